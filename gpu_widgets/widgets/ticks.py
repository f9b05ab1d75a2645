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


# A fitted axis whose data start this close to 0 (as a share of the other end) starts at 0, so
# loss and learning-rate charts get a "0" label to read the rest against.
NEAR_ZERO = 0.25
# Room beyond the outermost tick of a fitted end, as a share of the span: the tick's label sits
# inside the plot instead of on its frame ("1", "0.001" half cut off at the top).
END_PAD = 0.06
F32_MAX = float(3.4028234663852886e38)  # the charts draw in float32 (drawable): no end past it


def axis_plan(lo: float, hi: float, count: int, fixed_low: bool = False,
              fixed_high: bool = False) -> tuple[tuple[float, ...], float, float]:
    """(ticks, bottom, top) for an axis showing ``lo``..``hi``. A fixed end (0 %, 100 %, a memory
    total) stays where it is; a fitted one goes to 0 when the data start near it, else gets
    ``END_PAD`` of room beyond the data, so no tick sits on the frame. Ends not finite: as given."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return nice_ticks(lo, hi, count), lo, hi
    if hi < lo:
        lo, hi = hi, lo
    if not fixed_low and 0.0 < lo <= NEAR_ZERO * hi:
        lo = 0.0
    if not fixed_high and NEAR_ZERO * lo <= hi < 0.0:
        hi = 0.0
    ticks = nice_ticks(lo, hi, count)
    span = hi / 2 - lo / 2  # half the span: never overflows
    if span <= abs(hi) * 1e-9:  # flat: room on both sides, a span of its own size (or 1)
        span = abs(hi) / 20 or 0.5
    pad = min(2.0 * span * END_PAD, F32_MAX)
    bottom = lo if fixed_low or lo == 0.0 else max(-F32_MAX, lo - pad)
    top = hi if fixed_high else min(F32_MAX, hi + pad)  # a 0 at the top needs room too
    return ticks, bottom, top
