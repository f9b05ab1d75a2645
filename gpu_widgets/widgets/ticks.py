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


def nice_ticks(lo: float, hi: float, count: int = 5) -> tuple[float, ...]:
    """Round values between ``lo`` and ``hi`` (both included), at most ``count`` of them and as
    close to it as round steps allow; empty when the range is not finite."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return ()
    if hi < lo:
        lo, hi = hi, lo
    span = hi - lo
    if span <= max(abs(lo), abs(hi)) * 1e-6:
        return (float(f"{lo:.6g}"),)  # flat: one tick, not a ladder of rounding noise
    raw = span / max(count - 1, 1)
    exponent = math.floor(math.log10(raw))
    best: tuple[int, float, int] | None = None  # (ticks, step, decimals it needs)
    for e in (exponent, exponent + 1):
        for m in MANTISSAS:
            step = m * 10.0**e
            n = _count(lo, hi, step)
            if n <= count and (best is None or abs(n - count) < abs(best[0] - count)):
                # enough decimals that 0.1 × 3 prints as 0.3 (2.5 × 10^e needs one more)
                best = (n, step, max(0, -e + (m == 2.5)))
    assert best is not None  # 10^(exponent + 1) > raw always fits
    _, step, decimals = best
    first = math.ceil(lo / step - 1e-9)
    last = math.floor(hi / step + 1e-9)
    return tuple(round(k * step, decimals) + 0.0 for k in range(first, last + 1))
