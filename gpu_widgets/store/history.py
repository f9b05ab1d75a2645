"""A bounded, columnar history of samples: fixed memory, fast ``since()`` and downsampling.

Each device keeps one ``array('d')`` ring per numeric field (8 bytes a value, NaN for null),
sharing one ring of timestamps. Capacity is fixed when the history is made, so memory is
bounded by configuration: 1 h at 1 Hz for 8 GPUs is about 5 MB whatever runs for how long.
Process lists are not kept here: they are large and only the latest matters. Throttle reasons
are kept as the sample has them, NVML's bitmask (``since()`` gives them back as ints; the server
names them when it writes JSON).

A big ``since()`` copies one device at a time under the lock (the sampler waits ~1 ms, not for a
copy of every GPU's hour), so the ring keeps ``READ_MARGIN_S`` of samples beyond the window: a
reader can take that long before a sample it planned to read is overwritten.
"""
from __future__ import annotations

import math
import operator
import threading
from array import array
from collections.abc import Iterator
from typing import Any

from ..metrics.fields import SERIES_FIELDS
from ..metrics.samples import Snapshot
from .downsample import downsample

NAN = float("nan")
# From this many samples on, or when they must be downsampled, since() copies them with NumPy
# (imported then, so the CLI never pays for it); below, plain lists are faster (an incremental
# poll asks for 1-2 samples).
NUMPY_FROM = 256
THROTTLE = "throttle_mask"
LOST = "lost"
COLUMNS: tuple[str, ...] = SERIES_FIELDS + (THROTTLE, LOST)
BITMASKS = frozenset({THROTTLE, LOST})
# The series and the throttle mask in one C call (this runs per GPU per tick).
_sample_values = operator.itemgetter(*SERIES_FIELDS, "throttle_reasons")
# A float64 holds a whole number exactly up to 2**53: the mask keeps bits 0-52 (NVML defines 0-8).
MASK_BITS = (1 << 53) - 1
# Seconds of extra samples kept beyond the window for readers that copy device by device.
READ_MARGIN_S = 10.0


def capacity_for(window_s: float, interval_s: float) -> int:
    if not (window_s > 0 and interval_s > 0):
        raise ValueError(f"history window and interval must be > 0 (got {window_s}, {interval_s})")
    return max(2, math.ceil(window_s / interval_s) + 1)


