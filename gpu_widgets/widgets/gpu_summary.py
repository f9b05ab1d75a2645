"""Many GPUs, none of them this process's: one compact summary instead of a line and a card per GPU.

``gpus="auto"`` in a process that uses no GPU (no PyTorch CUDA memory, no CUDA_VISIBLE_DEVICES)
watches every GPU of the machine. From ``SUMMARY_FROM`` GPUs on, the widgets then draw, per GPU
chart, the mean of the GPUs as one line and their min–max as a band, and the header shows one
summary card (ranges, means, a small tile per GPU) saying why. ``gpus="all"`` or indices draw
each GPU; so does a machine with fewer GPUs (two lines read fine).

The aggregate is computed on the monitor's (or dashboard's) thread from the curves already
bounded for drawing: a few small NumPy operations per chart and redraw.
"""
from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

import numpy as np

from ..metrics.catalogue import Metric
from ..metrics.throttle import SLOWDOWNS, slowdown_names
from ..runs.gpu_trace import DeviceTrace
from .gpu_cards import LIMIT_WORDS, cell, lost_now, number, reasons_text, short_label
from .process_gpus import AUTO, Choice, watched
from .torch_probe import TorchState

SUMMARY_FROM = 3  # GPUs: fewer are drawn one line each
# The shaded episodes of every widget (the monitor, the dashboard), as the sidebar draws them.
THROTTLE_COLOR = "#ef6c00"  # the sidebar's throttle bands
LOST_COLOR = "#757575"
SUMMARY_THROTTLED = "throttled (any GPU)"


def summarised(choice: Choice, snap: Mapping[str, Any] | None, torch: TorchState | None) -> bool:
    """True when ``gpus="auto"`` falls back to all GPUs (this process uses none) and there are at
    least ``SUMMARY_FROM`` of them."""
    if choice != AUTO or snap is None or watched(choice, snap, torch) is not None:
        return False
    return len(snap.get("devices", ())) >= SUMMARY_FROM


def why(n: int) -> str:
    return f"this process uses no GPU: showing all {n} as a summary; gpus='all' draws each"


@dataclass(frozen=True)
class Reading:
    """One GPU's newest values, whatever the source."""

    index: int
    name: str | None
    values: Mapping[str, Any]
    throttled: tuple[str, ...] = ()
    lost: bool = False


def from_trace(d: DeviceTrace) -> Reading:
    now = tuple(r for r in d.latest.get("throttle_reasons") or () if r in SLOWDOWNS)
    return Reading(d.index, d.name, d.latest, now, lost_now(d))


def from_snapshot(dev: Mapping[str, Any]) -> Reading:
    return Reading(dev["index"], dev.get("name"), dev, tuple(slowdown_names(dev.get("throttle_reasons"))),
                   dev.get("status") == "lost")


def span_cell(m: Metric, readings: Sequence[Reading]) -> str:
    """"12–95 %" with "mean 60 %" under it; "of 80.0 GiB" for a metric with a limit field."""
    raw = [r.values.get(m.field) for r in readings if not r.lost]
    known = [v for v in raw if isinstance(v, (int, float)) and v == v]
    if not known:
        return ""
    lo, hi, mean = min(known), max(known), sum(known) / len(known)
    text = m.text(lo) if number(m, lo) == number(m, hi) else f"{number(m, lo)}–{m.text(hi)}"
    subs = [f"mean {m.text(mean)}"]
    top = m.top(r.values.get(m.y_max_field) for r in readings) if m.y_max_field else None
    if top:
        subs.append(f"{LIMIT_WORDS.get(m.y_max_field or '', 'of')} {m.text(top / m.scale)}")
    return cell(short_label(m), text, " · ".join(subs), m.help)


def tile(r: Reading, m: Metric | None) -> str:
    """A GPU's small tile: its index and first metric; orange when throttled, red when lost."""
    if r.lost:
        kind, text, tip = " gpuw-error", "lost", "lost (not answering)"
    else:
        raw = r.values.get(m.field) if m is not None else None
        text = m.text(raw) if m is not None and raw is not None else "–"
        kind = " gpuw-warn" if r.throttled else ""
        tip = f"throttled now: {reasons_text(r.throttled)}" if r.throttled else ""
    title = escape(" · ".join(x for x in (f"GPU {r.index} {r.name or ''}".strip(), tip) if x))
    return f'<span class="gpuw-tile{kind}" title="{title}">{r.index} <b>{escape(text)}</b></span>'


