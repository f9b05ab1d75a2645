"""Per-process GPU use: each process's share of SM time and of the memory controller's time.

NVML keeps a short buffer of per-process samples (one every ~1/6 s while a process runs kernels).
Each slow read asks for the samples since the previous read and averages them per pid, so the
figures cover the slow interval. A process on the GPU's list with no sample in that window ran
no kernel: 0 %. Drivers older than 550 lack nvmlDeviceGetProcessesUtilizationInfo; the older
nvmlDeviceGetProcessUtilization gives the same figures.
"""
from __future__ import annotations

import time
from typing import Any

from ..inflight import calling
from .errors import LOST, NO_GPU, NOT_FOUND, UNSUPPORTED, classify

Usage = dict[int, tuple[float, float]]  # pid -> (sm percent, memory bandwidth percent)
NO_API = "not supported by this driver or nvidia-ml-py (no per-process utilization)"
FIRST_WINDOW_S = 2.0  # the first read looks this far back (NVML's buffer holds about that much)


class UsageReader:
    """Per-process use of one GPU, read since the previous read."""

    def __init__(self) -> None:
        self.since_us = 0  # NVML's timestamps: microseconds since the epoch
        self.new_api = True

    def reset(self) -> None:
        self.since_us = 0


def read_usage(nv: Any, handle: Any, reader: UsageReader) -> Usage:
    """pid -> (sm %, memory bandwidth %) over the window since the last call; raises on failure
    (the caller turns the failure into a reason; a lost GPU into a lost GPU)."""
    since = reader.since_us or int((time.time() - FIRST_WINDOW_S) * 1e6)
    samples: list[Any] = []
    try:
        samples = _samples(nv, handle, reader, since)
    except Exception as exc:
        if classify(exc).code != NOT_FOUND:  # NOT_FOUND: no process ran a kernel in the window
            raise
    sums: dict[int, list[float]] = {}
    last = since
    for s in samples:
        acc = sums.setdefault(s.pid, [0.0, 0.0, 0])
        acc[0] += s.smUtil
        acc[1] += s.memUtil
        acc[2] += 1
        last = max(last, s.timeStamp)
    reader.since_us = max(last, int(time.time() * 1e6) - int(FIRST_WINDOW_S * 1e6))
    return {pid: (round(sm / n, 1), round(mem / n, 1)) for pid, (sm, mem, n) in sums.items()}


def _samples(nv: Any, handle: Any, reader: UsageReader, since: int) -> list[Any]:
    if reader.new_api:
        fn = getattr(nv, "nvmlDeviceGetProcessesUtilizationInfo", None)
        if fn is not None:
            calling("nvmlDeviceGetProcessesUtilizationInfo")
            try:
                return fn(handle, since)
            except Exception as exc:
                failure = classify(exc)
                if failure.kind != UNSUPPORTED or failure.code == 4:  # no permission: the old one would say so too
                    raise
        reader.new_api = False  # an older driver: remember, and use the older call from now on
    fn = getattr(nv, "nvmlDeviceGetProcessUtilization", None)
    if fn is None:
        raise AttributeError(NO_API)
    calling("nvmlDeviceGetProcessUtilization")
    return fn(handle, since)


def processes_with_usage(nv: Any, handle: Any, reader: UsageReader, entries: list[Any]) -> list[Any]:
    """``entries`` with each process's use, or null with the reason; raises only for a lost GPU."""
    try:
        return with_usage(entries, read_usage(nv, handle, reader), None)
    except Exception as exc:
        if fatal(exc):
            raise
        return with_usage(entries, None, usage_reason(exc))


def usage_reason(exc: BaseException) -> str:
    if isinstance(exc, AttributeError):
        return NO_API
    failure = classify(exc)
    if failure.code == 13:
        return NO_API
    return failure.reason


def fatal(exc: BaseException) -> bool:
    return classify(exc).kind in (LOST, NO_GPU)


def with_usage(entries: list[Any], usage: Usage | None, reason: str | None) -> list[Any]:
    """Copies of the (shared, cached) process entries with their use, or null with ``reason``."""
    out = []
    for e in entries:
        unavailable = {k: v for k, v in e["unavailable"].items() if k not in ("sm_percent", "memory_bandwidth_percent")}
        if usage is None:
            sm = mem = None
            unavailable["sm_percent"] = unavailable["memory_bandwidth_percent"] = reason or NO_API
        else:
            # NVML's per-process figures are keyed by its own pids (host pids in a container).
            nvml_pid = e.get("nvml_pid", e["pid"])
            if nvml_pid is None:  # matched by its device files, which host pid it is unknown
                sm = mem = None
                unavailable["sm_percent"] = unavailable["memory_bandwidth_percent"] = e["unavailable"].get(
                    "used_memory_bytes", "the driver's pid of this process is not known")
            else:
                sm, mem = usage.get(nvml_pid, (0.0, 0.0))
        out.append({**e, "sm_percent": sm, "memory_bandwidth_percent": mem, "unavailable": unavailable})
    return out
