"""Round tick values for the charts' axes.

bqplot's ``num_ticks`` spaces ticks evenly over the domain (0, 1.6, 3.2 … shown as "0 2 3"), so
the view computes the ticks itself: multiples of 1, 2, 2.5 or 5 × 10^k inside the data's range,
as many as asked for or a few fewer.
"""
from __future__ import annotations

import math

MANTISSAS = (1.0, 2.0, 2.5, 5.0)


def _count(lo: float, hi: float, step: float) -> int:
    return math.floor(hi / step + 1e-9) - math.ceil(lo / step - 1e-9) + 1


def _step(m: float, e: int) -> float:
    """m × 10^e, or 0 when that is no usable float (past 1.8e308, or below the smallest one)."""
    if e > 308:
        return 0.0
    step = m * 10.0**e
    return step if 0 < step < math.inf else 0.0


def nice_ticks(lo: float, hi: float, count: int = 5) -> tuple[float, ...]:
    """Round values between ``lo`` and ``hi`` (both included), at most ``count`` of them and as
    close to it as round steps allow; empty when the range is not finite. Any finite ends work,
    -1e308 to 1e308 too (whose span overflows: only the span per gap is computed)."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return ()
    if hi < lo:
        lo, hi = hi, lo
    gaps = max(count - 1, 1)
    raw = hi / gaps - lo / gaps  # the span over the gaps, never inf
    if raw <= max(abs(lo), abs(hi)) / gaps * 1e-6:
        return (float(f"{lo:.6g}"),)  # flat: one tick, not a ladder of rounding noise
    exponent = math.floor(math.log10(raw))
    best: tuple[int, float, int] | None = None  # (ticks, step, decimals it needs)
    for e in (exponent, exponent + 1):
        for m in MANTISSAS:
            step = _step(m, e)
            if not step:
                continue
            n = _count(lo, hi, step)
            if n <= count and (best is None or abs(n - count) < abs(best[0] - count)):
                # enough decimals that 0.1 × 3 prints as 0.3 (2.5 × 10^e needs one more)
                best = (n, step, max(0, -e + (m == 2.5)))
    if best is None:  # no round step fits (a span near the smallest floats): the ends themselves
        return (lo, hi)
    _, step, decimals = best
    first = math.ceil(lo / step - 1e-9)
    last = math.floor(hi / step + 1e-9)
    return tuple(round(k * step, decimals) + 0.0 for k in range(first, last + 1))
