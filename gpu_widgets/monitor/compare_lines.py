"""What a comparison draws: its charts (one per logged key, then the GPU charts of the metric
catalogue) and one line per run in each, bounded like the monitor's.

Metric lines go through the monitor's ``Decimator``; a run's GPU line is the mean of its GPUs
(``gpu_summary.aggregate`` over the trace's decimated curves; one GPU: its own curve). Points are
split over all the lines as the monitor splits them (``METRIC_WEIGHT``, ``MIN_LINE_POINTS``), so a
comparison of long runs sends at most about ``max_points`` points in all.

By step, a GPU sample sits at the step the run was at when it was taken: its time interpolated
between the logged steps' times. Samples before the first or after the last logged step have no
step and are left out (so are the GPU lines of a run that logged no steps).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..metrics.catalogue import Metric
from ..store.decimator import Decimator
from .compare_runs import ComparedRun
from ..widgets.drawable import narrow
from ..widgets.gpu_summary import aggregate
from .monitor_charts import METRIC_WEIGHT, MIN_LINE_POINTS, chart_top, gpu_charts, has_curve
from ..widgets.view import LineData

X_LABELS = {"step": "step", "time": "seconds since start"}


@dataclass(frozen=True)
class CompareChart:
    name: str  # the chart's key in the view
    title: str
    unit: str = ""
    y_min: float | None = None
    y_max: float | None = None
    decimals: int | None = None
    key: str | None = None  # a logged key's chart
    curve: str | None = None  # a GPU chart: the trace curve it draws
    metric: Metric | None = None


def charts_for(runs: Sequence[ComparedRun], keys: Sequence[str]) -> list[CompareChart]:
    """The logged keys' charts, then the catalogue's GPU charts that some run has samples for,
    with their fixed ranges (a top from a limit field: the largest of all runs' GPUs)."""
    devices = [d for run in runs if run.trace is not None for d in run.trace.devices.values()]
    out: list[CompareChart] = []
    specs = runs[0].trace.curve_specs if runs and runs[0].trace is not None else {}
    gpu = [c for c in gpu_charts(specs) if any(has_curve(d, c.lines[0][0]) for d in devices)]
    gpu_names = {c.name for c in gpu}
    for key in keys:
        name = key if key not in gpu_names else f"{key} (logged)"
        out.append(CompareChart(name, key, key=key))
    for c in gpu:
        m = c.metric
        out.append(CompareChart(c.name, m.title, m.unit, m.y_min, chart_top(m, devices), m.decimals,
                                curve=c.lines[0][0], metric=m))
    return out


def shares(runs: Sequence[ComparedRun], charts: Sequence[CompareChart], max_points: int) -> tuple[int, int]:
    """Points per metric line and per GPU line, as the monitor splits ``max_points``."""
    n_metric = sum(1 for run in runs for c in charts if c.key is not None and c.key in run.records.series)
    n_gpu = sum(1 for run in runs for c in charts if c.curve is not None and run.trace is not None
                and any(has_curve(d, c.curve) for d in run.trace.devices.values()))
    units = METRIC_WEIGHT * n_metric + n_gpu
    if not units:
        return max_points, max_points
    per = max_points / units
    return max(MIN_LINE_POINTS, int(per * METRIC_WEIGHT)), max(MIN_LINE_POINTS, int(per))


def step_of(run: ComparedRun, seconds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(steps, which of ``seconds`` have one): seconds since the run's start as the step it was at."""
    records = run.records
    n = records.size
    times = np.asarray(records.times[:n], float) - run.origin
    steps = np.asarray(records.steps[:n], float)
    known = np.isfinite(times)
    times, steps = times[known], steps[known]
    if not times.size:
        return np.zeros(0), np.zeros(len(seconds), bool)
    times = np.maximum.accumulate(times)  # interp needs time order; a clock step back stays put
    inside = (seconds >= times[0]) & (seconds <= times[-1])
    return np.interp(seconds[inside], times, steps), inside


def metric_line(run: ComparedRun, chart: CompareChart, x_axis: str, points: int) -> LineData | None:
    records = run.records
    if chart.key not in records.series:
        return None
    xs, ys, _ = records.points(chart.key, 0, records.size, run.origin if x_axis == "time" else None)
    dec = Decimator(max(4, points))
    dec.extend(xs, ys)
    if not dec.count:
        return None
    px, py = dec.points()
    # As the monitor sends them: x in float32, the logged values exactly (float64).
    return (chart.name, run.label, run.color, "solid", np.asarray(px, np.float32), np.asarray(py, np.float64))


def gpu_line(run: ComparedRun, chart: CompareChart, x_axis: str, points: int) -> LineData | None:
    if run.trace is None:
        return None
    curves = [d.curves[chart.curve].points(points) for d in run.trace.devices.values()
              if chart.curve in d.curves and d.curves[chart.curve].count]
    agg = aggregate(curves, points)
    if agg is None:
        return None
    xs, mean, _ = agg
    xs, mean = np.asarray(xs, float), np.asarray(mean, float)
    if x_axis == "step":
        xs, inside = step_of(run, xs)
        mean = mean[inside]
        if not xs.size:
            return None
    return (chart.name, run.label, run.color, "solid", narrow(xs), narrow(mean))


def compare_lines(runs: Sequence[ComparedRun], charts: Sequence[CompareChart], x_axis: str,
                  max_points: int) -> list[LineData]:
    """Every line of the comparison: per chart, one per run that has data for it, in run order."""
    metric_points, gpu_points = shares(runs, charts, max_points)
    out: list[LineData] = []
    for chart in charts:
        for run in runs:
            if chart.key is not None:
                line = metric_line(run, chart, x_axis, metric_points)
            else:
                line = gpu_line(run, chart, x_axis, gpu_points)
            if line is not None:
                out.append(line)
    return out
