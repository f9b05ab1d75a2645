"""Values as the charts can draw them, and titles as they can be shown.

Any finite value may be logged (``loss=1e308``), but a scale over [-1e308, 1e308] has a span
that overflows: bqplot's padding, d3's scale and matplotlib's tick locator all end in inf or an
error. Drawn values are therefore clipped to float32's range (±3.4e38), which is also what the
float32 arrays sent to bqplot can hold (a larger value would turn into inf in the cast:
``narrow`` sends such a line as float64 instead). Only what is drawn is clipped: the run log,
``rows()``, ``load()`` and the legends keep the values exactly. NaN stays, and an infinity
becomes, a gap in the line.

Titles (the user's text) are cut for display to ``TITLE_CHARS`` characters with an ellipsis: a
million-character title would otherwise be laid out in every header, legend and picture. The
pictures' legends cut names to ``LEGEND_CHARS`` (their plots are a few hundred pixels wide).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

DRAW_MAX = float(np.finfo(np.float32).max)
TITLE_CHARS = 80
LEGEND_CHARS = 40  # a picture's legend row: longer names would squeeze its plot to nothing


def _fits(a: np.ndarray) -> bool:
    lo, hi = np.fmin.reduce(a, axis=None), np.fmax.reduce(a, axis=None)
    return bool(-DRAW_MAX <= lo and hi <= DRAW_MAX or lo != lo)  # lo is NaN only when every value is


def clipped(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """``values`` as a float array within ±DRAW_MAX; the same array (no copy) when they already are."""
    a = values if isinstance(values, np.ndarray) and values.dtype.kind == "f" else np.asarray(values, dtype=float)
    if not a.size or _fits(a):
        return a
    out = np.clip(a, -DRAW_MAX, DRAW_MAX)  # NaN stays NaN
    out[np.isinf(a)] = np.nan  # an infinity is a gap, as the decimator leaves it out
    return out


def narrow(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """``values`` as float32 (half the bytes to send) when that holds every one of them; else as
    float64, which the chart clips for drawing while its legend shows the value itself."""
    a = np.asarray(values, dtype=float)
    return a.astype(np.float32) if not a.size or _fits(a) else a


def short_title(text: str, limit: int = TITLE_CHARS) -> str:
    """``text`` cut to ``limit`` characters, the last one an ellipsis when it was longer."""
    return text if len(text) <= limit else text[:limit - 1] + "…"
