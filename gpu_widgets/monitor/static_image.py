"""A PNG of a run's charts, for places that cannot run widgets (GitHub, nbviewer, a report).

The same charts as the widget, laid out the same way: the metric charts, then the GPU charts of
the metric catalogue (``shown_in(MONITOR)``: busy % with throttle episodes shaded orange as in the
sidebar, memory with PyTorch's allocated and reserved, temperature, power), with the catalogue's
titles and fixed y ranges, each chart's title and legend (with latest values) above its plot. A run
that timed its steps' wait for data gets the "data wait (%)" chart beside GPU busy, as in the widget. Alert episodes
(monitor_alerts) are marked as in the widget: a bar along the top of their metric's chart (every GPU chart for a
lost GPU) over a faint shade, never in a legend. Drawn with matplotlib's
object API on the Agg canvas, never ``pyplot``: no global figure state, no interference with the
user's own plots or backend.
"""
from __future__ import annotations

import io
import math
from collections.abc import Sequence
from typing import Any

from .charts import ChartPlan
from .data_wait import CHART_TITLE as WAIT_TITLE, COLOR as WAIT_COLOR, LINE as WAIT_LINE
from ..widgets.gpu_summary import aggregate, merged
from .monitor_alerts import BAR, KIND_COLORS, charts_for
from .monitor_charts import CHART_NAMES, chart_top, gpu_charts, line_color, line_name
from ..store.decimator import Decimator
from ..runs.gpu_trace import GpuTrace
from ..runs.records import Records
from ..widgets.drawable import LEGEND_CHARS, clipped, short_title
from ..widgets.legend import value_text
from ..widgets.png_cards import STYLES, card_head
from ..widgets.view import color

REGION_COLOR = "#ef6c00"  # throttle episodes, as the sidebar's bands


def _last(ys: Sequence[float]) -> float | None:
    return next((float(v) for v in reversed(ys) if v == v), None)


def _summary(ax: Any, panel: Any, devices: Sequence[Any], max_points: int) -> float:
    """Many GPUs this process does not use, as in the widget: their mean and min–max band.
    Returns the band's highest value (for the y range)."""
    curve = panel.lines[0][0]
    agg = aggregate((d.curves[curve].points() for d in devices if curve in d.curves), max_points)
    if agg is None:
        return -math.inf
    xs, mean, band = agg
    m = panel.metric
    line, low, high = clipped(mean), clipped(band[0]), clipped(band[1])  # as drawn (drawable); legends exact
    ax.plot(xs, line, color=color(0), linewidth=1.2,
            label=f"mean of {len(devices)} GPUs {value_text(_last(mean), m.unit, m.decimals)}")
    ax.fill_between(xs, low, high, color=color(0), alpha=0.2, linewidth=0,  # under the line (zorder)
                    label=f"min–max {value_text(_last(band[0]), '', m.decimals)}–{value_text(_last(band[1]), m.unit, m.decimals)}")
    return max((float(v) for v in high if v == v), default=-math.inf)


Points = tuple[Sequence[float], Sequence[float]]
Spans = Sequence[tuple[float, float]]  # [start, end] in seconds since the start


def _alert_marks(ax: Any, panel: Any, alerts: dict[str, Spans]) -> None:
    """Each episode of a kind drawn on ``panel`` as a bar over the top of the plot and a faint shade below
    it, in axes height (never moves the y range), with no legend entry: it is not a series."""
    for kind, spans in alerts.items():
        if not charts_for(kind, [panel]):
            continue
        colour = KIND_COLORS.get(kind, KIND_COLORS["lost"])
        for start, end in spans:
            ax.axvspan(start, end, ymin=1.0 - BAR, ymax=1.0, color=colour, alpha=0.85, linewidth=0)
            ax.axvspan(start, end, ymin=0.0, ymax=1.0 - BAR, color=colour, alpha=0.12, linewidth=0)


