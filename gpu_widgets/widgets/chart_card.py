"""One chart as a card: the head (title and legend, HTML) over a bqplot figure whose lines are
addressed by name.

Line styles (the ``style`` of a view's LineData):

- ``"solid"``, ``"dashed"``, ``"dotted"``, ``"dash_dotted"``: a line, with a key in the legend
  showing its latest value.
- ``"region"``: episodes (throttling) shaded over the whole height. ys is a step curve: above the
  chart's floor (its ``y_min``, else 0) inside an episode, at the floor outside, x in pairs at the
  edges. Drawn on a 0-1 scale of its own, so it never moves the y axis; its legend key ("GPU 0
  throttled" -> "throttled") appears once per chart. ``"lost"``: the same, for lost periods.
- ``"range"``: a band between two curves; ys is 2 x n (low row, high row).
- ``"band"``: a thick translucent line (the old throttle marker).
- ``"alert"``: alert episodes (monitor_alerts) as a bar along the top of the plot, on the same
  0-1 scale as the regions: ys is 2 x n (the bar's lower edge, its upper edge), the two rows equal
  between episodes. ``"alert_shade"``: a faint shade under the bar over the whole height (ys a
  0/1 step curve). Neither is in the legend (the header names the alerts) and their colour follows
  the theme (theme.themed). Both are drawn under every other mark, so data near the top shows.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from bqplot import Axis, Figure, LinearScale, Lines
from ipywidgets import HTML, Layout, VBox

from . import legend
from .drawable import clipped
from .legend import AREA_STYLES, Key
from .theme import themed
from .ticks import axis_plan

Extent = tuple[float, float, float, float]  # x min, x max, y min, y max (NaN: no finite point)
NO_EXTENT: Extent = (np.nan, np.nan, np.nan, np.nan)
REGIONS = ("region", "lost")
ALERTS = ("alert", "alert_shade")
AREA_OPACITY = {"region": 0.2, "lost": 0.28, "range": 0.18, "alert": 0.85, "alert_shade": 0.12}
# Room for tick labels such as "0.0008" on the left and the axis label below; the title and the
# legend are HTML above the figure, so the top needs room for half a tick label only (a fixed
# top such as 100 % has its tick on the plot's edge; fitted tops get room inside: ticks.axis_plan).
FIG_MARGIN = {"top": 12, "bottom": 36, "left": 56, "right": 14}


def array(values: Sequence[float]) -> np.ndarray:
    """A float array as given (a caller may send float32: half the bytes), else float64."""
    if isinstance(values, np.ndarray) and values.dtype.kind == "f":
        return values
    return np.asarray(values, dtype=float)


def extent(xs: np.ndarray, ys: np.ndarray) -> Extent:
    """The lines' bounding box, NaN (a gap in a line) left out. fmin/fmax skip NaN without the
    masks and copies a filter would make: this runs for every line on every redraw."""
    if not xs.size or not ys.size:
        return NO_EXTENT
    return (float(np.fmin.reduce(xs)), float(np.fmax.reduce(xs)),
            float(np.fmin.reduce(ys, axis=None)), float(np.fmax.reduce(ys, axis=None)))


def last_finite(ys: np.ndarray) -> float | None:
    if ys.size and np.isfinite(ys[-1]):
        return float(ys[-1])
    finite = np.flatnonzero(np.isfinite(ys))
    return float(ys[finite[-1]]) if finite.size else None


def without_trailing_gaps(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The points up to the last finite one (any row NaN counts as a gap for a band). bqplot puts a
    line's label at its last point, and a NaN there becomes "translate(x,undefined)", which the
    browser logs as an error at every redraw; a gap at the end draws nothing either way."""
    finite = np.isfinite(y) if y.ndim == 1 else np.isfinite(y).all(axis=0)
    if not finite.size or finite[-1]:
        return x, y
    kept = np.flatnonzero(finite)
    n = int(kept[-1]) + 1 if kept.size else 0
    return x[:n], y[..., :n]


