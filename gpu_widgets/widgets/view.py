"""The widgets: an HTML header over cards of bqplot charts, updated in place and in batches.

Marks are created once and then only their ``x``/``y`` change (sent as binary arrays); every
widget touched by one update is held with ``hold_sync()`` so each sends one message. Callers pass
already bounded data (see decimator) and only what changed; a numpy float array (float32 for
the monitor) is sent as it is, anything else as float64.

Each chart is a card (chart_card): a head with its title and a legend row (colour, name, latest
value) above the plot, never a legend box over the data. Axes get round tick values computed
here from the data sent (see ticks), sent only when they change. The look (theme) is one
``<style>`` widget made with the view, never resent by a redraw.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence

import numpy as np
from bqplot import Axis, LinearScale
from ipywidgets import HTML, GridBox, Layout, VBox, Widget

from .chart_card import NO_EXTENT, Chart, Extent, extent, span
from .theme import style_widget
from .ticks import nice_ticks

# Chart and the extent helpers moved to chart_card; importing them from here keeps working.
__all__ = ["ChartsView", "Chart", "LineData", "color", "extent", "Extent", "NO_EXTENT", "PALETTE"]

X_TICKS = 6
Y_TICKS = 5
# A window counts as full once the oldest point is this close to its start (samples are whole
# intervals apart, so the oldest one kept sits up to one interval inside the window).
FULL_SLACK = 0.03
MIN_TIME_SPAN_S = 2.0  # a lone first sample is shown on the last 2 s, not on a zero-width axis

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")


def color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


# One line's update: (chart name, line name, colour, style, xs, ys); style is a bqplot line_style
# ("solid", "dashed", "dotted", "dash_dotted"), "band" (a thick translucent marker line), or a
# shaded area: "region"/"lost" (episodes) or "range" (ys 2 x n: a band between two curves); see
# chart_card.
LineData = tuple[str, str, str, str, Sequence[float], Sequence[float]]


class ChartsView:
    """Header + a responsive grid of chart cards; charts appear when their first line does.

    ``time_domain``: the common time axis's ends, fixed, or following the data where None (a
    run: from 0 to its latest point). ``time_window`` (seconds; the axis ends at 0 = now): the
    axis spans the data shown until they fill the window, then the whole window.
    """

    def __init__(self, header_html: str = "", time_domain: tuple[float | None, float | None] = (None, None),
                 time_window: float | None = None) -> None:
        if time_window is not None and not time_window > 0:
            raise ValueError(f"time_window must be a positive number of seconds, got {time_window!r}")
        self.header = HTML(value=header_html)
        self.grid = GridBox(
            children=[],
            layout=Layout(grid_template_columns="repeat(auto-fill, minmax(340px, 1fr))", grid_gap="8px",
                          width="100%"),
        )
        self.grid.add_class("gpuw-charts")
        self.style = style_widget()  # sent once, with the view
        self.widget = VBox([self.header, self.grid, self.style], layout=Layout(width="100%"))
        self.widget.add_class("gpuw")
        self.charts: dict[str, Chart] = {}
        self._chart_specs: dict[str, dict] = {}
        self.time_window = time_window
        lo, hi = time_domain
        if time_window is not None:
            lo, hi = -time_window, 0.0 if hi is None else hi
        self.time_scale = LinearScale(min=lo, max=hi, allow_padding=False)
        self._time_fixed = tuple(v for v in (lo, hi) if v is not None and time_window is None)
        self._rank: dict[str, int] = {}
        self._ticks: dict[Axis, tuple[float, ...]] = {}  # as last sent
        # A line's legend key -> what it says on hover (a launch's GPU: its rank, host and GPU in full).
        self.hints: dict[str, str] = {}

    def define_chart(self, name: str, shared_x: bool = False, **spec) -> None:
        """Register how chart ``name`` looks (title, axis labels, y range, ``decimals`` of the
        legend's values); shown on first data. ``shared_x``: on the view's common time axis;
        ``rank``: charts sort by it in the grid; ``"*"``: the look of charts not registered by name."""
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
            chart.y_max = top
            if top is None:
                chart.y_scale.max = None
            else:
                chart.fit_fixed_ends()

    @property
    def line_count(self) -> int:
        return sum(len(chart.lines) for chart in self.charts.values())

    def update(self, header_html: str | None, lines: Sequence[LineData]) -> None:
        new_charts: list[Chart] = []
        new_marks: list[Chart] = []
        for chart_name, line_name, line_color, style, _, _ in lines:
            chart = self.charts.get(chart_name)
            if chart is None:
                spec = dict(self._chart_specs.get(chart_name, self._chart_specs.get("*", {"x_label": "step"})))
                self._rank[chart_name] = spec.pop("rank", 0)
                chart = self.charts[chart_name] = Chart(**{**spec, "title": spec.get("title") or chart_name})
                chart.hints = self.hints  # one map for every chart
                new_charts.append(chart)
            _, made = chart.line(line_name, line_color, style)
            if made and chart not in new_marks:
                new_marks.append(chart)
        with contextlib.ExitStack() as stack:
            if header_html is not None and header_html != self.header.value:
                self.header.value = header_html
            touched: dict[str, Chart] = {}
            for chart_name, line_name, _, _, xs, ys in lines:
                chart = touched[chart_name] = self.charts[chart_name]
                stack.enter_context(chart.lines[line_name].hold_sync())
                chart.set_data(line_name, xs, ys)
            for chart in new_marks:
                chart.figure.marks = chart.marks_in_order()
            for chart in touched.values():
                chart.fit_fixed_ends()
                head = chart.head_html()
                if head != chart.head.value:  # the latest values changed: a few hundred bytes
                    chart.head.value = head
            self._set_ticks(touched.values(), stack)
        if new_charts:
            order = sorted(self.charts, key=lambda name: self._rank.get(name, 0))  # stable: first come first
            self.grid.children = [self.charts[name].card for name in order]

    def _time_range(self, on_time: list[Chart]) -> tuple[float, float]:
        ranges = [c.x_range() for c in on_time]
        lo, hi = span([r[0] for r in ranges], [r[1] for r in ranges])
        if self.time_window is None:
            return span([lo, *self._time_fixed], [hi, *self._time_fixed])
        end, start = float(self.time_scale.max), -self.time_window
        if not lo == lo or lo - start <= FULL_SLACK * self.time_window:
            lo = start  # no data yet, or the window is full: the whole window
        lo = min(max(lo, start), end - min(MIN_TIME_SPAN_S, self.time_window))
        if self.time_scale.min != lo:
            self.time_scale.min = lo
        return lo, end

    def _set_ticks(self, charts: Iterable[Chart], stack: contextlib.ExitStack) -> None:
        """Round ticks for the axes whose data changed; an axis is sent only when its ticks do."""
        axes: list[tuple[Axis, tuple[float, ...]]] = []
        on_time: list[Chart] = []
        for chart in charts:
            axes.append((chart.y_axis, chart.fit_y(Y_TICKS)))  # and the fitted ends of its y scale
            if chart.x_scale is not self.time_scale:
                axes.append((chart.x_axis, nice_ticks(*chart.x_range(), X_TICKS)))
            elif not on_time:
                on_time = [c for c in self.charts.values() if c.x_scale is self.time_scale]
        if on_time:  # one range and one set of ticks for every chart on the shared time axis
            ticks = nice_ticks(*self._time_range(on_time), X_TICKS)
            axes += [(c.x_axis, ticks) for c in on_time]
        for axis, ticks in axes:
            if ticks and ticks != self._ticks.get(axis):
                self._ticks[axis] = ticks
                stack.enter_context(axis.hold_sync())
                axis.tick_values = np.array(ticks)

    def close(self) -> None:
        for chart in self.charts.values():
            chart.close()
        self.style.close()
        self.widget.close()
