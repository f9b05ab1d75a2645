"""A recent GPU sample from this kernel's sampler, for the post-mortem and ``free_gpu_memory()``:
its latest when fresh enough, else one read for the occasion (a lease on the shared sampler, at
most ``wait_s`` of waiting: never a hang on a stuck driver)."""
from __future__ import annotations

import os
import time
from typing import Any

from ..widgets import leases

FRESH_S = 5.0
WAIT_S = 2.0


def recent_snapshot(newer_than: float | None = None, wait_s: float = WAIT_S,
                    processes: bool = False) -> dict[str, Any] | None:
    """A sample taken after ``newer_than`` (epoch s; default: at most FRESH_S old), or the newest
    there is once ``wait_s`` passed (None when the sampler cannot be had). ``processes``: its
    process lists must also have been read after ``newer_than`` (they are slow fields, read every
    2 s and carried by the fast samples between: a fresh sample can hold an older list)."""
    try:
        sampler = leases.acquire()
    except leases.ConfigError:
        return None
    after = time.time() - FRESH_S if newer_than is None else newer_than
    try:
        if processes:
            sampler.read_slow_soon()
        end = time.monotonic() + wait_s
        while True:
            snap = sampler.latest
            if snap is not None and snap.get("timestamp", 0) >= after and (not processes or _carries_read_since(snap, sampler, after)):
                return snap
            if time.monotonic() >= end:
                return snap  # stale or None: the caller says what it has
            time.sleep(0.05)
    finally:
        leases.release(sampler)


def _carries_read_since(snap: dict[str, Any], sampler: Any, after: float) -> bool:
    span = sampler.slow_read_span
    return span is not None and span[0] >= after and snap.get("timestamp", 0) >= span[1]


def own_gpu_memory(snapshot: dict[str, Any] | None) -> dict[int, int]:
    """This process's GPU memory in a sample, per NVML GPU index (NVML's per-process figures)."""
    out: dict[int, int] = {}
    me = os.getpid()
    for d in (snapshot or {}).get("devices", ()):
        for p in d.get("processes") or ():
            if isinstance(p, dict) and p.get("pid") == me and isinstance(p.get("used_memory_bytes"), int):
                out[d.get("index")] = out.get(d.get("index"), 0) + p["used_memory_bytes"]
    return out