def step_curve(x: np.ndarray, inside: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each run of points inside an episode as a box on a 0-1 scale: x at its edges, twice each.
    Whatever form the caller used (pairs at the edges, NaN between episodes), no ramps between."""
    if not inside.size:
        return np.zeros(0, np.float32), np.zeros(0, np.float32)
    edges = np.diff(np.concatenate(([0], inside.view(np.int8), [0])))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1) - 1
    xs = np.repeat(np.stack([x[starts], x[ends]], axis=1), 2, axis=1).ravel().astype(np.float32)
    ys = np.tile(np.array([0, 1, 1, 0], np.float32), starts.size)
    return xs, ys


def span(lows: Sequence[float], highs: Sequence[float]) -> tuple[float, float]:
    lows = [v for v in lows if v is not None and v == v]
    highs = [v for v in highs if v is not None and v == v]
    return (min(lows), max(highs)) if lows and highs else (np.nan, np.nan)


class Chart:
    """One card; ``y_min``/``y_max`` are fixed ends (None: fit the data). Data beyond a fixed end
    widens the axis rather than being cut off (a GPU above its slowdown temperature)."""

    def __init__(self, title: str, x_label: str, y_label: str = "", y_min: float | None = None,
                 y_max: float | None = None, height: str = "220px", x_scale: LinearScale | None = None,
                 decimals: int | None = None) -> None:
        self.title, self.unit, self.decimals = title, y_label, decimals
        # Charts given the same x_scale share their x range: one time axis for all of them.
        self.x_scale = x_scale or LinearScale()
        self.y_min, self.y_max = y_min, y_max
        # A fixed end (0-100 %) must stay where it is: no padding beyond it.
        self.y_scale = LinearScale(min=y_min, max=y_max, allow_padding=y_min is None and y_max is None)
        self.area_scale: LinearScale | None = None  # 0-1, made with the first region
        self.x_axis = Axis(scale=self.x_scale, side="bottom", label=x_label, tick_format="~g", label_offset="30px")
        self.y_axis = Axis(scale=self.y_scale, side="left", label=y_label, tick_format="~g", label_offset="40px")
        # The title is HTML in the head; the figure keeps it as its name but does not draw it.
        self.figure = Figure(marks=[], axes=[self.x_axis, self.y_axis], title=title,
                             title_style={"display": "none"}, animation_duration=0, fig_margin=FIG_MARGIN,
                             layout=Layout(width="100%", height=height, min_width="0"))
        self.head = HTML(value=legend.render(title, [], y_label, decimals))
        self.head.add_class("gpuw-head")
        self.card = VBox([self.head, self.figure], layout=Layout(min_width="0"))
        self.card.add_class("gpuw-chart")
        self.lines: dict[str, Lines] = {}
        self.keys: dict[str, Key] = {}
        self.extents: dict[str, Extent] = {}  # per line, of the data last sent
        self.hints: dict[str, str] = {}  # a key's hover text, by line name (ChartsView shares its own)

    @property
    def y_fixed(self) -> tuple[float, ...]:
        return tuple(v for v in (self.y_min, self.y_max) if v is not None)

    def data_y_range(self) -> tuple[float, float]:
        return span([e[2] for e in self.extents.values()], [e[3] for e in self.extents.values()])

    def y_range(self) -> tuple[float, float]:
        """The y values shown: every line's, and the fixed ends of the axis."""
        lo, hi = self.data_y_range()
        return span([lo, *self.y_fixed], [hi, *self.y_fixed])

    def x_range(self) -> tuple[float, float]:
        return span([e[0] for e in self.extents.values()], [e[1] for e in self.extents.values()])

    def fit_y(self, count: int) -> tuple[float, ...]:
        """The y ticks to show; the fitted ends of the scale (those without a fixed y_min/y_max) set
        so the data, a 0 near them and room above the top tick are in view (ticks.axis_plan)."""
        ticks, bottom, top = axis_plan(*self.y_range(), count, self.y_min is not None, self.y_max is not None)
        free = [(end, value) for end, value, fixed in (("min", bottom, self.y_min), ("max", top, self.y_max))
                if fixed is None and value == value and getattr(self.y_scale, end) != value]
        if free:
            with self.y_scale.hold_sync():
                self.y_scale.allow_padding = False  # the ends are set here
                for end, value in free:
                    setattr(self.y_scale, end, value)
        return ticks

    def fit_fixed_ends(self) -> None:
        """Fixed ends stay put unless the data goes past them; sent only when they move."""
        lo, hi = self.data_y_range()
        if self.y_scale.allow_padding and self.y_fixed:  # a limit arrived later (set_y_max): no padding past it
            self.y_scale.allow_padding = False
        if self.y_min is not None:
            bottom = self.y_min if not lo < self.y_min else lo
            if self.y_scale.min != bottom:
                self.y_scale.min = bottom
        if self.y_max is not None:
            top = self.y_max if not hi > self.y_max else hi
            if self.y_scale.max != top:
                self.y_scale.max = top

    def line(self, name: str, line_color: str, style: str = "solid") -> tuple[Lines, bool]:
        """The line called ``name``; True when it was just made (the figure needs its new marks)."""
        mark = self.lines.get(name)
        if mark is not None:
            return mark, False
        scales = {"x": self.x_scale, "y": self.y_scale}
        common = dict(x=np.zeros(0), y=np.zeros(0), labels=[name], display_legend=False)
        if style in REGIONS or style in ALERTS:
            if self.area_scale is None:
                self.area_scale = LinearScale(min=0.0, max=1.0, allow_padding=False)
        if style == "alert":  # a band between two rows: the bar's lower and upper edges
            shade = themed(line_color)
            mark = Lines(**{**common, "y": np.zeros((2, 0))}, scales={"x": self.x_scale, "y": self.area_scale},
                         colors=[shade, shade], fill="between", fill_colors=[shade],
                         fill_opacities=[AREA_OPACITY[style]], opacities=[0.0, 0.0], stroke_width=0)
        elif style in REGIONS or style == "alert_shade":
            shade = themed(line_color) if style == "alert_shade" else line_color
            mark = Lines(**common, scales={"x": self.x_scale, "y": self.area_scale}, colors=[shade],
                         fill="bottom", fill_colors=[shade], fill_opacities=[AREA_OPACITY[style]],
                         opacities=[0.0], stroke_width=0)
        elif style == "range":
            mark = Lines(**{**common, "y": np.zeros((2, 0))}, scales=scales, colors=[line_color, line_color],
                         fill="between", fill_colors=[line_color], fill_opacities=[AREA_OPACITY[style]],
                         opacities=[0.4, 0.4], stroke_width=1)
        else:
            band = style == "band"
            mark = Lines(**common, scales=scales, colors=[line_color], line_style="solid" if band else style,
                         stroke_width=6 if band else 1.6, opacities=[0.6 if band else 1.0])
        self.lines[name] = mark
        self.keys[name] = Key(name, line_color, style, shown=style not in REGIONS and style not in ALERTS)
        return mark, True

    def marks_in_order(self) -> list[Lines]:
        """Alert marks first, then shaded areas: lines are drawn over them."""
        keys = self.keys

        def layer(mark: Lines) -> int:
            style = keys[mark.labels[0]].style
            return 0 if style in ALERTS else 1 if style in AREA_STYLES else 2
        return sorted(self.lines.values(), key=layer)

    def set_data(self, name: str, xs: Sequence[float], ys: Sequence[float]) -> None:
        mark, key = self.lines[name], self.keys[name]
        # Drawn within float32's range (drawable); the legend's values stay the exact ones.
        exact = array(ys)
        x, y = clipped(array(xs)), clipped(exact)
        if key.style in REGIONS:
            floor = self.y_min if self.y_min is not None else 0.0
            sx, sy = step_curve(x, y > floor)  # NaN compares False: outside
            key.shown = bool(sy.size)
            mark.x, mark.y = sx, sy
            self.extents[name] = extent(x, x)[:2] + (np.nan, np.nan)
            return
        if key.style in ALERTS:  # on its own 0-1 scale: only its x counts for the axes; never a key
            if key.style == "alert" and (y.ndim != 2 or y.shape != (2, x.shape[0])):
                raise ValueError(f"the alert mark {name!r} needs ys of shape (2, {x.shape[0]}), got {y.shape}")
            mark.x, mark.y = x, y
            self.extents[name] = extent(x, x)[:2] + (np.nan, np.nan)
            return
        if key.style == "range":
            if y.ndim != 2 or y.shape[0] != 2 or y.shape[1] != x.shape[0]:
                raise ValueError(f"the range line {name!r} needs ys of shape (2, {x.shape[0]}) (low row, high row), "
                                 f"got {y.shape}")
            key.value, key.high = last_finite(exact[0]), last_finite(exact[1])
        else:
            key.value = last_finite(exact)
        x, y = without_trailing_gaps(x, y)
        mark.x, mark.y = x, y
        self.extents[name] = extent(x, y)

    def head_html(self) -> str:
        return legend.render(self.title, list(self.keys.values()), self.unit, self.decimals, self.hints)

    def close(self) -> None:
        for mark in self.lines.values():
            mark.close()
        for w in (self.figure, self.head, self.card):
            w.close()
