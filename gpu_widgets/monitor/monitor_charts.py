"""The TrainingMonitor's charts: which lines go where, how many points each line gets, and the
lines a redraw sends.

The GPU charts are the metric catalogue's monitor metrics (``shown_in(MONITOR)``): their titles,
units and y ranges come from there, so a metric added to the catalogue gets its chart here and in
the static PNG. The memory chart also carries PyTorch's allocator (allocated, reserved).
``max_points`` is split over all the lines drawn (see ``shares``), which bounds a redraw's bytes.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..metrics.catalogue import MONITOR, Metric, shown_in
from ..runs.gpu_trace import DeviceTrace, curve_of
from ..runs.records import Records
from ..store.decimator import Decimator
from .charts import ChartPlan, PlotSpec
from .data_wait import CHART as WAIT_CHART, CHART_TITLE as WAIT_TITLE, StepTimes
from .rank_charts import MAX_RANK_LINES, RankCharts
from ..widgets.drawable import narrow
from ..widgets.gpu_summary import LOST_COLOR, SUMMARY_THROTTLED, THROTTLE_COLOR, aggregate, merged, region
from ..widgets.view import ChartsView, LineData, color

SUMMARY_COLOR = color(0)
METRIC_WEIGHT = 4  # a metric line gets this many times a GPU line's share of max_points
MIN_LINE_POINTS = 16  # a line's share never goes below this, however many lines there are
# Chart names the tests and saved widget states know; a new metric's chart is "gpu_<id>".
CHART_NAMES = {"utilization": "gpu_util"}
# Words after "GPU n" for a metric's own line, and the extra lines its chart carries.
LINE_SUFFIX = {"memory": " used"}
EXTRA_LINES: dict[str, tuple[tuple[str, str, str], ...]] = {
    "memory": (("torch_allocated", " PyTorch allocated", "dashed"), ("torch_reserved", " PyTorch reserved", "dotted")),
}


@dataclass(frozen=True)
class GpuChart:
    metric: Metric
    name: str  # the chart's key in the view
    lines: tuple[tuple[str, str, str], ...]  # (trace curve, label suffix, line style)

    @property
    def title(self) -> str:
        return self.metric.title


def chart_top(m: Metric, devices: Sequence[DeviceTrace]) -> float | None:
    """A GPU chart's top: the metric's ``y_max``, else the largest latest ``y_max_field`` of the
    GPUs shown (memory total, power limit) in the metric's unit; None: fit the data."""
    return m.top(d.latest.get(m.y_max_field) for d in devices)  # type: ignore[arg-type]


def lost_episodes(d: DeviceTrace, t0: float) -> list[list[float]]:
    """The stretches of samples in which the GPU did not answer, as [first, last] seconds since
    ``t0``, from the samples the trace holds in memory (older ones went to the run log)."""
    if not d.lost_samples or not len(d.lost):
        return []
    lost = np.array(d.lost, dtype=np.int8)  # a copy: the trace's arrays must stay growable
    times = np.array(d.times, dtype=float)
    edges = np.flatnonzero(np.diff(np.concatenate(([0], lost != 0, [0])).astype(np.int8)))
    return [[times[s] - t0, times[e - 1] - t0] for s, e in zip(edges[::2], edges[1::2])]


def line_name(d: DeviceTrace) -> str:
    """A GPU's line: "GPU 0", or in a launch's view "rank 1 · node-b · GPU 0" (rank_charts)."""
    return d.label or f"GPU {d.index}"


def line_color(d: DeviceTrace) -> str:
    return color(d.index if d.slot is None else d.slot)


def has_curve(d: DeviceTrace, curve: str) -> bool:
    return curve in d.curves and d.curves[curve].count > 0


def gpu_charts(curve_specs: Any) -> tuple[GpuChart, ...]:
    """The GPU charts for a trace with these curves, in catalogue order. A metric whose field the
    trace has no curve for is left out (nothing to draw), never an error."""
    out = []
    for m in shown_in(MONITOR):
        curve = curve_of(m.field, curve_specs)
        if curve is None:
            continue
        lines = ((curve, LINE_SUFFIX.get(m.id, ""), "solid"), *EXTRA_LINES.get(m.id, ()))
        out.append(GpuChart(m, CHART_NAMES.get(m.id, f"gpu_{m.id}"), lines))
    return tuple(out)