def summary_html(readings: Sequence[Reading], metrics: Sequence[Metric]) -> str:
    """The summary card: how many GPUs, each metric's range and mean, a tile per GPU, what is
    throttled or lost, and why it is a summary."""
    n = len(readings)
    names = sorted({r.name for r in readings if r.name})
    model = names[0] if len(names) == 1 else f"{len(names)} models" if names else ""
    head = f'<div class="gpuw-card-head"><b>{n} GPUs</b> <span class="gpuw-name">{escape(model)}</span></div>'
    cells = " ".join(c for c in (span_cell(m, readings) for m in metrics) if c)
    first = metrics[0] if metrics else None
    tiles = " ".join(tile(r, first) for r in readings)
    notes = []
    throttled = [f"GPU {r.index} ({reasons_text(r.throttled)})" for r in readings if r.throttled and not r.lost]
    if throttled:
        notes.append(f'<div class="gpuw-warn">throttled now: {escape(", ".join(throttled))}</div>')
    lost = [str(r.index) for r in readings if r.lost]
    if lost:
        notes.append(f'<div class="gpuw-error">lost (not answering): GPU {", ".join(lost)}</div>')
    notes.append(f'<div class="gpuw-muted">{escape(why(n))}</div>')
    return (f'<div class="gpuw-cards"><div class="gpuw-card gpuw-wide">{head}<div class="gpuw-cells">{cells}</div>'
            f'<div class="gpuw-tiles">{tiles}</div>{"".join(notes)}</div></div>')


# -- the charts' aggregate ----------------------------------------------------------------------
def across(stack: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean, min and max over the GPUs (rows) at each point (column); NaN (no GPU with a value)
    where a column has none."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns: NaN is the answer
        return np.nanmean(stack, axis=0), np.nanmin(stack, axis=0), np.nanmax(stack, axis=0)


def on_grid(curves: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The curves (each already bounded, x increasing) on the union of their x: one row each,
    interpolated between its own points, NaN outside its own first and last x."""
    grid = np.unique(np.concatenate([np.asarray(x, float) for x, _ in curves]))
    stack = np.full((len(curves), len(grid)), np.nan)
    for row, (x, y) in zip(stack, curves):
        inside = (grid >= x[0]) & (grid <= x[-1])
        row[inside] = np.interp(grid[inside], x, y)
    return grid, stack


def buckets(xs: np.ndarray, mean: np.ndarray, lo: np.ndarray, hi: np.ndarray,
            points: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """At most ``points`` points: per bucket its first x, the mean of the means, the lowest low and
    the highest high (a peak of any GPU stays in the band); the newest point kept as it is."""
    if len(xs) <= points:
        return xs, mean, lo, hi
    starts = np.unique(np.linspace(0, len(xs) - 1, max(1, points - 1), endpoint=False).astype(int))
    valid = ~np.isnan(mean)
    total = np.add.reduceat(np.where(valid, mean, 0.0), starts)
    count = np.add.reduceat(valid.astype(float), starts)
    with np.errstate(invalid="ignore", divide="ignore"):
        bucket_mean = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    out = (xs[starts], bucket_mean, np.fmin.reduceat(lo, starts), np.fmax.reduceat(hi, starts))
    return tuple(np.append(a, b[-1]) for a, b in zip(out, (xs, mean, lo, hi)))  # type: ignore[return-value]


def aggregate(curves: Iterable[tuple[np.ndarray, np.ndarray]], points: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(x, mean, band) of GPU curves: band is 2 × n, the min row then the max row (a "range"
    line's ys). None when no curve has a point."""
    curves = [(x, y) for x, y in curves if len(x)]
    if not curves:
        return None
    grid, stack = on_grid(curves)
    xs, mean, lo, hi = buckets(grid, *across(stack), max(4, points))
    return xs, mean, np.vstack((lo, hi))


def merged(episodes: Iterable[Sequence[float]]) -> list[list[float]]:
    """Throttle episodes of several GPUs as one list: overlapping ones joined, oldest first."""
    out: list[list[float]] = []
    for start, end in sorted((float(s), float(e)) for s, e in episodes):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return out


def region(episodes: Sequence[Sequence[float]], low: float, top: float) -> tuple[np.ndarray, np.ndarray]:
    """Episodes as a "region" line: x in pairs at each edge, y stepping from ``low`` up to
    ``top`` for the episode and back. A one-sample episode gets half a second (still visible)."""
    xs: list[float] = []
    ys: list[float] = []
    for start, end in episodes:
        end = max(end, start + 0.5)
        xs += [start, start, end, end]
        ys += [low, top, top, low]
    return np.asarray(xs, np.float32), np.asarray(ys, np.float32)
