"""Which GPUs each kernel's processes held, and how much, in one sample: the kernel, its children
and theirs (DataLoader workers, a torchrun started from a cell). The server's ledger
(server/cell_ledger.py) and a kernel's own cell book (magic/cell_book.py) both book these.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .attribution import owning_kernel

MAX_PROCESSES = 4096  # a round's /proc walk stays bounded on a crowded machine


@dataclass(frozen=True)
class Entry:
    """One kernel's GPUs from one sample on (until its next entry)."""

    t: float  # the sample's unix time
    held: Mapping[int, int | None]  # GPU index -> bytes its processes held (None: unknown, in a container)
    others: Mapping[int, int]  # GPU index -> processes on that GPU that are not this kernel's


Held = dict[str, dict[int, int | None]]
Counts = dict[str, dict[int, int]]


def classify(devices: Iterable[Mapping[str, Any]], roots: dict[int, str],
             owners: dict[int, str | None]) -> tuple[Held, Counts]:
    """Per kernel, GPU -> bytes held; and per kernel, GPU -> how many other processes it has. Runs in
    a worker thread.

    ``owners`` caches pid -> kernel between rounds (the /proc walk is the cost); the caller drops it
    when the kernels change."""
    held: Held = {}
    mine: Counts = {}
    counts: dict[int, int] = {}
    seen: set[int] = set()
    n = 0
    for dev in devices:
        gpu = dev["index"]
        for proc in dev.get("processes") or ():
            n += 1
            if n > MAX_PROCESSES:
                break
            counts[gpu] = counts.get(gpu, 0) + 1
            pid = proc.get("pid")
            if pid is None:
                continue  # outside this container: never a kernel of this server
            seen.add(pid)
            if pid not in owners:
                owners[pid] = owning_kernel(pid, roots)
            kernel_id = owners[pid]
            if kernel_id is None:
                continue
            mem = proc.get("used_memory_bytes")
            own = mine.setdefault(kernel_id, {})
            own[gpu] = own.get(gpu, 0) + 1
            gpus = held.setdefault(kernel_id, {})
            before = gpus.get(gpu, 0)
            gpus[gpu] = None if mem is None or before is None else before + int(mem)
    for pid in [p for p in owners if p not in seen]:
        del owners[pid]  # a pid that left the lists may come back as another process
    others = {k: {g: counts.get(g, 0) - n for g, n in own.items()} for k, own in mine.items()}
    return held, others