class MonitorCharts:
    """The metric and GPU lines of one monitor, drawn into ``view``; runs on the monitor's thread."""

    def __init__(self, view: ChartsView, plot: PlotSpec, x_axis: str, max_points: int,
                 charts: tuple[GpuChart, ...]) -> None:
        self.view = view
        self.plan = ChartPlan(plot)
        self.on_time = x_axis == "time"
        self.max_points = max_points
        self.gpu = charts
        self.curves: dict[str, Decimator] = {}  # per logged key
        self.curve_pos: dict[str, int] = {}  # rows of each key already in its curve
        self.gpu_drawn: dict[Any, int] = {}  # samples of each GPU (by index, or label in a launch) last sent
        self.drawn_shares: tuple[int, int] | None = None
        self.summary_names: list[tuple[str, str, str]] = []  # (chart, line, style) a summary drew
        self.gpu_names: set[tuple[str, str, str]] = set()  # the same, of a launch's labelled GPU lines
        self.tops: dict[str, float | None] = {}  # charts whose top follows a limit field: as last set
        self.t0 = 0.0  # the run's start: x = 0 of the GPU curves
        self.waits = StepTimes(max_points)  # the steps' data wait (track(), callbacks): its own chart
        self.ranks: RankCharts | None = None  # a launch's by-rank charts (load(), follow()); see by_rank
        view.define_chart("*", shared_x=self.on_time, x_label="seconds since start" if self.on_time else "step",
                          rank=0)
        for rank, chart in enumerate(charts, 1):
            m = chart.metric
            view.define_chart(chart.name, shared_x=True, title=m.title, x_label="seconds since start",
                              y_label=m.unit, y_min=m.y_min, y_max=m.y_max, decimals=m.decimals,
                              rank=rank + (rank > 1))
        # Beside GPU busy: waiting for data next to the GPU's idle time tells input-bound apart.
        view.define_chart(WAIT_CHART, shared_x=True, title=WAIT_TITLE, x_label="seconds since start", y_label="%",
                          y_min=0.0, y_max=100.0, decimals=0, rank=2)

    def shares(self, records: Records, devices: Sequence[DeviceTrace], summary: bool = False) -> tuple[int, int]:
        """Points per metric line and per GPU line: ``max_points`` split over all the lines drawn,
        a metric line getting ``METRIC_WEIGHT`` times a GPU line's share (GPUs are sampled at
        1 Hz; the loss is what users read closely). Never below ``MIN_LINE_POINTS``. A summary
        draws per GPU chart a mean line and a band (two rows): three GPU lines' worth."""
        n_metric = sum(1 for key in records.keys if self.plan.chart_of(key) is not None)
        if summary:
            n_gpu = 3 * sum(1 for chart in self.gpu if any(has_curve(d, chart.lines[0][0]) for d in devices))
        else:
            n_gpu = sum(1 for d in devices for chart in self.gpu for curve, _, _ in chart.lines if has_curve(d, curve))
        n_gpu += self.waits.has_data  # the data-wait line: a GPU line's share (it is binned like one)
        n_gpu += self.ranks.units() if self.ranks is not None else 0  # by-rank lines: binned the same way
        units = METRIC_WEIGHT * n_metric + n_gpu
        if not units:
            return self.max_points, self.max_points
        per = self.max_points / units
        return max(MIN_LINE_POINTS, int(per * METRIC_WEIGHT)), max(MIN_LINE_POINTS, int(per))

    def lines(self, records: Records, n: int, devices: Sequence[DeviceTrace], t0: float | None,
              summary: bool = False) -> list[LineData]:
        """The lines that changed since the last redraw (all of them when a line appeared);
        ``summary``: the GPUs as one mean line and a min–max band per chart (gpu_summary)."""
        devices, summary = self.with_ranks(devices, summary)
        shares = self.shares(records, devices, summary)
        metric_points, gpu_points = shares
        redraw_all = shares != self.drawn_shares  # a line appeared: every line gets its new share
        if redraw_all:
            self.drawn_shares = shares
            self.gpu_drawn.clear()
        out: list[LineData] = []
        origin = (t0 or 0.0) if self.on_time else None
        self.t0 = t0 or 0.0
        for i, key in enumerate(records.keys):
            dec = self.curves.get(key)
            if dec is None:
                dec = self.curves[key] = Decimator(self.max_points)
            pos = self.curve_pos.get(key)
            xs, ys, end = records.points(key, pos or 0, n, origin)
            if end == (pos or 0) and not (redraw_all and pos is not None):
                continue
            dec.extend(xs, ys)
            self.curve_pos[key] = end
            chart = self.plan.chart_of(key)
            if chart is not None:
                px, py = dec.points(metric_points)
                # x (seconds since start, or steps) in float32: ~ms for days, steps exact to 16 M.
                # y stays float64: the values logged, exactly.
                out.append((chart, key, color(i), "solid", np.asarray(px, np.float32), np.asarray(py, np.float64)))
        wait_line = self.waits.line(t0, gpu_points, redraw_all)
        if wait_line is not None:
            out.append(wait_line)
        if self.ranks is not None:
            out.extend(self.ranks.lines(gpu_points, redraw_all))
        if summary:
            out.extend(self.clear_gpu_lines())  # a launch's view that grew past MAX_RANK_LINES GPUs
            seen = sum(d.samples for d in devices)
            if self.gpu_drawn.get(-1) != seen:  # -1: the summary's key (GPU indices are >= 0)
                self.gpu_drawn[-1] = seen
                out.extend(self.summary_lines(devices, gpu_points))
        else:
            out.extend(self.clear_summary())
            out.extend(self.clear_relabelled(devices))
            for d in devices:
                key = d.index if d.label is None else d.label
                if self.gpu_drawn.get(key) != d.samples:
                    self.gpu_drawn[key] = d.samples
                    drawn = self.gpu_lines(d, gpu_points)
                    if d.label is not None:  # a launch's: emptied if its GPUs become a summary
                        self.gpu_names.update((c, name, style) for c, name, _, style, _, _ in drawn)
                    out.extend(drawn)
        self.follow_limits(devices)
        return out

    def by_rank(self) -> RankCharts:
        """The by-rank charts, made when a launch's ranks are first fed (run_feed): never for a single process."""
        if self.ranks is None:
            self.ranks = RankCharts(self.view, self.max_points)
        return self.ranks

    def with_ranks(self, devices: Sequence[DeviceTrace], summary: bool) -> tuple[Sequence[DeviceTrace], bool]:
        """A launch's view: every rank's GPUs (labelled), as a summary beyond MAX_RANK_LINES."""
        if self.ranks is None:
            return devices, summary
        every = self.ranks.devices(devices)
        return every, summary or len(every) > MAX_RANK_LINES

    def follow_limits(self, devices: Sequence[DeviceTrace]) -> None:
        """A chart whose metric has a ``y_max_field`` (memory total, power limit) tops out at the
        largest latest limit of the GPUs shown: a full chart means "at the limit"."""
        for chart in self.gpu:
            if chart.metric.y_max is not None or chart.metric.y_max_field is None:
                continue
            top = chart_top(chart.metric, devices)
            if top != self.tops.get(chart.name):
                self.tops[chart.name] = top
                self.view.set_y_max(chart.name, top)

    def gpu_lines(self, d: DeviceTrace, points: int | None = None) -> list[LineData]:
        c, name = line_color(d), line_name(d)
        out: list[LineData] = []
        for chart in self.gpu:
            for curve, suffix, style in chart.lines:
                dec = d.curves.get(curve)
                if dec is not None and dec.count:
                    px, py = dec.points(points)
                    # float32 both ways: percents, GiB, °C and W need far fewer than 7 digits
                    # (narrow: float64 for a value past float32's 3.4e38, which would become inf).
                    out.append((chart.name, name + suffix, c, style, narrow(px), narrow(py)))
        throttled = self.throttle_region(f"{name} throttled", d.episodes, [d])
        if throttled is not None:
            out.append(throttled)
        lost = lost_episodes(d, self.t0)
        for chart in self.gpu if lost else ():  # shaded on each of its charts, as in the sidebar
            if not has_curve(d, chart.lines[0][0]):
                continue  # a chart this GPU never drew (SM active without GPM): not made for a shade
            m = chart.metric
            low = m.y_min if m.y_min is not None else 0.0
            top = chart_top(m, [d])
            out.append((chart.name, f"{name} lost", LOST_COLOR, "lost", *region(lost, low, low + 1 if top is None else top)))
        return out

    def throttle_region(self, name: str, episodes: list[list[float]], devices: Sequence[DeviceTrace]) -> LineData | None:
        """Throttle episodes as a translucent region over the whole height of the GPU-busy chart."""
        busy = next((c for c in self.gpu if c.name == CHART_NAMES["utilization"]), None)
        if not episodes or busy is None:
            return None
        m = busy.metric
        low = m.y_min if m.y_min is not None else 0.0
        top = chart_top(m, devices)
        return (busy.name, name, THROTTLE_COLOR, "region", *region(episodes, low, 100.0 if top is None else top))

    def summary_lines(self, devices: Sequence[DeviceTrace], points: int) -> list[LineData]:
        """Per GPU chart the mean of the GPUs and their min–max band; the throttle episodes of
        all of them as one region."""
        out: list[LineData] = []
        for chart in self.gpu:
            curve = chart.lines[0][0]
            agg = aggregate((d.curves[curve].points(points) for d in devices if curve in d.curves), points)
            if agg is None:
                continue
            xs, mean, band = agg
            x32 = narrow(xs)
            out.append((chart.name, f"mean of {len(devices)} GPUs", SUMMARY_COLOR, "solid", x32, narrow(mean)))
            out.append((chart.name, "min–max", SUMMARY_COLOR, "range", x32, narrow(band)))
        throttled = self.throttle_region(SUMMARY_THROTTLED, merged(e for d in devices for e in d.episodes), devices)
        if throttled is not None:
            out.append(throttled)
        drawn = self.summary_names + [(c, name, style) for c, name, _, style, _, _ in out]
        self.summary_names = list(dict.fromkeys(drawn))
        return out

    def clear_summary(self) -> list[LineData]:
        """Once the process uses a GPU after all (PyTorch started): the summary's lines emptied."""
        names, self.summary_names = self.summary_names, []
        return _emptied(names)

    def clear_gpu_lines(self) -> list[LineData]:
        """A launch's GPUs drawn one line each, emptied once they are a summary."""
        names, self.gpu_names = list(self.gpu_names), set()
        for key in [k for k in self.gpu_drawn if isinstance(k, str)]:
            del self.gpu_drawn[key]
        return _emptied(names)

    def clear_relabelled(self, devices: Sequence[DeviceTrace]) -> list[LineData]:
        """A launch's GPU lines whose label is gone, emptied: "rank 0 · GPU 0" once rank 1 turns
        out to have recorded the same GPU ("ranks 0, 1 · GPU 0")."""
        labels = {d.label for d in devices if d.label is not None}
        for key in [k for k in self.gpu_drawn if isinstance(k, str) and k not in labels]:
            del self.gpu_drawn[key]
        # a line's name is its GPU's label, or the label and a suffix (" PyTorch allocated", " throttled")
        stale = {(c, name, style) for c, name, style in self.gpu_names
                 if name not in labels and not any(name.startswith(label + " ") for label in labels)}
        self.gpu_names -= stale
        return _emptied(sorted(stale))

    def nonfinite(self, records: Records) -> dict[str, tuple[int, float, int]]:
        """Keys that logged NaN or inf: (step of the first, its value, how many)."""
        out = {}
        for key, dec in list(self.curves.items()):
            if dec.first_nonfinite is not None:
                position, value = dec.first_nonfinite
                row = records.series[key].rows[position]
                out[key] = (records.steps[row], value, dec.nonfinite)
        return out


def _emptied(names: Sequence[tuple[str, str, str]]) -> list[LineData]:
    """Lines sent empty (a mark keeps the last data it was sent)."""
    empty = np.zeros(0, np.float32)
    return [(c, name, SUMMARY_COLOR, style, empty, np.zeros((2, 0), np.float32) if style == "range" else empty)
            for c, name, style in names]