class History:
    """Samples from the sampler, newest last, at most ``capacity`` of them."""

    def __init__(self, window_s: float = 3600.0, interval_s: float = 1.0) -> None:
        self.window_s = float(window_s)
        self.capacity = capacity_for(window_s, interval_s) + math.ceil(READ_MARGIN_S / interval_s)
        self._lock = threading.Lock()
        self._times = array("d", [NAN]) * self.capacity
        self._devices: dict[int, dict[str, Any]] = {}  # index -> {"uuid", "name", "cols": {col: array}}
        self._start = 0
        self._size = 0
        self.appended = 0  # samples ever appended: tells a cached answer it is stale

    def __len__(self) -> int:
        return self._size

    @property
    def bytes_held(self) -> int:
        """Memory held by the value arrays (what the capacity bounds)."""
        per_column = self.capacity * self._times.itemsize
        return per_column * (1 + len(self._devices) * len(COLUMNS))

    @property
    def device_count(self) -> int:
        return len(self._devices)

    def count_since(self, t: float | None) -> int:
        """How many samples ``since(t)`` covers (before downsampling)."""
        with self._lock:
            return self._size - self._first(t)

    def whole_window(self, t: float | None) -> bool:
        """Whether ``since(t)`` answers with the whole window (``t`` is before its oldest sample)."""
        with self._lock:
            if t is None or not self._size:
                return True
            newest = self._times[(self._start + self._size - 1) % self.capacity]
            return self._first_after(t) <= self._first_after(newest - self.window_s)

    def append(self, snapshot: Snapshot) -> None:
        with self._lock:
            self.appended += 1
            pos = (self._start + self._size) % self.capacity
            if self._size < self.capacity:
                self._size += 1
            else:
                self._start = (self._start + 1) % self.capacity
            self._times[pos] = snapshot["timestamp"]
            seen = set()
            for dev in snapshot.get("devices", ()):
                idx = dev["index"]
                seen.add(idx)
                entry = self._devices.get(idx)
                if entry is None:
                    cols = {c: array("d", [NAN]) * self.capacity for c in COLUMNS}
                    entry = self._devices[idx] = {"cols": cols, "series": [cols[f] for f in SERIES_FIELDS]}
                entry["uuid"], entry["name"] = dev.get("uuid"), dev.get("name")
                cols = entry["cols"]
                try:
                    values = _sample_values(dev)
                except KeyError:  # a backend that leaves a field out means "no data"
                    values = [dev.get(f) for f in (*SERIES_FIELDS, "throttle_reasons")]
                mask = values[-1]
                for col, v in zip(entry["series"], values):  # zip stops before the mask
                    col[pos] = NAN if v is None else v
                cols[THROTTLE][pos] = NAN if mask is None else mask & MASK_BITS
                cols[LOST][pos] = 1.0 if dev.get("status") == "lost" else 0.0
            for idx, entry in self._devices.items():
                if idx not in seen:  # a device missing from this snapshot has no data for it
                    for col in entry["cols"].values():
                        col[pos] = NAN

    def stats_between(self, t0: float, t1: float, indices: Any = None,
                      lookback_s: float = 0.0) -> tuple[int, dict[int, dict[str, Any]], float | None]:
        """What a cell's summary needs of the samples with t0 <= timestamp <= t1 (and the newest
        one before t0, where it is at most ``lookback_s`` older: the state as the cell began), per GPU in
        ``indices`` (all when None), reduced in place under the lock (no copy of an hour's columns):
        (samples, {index: {"uuid", "name", "util_mean", "util_max", "sm_mean", "energy_first",
        "energy_last", "throttle_mask", "lost"}}, the oldest timestamp kept). NaN is "no value"."""
        import numpy as np

        with self._lock:
            oldest = self._times[self._start] if self._size else None
            first, last = self._first_after(t0 - 1e-9), self._first_after(t1)
            if first and self._times[(self._start + first - 1) % self.capacity] >= t0 - lookback_s:
                first -= 1
            n = max(0, last - first)
            a = (self._start + first) % self.capacity
            # The ring's one or two stretches that hold the samples, as views.
            spans = [(a, a + n)] if a + n <= self.capacity else [(a, self.capacity), (0, a + n - self.capacity)]
            out = {}
            for idx, e in sorted(self._devices.items()):
                if indices is not None and idx not in indices:
                    continue
                cols = {c: [np.frombuffer(e["cols"][c], dtype=np.float64)[lo:hi] for lo, hi in spans] for c in
                        ("utilization_gpu_percent", "sm_active_percent", "energy_j", THROTTLE, LOST)}
                out[idx] = {"uuid": e["uuid"], "name": e["name"], **_reduced(cols)} if n else \
                    {"uuid": e["uuid"], "name": e["name"]}
        return n, out, oldest

    def _first_after(self, t: float) -> int:
        """Logical index of the first sample with timestamp > t (binary search on the ring)."""
        lo, hi = 0, self._size
        while lo < hi:
            mid = (lo + hi) // 2
            if self._times[(self._start + mid) % self.capacity] > t:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def _take(self, col: array, first: int, end: int | None = None) -> list[float | None]:
        """Logical positions first..end as a list, NaN -> None (slices: C speed for the copy)."""
        a = (self._start + first) % self.capacity
        n = (self._size if end is None else end) - first
        if n <= 0:
            return []
        if a + n <= self.capacity:
            values = col[a : a + n].tolist()
        else:
            values = col[a:].tolist() + col[: a + n - self.capacity].tolist()
        return [None if v != v else v for v in values]  # v != v only for NaN

    def _copy(self, col: array, first: int, size: int, start: int) -> Any:
        """Logical positions first..size (as of ``start``) as a float64 NumPy copy (NaN stays NaN)."""
        import numpy as np

        whole = np.frombuffer(col, dtype=np.float64)
        a, n = (start + first) % self.capacity, size - first
        if a + n <= self.capacity:
            return whole[a : a + n].copy()
        return np.concatenate((whole[a:], whole[: a + n - self.capacity]))

    def _first(self, t: float | None) -> int:
        """Logical index of the first sample newer than ``t`` and inside the window."""
        first = 0 if t is None else self._first_after(t)
        if self._size:
            newest = self._times[(self._start + self._size - 1) % self.capacity]
            first = max(first, self._first_after(newest - self.window_s))
        return first

    def since(self, t: float | None = None, max_points: int | None = None) -> dict[str, Any]:
        """Samples newer than ``t`` (all when None), per device, downsampled to ``max_points``.

        Returns ``{"timestamps": [...], "devices": [{"index", "uuid", "name", <field>: [...],
        "throttle_reasons": [mask, ...], "lost": [bool, ...]}]}`` with all lists aligned; a null
        value (or mask) is None.
        """
        times, devices = self.since_lazily(t, max_points)
        return {"timestamps": times, "devices": list(devices)}

    def since_lazily(self, t: float | None = None, max_points: int | None = None,
                     until: float | None = None) -> tuple[list[float], Iterator[dict[str, Any]]]:
        """``since()`` as the timestamps and an iterator of devices: a caller that serialises each
        device as it comes holds one device's copy at a time, not every GPU's. With ``until``,
        only the samples up to that time (a client that holds the newer ones asks for the older)."""
        with self._lock:
            first = self._first(t)
            end = self._size if until is None else max(first, self._first_after(until))
            n = end - first
            if max_points is None or (n < NUMPY_FROM and n <= max_points):
                # Nothing to downsample, and a poll's increment (a few samples): plain lists, all
                # under the lock, is fastest.
                times = self._take(self._times, first, end)
                cols = [(idx, e["uuid"], e["name"], {c: self._take(col, first, end) for c, col in e["cols"].items()})
                        for idx, e in sorted(self._devices.items())]
                # (the generator runs outside the lock, as the caller reads each device)
                return times, (_device(idx, uuid, name, c, True) for idx, uuid, name, c in cols)  # type: ignore[return-value]
            plan = (first, end, self._start, self.appended, self._size)
            times = self._copy(self._times, *plan[:3])
            entries = [(idx, e["uuid"], e["name"], e["cols"]) for idx, e in sorted(self._devices.items())]
        out_times = downsample(times, {}, max_points)[0]
        return out_times, self._copied_devices(entries, plan, times, max_points)

    def _copied_devices(self, entries: list, plan: tuple[int, int, int, int, int], times: Any,
                        max_points: int) -> Iterator[dict[str, Any]]:
        first, end, start, appended, size = plan
        # Appends the ring can take before one overwrites the oldest sample of this answer.
        slack = self.capacity - size + first
        for idx, uuid, name, cols in entries:
            with self._lock:
                copies = {c: self._copy(col, first, end, start) for c, col in cols.items()}
                overwritten = self.appended - appended - slack
            if overwritten > 0:  # this reader took longer than READ_MARGIN_S: those samples are gone
                for values in copies.values():
                    values[:overwritten] = NAN
            yield _device(idx, uuid, name, downsample(times, copies, max_points, BITMASKS)[1])


