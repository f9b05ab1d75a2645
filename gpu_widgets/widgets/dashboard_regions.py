"""The dashboard's shaded episodes: throttling on the GPU-busy chart and lost stretches on each
chart of a lost GPU, as the TrainingMonitor and the sidebar draw them.

They come from the sampler's history (its throttle mask and lost columns, aligned with its
timestamps), so a dashboard opened mid-episode shows it from where the window starts.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..metrics.catalogue import Metric
from ..metrics.fields import GPM_FIELDS
from ..metrics.throttle import SLOWDOWN_MASK
from .gpu_summary import LOST_COLOR, SUMMARY_THROTTLED, THROTTLE_COLOR, merged, region
from .view import LineData

BUSY = "utilization"  # the metric id whose chart carries the throttle region


def runs(xs: np.ndarray, flags: np.ndarray) -> list[list[float]]:
    """Stretches of consecutive True flags as [x of the first, x of the last] pairs."""
    if not flags.any():
        return []
    edges = np.flatnonzero(np.diff(np.concatenate(([0], flags.astype(np.int8), [0]))))
    return [[float(xs[s]), float(xs[e - 1])] for s, e in zip(edges[::2], edges[1::2])]


def throttled(dev: dict[str, Any], xs: np.ndarray) -> list[list[float]]:
    masks = dev.get("throttle_reasons") or ()
    if len(masks) != len(xs):
        return []
    flags = np.fromiter(((m or 0) & SLOWDOWN_MASK != 0 for m in masks), dtype=bool, count=len(xs))
    return runs(xs, flags)


def lost(dev: dict[str, Any], xs: np.ndarray) -> list[list[float]]:
    flags = dev.get("lost") or ()
    return runs(xs, np.asarray(flags, dtype=bool)) if len(flags) == len(xs) else []


def _span(m: Metric, top: float | None) -> tuple[float, float]:
    low = m.y_min if m.y_min is not None else 0.0
    return low, (top if top is not None else low + 1.0)


def region_lines(metrics: Sequence[Metric], devices: Sequence[dict[str, Any]], xs: np.ndarray,
                 tops: dict[str, float | None], summary: bool) -> list[LineData]:
    """Throttle regions (one per GPU, or one for all in a summary) and each lost GPU's stretches."""
    if not len(xs):
        return []
    out: list[LineData] = []
    busy = next((m for m in metrics if m.id == BUSY), None)
    if busy is not None:
        per_gpu = [(f"GPU {dev['index']} throttled", throttled(dev, xs)) for dev in devices]
        if summary:
            per_gpu = [(SUMMARY_THROTTLED, merged(e for _, eps in per_gpu for e in eps))]
        for name, episodes in per_gpu:
            if episodes:
                out.append((busy.id, name, THROTTLE_COLOR, "region", *region(episodes, *_span(busy, tops.get(busy.id)))))
    for dev in devices:
        stretches = lost(dev, xs)
        for m in metrics if stretches else ():
            if m.field in GPM_FIELDS and all(v is None for v in dev.get(m.field) or ()):
                continue  # a chart this GPU has no line in (SM active without GPM)
            out.append((m.id, f"GPU {dev['index']} lost", LOST_COLOR, "lost", *region(stretches, *_span(m, tops.get(m.id)))))
    return out


class Regions:
    """The region lines of one dashboard. The window slides: an episode that leaves it must be
    wiped, so a region drawn once is sent empty when it has nothing left, never just dropped
    (a mark keeps the last data it was sent)."""

    def __init__(self) -> None:
        self.drawn: dict[tuple[str, str], tuple[str, str]] = {}  # (chart, name) -> (colour, style)

    def lines(self, metrics: Sequence[Metric], devices: Sequence[dict[str, Any]], xs: np.ndarray,
              tops: dict[str, float | None], summary: bool) -> list[LineData]:
        out = region_lines(metrics, devices, xs, tops, summary)
        now = {(chart, name): (colour, style) for chart, name, colour, style, _, _ in out}
        empty = np.zeros(0, np.float32)
        out += [(chart, name, colour, style, empty, empty)
                for (chart, name), (colour, style) in self.drawn.items() if (chart, name) not in now]
        self.drawn.update(now)
        return out
