"""A PNG of a run's charts, for places that cannot run widgets (GitHub, nbviewer, a report).

The same charts as the widget: the metric charts, then the GPU charts of the metric catalogue
(``shown_in(MONITOR)``: busy % with throttle episodes shaded, memory with PyTorch's allocated and
reserved, temperature, power), with the catalogue's titles and y ranges. Drawn with matplotlib's
object API on the Agg canvas, never ``pyplot``: no global figure state, no interference with the
user's own plots or backend.
"""
from __future__ import annotations

import io
import math
from collections.abc import Sequence
from typing import Any, Callable

from .charts import ChartPlan
from .monitor_charts import CHART_NAMES, chart_top, gpu_charts
from ..store.decimator import Decimator
from ..runs.gpu_trace import GpuTrace
from ..runs.records import Records
from .view import color

STYLES = {"solid": "-", "dashed": "--", "dotted": ":"}  # the widget's line styles in matplotlib's words


def render_png(title: str, records: Records, plan: ChartPlan, trace: GpuTrace, devices: Sequence[Any],
               time_origin: float | None = None, max_points: int = 2000) -> bytes:
    """``time_origin``: metrics against seconds since then (the widget's time axis); None: steps."""
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
    gpu_panels = [c for c in gpu_charts(trace.curve_specs)
                  if any(curve in d.curves and d.curves[curve].count for d in devices for curve, _, _ in c.lines)]
    panels = len(charts) + len(gpu_panels)
    cols = 2 if panels > 1 else 1
    rows = max(1, math.ceil(panels / cols))
    fig = Figure(figsize=(5.2 * cols, 2.6 * rows + 0.4), dpi=90, layout="constrained")
    FigureCanvasAgg(fig)
    simulated = " · SIMULATED GPUs" if trace.backend == "simulated" else ""
    fig.suptitle(title + simulated, fontsize=11)
    axes = list(fig.subplots(rows, cols, squeeze=False).flat)
    x_label = "seconds since start" if time_origin is not None else "step"
    for ax, (chart, keys) in zip(axes, charts.items()):
        for i, key in keys:
            dec = Decimator(max_points)
            xs, ys, _ = records.points(key, 0, records.size, time_origin)
            dec.extend(xs, ys)
            ax.plot(*dec.points(), color=color(i), label=key, linewidth=1.2)
        ax.set_title(chart, fontsize=9)
        ax.set_xlabel(x_label, fontsize=8)
        ax.legend(fontsize=7)
    for ax, panel in zip(axes[len(charts):], gpu_panels):
        busy = panel.name == CHART_NAMES["utilization"]
        for d in devices:
            for curve, suffix, style in panel.lines:
                if curve in d.curves and d.curves[curve].count:
                    ax.plot(*d.curves[curve].points(), color=color(d.index), linestyle=STYLES.get(style, "-"),
                            linewidth=1.2, label=f"GPU {d.index}{suffix}")
            if busy:
                for start, end in d.episodes:
                    ax.axvspan(start, max(end, start + 0.5), color="#d62728", alpha=0.25, linewidth=0)
        m, top = panel.metric, chart_top(panel.metric, devices)
        if m.y_min is not None or top is not None:
            ax.set_ylim(bottom=m.y_min, top=top)
        throttled = busy and any(d.episodes for d in devices)
        ax.set_title(panel.title + (" · red: throttled" if throttled else ""), fontsize=9)
        ax.set_xlabel("seconds since start", fontsize=8)
        ax.legend(fontsize=7)
    for ax in axes:
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in axes[panels:]:
        ax.set_visible(False)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


class CachedPng:
    """The run's picture, drawn once per state of the run (key) and kept: a notebook asks for
    the output's representation more than once."""

    def __init__(self) -> None:
        self.key: Any = None
        self.png: bytes | None = None

    def get(self, key: Any, draw: Callable[[], bytes] | None, problem: Callable[[str], None]) -> bytes | None:
        """The PNG for ``key``; ``draw`` None: nothing to draw. None without matplotlib."""
        if key == self.key:
            return self.png
        png = None
        if draw is not None:
            try:
                png = draw()
            except ImportError:
                png = None  # no matplotlib: the text/plain line is the fallback
            except Exception as exc:
                problem(f"drawing the static image: {type(exc).__name__}: {exc}")
        self.key, self.png = key, png
        return png
