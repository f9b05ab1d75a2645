"""The comparison as a PNG, for viewers without widgets (GitHub, nbviewer, a report).

The widget's charts with the very lines it draws (the same bounded points), each chart's title
and legend row (run names and their last values) above its plot, the catalogue's fixed y ranges
for the GPU charts; then the summary table. Drawn with matplotlib's object API on the Agg
canvas, never ``pyplot`` (no global state touched), as the monitor's static picture is.
"""
from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .compare_lines import X_LABELS, CompareChart
from .compare_table import energy_note, table_cells
from ..widgets.drawable import LEGEND_CHARS, clipped, short_title
from ..widgets.legend import value_text
from ..widgets.view import LineData

MUTED = "#616161"
PER_ROW = 2


def _last(ys: np.ndarray) -> float | None:
    finite = ys[np.isfinite(ys)]
    return float(finite[-1]) if finite.size else None


def _head(ax: Any, title: str, n_lines: int) -> None:
    """The card head of the widget: title small and muted over the legend row, above the plot."""
    longest = max(map(len, ax.get_legend_handles_labels()[1]), default=0)
    per_row = 2 if longest <= LEGEND_CHARS else 1  # two long names side by side would squeeze the plot
    leg = ax.legend(title=short_title(title, LEGEND_CHARS).upper(), loc="lower left", bbox_to_anchor=(0.0, 1.0),
                    ncols=max(1, min(n_lines, per_row)),
                    frameon=False, fontsize=7, title_fontsize=7, alignment="left", borderaxespad=0.2,
                    handlelength=1.4, columnspacing=1.0)
    leg.get_title().set_color(MUTED)


def draw_comparison(title: str, charts: Sequence[CompareChart], lines: Sequence[LineData], x_axis: str,
                    summary: Sequence[Mapping[str, Any]], keys: Sequence[str], colors: Sequence[str]) -> Any:
    """The matplotlib Figure: a grid of the charts that have lines, then the summary table (each
    run's name in its ``colors``)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError("the static picture needs matplotlib: pip install matplotlib") from None
    by_chart: dict[str, list[LineData]] = {}
    for line in lines:
        by_chart.setdefault(line[0], []).append(line)
    shown = [c for c in charts if c.name in by_chart]
    cols = PER_ROW if len(shown) > 1 else 1
    rows = max(1, math.ceil(len(shown) / cols))
    table_h = 0.35 + 0.22 * (len(summary) + 1)
    fig = Figure(figsize=(5.2 * cols, 2.6 * rows + table_h + 0.4), dpi=90, layout="constrained")
    FigureCanvasAgg(fig)
    fig.suptitle(short_title(title), fontsize=11)
    grid = fig.add_gridspec(rows + 1, cols, height_ratios=[2.6] * rows + [table_h])
    for k, chart in enumerate(shown):
        ax = fig.add_subplot(grid[k // cols, k % cols])
        top = -math.inf
        for _, label, color, _, xs, ys in by_chart[chart.name]:
            exact = np.asarray(ys, float)
            ys = clipped(exact)  # drawn within float32's range (drawable); the legend's value exact
            ax.plot(xs, ys, color=color, linewidth=1.2,
                    label=f"{short_title(label, LEGEND_CHARS)} {value_text(_last(exact), chart.unit, chart.decimals)}")
            if ys.size and np.isfinite(ys).any():
                top = max(top, float(np.nanmax(ys)))
        if chart.y_min is not None or chart.y_max is not None:
            # The catalogue's fixed range; data past a fixed top widens it (never cut off).
            ax.set_ylim(bottom=chart.y_min, top=None if chart.y_max is None else max(chart.y_max, top))
        ax.set_xlabel(X_LABELS[x_axis], fontsize=8)
        ax.tick_params(labelsize=7, colors=MUTED)
        ax.grid(alpha=0.3)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        _head(ax, chart.title, len(by_chart[chart.name]))
    table_ax = fig.add_subplot(grid[rows, :])
    table_ax.axis("off")
    head, cells = table_cells(summary, keys)
    if cells:
        table = table_ax.table(cellText=cells, colLabels=head, loc="upper left", cellLoc="right", colLoc="right")
        table.auto_set_font_size(False)
        table.set_fontsize(7)
        for (r, c), cell in table.get_celld().items():
            cell.set_edgecolor("#e0e0e0")
            if r == 0:
                cell.get_text().set_color(MUTED)
            if c == 0:
                cell.get_text().set_horizontalalignment("left")
                if r > 0:  # the run's colour, as its lines
                    cell.get_text().set_color(colors[r - 1])
        table.auto_set_column_width(list(range(len(head))))
    table_ax.set_title(energy_note(summary), fontsize=7, color=MUTED, loc="left")
    return fig


def render_comparison(*args: Any, **kwargs: Any) -> bytes:
    """``draw_comparison``'s figure as PNG bytes."""
    buf = io.BytesIO()
    draw_comparison(*args, **kwargs).savefig(buf, format="png")
    return buf.getvalue()