def _device(idx: int, uuid: str | None, name: str | None, cols: dict[str, list[Any]],
            float_masks: bool = False) -> dict[str, Any]:
    dev: dict[str, Any] = {"index": idx, "uuid": uuid, "name": name}
    for field in SERIES_FIELDS:
        dev[field] = cols[field]
    masks = cols[THROTTLE]  # ints from downsample; floats straight from the ring
    dev["throttle_reasons"] = [None if m is None else int(m) for m in masks] if float_masks else masks
    dev["lost"] = [bool(m) for m in cols[LOST]]
    return dev


def _reduced(cols: dict[str, list[Any]]) -> dict[str, Any]:
    """A cell's figures from the views of its samples (one or two stretches of the ring)."""
    import numpy as np

    def finite(name: str) -> list[Any]:
        return [v[np.isfinite(v)] for v in cols[name]]

    util, sm, energy = finite("utilization_gpu_percent"), finite("sm_active_percent"), finite("energy_j")
    masks, lost = finite(THROTTLE), finite(LOST)
    n_util, n_sm = sum(v.size for v in util), sum(v.size for v in sm)
    joules = [v for v in energy if v.size]
    mask = 0
    for v in masks:
        if v.size:
            mask |= int(np.bitwise_or.reduce(v.astype(np.int64)))
    return {
        "util_mean": sum(float(v.sum()) for v in util) / n_util if n_util else NAN,
        "util_max": max(float(v.max()) for v in util if v.size) if n_util else NAN,
        "sm_mean": sum(float(v.sum()) for v in sm) / n_sm if n_sm else NAN,
        "energy_first": float(joules[0][0]) if joules else NAN,
        "energy_last": float(joules[-1][-1]) if joules else NAN,
        "throttle_mask": mask,
        "lost": any(bool(v.any()) for v in lost),
    }
