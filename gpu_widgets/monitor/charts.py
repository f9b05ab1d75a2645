"""Which chart each logged key is drawn on (the ``plot=`` option of TrainingMonitor).

``plot=None`` (default): keys with "loss" in the name share the "loss" chart, keys with "acc" the
"accuracy" chart, any other key gets a chart of its own, up to ``MAX_AUTO_CHARTS`` charts; later
keys are shown as numbers only. ``plot=["loss", "val_loss"]``: one chart with those keys.
``plot=[["loss", "val_loss"], ["lr"]]``: one chart per group. ``plot=False``: no metric charts.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

MAX_AUTO_CHARTS = 4

PlotSpec = Any  # None | False | list[str] | list[list[str]]


def check_plot(plot: PlotSpec) -> list[list[str]] | None:
    """Normalise ``plot=``: None (automatic), [] (no charts) or groups of keys."""
    if plot is None:
        return None
    if plot is False:
        return []
    message = (
        "plot must be None (automatic), False (no charts), a list of keys such as ['loss', 'val_loss'] "
        f"or a list of such lists (one chart each), got {plot!r}"
    )
    if isinstance(plot, str) or not isinstance(plot, Sequence):
        raise TypeError(message)
    if all(isinstance(k, str) for k in plot):
        return [list(plot)] if plot else []
    groups = []
    for group in plot:
        if isinstance(group, str) or not isinstance(group, Sequence) or not all(isinstance(k, str) for k in group):
            raise TypeError(message)
        groups.append(list(group))
    return groups


def auto_chart(key: str) -> str:
    lower = key.lower()
    if "loss" in lower:
        return "loss"
    if "acc" in lower:
        return "accuracy"
    return key


class ChartPlan:
    """Assigns keys to charts as they first appear; a key's chart never changes."""

    def __init__(self, plot: PlotSpec) -> None:
        self.groups = check_plot(plot)
        self.assigned: dict[str, str | None] = {}

    def chart_of(self, key: str) -> str | None:
        if key in self.assigned:
            return self.assigned[key]
        chart: str | None
        if self.groups is None:
            chart = auto_chart(key)
            charts = {c for c in self.assigned.values() if c is not None}
            if chart not in charts and len(charts) >= MAX_AUTO_CHARTS:
                chart = None
        else:
            chart = next((" · ".join(g) if len(g) > 1 else g[0] for g in self.groups if key in g), None)
        self.assigned[key] = chart
        return chart
