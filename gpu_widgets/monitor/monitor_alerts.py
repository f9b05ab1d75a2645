"""The TrainingMonitor's alerts: the server's rules (gpu_widgets.alerts) applied to the run's own
GPU samples, shown as marks on its GPU charts and as short lines in its header.

The rules and episodes are the sidebar's (docs/alerts.md), run here on the monitor's thread over
the snapshots the monitor already receives from its sampler: no NVML call of its own, and only
on the GPUs the monitor shows. The thresholds are the defaults: the server's settings live in
another process. The idle-kernel rule does not apply inside a training run: it looks for a
kernel that holds memory on a GPU nobody uses, and a running loop is that kernel at work, so no
kernel attribution is given to the rules and that rule never fires.

On the charts an episode is a bar along the top of the plot over its span, with a faint shade
under it, on the chart of its metric only (memory full: GPU memory; hot: GPU temperature;
throttled: GPU busy, where the throttled stretches are shaded), and on every GPU chart for a lost
GPU. The bar sits on a 0-1 scale of its own, under the data, and is not in the legend: a mark
never reads as a series. The header lists the open episodes of the GPUs the run uses.

Each episode (kind, GPU, start, end: None while it lasts) goes to the run log's alerts.jsonl, a
line when it opens and another when it ends (the latest line of an id wins), so load(), follow()
and the PNG show what the live run showed.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..alerts.episodes import EpisodeBook
from ..alerts.rules import FALLBACK_SLOWDOWN_C, GpuState, Thresholds, evaluate
from ..alerts.words import clock
from ..metrics.throttle import LABELS, mask_from_names, slowdown_names
from ..runs.gpu_trace import DeviceTrace
from ..widgets.view import LineData

MAX_KEPT = 500  # episodes a run keeps (the oldest ended ones go first); ``ended`` counts them all
MAX_MARKS = 100  # episodes drawn on the charts: the latest ones
# Deep tones on a light theme, light ones on a dark theme (theme.DARK_VARIANTS holds both).
KIND_COLORS = {"lost": "#c62828", "throttle": "#e65100", "temperature": "#ad1457", "memory": "#6a1b9a"}
KIND_WORDS = {"lost": "lost", "throttle": "throttled", "temperature": "hot", "memory": "memory full"}
# The sample field of the chart each kind is drawn on; a kind not named here ("lost") goes on
# every GPU chart.
KIND_FIELDS = {"memory": "memory_used_bytes", "temperature": "temperature_c", "throttle": "utilization_gpu_percent"}
BAR = 0.06  # the bar's height: the top 6 % of the plot (~10 px of a 220 px chart)
MIN_WIDTH_S = 0.5  # an episode that just opened still shows
FILE_KEYS = ("id", "kind", "severity", "gpu", "uuid", "start", "end", "message")
NO_OWNERS: Mapping[int, Any] = {}  # no kernel attribution: the idle-kernel rule stays silent


def mark_name(kind: str) -> str:
    return f"alert: {KIND_WORDS.get(kind, kind)}"


def shade_name(kind: str) -> str:
    return f"{mark_name(kind)} (shade)"


def charts_for(kind: str, charts: Sequence[Any]) -> list[Any]:
    """The GPU charts (monitor_charts.GpuChart) an episode of ``kind`` is drawn on."""
    field = KIND_FIELDS.get(kind)
    return [c for c in charts if field is None or c.metric.field == field]


def bar_paths(intervals: Sequence[tuple[float, float]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Episodes ([start, end], sorted, not overlapping) as (x, bar rows 2 x n, shade) on a 0-1
    height: each a box from its start to its end, nothing between (the rows meet at the top)."""
    xs = np.repeat(np.asarray(intervals, np.float32).reshape(-1, 2), 2, axis=1).ravel()
    n = len(intervals)
    low = np.tile(np.array([1.0, 1.0 - BAR, 1.0 - BAR, 1.0], np.float32), n)
    shade = np.tile(np.array([0.0, 1.0, 1.0, 0.0], np.float32), n)
    return xs, np.stack([low, np.ones_like(low)]), shade


