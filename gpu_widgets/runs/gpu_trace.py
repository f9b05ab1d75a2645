"""The GPU samples one run (or one ``%%gpuwatch`` cell) saw: per-GPU columns, plot curves and totals.

Fed with sampler snapshots on the monitor's thread. Keeps, per GPU: the samples in columns (about
100 bytes per sample, so a day at 1 Hz on 8 GPUs is ~70 MB, not the ~400 MB dicts would take),
bounded plot curves (utilization, memory, temperature, power, PyTorch's memory; x = seconds since
the start), throttle episodes, and running totals for the header, the advice and summaries: mean
and peak utilization, peak memory, peak temperature and power, energy, time spent throttled.

Throttle reasons stay NVML's bitmask from the snapshot to the columns; rows (what files hold and
``rows()`` gives) carry them as names. Rows for files are flat:
``{"time", "gpu", <field>..., "throttle_reasons"}``; a GPU's ``name``
and the ``backend`` are written on its first row and whenever they change (readers carry them
forward), which keeps ``gpu.jsonl`` near 250 bytes a sample.

Memory is bounded when the run log holds the samples: ``drop_oldest`` forgets the oldest samples
(only ones the file already has, in arrival order, line i of ``gpu.jsonl`` being sample i), and
``rows()`` reads them back from that file. The totals and the plot curves are not affected.
"""
from __future__ import annotations

import math
import threading
from array import array
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..metrics.catalogue import MONITOR, shown_in
from ..metrics.throttle import json_names, mask_from_names, names_from_mask, slowdown_names
from ..store.decimator import Decimator
from .file_reads import first_lines, load_json, open_regular

# Snapshot fields kept per sample (all numeric), in the order the files show them.
BASE_FIELDS: tuple[str, ...] = (
    "utilization_gpu_percent",
    "utilization_memory_percent",
    "memory_used_bytes",
    "memory_total_bytes",
    "temperature_c",
    "power_w",
    "power_limit_w",
    "energy_j",
    "sm_clock_mhz",
)


def recorded_fields() -> tuple[str, ...]:
    """BASE_FIELDS, then the field and ``y_max_field`` of every metric the catalogue shows in the
    TrainingMonitor: a metric added there is recorded (and charted) with no edit here. Read when
    a trace is made, so a catalogue extended at run time counts too."""
    extra = (f for m in shown_in(MONITOR) for f in (m.field, m.y_max_field) if f is not None)
    return tuple(dict.fromkeys((*BASE_FIELDS, *extra)))


FIELDS: tuple[str, ...] = recorded_fields()
# PyTorch's allocator on this GPU, when this process uses it through torch (see torch_probe).
TORCH_FIELDS: tuple[str, ...] = ("torch_allocated_bytes", "torch_reserved_bytes", "torch_peak_allocated_bytes")
# Whole numbers; stored as floats (NaN = missing), given back as ints.
INT_FIELDS = frozenset({"utilization_gpu_percent", "utilization_memory_percent", "memory_used_bytes",
                        "memory_total_bytes", "sm_clock_mhz", *TORCH_FIELDS})
GIB = float(1 << 30)
MAX_EPISODES = 1000  # throttle episodes kept for the charts (the totals count them all)
# A gap longer than this between two samples is not counted as time spent throttled.
MAX_GAP_S = 5.0
NAN = math.nan
NO_REASONS = -1  # throttle mask column: reasons not readable
INT64_BITS = (1 << 63) - 1  # the column is int64: bit 63, which NVML does not use, cannot be held


