"""A snapshot: one sample of every GPU. This module is the only place that shapes one.

``compose`` merges a backend's reads; ``empty`` is the snapshot with no devices (before the
first sample, without a GPU); ``with_status`` restates a snapshot's status (stale, say);
``aged`` adds how old it is; ``public`` turns one into its JSON form (served by the API and
``snapshot --json``), the one step where the throttle bitmask becomes names and each GPU's
process list is cut to its ``PROCESSES_SHOWN`` largest (``by_memory`` orders them once per slow
read).
"""
from __future__ import annotations

import os
import time
from operator import itemgetter
from typing import Any, Mapping

from ..backends.base import Backend
from ..metrics.fields import SLOW_FIELDS
from ..metrics.samples import FastRead, Snapshot, SlowRead
from ..metrics.throttle import json_names
from .visibility import cuda_visible_indices

PENDING = "not read yet (read on the slow cadence)"
# A sample's JSON lists each GPU's largest processes only, with ``processes_omitted`` counting
# the rest: 64 GPUs x 1000 processes made ``samples/latest`` 42 MB, served every second to every
# tab. The whole list is paged through with ``GET processes``; Python callers get it in full.
PROCESSES_SHOWN = 32
_NO_SYSTEM: Mapping[str, Any] = {}


def compose(
    backend: Backend,
    timestamp: float,
    fast: list[FastRead],
    slow: Mapping[int, SlowRead],
    uuids: list[str | None] | None = None,
    mig_uuids: list[list[str] | None] | None = None,
    pending: str = PENDING,
) -> Snapshot:
    """Merge a fast read with the latest slow read of each device into one snapshot.

    A device without a slow part has its slow fields null with ``pending`` as the reason.

    The fast read's dicts become the snapshot's devices (they are fresh from ``read_fast``;
    copying them again cost a tenth of a tick). The slow parts are shared, so only read.
    """
    for dev in fast:
        d: Any = dev  # becomes a DeviceSample here
        unavailable = d.pop("unavailable", None)
        if unavailable is None:
            unavailable = {}
        if d.get("status") != "lost":
            part: Any = slow.get(d["index"])
            if part is None:
                for f in SLOW_FIELDS:
                    d[f] = None
                    unavailable[f] = pending
            else:
                for f in SLOW_FIELDS:
                    d[f] = part.get(f)
                more = part.get("unavailable")
                if more:
                    unavailable.update(more)
        d["unavailable"] = unavailable  # last, after the slow fields, as people read it
    if uuids is None:
        uuids = [d.get("uuid") for d in fast]
    visible = cuda_visible_indices(os.environ.get("CUDA_VISIBLE_DEVICES"), uuids, mig_uuids)
    return _shaped(backend.name, backend.status, backend.reason, timestamp, backend.system, visible, fast)


def _shaped(backend: str | None, status: str, reason: str | None, timestamp: float, system: Mapping[str, Any],
            visible: list[int] | None, devices: list[Any]) -> Snapshot:
    """The snapshot's keys in their documented order."""
    return {
        "backend": backend,
        "status": status,
        "reason": reason,
        "timestamp": timestamp,
        "driver_version": system.get("driver_version"),
        "cuda_driver_version": system.get("cuda_driver_version"),
        "nvml_version": system.get("nvml_version"),
        "cuda_visible_devices": visible,
        "devices": devices,
    }


def empty(status: str, reason: str | None, backend: Backend | str | None = None,
          timestamp: float | None = None) -> Snapshot:
    """A snapshot without devices: no sample yet, no GPU, or nothing read before a deadline.

    ``backend`` (a Backend, or only its name) gives the name and the driver versions it knows.
    """
    name: str | None = backend.name if isinstance(backend, Backend) else backend
    system: Mapping[str, Any] = backend.system if isinstance(backend, Backend) else _NO_SYSTEM
    return _shaped(name, status, reason, time.time() if timestamp is None else timestamp, system, None, [])


def with_status(snap: Snapshot | None, status: str, reason: str | None,
                backend: Backend | str | None = None) -> Snapshot:
    """``snap`` (shared, so copied) with another status and reason; an empty snapshot for None."""
    if snap is None:
        return empty(status, reason, backend)
    out = dict(snap)
    out.update(status=status, reason=reason)
    return out  # type: ignore[return-value]