def merged_spans(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for start, end in sorted(spans):
        end = max(end, start + MIN_WIDTH_S)
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


class MonitorAlerts:
    """One run's alert episodes: evaluated from live snapshots (``feed``) or read back from a run
    log (``add_saved``). Runs on the monitor's (or the follower's) thread."""

    def __init__(self, limits: Thresholds | None = None) -> None:
        self.limits = limits or Thresholds()
        self.book = EpisodeBook(keep_s=math.inf, max_ended=MAX_KEPT)
        self.states: dict[int, GpuState] = {}
        self.episodes: dict[str, dict[str, Any]] = {}  # id -> episode, in the order they opened
        self.ended = 0  # episodes that ended this run, kept or not
        self.ended_per_gpu: dict[Any, int] = {}  # the same, per GPU index
        self.version = 0  # counts the changes, for redraws
        self.unsaved: list[dict[str, Any]] | None = None  # lines for alerts.jsonl, while the run log is on
        self.problem: str | None = None  # the evaluation failed once: alerts are off for this run
        self._drawn: dict[tuple[str, str], tuple[str, str]] = {}  # (chart, mark) -> (colour, style) sent
        self._drawn_key: Any = None

    # -- in -----------------------------------------------------------------------------------
    def feed(self, snap: Mapping[str, Any], gpus: Iterable[int] | None) -> None:
        """One sampler snapshot: the rules on the GPUs shown (``gpus``; every GPU when None)."""
        if self.problem is not None:
            return
        try:
            conditions = evaluate(snap, self.limits, self.states, NO_OWNERS, gpus)
            if self.book.update(float(snap["timestamp"]), conditions):
                for e in sorted(self.book.published[1], key=lambda e: e["start"]):  # oldest first
                    self._record({k: e[k] for k in FILE_KEYS}, save=True)
        except Exception as exc:  # a bad snapshot must not stop the GPU charts: say it, stop alerting
            self.problem = f"alerts off for this run: {type(exc).__name__}: {exc}"

    def add_saved(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Episodes read back from alerts.jsonl (load, follow): the latest line of an id wins."""
        for row in rows:
            self._record({k: row.get(k) for k in FILE_KEYS}, save=False)

    def _record(self, e: dict[str, Any], save: bool) -> None:
        old = self.episodes.get(e["id"])
        if old is not None and old["end"] == e["end"]:
            return
        self.episodes[e["id"]] = e
        if e["end"] is not None and (old is None or old["end"] is None):
            self.ended += 1
            self.ended_per_gpu[e["gpu"]] = self.ended_per_gpu.get(e["gpu"], 0) + 1
        self.version += 1
        if save and self.unsaved is not None:
            self.unsaved.append(e)
        if len(self.episodes) > MAX_KEPT:
            oldest = next((i for i, x in self.episodes.items() if x["end"] is not None), None)
            if oldest is not None:
                del self.episodes[oldest]

    def take_unsaved(self) -> list[dict[str, Any]]:
        if self.unsaved is None:
            return []
        rows, self.unsaved = self.unsaved, []
        return rows

    # -- out: the header ----------------------------------------------------------------------
    def open_now(self) -> list[dict[str, Any]]:
        return [e for e in self.episodes.values() if e["end"] is None]

    def ended_on(self, devices: Sequence[DeviceTrace]) -> int:
        """Episodes that ended this run on these GPUs."""
        return sum(self.ended_per_gpu.get(d.index, 0) for d in devices)

    def header_lines(self, devices: Sequence[DeviceTrace], live: bool) -> list[tuple[str, str]]:
        """(severity, short line) for each open episode of ``devices`` (the GPUs the run uses):
        "GPU 1 lost since 14:02:11 UTC"."""
        latest = {d.index: d.latest for d in devices}
        out = []
        for e in self.open_now():
            if e["gpu"] not in latest:
                continue  # a GPU this run does not use (any more): the sidebar tells its owner
            when = f"since {clock(e['start'])}" if live else f"from {clock(e['start'])} to the end of the run"
            out.append((e.get("severity") or "warning", f"{short_what(e, latest.get(e['gpu'], {}))} {when}"))
        return out

    # -- out: the charts ----------------------------------------------------------------------
    def intervals(self, devices: Sequence[DeviceTrace], t0: float) -> dict[str, list[tuple[float, float]]]:
        """Per kind, the latest MAX_MARKS episodes of the GPUs shown as merged [start, end] in
        seconds since ``t0`` (an open one: to the latest sample)."""
        shown = {d.index for d in devices}
        last = max((d.last_t for d in devices if d.last_t is not None), default=None)
        found: dict[str, list[tuple[float, float]]] = {}
        for e in [e for e in self.episodes.values() if e["gpu"] in shown][-MAX_MARKS:]:
            end = e["end"] if e["end"] is not None else max(last if last is not None else e["start"], e["start"])
            found.setdefault(e["kind"], []).append((e["start"] - t0, end - t0))
        return {kind: merged_spans(spans) for kind, spans in found.items()}

    def lines(self, charts: Sequence[Any], devices: Sequence[DeviceTrace], t0: float | None) -> list[LineData]:
        """The marks, each kind on the charts of its metric that have data, sent only when they
        change; a mark with no episode left is sent empty (a mark keeps the last data it was sent)."""
        drawn = [c for c in charts if any(c.lines[0][0] in d.curves and d.curves[c.lines[0][0]].count for d in devices)]
        last = max((d.last_t for d in devices if d.last_t is not None), default=None)
        key = (self.version, tuple(c.name for c in drawn), tuple(d.index for d in devices), t0,
               last if self.open_now() else None)
        if key == self._drawn_key:
            return []
        self._drawn_key = key
        out: list[LineData] = []
        for kind, spans in self.intervals(devices, t0 or 0.0).items():
            xs, bar, shade = bar_paths(spans)
            colour = KIND_COLORS.get(kind, KIND_COLORS["lost"])
            for chart in charts_for(kind, drawn):
                out.append((chart.name, shade_name(kind), colour, "alert_shade", xs, shade))
                out.append((chart.name, mark_name(kind), colour, "alert", xs, bar))
        now = {(chart, name): (colour, style) for chart, name, colour, style, _, _ in out}
        empty = np.zeros(0, np.float32)
        out += [(chart, name, colour, style, empty, np.zeros((2, 0), np.float32) if style == "alert" else empty)
                for (chart, name), (colour, style) in self._drawn.items() if (chart, name) not in now]
        self._drawn.update(now)
        return out


def short_what(e: Mapping[str, Any], latest: Mapping[str, Any]) -> str:
    """What an episode is, in a few words, with the GPU's latest reading where it helps."""
    gpu, kind = f"GPU {e['gpu']}", e["kind"]
    if kind == "lost":
        return f"{gpu} lost"
    if kind == "temperature":
        temp, limit = latest.get("temperature_c"), latest.get("temperature_slowdown_c")
        if temp is None:
            return f"{gpu} hot, near its slowdown temperature"
        if limit:
            return f"{gpu} at {temp:g} °C, {max(0.0, limit - temp):g} °C from its slowdown"
        # The rule's stand-in when the GPU does not tell its own limit (rules.FALLBACK_SLOWDOWN_C).
        return f"{gpu} at {temp:g} °C, {max(0.0, FALLBACK_SLOWDOWN_C - temp):g} °C from a typical slowdown temperature"
    if kind == "throttle":
        names = latest.get("throttle_reasons")
        reasons = slowdown_names(mask_from_names(names)) if names else []
        return f"{gpu} slowed down by {', '.join(LABELS.get(n, n) for n in reasons)}" if reasons else f"{gpu} slowed down"
    if kind == "memory":
        used, total = latest.get("memory_used_bytes"), latest.get("memory_total_bytes")
        return f"{gpu} memory {100.0 * used / total:.0f} % full" if used is not None and total else f"{gpu} memory nearly full"
    return f"{gpu} {kind}"