def draw_figure(title: str, records: Records, plan: ChartPlan, trace: GpuTrace, devices: Sequence[Any],
                time_origin: float | None = None, max_points: int = 2000, summary: bool = False,
                data_wait: Points | None = None, alerts: dict[str, Spans] | None = None,
                by_rank: Sequence[tuple[str, Sequence[Any]]] | None = None) -> Any:
    """The matplotlib Figure of the run's charts. ``time_origin``: metrics against seconds since then (the widget's time axis); None: steps.
    ``summary``: the GPUs as one mean line and a min–max band per chart, as the widget draws them.
    ``data_wait``: the data-wait chart's points (seconds since the start, %; ``StepTimes.points``).
    ``alerts``: per alert kind, its episodes as merged [start, end] (``MonitorAlerts.intervals``).
    ``by_rank``: a launch's by-rank charts, (title, the widget's lines) each (``RankCharts.panels``)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError("the static picture needs matplotlib: pip install matplotlib") from None
    charts: dict[str, list[tuple[int, str]]] = {}
    for i, key in enumerate(records.keys):
        chart = plan.chart_of(key)
        if chart is not None:
            charts.setdefault(chart, []).append((i, key))
    gpu_panels: list[Any] = [c for c in gpu_charts(trace.curve_specs)
                  if any(curve in d.curves and d.curves[curve].count for d in devices for curve, _, _ in c.lines)]
    # The data-wait chart sits after GPU busy (first of the GPU charts), as in the widget.
    waits = data_wait if data_wait is not None and len(data_wait[0]) else None
    if waits is not None:
        gpu_panels.insert(1 if gpu_panels and gpu_panels[0].name == CHART_NAMES["utilization"] else 0, None)
    rank_panels = list(by_rank or ())  # after the metric charts, as in the widget
    panels = len(charts) + len(rank_panels) + len(gpu_panels)
    cols = 2 if panels > 1 else 1
    rows = max(1, math.ceil(panels / cols))
    fig = Figure(figsize=(5.2 * cols, 2.6 * rows + 0.4), dpi=90, layout="constrained")
    FigureCanvasAgg(fig)
    simulated = " · SIMULATED GPUs" if trace.backend == "simulated" else ""
    fig.suptitle(short_title(title) + simulated, fontsize=11)
    axes = list(fig.subplots(rows, cols, squeeze=False).flat)
    x_label = "seconds since start" if time_origin is not None else "step"
    for ax, (chart, keys) in zip(axes, charts.items()):
        for i, key in keys:
            dec = Decimator(max_points)
            xs, ys, _ = records.points(key, 0, records.size, time_origin)
            dec.extend(xs, ys)
            px, py = dec.points()
            label = f"{short_title(key, LEGEND_CHARS)} {value_text(_last(py), '', None)}"  # the exact value; the line clipped
            ax.plot(px, clipped(py), color=color(i), label=label, linewidth=1.2)
        ax.set_xlabel(x_label, fontsize=8)
        card_head(ax, chart)
    for ax, (rank_title, rank_lines) in zip(axes[len(charts):], rank_panels):
        _rank_chart(ax, rank_title, rank_lines)
    for ax, panel in zip(axes[len(charts) + len(rank_panels):], gpu_panels):
        if panel is None:
            _wait_chart(ax, waits)  # type: ignore[arg-type]
            continue
        busy = panel.name == CHART_NAMES["utilization"]
        m, top = panel.metric, chart_top(panel.metric, devices)
        highest = _summary(ax, panel, devices, max_points) if summary else -math.inf
        for d in () if summary else devices:
            for curve, suffix, style in panel.lines:
                if curve in d.curves and d.curves[curve].count:
                    px, exact = d.curves[curve].points()
                    py = clipped(exact)
                    highest = max([highest, *(v for v in py if v == v)])
                    value = value_text(_last(exact), m.unit, m.decimals)
                    ax.plot(px, py, color=line_color(d), linestyle=STYLES.get(style, "-"),
                            linewidth=1.2, label=f"{line_name(d)}{suffix} {value}")
        if busy:  # shaded over the whole height as in the widget, named once
            episodes = merged(e for d in devices for e in d.episodes) if summary else [e for d in devices for e in d.episodes]
            spans = [(start, max(end, start + 0.5)) for start, end in episodes]
            for k, (start, end) in enumerate(spans):
                ax.axvspan(start, end, color=REGION_COLOR, alpha=0.2, linewidth=0,
                           label=("throttled (any GPU)" if summary else "throttled") if k == 0 else None)
        _alert_marks(ax, panel, alerts or {})
        # The catalogue's fixed range; data past a fixed top widens it (never cut off).
        if m.y_min is not None or top is not None:
            ax.set_ylim(bottom=m.y_min, top=None if top is None else max(top, highest))
        ax.set_xlabel("seconds since start", fontsize=8)
        card_head(ax, panel.title)
    for ax in axes:
        ax.tick_params(labelsize=7, colors="#616161")
        ax.grid(alpha=0.3)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    for ax in axes[panels:]:
        ax.set_visible(False)
    return fig


def _wait_chart(ax: Any, points: Points) -> None:
    xs, ys = points
    ax.plot(xs, ys, color=WAIT_COLOR, linewidth=1.2, label=f"{WAIT_LINE} {value_text(_last(ys), '%', 0)}")
    ax.set_ylim(bottom=0.0, top=100.0)
    ax.set_xlabel("seconds since start", fontsize=8)
    card_head(ax, WAIT_TITLE)


def _rank_chart(ax: Any, title: str, lines: Sequence[Any]) -> None:
    """A by-rank chart: a line per rank, or the min–max band ("range") and the slowest rank's line."""
    for _, name, colour, style, xs, ys in lines:
        if style == "range":
            ax.fill_between(xs, ys[0], ys[1], color=colour, alpha=0.2, linewidth=0, label=name)
        else:
            ax.plot(xs, ys, color=colour, linewidth=1.2,
                    label=f"{short_title(name, LEGEND_CHARS)} {value_text(_last(ys), 'ms', 1)}")
    ax.set_ylim(bottom=0.0)
    ax.set_xlabel("seconds since start", fontsize=8)
    card_head(ax, title)


def render_png(title: str, records: Records, plan: ChartPlan, trace: GpuTrace, devices: Sequence[Any],
               time_origin: float | None = None, max_points: int = 2000, summary: bool = False,
               data_wait: Points | None = None, alerts: dict[str, Spans] | None = None,
               by_rank: Sequence[tuple[str, Sequence[Any]]] | None = None) -> bytes:
    """The figure of ``draw_figure`` as PNG bytes."""
    fig = draw_figure(title, records, plan, trace, devices, time_origin, max_points, summary, data_wait, alerts,
                      by_rank)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()
