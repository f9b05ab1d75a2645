"""The widgets: an HTML header over bqplot charts, updated in place and in batches.

Marks are created once and then only their ``x``/``y`` change (sent as binary arrays); every
widget touched by one update is held with ``hold_sync()`` so each sends one message. Callers pass
already bounded data (see decimator) and only what changed; a numpy float array (float32 for
the monitor) is sent as it is, anything else as float64.

Axes get round tick values computed here from the data sent (see ticks), sent only when they
change; a chart shows its legend once it has two lines (one line is named by the title).
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence

import numpy as np
from bqplot import Axis, Figure, LinearScale, Lines
from ipywidgets import HTML, GridBox, Layout, VBox, Widget

from .ticks import nice_ticks

X_TICKS = 6
Y_TICKS = 5
# The legend box hides the lines under it instead of mixing with them; the theme's background
# where JupyterLab's variables exist, white elsewhere.
LEGEND_STYLE = {"fill": "var(--jp-layout-color0, white)", "fill-opacity": "0.85"}
Extent = tuple[float, float, float, float]  # x min, x max, y min, y max (NaN: no finite point)
NO_EXTENT: Extent = (np.nan, np.nan, np.nan, np.nan)

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")


def color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


class Chart:
    """One figure whose lines are addressed by name."""

    def __init__(self, title: str, x_label: str, y_label: str = "", y_min: float | None = None,
                 y_max: float | None = None, height: str = "240px", x_scale: LinearScale | None = None) -> None:
        # Charts given the same x_scale share their x range: one time axis for all of them.
        self.x_scale = x_scale or LinearScale()
        # A fixed end (0-100 %) must stay where it is: no padding beyond it.
        self.y_scale = LinearScale(min=y_min, max=y_max, allow_padding=y_min is None and y_max is None)
        self.y_fixed = tuple(v for v in (y_min, y_max) if v is not None)
        self.x_axis = Axis(scale=self.x_scale, side="bottom", label=x_label, tick_format="~g")
        self.y_axis = Axis(scale=self.y_scale, side="left", label=y_label, tick_format="~g")
        self.figure = Figure(
            marks=[],
            axes=[self.x_axis, self.y_axis],
            title=title,
            legend_location="top-right",
            legend_style=LEGEND_STYLE,
            animation_duration=0,
            fig_margin={"top": 36, "bottom": 40, "left": 66, "right": 16},
            layout=Layout(width="100%", height=height, min_width="300px"),
        )
        self.lines: dict[str, Lines] = {}
        self.extents: dict[str, Extent] = {}  # per line, of the data last sent

    def y_range(self) -> tuple[float, float]:
        """The y values shown: every line's, and the fixed ends of the axis."""
        return _span([e[2] for e in self.extents.values()] + list(self.y_fixed),
                     [e[3] for e in self.extents.values()] + list(self.y_fixed))

    def x_range(self) -> tuple[float, float]:
        return _span([e[0] for e in self.extents.values()], [e[1] for e in self.extents.values()])

    def line(self, name: str, line_color: str, style: str = "solid") -> tuple[Lines, bool]:
        """The line called ``name``; True when it was just made (the figure needs its new marks)."""
        mark = self.lines.get(name)
        if mark is not None:
            return mark, False
        mark = Lines(
            x=np.zeros(0), y=np.zeros(0),
            scales={"x": self.x_scale, "y": self.y_scale},
            labels=[name], display_legend=bool(self.lines), colors=[line_color],
            line_style="solid" if style == "band" else style, stroke_width=6 if style == "band" else 1.6,
            opacities=[0.6 if style == "band" else 1.0],
        )
        if len(self.lines) == 1:
            next(iter(self.lines.values())).display_legend = True  # two lines now: name them
        self.lines[name] = mark
        return mark, True


def _span(lows: Sequence[float], highs: Sequence[float]) -> tuple[float, float]:
    lows = [v for v in lows if v == v]
    highs = [v for v in highs if v == v]
    return (min(lows), max(highs)) if lows and highs else (np.nan, np.nan)


def extent(xs: np.ndarray, ys: np.ndarray) -> Extent:
    """The lines' bounding box, NaN (a gap in a line) left out. fmin/fmax skip NaN without the
    masks and copies a filter would make: this runs for every line on every redraw."""
    if not xs.size or not ys.size:
        return NO_EXTENT
    return (float(np.fmin.reduce(xs)), float(np.fmax.reduce(xs)),
            float(np.fmin.reduce(ys)), float(np.fmax.reduce(ys)))


# One line's update: (chart name, line name, colour, style, xs, ys); style is a bqplot line_style
# ("solid", "dashed", "dotted", "dash_dotted") or "band" (a thick translucent marker line).
LineData = tuple[str, str, str, str, Sequence[float], Sequence[float]]


def _array(values: Sequence[float]) -> np.ndarray:
    """A float array as given (a caller may send float32: half the bytes), else float64."""
    if isinstance(values, np.ndarray) and values.dtype.kind == "f":
        return values
    return np.asarray(values, dtype=float)


