"""A bounded, columnar history of samples: fixed memory, fast ``since()`` and downsampling.

Each device keeps one ``array('d')`` ring per numeric field (8 bytes a value, NaN for null),
sharing one ring of timestamps. Capacity is fixed when the history is made, so memory is
bounded by configuration: 1 h at 1 Hz for 8 GPUs is about 4 MB whatever runs for how long.
Process lists are not kept here: they are large and only the latest matters.
"""
from __future__ import annotations

import math
import operator
import threading
from array import array
from typing import Any

from .downsample import downsample, downsample_arrays
from .fields import SERIES_FIELDS
from .throttle import mask_from_names, names_from_mask

NAN = float("nan")
# From this many samples on, since() copies and downsamples with NumPy (imported then, so the CLI
# never pays for it); below, plain lists are faster (an incremental poll asks for 1-2 samples).
NUMPY_FROM = 256
THROTTLE = "throttle_mask"
LOST = "lost"
COLUMNS: tuple[str, ...] = SERIES_FIELDS + (THROTTLE, LOST)
BITMASKS = frozenset({THROTTLE, LOST})
_series_values = operator.itemgetter(*SERIES_FIELDS)


def capacity_for(window_s: float, interval_s: float) -> int:
    if not (window_s > 0 and interval_s > 0):
        raise ValueError(f"history window and interval must be > 0 (got {window_s}, {interval_s})")
    return max(2, math.ceil(window_s / interval_s) + 1)


class History:
    """Samples from the sampler, newest last, at most ``capacity`` of them."""

    def __init__(self, window_s: float = 3600.0, interval_s: float = 1.0) -> None:
        self.window_s = float(window_s)
        self.capacity = capacity_for(window_s, interval_s)
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

    def whole_window(self, t: float | None) -> bool:
        """Whether ``since(t)`` answers with the whole window (``t`` is before its oldest sample)."""
        with self._lock:
            if t is None or not self._size:
                return True
            newest = self._times[(self._start + self._size - 1) % self.capacity]
            return self._first_after(t) <= self._first_after(newest - self.window_s)

    def append(self, snapshot: dict[str, Any]) -> None:
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
                    values = _series_values(dev)  # one C call: this runs per GPU per tick
                except KeyError:  # a backend that leaves a field out means "no data"
                    values = [dev.get(f) for f in SERIES_FIELDS]
                for col, v in zip(entry["series"], values):
                    col[pos] = NAN if v is None else v
                reasons = dev.get("throttle_reasons")
                cols[THROTTLE][pos] = NAN if reasons is None else mask_from_names(reasons)
                cols[LOST][pos] = 1.0 if dev.get("status") == "lost" else 0.0
            for idx, entry in self._devices.items():
                if idx not in seen:  # a device missing from this snapshot has no data for it
                    for col in entry["cols"].values():
                        col[pos] = NAN

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

    def _take(self, col: array, first: int) -> list[float | None]:
        """Logical positions first.. as a list, NaN -> None (slices: C speed for the copy)."""
        a = (self._start + first) % self.capacity
        n = self._size - first
        if n <= 0:
            return []
        if a + n <= self.capacity:
            values = col[a : a + n].tolist()
        else:
            values = col[a:].tolist() + col[: a + n - self.capacity].tolist()
        return [None if v != v else v for v in values]  # v != v only for NaN

    def _take_array(self, col: array, first: int) -> Any:
        """Logical positions first.. as a float64 NumPy copy (NaN stays NaN)."""
        import numpy as np

        whole = np.frombuffer(col, dtype=np.float64)
        return whole[(self._start + np.arange(first, self._size)) % self.capacity]

    def since(self, t: float | None = None, max_points: int | None = None) -> dict[str, Any]:
        """Samples newer than ``t`` (all when None), per device, downsampled to ``max_points``.

        Returns ``{"timestamps": [...], "devices": [{"index", "uuid", "name", <field>: [...],
        "throttle_reasons": [[...], ...], "lost": [bool, ...]}]}`` with all lists aligned.
        """
        with self._lock:
            first = 0 if t is None else self._first_after(t)
            if self._size:
                newest = self._times[(self._start + self._size - 1) % self.capacity]
                first = max(first, self._first_after(newest - self.window_s))
            vectorised = self._size - first >= NUMPY_FROM and max_points is not None
            take = self._take_array if vectorised else self._take
            times = take(self._times, first)
            devices = [
                (idx, e["uuid"], e["name"], {c: take(col, first) for c, col in e["cols"].items()})
                for idx, e in sorted(self._devices.items())
            ]
        reduce = downsample_arrays if vectorised else downsample
        out_devices = []
        out_times = times.tolist() if vectorised else times
        for idx, uuid, name, cols in devices:
            if max_points is not None:
                out_times, cols = reduce(times, cols, max_points, BITMASKS)
            dev: dict[str, Any] = {"index": idx, "uuid": uuid, "name": name}
            for field in SERIES_FIELDS:
                dev[field] = cols[field]
            dev["throttle_reasons"] = [None if m is None else names_from_mask(int(m)) for m in cols[THROTTLE]]
            dev["lost"] = [bool(m) for m in cols[LOST]]
            out_devices.append(dev)
        if max_points is not None and not devices:
            out_times, _ = reduce(times, {}, max_points)
        return {"timestamps": out_times, "devices": out_devices}
