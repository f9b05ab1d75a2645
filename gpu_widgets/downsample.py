"""Shrink a series to at most ``max_points`` while keeping every peak and dip visible.

Min/max buckets: the points are cut into ``max_points // 2`` buckets of (almost) equal count and
each bucket keeps its smallest and largest value, in the order they happened, placed at the
bucket's first and last timestamps. The global extremes always survive, which is what matters
on a monitoring chart (a 1 s spike to 100 % must not vanish when an hour is drawn in 300 px).
All columns share the time axis, so one bucketing serves every column of a device.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Optional

Num = Optional[float]


def bucket_bounds(n: int, n_buckets: int) -> list[tuple[int, int]]:
    """``n_buckets`` half-open index ranges covering ``range(n)`` with sizes differing by <= 1."""
    n_buckets = max(1, min(n_buckets, n))
    return [(n * b // n_buckets, n * (b + 1) // n_buckets) for b in range(n_buckets)]


def _extremes(values: Sequence[Num], lo: int, hi: int) -> tuple[Num, Num]:
    i_min = i_max = -1
    for i in range(lo, hi):
        v = values[i]
        if v is None:
            continue
        if i_min < 0 or v < values[i_min]:  # type: ignore[operator]
            i_min = i
        if i_max < 0 or v > values[i_max]:  # type: ignore[operator]
            i_max = i
    if i_min < 0:
        return None, None
    first, second = sorted((i_min, i_max))
    return values[first], values[second]


def _union(values: Sequence[Num], lo: int, hi: int) -> Num:
    mask = 0
    seen = False
    for i in range(lo, hi):
        v = values[i]
        if v is not None:
            mask |= int(v)
            seen = True
    return mask if seen else None


def downsample(
    timestamps: Sequence[float],
    columns: Mapping[str, Sequence[Num]],
    max_points: int,
    bitmask_columns: frozenset[str] = frozenset(),
) -> tuple[list[float], dict[str, list[Num]]]:
    """Min/max-bucket ``columns`` (each aligned with ``timestamps``) to <= ``max_points`` points.

    ``bitmask_columns`` (e.g. throttle reasons) are OR-ed over each bucket instead, so a short
    episode stays marked.
    """
    if max_points < 2:
        raise ValueError(f"max_points must be at least 2, got {max_points}")
    n = len(timestamps)
    if n <= max_points:
        return list(timestamps), {k: list(v) for k, v in columns.items()}
    out_t: list[float] = []
    out: dict[str, list[Num]] = {k: [] for k in columns}
    for lo, hi in bucket_bounds(n, max_points // 2):
        pair = hi - lo >= 2
        out_t.append(timestamps[lo])
        if pair:
            out_t.append(timestamps[hi - 1])
        for key, values in columns.items():
            if key in bitmask_columns:
                u = _union(values, lo, hi)
                out[key].extend((u, u) if pair else (u,))
            elif pair:
                out[key].extend(_extremes(values, lo, hi))
            else:
                out[key].append(values[lo])
    return out_t, out
