"""Shrink a series to at most ``max_points`` while keeping every peak and dip visible: the one
min/max bucketing of the package (the GPU history and the run curves' ``Decimator`` both use it).

Min/max buckets: the points are cut into ``max_points // 2`` buckets of (almost) equal count and
each bucket keeps its smallest and largest value, in the order they happened, placed at the
bucket's first and last timestamps. The global extremes always survive, which is what matters
on a monitoring chart (a 1 s spike to 100 % must not vanish when an hour is drawn in 300 px).
All columns share the time axis, so one bucketing serves every column of a device.

NumPy does the work: an hour of 8 GPUs is ~550 000 values, which bucketing in Python held the GIL
for ~90 ms per request (the server's event loop waited meanwhile); ``reduceat`` takes a few ms.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    import numpy as np

# NumPy is imported when first needed: the server starts (and answers a poll's few samples)
# without it.
Num = Optional[float]


def bucket_starts(n: int, n_buckets: int) -> np.ndarray:
    """The first index of each of ``n_buckets`` buckets covering ``range(n)``, sizes differing by <= 1."""
    import numpy as np

    n_buckets = max(1, min(n_buckets, n))
    return n * np.arange(n_buckets) // n_buckets


def extremes(values: np.ndarray, n_buckets: int) -> np.ndarray:
    """Per bucket, the positions of its smallest and its largest value, the earlier one first:
    shape ``(n_buckets, 2)``. NaN is skipped; a bucket of NaN only gives ``len(values)`` (a
    position past the end, for the caller to read as null). Needs ``len(values) >= 2 * n_buckets``."""
    import numpy as np

    n = len(values)
    starts = bucket_starts(n, n_buckets)
    sizes = np.diff(np.append(starts, n))
    index = np.arange(n)
    with np.errstate(invalid="ignore"):
        lo = np.fmin.reduceat(values, starts)  # fmin/fmax skip NaN; an all-NaN bucket gives NaN
        hi = np.fmax.reduceat(values, starts)
    # the first position of the bucket's min and of its max (n where there is none)
    i_lo = np.minimum.reduceat(np.where(values == np.repeat(lo, sizes), index, n), starts)
    i_hi = np.minimum.reduceat(np.where(values == np.repeat(hi, sizes), index, n), starts)
    return np.column_stack((np.minimum(i_lo, i_hi), np.maximum(i_lo, i_hi)))


def _listed(values: np.ndarray, whole: bool = False) -> list[Num]:
    """A float64 array as a list, NaN -> None; ``whole``: the numbers as ints (a bitmask)."""
    import numpy as np

    out = values.tolist()
    if whole:
        return [None if v != v else int(v) for v in out]
    if np.isnan(values).any():
        out = [None if v != v else v for v in out]
    return out


def downsample(
    timestamps: Any,
    columns: Mapping[str, Any],
    max_points: int,
    bitmask_columns: frozenset[str] = frozenset(),
) -> tuple[list[float], dict[str, list[Num]]]:
    """Min/max-bucket ``columns`` (float64 arrays aligned with ``timestamps``, NaN = null) to at
    most ``max_points`` points; the answer as lists, null as None.

    ``bitmask_columns`` (throttle reasons, lost flags) are OR-ed over each bucket instead, as
    ints, so a short episode stays marked.
    """
    import numpy as np

    if max_points < 2:
        raise ValueError(f"max_points must be at least 2, got {max_points}")
    timestamps = np.asarray(timestamps, dtype=np.float64)
    n = len(timestamps)
    if n <= max_points:
        return timestamps.tolist(), {k: _listed(np.asarray(v, dtype=np.float64), k in bitmask_columns)
                                     for k, v in columns.items()}
    n_buckets = max(1, min(max_points // 2, n))  # each holds >= 2 points: n > max_points >= 2 * n_buckets
    starts = bucket_starts(n, n_buckets)
    ends = np.append(starts[1:], n)
    out_t = np.column_stack((timestamps[starts], timestamps[ends - 1])).ravel().tolist()
    out: dict[str, list[Num]] = {}
    for key, v in columns.items():
        v = np.asarray(v, dtype=np.float64)
        if key in bitmask_columns:
            present = ~np.isnan(v)
            masks = np.bitwise_or.reduceat(np.where(present, v, 0).astype(np.int64), starts)
            seen = np.logical_or.reduceat(present, starts)
            out[key] = [None if m < 0 else m for m in np.repeat(np.where(seen, masks, -1), 2).tolist()]
            continue
        pairs = np.append(v, np.nan)[extremes(v, n_buckets)].ravel()
        out[key] = _listed(pairs)
    return out_t, out
