"""``TrainingMonitor.compare(run_a, run_b, ...)``: saved (or live) runs overlaid on the same charts.

``CompareRuns`` is a mixin TrainingMonitor inherits for its ``compare`` classmethod (monitor.py
stays a thin facade). The work is here and in its parts: compare_runs (reading the runs, the
summary), compare_lines (the charts and their bounded lines), compare_table (the header and the
table), compare_png (the static picture). A comparison is made once, from what the runs hold when
it is made: it does not follow a live run (call ``compare`` again).
"""
from __future__ import annotations

import base64
import copy
import os
from pathlib import Path
from typing import Any

from ..widgets import cell_hooks
from .compare_lines import X_LABELS, CompareChart, charts_for, compare_lines
from .compare_png import draw_comparison, render_comparison
from .compare_runs import ComparedRun, build_traces, check_keys, check_x_axis, gather, summary_row
from .compare_table import header_html
from ..widgets.png_cards import CachedPng
from ..widgets.view import ChartsView, LineData


class RunComparison:
    """Runs overlaid on the same charts, with a table of their summaries.

    * ``summary``: one dict per run, in the order given (see docs/widgets.md, "Compare runs").
    * ``runs``: the runs' names, as the legends show them.
    * ``widget``: the ipywidget (shown by ``display()`` or as a cell's last value).
    * ``chart_titles``: the charts' titles, in order.
    * ``figure()`` / ``to_png(path=None)``: the static picture (needs matplotlib).
    """

    def __init__(self, runs: list[ComparedRun], *, x_axis: str, keys: tuple[str, ...], title: str,
                 max_points: int) -> None:
        self.title, self.x_axis, self.keys, self.max_points = title, x_axis, keys, max_points
        self._runs = runs
        build_traces(runs, max_points)
        self._summary = [summary_row(run, keys) for run in runs]
        self.charts: list[CompareChart] = charts_for(runs, keys)
        self.lines: list[LineData] = compare_lines(runs, self.charts, x_axis, max_points)
        self._view = ChartsView(header_html(title, runs, self._summary, keys, x_axis))
        for rank, chart in enumerate(self.charts):
            # One x axis for all: every chart reads by step, or by seconds since each run's start.
            self._view.define_chart(chart.name, shared_x=True, title=chart.title, x_label=X_LABELS[x_axis],
                                    y_label=chart.unit, y_min=chart.y_min, y_max=chart.y_max,
                                    decimals=chart.decimals, rank=rank)
        self._view.update(None, self.lines)
        self._png = CachedPng()
        self.problems: list[str] = []  # drawing the picture failed: why (the widget still shows)

    @property
    def summary(self) -> list[dict[str, Any]]:
        return copy.deepcopy(self._summary)  # a copy: the table shown stays what it says

    @property
    def runs(self) -> list[str]:
        return [run.label for run in self._runs]

    @property
    def widget(self) -> Any:
        return self._view.widget

    @property
    def chart_titles(self) -> tuple[str, ...]:
        """Titles of the charts that have at least one line, in the grid's order."""
        drawn = {line[0] for line in self.lines}
        return tuple(c.title for c in self.charts if c.name in drawn)

    def figure(self) -> Any:
        """The static picture as a matplotlib Figure (needs matplotlib)."""
        return draw_comparison(self.title, self.charts, self.lines, self.x_axis, self._summary, self.keys,
                               [run.color for run in self._runs])

    def to_png(self, path: str | os.PathLike | None = None) -> bytes:
        """The static picture as PNG bytes; written to ``path`` too when given (needs matplotlib)."""
        png = render_comparison(self.title, self.charts, self.lines, self.x_axis, self._summary, self.keys,
                                [run.color for run in self._runs])
        if path is not None:
            Path(path).write_bytes(png)
        return png

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = self._view.widget._repr_mimebundle_(**kwargs)
        bundle["text/plain"] = repr(self)
        # Where widgets do not render (GitHub, nbviewer), the picture does; drawn once.
        png = self._png.get("once", self.to_png, self.problems.append)
        if png is not None:
            bundle["image/png"] = base64.b64encode(png).decode("ascii")
        return bundle

    def __repr__(self) -> str:
        return f"<RunComparison of {len(self._runs)} runs by {self.x_axis}: {', '.join(map(repr, self.runs))}>"

    def close(self) -> None:
        """Close the widgets (the front end forgets them)."""
        self._view.close()


class CompareRuns:
    """Gives TrainingMonitor its ``compare`` classmethod."""

    @classmethod
    def compare(cls, *runs: Any, x_axis: str = "step", keys: Any = None, title: str | None = None,
                max_points: int = 2000, display: bool = True) -> RunComparison:
        """Overlay runs on the same charts, with a table of their summaries.

        ``runs``: at least two run-log directories, files written by ``save()`` (their GPU
        samples are read from beside them), or TrainingMonitors (live or loaded: what they hold
        now); one list of them works too. ``x_axis``: ``"step"`` (default) or ``"time"``
        (seconds since each run's start). ``keys``: the logged keys to chart (default all).
        ``max_points``: the most points all lines hold together (as the monitor's).
        ``display``: show it now (in a notebook). Returns a :class:`RunComparison`; its
        ``summary`` lists each run's steps, duration, rates, energy, peak memory and final values.
        """
        x_axis = check_x_axis(x_axis)
        if title is not None and not isinstance(title, str):
            raise TypeError(f"title must be a string, got {type(title).__name__}")
        if isinstance(max_points, bool) or not isinstance(max_points, int) or not 4 <= max_points <= 100_000:
            raise ValueError(f"max_points must be a whole number from 4 to 100000, got {max_points!r}")
        compared = gather(runs, CompareRuns)
        keys = check_keys(keys, compared)
        result = RunComparison(compared, x_axis=x_axis, keys=keys, title=title or "Compare runs",
                               max_points=max_points)
        if display and cell_hooks.in_kernel():
            from IPython.display import display as show

            show(result)
        return result