def aged(snap: Snapshot | Mapping[str, Any], status: str, reason: str | None, age_s: float | None) -> dict[str, Any]:
    """``snap`` as an answer gives it: ``status``, ``reason`` and ``sample_age_s`` (seconds since
    it was taken, as of the answer) right after its backend, the documented order."""
    out: dict[str, Any] = {"backend": snap.get("backend"), "status": status, "reason": reason, "sample_age_s": age_s}
    out.update((k, v) for k, v in snap.items() if k not in out)
    return out


def public(snap: Snapshot | Mapping[str, Any]) -> dict[str, Any]:
    """The JSON form of a snapshot: a shallow copy whose devices carry ``throttle_reasons`` as names
    and at most PROCESSES_SHOWN processes each, with ``processes_omitted`` the count of the rest.

    The snapshot is shared (every subscriber gets the same one), so the devices are copied
    rather than changed."""
    out = dict(snap)
    out["devices"] = [_public_device(d) for d in snap["devices"]]
    return out


def _public_device(dev: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in dev.items():
        out[key] = json_names(value) if key == "throttle_reasons" else value
        if key == "processes":  # the count of the rest right after the list, as documented
            out["processes"], out["processes_omitted"] = shown_processes(value)
    return out


def shown_processes(procs: list[Any] | None) -> tuple[list[Any] | None, int | None]:
    """The processes a sample's JSON lists (the largest first, at most PROCESSES_SHOWN) and how
    many it leaves out (None when the list was not read)."""
    if procs is None:
        return None, None
    return procs[:PROCESSES_SHOWN], max(0, len(procs) - PROCESSES_SHOWN)


def _PID(proc: Any) -> tuple[int, int]:  # noqa: N802  (a key, like the itemgetter beside it)
    # An entry with no local pid (outside this container) after the local ones, by the driver's pid.
    pid = proc["pid"]
    return (0, pid) if pid is not None else (1, proc.get("nvml_pid") or 0)


_USED = itemgetter("used_memory_bytes")


def by_memory(parts: list[SlowRead]) -> list[SlowRead]:
    """``parts`` (fresh from ``read_slow``) with each GPU's processes ordered by GPU memory, the
    largest first (then by pid; unknown memory last). Done once per slow read, on the slow
    thread: the JSON forms then cut the head and ``GET processes`` pages in this order. The lists
    are replaced, never sorted in place (a backend may reuse them)."""
    for part in parts:
        procs = part.get("processes")
        if procs and len(procs) > 1:
            # Two stable sorts on C key getters (by pid, then by memory): a Python key function
            # per process held the slow thread (and the GIL) ~30 ms a read at 64 GPUs x 1000.
            known = [p for p in procs if p.get("used_memory_bytes") is not None]
            unknown = [p for p in procs if p.get("used_memory_bytes") is None] if len(known) < len(procs) else []
            known.sort(key=_PID)
            known.sort(key=_USED, reverse=True)  # reverse keeps equal ones in pid order
            unknown.sort(key=_PID)
            part["processes"] = known + unknown
    return parts


# A one-shot snapshot's GPM figures span this gap between their two samples (NVML wants >= 0.1 s).
GPM_ONE_SHOT_S = 0.5


def take(backend: Backend, timestamp: float, gpm: bool = False, prime: bool = True) -> Snapshot:
    """One complete snapshot, slow fields included, read right now (for the CLI).

    ``gpm``: with GPM metrics and per-process use, which compare two samples. ``prime``: take the
    first now and wait GPM_ONE_SHOT_S (the snapshot, timed after the wait, is the second); without
    it the previous ``take`` was the first (``--watch``)."""
    backend.gpm = gpm
    if gpm and prime and backend.prime_gpm():
        time.sleep(GPM_ONE_SHOT_S)
        timestamp += GPM_ONE_SHOT_S
    fast = backend.read_fast(timestamp)
    slow = {d["index"]: d for d in by_memory(backend.read_slow(timestamp))}
    info = backend.device_info()
    return compose(backend, timestamp, fast, slow, [d.get("uuid") for d in info], [d.get("mig_device_uuids") for d in info])
