"""Numbers as people read them in the widgets and summaries: bytes, durations, rates, values."""
from __future__ import annotations

import math

GIB = float(1 << 30)
MIB = float(1 << 20)


def gib(n: float | None) -> str:
    if n is None:
        return "n/a"
    return f"{n / GIB:.1f} GiB" if n >= 0.1 * GIB else f"{n / MIB:.0f} MiB"


def duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "n/a"
    s = int(round(seconds))
    if seconds < 10:
        return f"{seconds:.1f} s"
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def rate(per_s: float | None, unit: str) -> str:
    if per_s is None or not math.isfinite(per_s):
        return "n/a"
    if per_s >= 100:
        return f"{per_s:,.0f} {unit}/s"
    if per_s >= 1:
        return f"{per_s:.1f} {unit}/s"
    return f"{per_s:.3g} {unit}/s"


def energy(joules: float | None) -> str:
    if joules is None or not math.isfinite(joules):
        return "n/a"
    if joules >= 3.6e6:
        return f"{joules / 3.6e6:.2f} kWh"
    if joules >= 1000:
        return f"{joules / 1000:.1f} kJ"
    return f"{joules:.0f} J"


def value(v: float | int | None) -> str:
    """A logged value: ints as they are, floats with 4 significant digits."""
    if v is None:
        return "–"
    if isinstance(v, int):
        return f"{v:,}"
    if v != v:
        return "NaN"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return f"{v:.4g}"
