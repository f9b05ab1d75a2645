"""The widgets: an HTML header over bqplot charts, updated in place and in batches.

Marks are created once and then only their ``x``/``y`` change (sent as binary arrays); every
widget touched by one update is held with ``hold_sync()`` so each sends one message. Callers pass
already bounded data (see decimator) and only what changed; a numpy float array (float32 for
the monitor) is sent as it is, anything else as float64.
"""
from __future__ import annotations

import contextlib
from collections.abc import Sequence

import numpy as np
from bqplot import Axis, Figure, LinearScale, Lines
from ipywidgets import HTML, GridBox, Layout, VBox, Widget

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
        self.figure = Figure(
            marks=[],
            axes=[
                Axis(scale=self.x_scale, side="bottom", label=x_label, num_ticks=6),
                Axis(scale=self.y_scale, side="left", label=y_label, tick_format=".3~g", num_ticks=5),
            ],
            title=title,
            legend_location="top-right",
            animation_duration=0,
            fig_margin={"top": 36, "bottom": 40, "left": 66, "right": 16},
            layout=Layout(width="100%", height=height, min_width="300px"),
        )
        self.lines: dict[str, Lines] = {}

    def line(self, name: str, line_color: str, style: str = "solid") -> tuple[Lines, bool]:
        """The line called ``name``; True when it was just made (the figure needs its new marks)."""
        mark = self.lines.get(name)
        if mark is not None:
            return mark, False
        mark = Lines(
            x=np.zeros(0), y=np.zeros(0),
            scales={"x": self.x_scale, "y": self.y_scale},
            labels=[name], display_legend=True, colors=[line_color],
            line_style="solid" if style == "band" else style, stroke_width=6 if style == "band" else 1.6,
            opacities=[0.6 if style == "band" else 1.0],
        )
        self.lines[name] = mark
        return mark, True


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

    def __init__(self, header_html: str = "", time_domain: tuple[float, float] | None = None) -> None:
        self.header = HTML(value=header_html)
        self.grid = GridBox(
            children=[],
            layout=Layout(grid_template_columns="repeat(auto-fill, minmax(340px, 1fr))", grid_gap="4px", width="100%"),
        )
        self.widget = VBox([self.header, self.grid], layout=Layout(width="100%"))
        self.charts: dict[str, Chart] = {}
        self._chart_specs: dict[str, dict] = {}
        # The common time axis: fixed (a dashboard's window) or following the data (a run).
        lo, hi = time_domain if time_domain is not None else (None, None)
        self.time_scale = LinearScale(min=lo, max=hi, allow_padding=False)
        self._rank: dict[str, int] = {}

    def define_chart(self, name: str, shared_x: bool = False, **spec) -> None:
        """Register how chart ``name`` looks (title, axis labels, y range); shown on first data.
        ``shared_x``: on the view's common time axis; ``rank``: charts sort by it in the grid;
        ``"*"``: the look of charts not registered by name."""
        if shared_x:
            spec["x_scale"] = self.time_scale
        self._chart_specs[name] = spec

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
            for chart_name, line_name, _, _, xs, ys in lines:
                mark = self.charts[chart_name].lines[line_name]
                stack.enter_context(mark.hold_sync())
                held.append(mark)
                mark.x = _array(xs)
                mark.y = _array(ys)
            for chart in new_marks:
                chart.figure.marks = list(chart.lines.values())
        if new_charts:
            order = sorted(self.charts, key=lambda name: self._rank.get(name, 0))  # stable: first come first
            self.grid.children = [self.charts[name].figure for name in order]

    def close(self) -> None:
        for chart in self.charts.values():
            for mark in chart.lines.values():
                mark.close()
            chart.figure.close()
        self.widget.close()
