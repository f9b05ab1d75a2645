"""The memory snapshot as a PNG, for viewers without widgets (GitHub, nbviewer, a run directory).

The widget's chart from the same sampled moments (the sites stacked, "peak" at the peak), then
the table of the sites alive at the peak. matplotlib's object API on the Agg canvas, never
``pyplot`` (no global state touched), as the monitor's static picture is.
"""
from __future__ import annotations

import io
from typing import Any

import numpy as np

from ..widgets.png_cards import MUTED, card_head
from . import snapshot_parts as parts
from .snapshot import Analysis


def draw_snapshot(analysis: Analysis, name: str) -> Any:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError("the static picture needs matplotlib: pip install matplotlib") from None
    unit, scale = parts.unit_of(analysis)
    rows = parts.table_rows(analysis, parts.PNG_ROWS)
    table_h = 0.4 + 0.2 * (len(rows) + 1)
    fig = Figure(figsize=(8.0, 3.4 + table_h), dpi=90, layout="constrained")
    FigureCanvasAgg(fig)
    fig.suptitle(f"Where the memory went: {parts.summary(analysis, name)}", fontsize=9, wrap=True)
    grid = fig.add_gridspec(2, 1, height_ratios=[3.4, table_h])
    ax = fig.add_subplot(grid[0])
    xs = analysis.times_s
    curves = [curve / scale for _, curve in analysis.series]
    labels = [f"{parts.short_site(label)} {curve[analysis.peak_sample]:.2f} {unit}" if curve.size else label
              for (label, _), curve in zip(analysis.series, curves)]
    if xs.size:
        ax.stackplot(xs, np.vstack(curves), colors=parts.colors(analysis), alpha=0.7, labels=labels, linewidth=0,
                     step="post")  # memory holds from one entry to the next
        peak_x, peak_y = float(xs[analysis.peak_sample]), analysis.peak_bytes / scale
        ax.axvline(peak_x, color=parts.PEAK_COLOR, linestyle="--", linewidth=1)
        ax.annotate(f"peak {peak_y:.2f} {unit}", (peak_x, peak_y), xytext=(0, 6), textcoords="offset points",
                    ha="center", fontsize=8, fontweight="bold", color=parts.PEAK_COLOR)
        ax.set_ylim(0, max(peak_y * 1.15, 1e-9))
    ax.set_xlabel(parts.x_label(analysis), fontsize=8)
    ax.set_ylabel(unit, fontsize=8)
    ax.tick_params(labelsize=7, colors=MUTED)
    ax.grid(alpha=0.3)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    card_head(ax, "memory by site, at the peak")
    tab = fig.add_subplot(grid[1])
    tab.axis("off")
    if rows:
        cells = [[parts.short_site(r[0], 3), r[2], r[3], r[4], r[1]] for r in rows]
        table = tab.table(cellText=cells, colLabels=["allocation site", "size", "count", "share", "function"],
                          loc="upper left", cellLoc="left", colLoc="left", edges="horizontal")
        table.auto_set_font_size(False)
        table.set_fontsize(7)
        table.auto_set_column_width(list(range(5)))
    else:
        tab.text(0, 1, "nothing allocated at the peak", fontsize=8, va="top", color=MUTED)
    return fig


def render_snapshot(analysis: Analysis, name: str) -> bytes:
    fig = draw_snapshot(analysis, name)
    out = io.BytesIO()
    fig.savefig(out, format="png")
    return out.getvalue()
