"""A PNG of what a ChartsView shows now (a stopped GpuDashboard, a ``%%gpuwatch`` cell's charts).

Drawn from the marks' own data, so the picture is the widget's last frame: the same cards in the
same order, each with its title and legend (latest values) above the plot, lines in their colours
and styles, shaded episodes and min–max bands, the same x and y ranges. The header is not in the
picture: final_output puts its HTML above it. matplotlib's object API on the Agg canvas, never
``pyplot`` (no global state, the user's plots untouched), as static_image.
"""
from __future__ import annotations

import io
import math
from typing import Any

import numpy as np

from .chart_card import REGIONS, Chart
from .drawable import LEGEND_CHARS, short_title
from .legend import value_text
from .png_cards import MUTED, STYLES, card_head

AREA_ALPHA = {"region": 0.2, "lost": 0.28, "range": 0.18}
MAX_CHARTS = 64  # a view never has more; bounds the figure's size whatever happens


def _limits(lo: Any, hi: Any) -> tuple[float | None, float | None]:
    def finite(v: Any) -> float | None:
        return float(v) if v is not None and math.isfinite(float(v)) else None
    return finite(lo), finite(hi)


def _draw_chart(ax: Any, chart: Chart) -> None:
    named: set[str] = set()
    for mark in chart.marks_in_order():
        key = chart.keys[mark.labels[0]]
        xs, ys = np.asarray(mark.x, dtype=float), np.asarray(mark.y, dtype=float)
        if not xs.size or not key.shown:
            continue
        name = short_title(key.name, LEGEND_CHARS)
        if key.style in REGIONS or key.style == "alert":
            label = name.split(" ", 2)[-1] if name.startswith("GPU ") else name  # once per chart, as the legend
            label = None if label in named else label
            named.add(label or "")
            on_height = ax.get_xaxis_transform()  # x in data, y on the 0-1 height: never moves the y range
            if key.style == "alert":
                ax.plot(xs, ys, color=key.color, linewidth=1.2, transform=on_height, label=label)
            else:
                ax.fill_between(xs, 0.0, ys, color=key.color, alpha=AREA_ALPHA[key.style], linewidth=0,
                                transform=on_height, label=label)
        elif key.style == "range" and ys.ndim == 2 and ys.shape[0] == 2:
            value = f"{value_text(key.value, '', chart.decimals)}–{value_text(key.high, chart.unit, chart.decimals)}"
            ax.fill_between(xs, ys[0], ys[1], color=key.color, alpha=AREA_ALPHA["range"], linewidth=0,
                            label=f"{name} {value}")
        else:
            ax.plot(xs, ys, color=key.color, linestyle=STYLES.get(key.style, "-"),
                    linewidth=4 if key.style == "band" else 1.2, alpha=0.6 if key.style == "band" else 1.0,
                    label=f"{name} {value_text(key.value, chart.unit, chart.decimals)}")
    ax.set_xlim(*_limits(chart.x_scale.min, chart.x_scale.max))
    bottom, top = _limits(chart.y_scale.min, chart.y_scale.max)
    if bottom is not None or top is not None:
        ax.set_ylim(bottom=bottom, top=top)
    ax.set_xlabel(chart.x_axis.label or "", fontsize=8)
    card_head(ax, chart.title)


def render_view_png(view: Any) -> bytes | None:
    """The view's charts (in the grid's order) as PNG bytes; None when no chart has data.
    Raises ImportError without matplotlib."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError("the static picture needs matplotlib: pip install matplotlib") from None
    order = {id(chart.card): chart for chart in view.charts.values()}
    charts = [order[id(card)] for card in view.grid.children if id(card) in order][:MAX_CHARTS]
    charts = [c for c in charts if any(np.asarray(m.x).size for m in c.lines.values())]
    if not charts:
        return None
    cols = 2 if len(charts) > 1 else 1
    rows = math.ceil(len(charts) / cols)
    fig = Figure(figsize=(5.2 * cols, 2.6 * rows), dpi=90, layout="constrained")
    FigureCanvasAgg(fig)
    axes = list(fig.subplots(rows, cols, squeeze=False).flat)
    for ax, chart in zip(axes, charts):
        _draw_chart(ax, chart)
        ax.tick_params(labelsize=7, colors=MUTED)
        ax.grid(alpha=0.3)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    for ax in axes[len(charts):]:
        ax.set_visible(False)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()
