"""GPU processes left behind by a kernel that ended: DataLoader workers, ``!python`` children,
subprocesses re-parented to init once their kernel is gone.

While a kernel lives its GPU processes are found by ancestry (attribution.py); once it is gone the
ancestry is gone too, so the book remembers, from the server's own samples, which GPU process
descended from which kernel. It is bounded (``LIMIT`` entries, only processes seen on a GPU) and
kept in memory: nothing is written per process. A pid is remembered with its start time, so a pid
the OS hands to a new process is never taken for the old one.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any, NamedTuple

import psutil

from .attribution import owning_kernel

# More GPU processes than any machine runs for one server's kernels; the oldest go first.
LIMIT = 4096


class Entry(NamedTuple):
    kernel_id: str
    notebook_path: str | None
    started: float  # the process's start time (psutil create_time): tells a reused pid apart
    ended: float | None  # when its kernel was first seen gone (epoch s)


def start_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


class OrphanBook:
    """pid -> the kernel it descended from; ``orphan_of`` answers for the kernels that ended."""

    def __init__(self, limit: int = LIMIT) -> None:
        self.limit = limit
        self._entries: OrderedDict[int, Entry] = OrderedDict()
        self._lock = threading.Lock()
        self.version = 0  # bumped on every change: answers made from the book key on it

    def note(self, gpu_pids: Iterable[int], roots: dict[int, str], paths: dict[str, str],
             live: frozenset[str], now: float | None = None) -> None:
        """One round: remember the GPU processes of live kernels, date the kernels that ended, and
        forget processes no longer on a GPU or no longer alive. Walks /proc: run it off the loop."""
        now = time.time() if now is None else now
        on_gpu = set(gpu_pids)
        found: dict[int, Entry] = {}
        for pid in on_gpu:
            kernel_id = owning_kernel(pid, roots) if roots else None
            if kernel_id is None or pid in roots:
                continue  # not ours, or a kernel's own process (it ends with its kernel)
            started = start_time(pid)
            if started is not None:
                found[pid] = Entry(kernel_id, paths.get(kernel_id), started, None)
        with self._lock:
            before = dict(self._entries)
        kept: dict[int, Entry] = {}
        for pid, entry in before.items():
            if pid in found or pid not in on_gpu or start_time(pid) != entry.started:
                continue
            if entry.kernel_id not in live and entry.ended is None:
                entry = entry._replace(ended=now)
            kept[pid] = entry
        for pid, entry in found.items():
            old = before.get(pid)
            if old is not None and old.started == entry.started:
                # The notebook may be learnt late (the session is made after the kernel starts).
                entry = entry._replace(notebook_path=entry.notebook_path or old.notebook_path)
            kept[pid] = entry
        with self._lock:
            if kept != before:
                self.version += 1
            self._entries = OrderedDict(kept)
            while len(self._entries) > self.limit:
                self._entries.popitem(last=False)

    def orphan_of(self, pid: int) -> dict[str, Any] | None:
        """``{"kernel_id", "notebook_path", "ended"}`` for a process whose kernel ended, else None."""
        entry = self._entries.get(pid)
        if entry is None or entry.ended is None:
            return None
        return {"kernel_id": entry.kernel_id, "notebook_path": entry.notebook_path, "ended": entry.ended}

    def started(self, pid: int) -> float | None:
        entry = self._entries.get(pid)
        return entry.started if entry else None

    def forget(self, pid: int) -> None:
        with self._lock:
            if self._entries.pop(pid, None) is not None:
                self.version += 1

    def __len__(self) -> int:
        return len(self._entries)