@dataclass
class DeviceTrace:
    index: int
    uuid: str | None = None
    name: str | None = None
    samples: int = 0
    lost_samples: int = 0
    util_sum: float = 0.0
    util_n: int = 0
    util_peak: float | None = None
    memory_first: float | None = None
    memory_peak: float | None = None
    memory_total: float | None = None
    temperature_peak: float | None = None
    power_peak: float | None = None
    energy_first: float | None = None
    energy_last: float | None = None
    throttled_s: dict[str, float] = field(default_factory=dict)
    # [start, end] of each stretch of samples with a slowdown reason, oldest first
    episodes: list[list[float]] = field(default_factory=list)
    throttled_last: bool = False
    torch_allocated_min: float | None = None
    torch_peak_allocated: float | None = None
    latest: dict[str, Any] = field(default_factory=dict)
    last_t: float | None = None
    # bounded curves for the charts, x = seconds since the trace's t0
    curves: dict[str, Decimator] = field(default_factory=dict)
    # the samples, in columns
    times: array = field(default_factory=lambda: array("d"))
    columns: dict[str, array] = field(default_factory=lambda: {f: array("d") for f in FIELDS + TORCH_FIELDS})
    throttle: array = field(default_factory=lambda: array("q"))
    lost: array = field(default_factory=lambda: array("b"))
    # A launch's view draws every rank's GPUs: "rank 1 · node-b · GPU 0" and its colour slot
    # (None: "GPU <index>" in the index's colour, as a single process draws it).
    label: str | None = None
    slot: int | None = None

    @property
    def util_mean(self) -> float | None:
        return self.util_sum / self.util_n if self.util_n else None

    @property
    def energy_j(self) -> float | None:
        if self.energy_first is None or self.energy_last is None:
            return None
        return max(0.0, self.energy_last - self.energy_first)

    def row(self, i: int) -> dict[str, Any]:
        mask = self.throttle[i]
        return typed_row(self.times[i], self.index, ((f, col[i]) for f, col in self.columns.items()),
                         None if mask == NO_REASONS else names_from_mask(mask), self.lost[i])

    def forget(self, n: int) -> None:
        """Drop the ``n`` oldest samples' columns."""
        del self.times[:n]
        for col in self.columns.values():
            del col[:n]
        del self.throttle[:n]
        del self.lost[:n]


def typed_row(t: float, gpu: int, values: Iterable[tuple[str, Any]], reasons: list[str] | None, lost: Any) -> dict[str, Any]:
    """One sample as ``rows()`` gives it, whether it comes from the columns (NaN = missing) or
    from ``gpu.jsonl`` (None = missing): whole-number fields as ints, the others as floats."""
    out: dict[str, Any] = {"time": float(t), "gpu": int(gpu)}
    for f, v in values:
        if v is None or v != v:
            if f not in TORCH_FIELDS:  # a missing PyTorch field: not PyTorch's GPU at that time
                out[f] = None
        else:
            out[f] = int(v) if f in INT_FIELDS else float(v)
    out["throttle_reasons"] = reasons
    if lost:
        out["lost"] = True
    return out


def as_kept(row: Mapping[str, Any], fields: tuple[str, ...] = FIELDS) -> dict[str, Any]:
    """A row read back from ``gpu.jsonl``, typed as the columns hold it (reasons go through the
    mask too), so rows from the file and from memory compare equal."""
    reasons = row.get("throttle_reasons")
    return typed_row(row["time"], row["gpu"], ((f, row.get(f)) for f in fields + TORCH_FIELDS),
                     None if reasons is None else names_from_mask(mask_from_names(reasons)), row.get("lost"))


def _peak(old: float | None, new: Any) -> float | None:
    if new is None:
        return old
    return new if old is None or new > old else old


# chart curve -> (row field, divisor)
CURVES: dict[str, tuple[str, float]] = {
    "util": ("utilization_gpu_percent", 1.0),
    "memory": ("memory_used_bytes", GIB),
    "temperature": ("temperature_c", 1.0),
    "power": ("power_w", 1.0),
    "torch_allocated": ("torch_allocated_bytes", GIB),
    "torch_reserved": ("torch_reserved_bytes", GIB),
    "torch_peak": ("torch_peak_allocated_bytes", GIB),
}


def curve_specs() -> dict[str, tuple[str, float]]:
    """CURVES, and a curve named by its id for each monitor metric whose field has none (in the
    metric's unit: the divisor undoes its scale)."""
    specs = dict(CURVES)
    sources = {source for source, _ in CURVES.values()}
    for m in shown_in(MONITOR):
        if m.field not in sources:
            specs[m.id] = (m.field, 1.0 / m.scale)
    return specs


def curve_of(field_name: str, specs: Mapping[str, tuple[str, float]]) -> str | None:
    """The curve that plots ``field_name``."""
    return next((name for name, (source, _) in specs.items() if source == field_name), None)


def episode_line(episodes: list[list[float]], y: float) -> tuple[list[float], list[float]]:
    """Throttle episodes as one line of segments at height ``y``, NaN between them (a gap)."""
    xs: list[float] = []
    ys: list[float] = []
    for start, end in episodes:
        if end == start:
            end = start + 0.5  # one sample: still visible
        xs += [start, end, end]
        ys += [y, y, NAN]
    return xs, ys


