"""A PNG of a run's charts, for places that cannot run widgets (GitHub, nbviewer, a report).

The same charts as the widget: the metric charts, then GPU busy % (throttle episodes shaded),
memory (with PyTorch's allocated and reserved), temperature and power. Drawn with matplotlib's
object API on the Agg canvas, never ``pyplot``: no global figure state, no interference with the
user's own plots or backend.
"""
from __future__ import annotations

import io
import math
from collections.abc import Sequence
from typing import Any

from .charts import ChartPlan
from ..store.decimator import Decimator
from ..runs.gpu_trace import GpuTrace
from ..runs.records import Records
from .view import color

GPU_PANELS = (  # (title, y label, [(curve, label suffix, line style)])
    ("GPU busy (%)", "%", [("util", "", "-")]),
    ("GPU memory (GiB)", "GiB", [("memory", " used", "-"), ("torch_allocated", " PyTorch allocated", "--"),
                                 ("torch_reserved", " PyTorch reserved", ":")]),
    ("GPU temperature (°C)", "°C", [("temperature", "", "-")]),
    ("GPU power (W)", "W", [("power", "", "-")]),
)


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
    gpu_panels = [p for p in GPU_PANELS if any(d.curves[c].count for d in devices for c, _, _ in p[2])]
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
    for ax, (panel_title, unit, curves) in zip(axes[len(charts):], gpu_panels):
        for d in devices:
            for curve, suffix, style in curves:
                if d.curves[curve].count:
                    ax.plot(*d.curves[curve].points(), color=color(d.index), linestyle=style, linewidth=1.2,
                            label=f"GPU {d.index}{suffix}")
            if curve == "util":
                for start, end in d.episodes:
                    ax.axvspan(start, max(end, start + 0.5), color="#d62728", alpha=0.25, linewidth=0)
        if unit == "%":
            ax.set_ylim(0, 100)
        elif unit in ("GiB", "W"):
            ax.set_ylim(bottom=0)
        ax.set_title(panel_title + (" · red: throttled" if unit == "%" and any(d.episodes for d in devices) else ""),
                     fontsize=9)
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