class ChartsView:
    """Header + a responsive grid of charts; charts appear when their first line does."""

    def __init__(self, header_html: str = "", time_domain: tuple[float | None, float | None] = (None, None)) -> None:
        self.header = HTML(value=header_html)
        self.grid = GridBox(
            children=[],
            layout=Layout(grid_template_columns="repeat(auto-fill, minmax(340px, 1fr))", grid_gap="4px", width="100%"),
        )
        self.widget = VBox([self.header, self.grid], layout=Layout(width="100%"))
        self.charts: dict[str, Chart] = {}
        self._chart_specs: dict[str, dict] = {}
        # The common time axis: fixed (a dashboard's window) or following the data at an end left
        # None (a run: from its start, 0, to the latest point).
        lo, hi = time_domain
        self.time_scale = LinearScale(min=lo, max=hi, allow_padding=False)
        self._time_fixed = tuple(v for v in time_domain if v is not None)
        self._rank: dict[str, int] = {}
        self._ticks: dict[Axis, tuple[float, ...]] = {}  # as last sent

    def define_chart(self, name: str, shared_x: bool = False, **spec) -> None:
        """Register how chart ``name`` looks (title, axis labels, y range); shown on first data.
        ``shared_x``: on the view's common time axis; ``rank``: charts sort by it in the grid;
        ``"*"``: the look of charts not registered by name."""
        if shared_x:
            spec["x_scale"] = self.time_scale
        self._chart_specs[name] = spec

    def set_y_max(self, name: str, top: float | None) -> None:
        """Move chart ``name``'s fixed top (a GPU's memory total or power limit), shown or not yet."""
        spec = self._chart_specs.get(name)
        if spec is not None:
            spec["y_max"] = top
        chart = self.charts.get(name)
        if chart is not None:
            chart.y_scale.max = top
            chart.y_fixed = tuple(v for v in (spec.get("y_min") if spec else None, top) if v is not None)

    @property
    def line_count(self) -> int:
        return sum(len(chart.lines) for chart in self.charts.values())

    def update(self, header_html: str | None, lines: Sequence[LineData]) -> None:
        new_charts: list[Chart] = []
        new_marks: list[Chart] = []
        held: list[Widget] = []
        for chart_name, line_name, line_color, style, _, _ in lines:
            chart = self.charts.get(chart_name)
            if chart is None:
                spec = dict(self._chart_specs.get(chart_name, self._chart_specs.get("*", {"x_label": "step"})))
                self._rank[chart_name] = spec.pop("rank", 0)
                chart = self.charts[chart_name] = Chart(**{**spec, "title": spec.get("title") or chart_name})
                new_charts.append(chart)
            mark, made = chart.line(line_name, line_color, style)
            if made and chart not in new_marks:
                new_marks.append(chart)
        with contextlib.ExitStack() as stack:
            if header_html is not None and header_html != self.header.value:
                self.header.value = header_html
            touched: dict[str, Chart] = {}
            for chart_name, line_name, _, _, xs, ys in lines:
                chart = touched[chart_name] = self.charts[chart_name]
                mark = chart.lines[line_name]
                stack.enter_context(mark.hold_sync())
                held.append(mark)
                mark.x = x = _array(xs)
                mark.y = y = _array(ys)
                chart.extents[line_name] = extent(x, y)
            for chart in new_marks:
                chart.figure.marks = list(chart.lines.values())
            self._set_ticks(touched.values(), stack)
        if new_charts:
            order = sorted(self.charts, key=lambda name: self._rank.get(name, 0))  # stable: first come first
            self.grid.children = [self.charts[name].figure for name in order]

    def _set_ticks(self, charts: Iterable[Chart], stack: contextlib.ExitStack) -> None:
        """Round ticks for the axes whose data changed; an axis is sent only when its ticks do."""
        axes: list[tuple[Axis, tuple[float, ...]]] = []
        on_time: list[Chart] = []
        for chart in charts:
            axes.append((chart.y_axis, nice_ticks(*chart.y_range(), Y_TICKS)))
            if chart.x_scale is not self.time_scale:
                axes.append((chart.x_axis, nice_ticks(*chart.x_range(), X_TICKS)))
            elif not on_time:
                on_time = [c for c in self.charts.values() if c.x_scale is self.time_scale]
        if on_time:  # one range and one set of ticks for every chart on the shared time axis
            ranges = [c.x_range() for c in on_time]
            lo, hi = _span([r[0] for r in ranges] + list(self._time_fixed), [r[1] for r in ranges] + list(self._time_fixed))
            ticks = nice_ticks(lo, hi, X_TICKS)
            axes += [(c.x_axis, ticks) for c in on_time]
        for axis, ticks in axes:
            if ticks and ticks != self._ticks.get(axis):
                self._ticks[axis] = ticks
                stack.enter_context(axis.hold_sync())
                axis.tick_values = np.array(ticks)

    def close(self) -> None:
        for chart in self.charts.values():
            for mark in chart.lines.values():
                mark.close()
            chart.figure.close()
        self.widget.close()