class GpuTrace:
    def __init__(self, t0: float, max_points: int = 2000) -> None:
        self.t0 = t0
        self.max_points = max_points
        self.devices: dict[int, DeviceTrace] = {}
        self.fields = recorded_fields()
        self.curve_specs = curve_specs()
        self.order = array("h")  # the GPU of each sample, in arrival order
        self.backend: str | None = None
        self.status: str | None = None
        self.reason: str | None = None
        self.last_snapshot: dict[str, Any] | None = None
        self._labels_written: dict[int, tuple[Any, Any]] = {}
        # Samples forgotten by drop_oldest: lines 1..dropped of spill_path hold them.
        self.dropped = 0
        self.spill_path: Path | None = None
        # drop_oldest and rows() exclude each other; appends (one thread) need no lock.
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """Samples seen, kept in memory or not."""
        return self.dropped + len(self.order)

    @property
    def kept(self) -> int:
        return len(self.order)

    def _device(self, index: int) -> DeviceTrace:
        d = self.devices.get(index)
        if d is None:
            d = self.devices[index] = DeviceTrace(index, curves={name: Decimator(self.max_points) for name in self.curve_specs},
                                                    columns={f: array("d") for f in self.fields + TORCH_FIELDS})
        return d

    def add_snapshot(self, snap: Mapping[str, Any], watched: Iterable[int] | None = None,
                     extra: Mapping[int, Mapping[str, Any]] | None = None) -> list[dict[str, Any]]:
        """Fold in one sampler snapshot (only the ``watched`` GPUs; all when None); ``extra`` adds
        fields per GPU index (PyTorch's memory). Returns its rows as they go to a file (labels only
        where they changed)."""
        self.backend, self.status, self.reason = snap.get("backend"), snap.get("status"), snap.get("reason")
        self.last_snapshot = dict(snap)
        keep = None if watched is None else set(watched)
        t = snap["timestamp"]
        rows = []
        for dev in snap.get("devices", ()):
            if keep is not None and dev["index"] not in keep:
                continue
            row: dict[str, Any] = {"time": t, "gpu": dev["index"], "name": dev.get("name"), "backend": self.backend}
            for f in self.fields:
                row[f] = dev.get(f)
            mask = dev.get("throttle_reasons")
            row["throttle_reasons"] = json_names(mask)  # the row is what the run log writes
            if extra and dev["index"] in extra:
                row.update(extra[dev["index"]])
            if dev.get("status") == "lost":
                row["lost"] = True
            self._device(dev["index"]).uuid = dev.get("uuid")
            self._add(row, mask)
            rows.append(self.file_row(row))
        return rows

    def file_row(self, row: dict[str, Any]) -> dict[str, Any]:
        """``row`` without the labels a reader already has from an earlier row of this GPU."""
        labels = (row.get("name"), row.get("backend"))
        if self._labels_written.get(row["gpu"]) == labels:
            return {k: v for k, v in row.items() if k not in ("name", "backend")}
        self._labels_written[row["gpu"]] = labels
        return row

    def add_row(self, row: Mapping[str, Any]) -> None:
        """Fold in one flat sample row (from a saved run: reasons as names)."""
        reasons = row.get("throttle_reasons")
        self._add(row, None if reasons is None else mask_from_names(reasons))

    def _add(self, row: Mapping[str, Any], mask: int | None) -> None:
        """Fold in one row whose throttle reasons are ``mask`` (None: not read)."""
        d = self._device(int(row["gpu"]))
        d.name = row.get("name") or d.name
        self.backend = row.get("backend") or self.backend  # a saved run stays labelled simulated
        t = float(row["time"])
        d.times.append(t)
        for f, col in d.columns.items():
            v = row.get(f)
            col.append(NAN if v is None else v)
        d.throttle.append(NO_REASONS if mask is None else mask & INT64_BITS)
        d.lost.append(1 if row.get("lost") else 0)
        self.order.append(d.index)  # last: a reader on another thread finds the columns filled
        d.samples += 1
        if row.get("lost"):
            d.lost_samples += 1
            d.last_t = t
            d.throttled_last = False
            return
        d.latest = dict(row)
        util, used, total = row.get("utilization_gpu_percent"), row.get("memory_used_bytes"), row.get("memory_total_bytes")
        if util is not None:
            d.util_sum += util
            d.util_n += 1
            d.util_peak = _peak(d.util_peak, util)
        if used is not None:
            d.memory_first = used if d.memory_first is None else d.memory_first
            d.memory_peak = _peak(d.memory_peak, used)
        if total:
            d.memory_total = total
        d.temperature_peak = _peak(d.temperature_peak, row.get("temperature_c"))
        d.power_peak = _peak(d.power_peak, row.get("power_w"))
        energy = row.get("energy_j")
        if energy is not None:
            d.energy_first = energy if d.energy_first is None else d.energy_first
            d.energy_last = energy
        slow = slowdown_names(mask)
        x = t - self.t0
        if slow:
            if d.throttled_last and d.last_t is not None and t - d.last_t <= MAX_GAP_S:
                d.episodes[-1][1] = x  # the episode goes on
            else:
                d.episodes.append([x, x])
                del d.episodes[:-MAX_EPISODES]
        d.throttled_last = bool(slow)
        if d.last_t is not None and 0 < t - d.last_t <= MAX_GAP_S:
            for reason in slow:
                d.throttled_s[reason] = d.throttled_s.get(reason, 0.0) + (t - d.last_t)
        d.last_t = t
        allocated, peak = row.get("torch_allocated_bytes"), row.get("torch_peak_allocated_bytes")
        if allocated is not None:
            d.torch_allocated_min = allocated if d.torch_allocated_min is None else min(d.torch_allocated_min, allocated)
        d.torch_peak_allocated = _peak(d.torch_peak_allocated, peak)
        for name, (source, scale) in self.curve_specs.items():
            v = row.get(source)
            d.curves[name].extend((x,), (NAN if v is None else v / scale,))

    def drop_oldest(self, window_s: float, limit: int, at_least: int = 1) -> int:
        """Forget the samples older than ``window_s`` before the newest one, oldest first: at
        most ``limit`` in all (the samples ``spill_path`` holds, counted from its first line), and
        none unless at least ``at_least`` can go (a drop moves the kept columns; doing it in
        chunks keeps that rare). Returns how many were dropped now."""
        if self.spill_path is None:
            return 0
        limit = min(limit - self.dropped, len(self.order))
        if limit < at_least:
            return 0
        before = max(d.times[-1] for d in self.devices.values() if d.times) - window_s
        old = sum(bisect_left(d.times, before) for d in self.devices.values())
        n = min(limit, old)
        if n < at_least:
            return 0
        with self._lock:
            for index, count in Counter(self.order[:n]).items():
                self.devices[index].forget(count)
            del self.order[:n]
            self.dropped += n
        return n

    def spilled_rows(self) -> list[dict[str, Any]]:
        """The dropped samples, read back from the run log (OSError or ValueError when it no
        longer has them)."""
        if not self.dropped:
            return []
        assert self.spill_path is not None
        with open_regular(self.spill_path) as f:  # a regular file only, and no line over the limit
            raw = [load_json(line, self.spill_path) for line in first_lines(f, self.spill_path, self.dropped)]
        if len(raw) < self.dropped:
            raise ValueError(f"{self.spill_path} holds {len(raw)} GPU samples, {self.dropped} expected")
        return raw

    def rows(self, labels: str = "all", spilled: bool = True) -> list[dict[str, Any]]:
        """Every sample in arrival order; ``labels``: "all" (name and backend on every row) or
        "changes" (as files hold them); ``spilled``: with the samples read back from the run log."""
        with self._lock:
            return self._rows(labels, self.spilled_rows() if spilled else [])

    def _rows(self, labels: str, spilled: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        seen: dict[int, tuple[Any, Any]] = {}

        def add(row: dict[str, Any], label: tuple[Any, Any]) -> None:
            index = row["gpu"]
            if labels == "all" or seen.get(index) != label:
                row = {"time": row.pop("time"), "gpu": row.pop("gpu"), "name": label[0], "backend": label[1], **row}
                seen[index] = label
            out.append(row)

        names: dict[int, tuple[Any, Any]] = {}  # the file writes labels where they change: carry them
        for raw in spilled:
            row = as_kept(raw, self.fields)
            last = names.get(row["gpu"], (None, None))
            label = names[row["gpu"]] = (raw.get("name") or last[0], raw.get("backend") or last[1])
            add(row, label)
        pos: dict[int, int] = {}
        for index in list(self.order):
            d = self.devices[index]
            i = pos.get(index, 0)
            pos[index] = i + 1
            add(d.row(i), (d.name, self.backend))
        return out
