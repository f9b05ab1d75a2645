"""The kernel's own record of its cells, for ``%gpu_cells``: each cell's execution count, first
line, start and end (IPython's pre/post_run_cell events), kept from ``%load_ext gpu_widgets`` on.

Where the kernel belongs to a Jupyter server, the server has the GPU figures (cells/summary) and
this book only says when each cell ran. Where it has none (plain IPython), ``watch_locally()``
leases the process's sampler and books, on each sample with a process list, what this process and
its children held on each GPU (service/kernel_holdings.py, as the server books its kernels), so
that each cell's summary comes from the same code either way.
"""
from __future__ import annotations

import os
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from ..service.kernel_holdings import Entry, classify

MAX_CELLS = 5000
MAX_ENTRIES = 20000
FIRST_LINE_CHARS = 80
SELF = "this kernel"


@dataclass
class CellRecord:
    count: int | None
    first_line: str
    start: float
    end: float | None = None
    failed: bool = False


def first_line(source: str) -> str:
    for line in source.splitlines():
        if line.strip():
            return line.strip()[:FIRST_LINE_CHARS]
    return ""


class CellBook:
    def __init__(self, shell: Any) -> None:
        self.shell = shell
        self.cells: deque[CellRecord] = deque(maxlen=MAX_CELLS)
        self.entries: deque[Entry] = deque(maxlen=MAX_ENTRIES)
        self._lock = threading.Lock()
        self._owners: dict[int, str | None] = {}
        self._current: CellRecord | None = None
        self._sampler: Any = None
        self._unsubscribe: Any = None

    # -- IPython events (cheap: they run around every cell) --------------------------------------
    def pre_run_cell(self, info: Any) -> None:
        source = getattr(info, "raw_cell", "") or ""
        count = getattr(self.shell, "execution_count", None)
        self._current = CellRecord(count if isinstance(count, int) else None, first_line(source), time.time())
        self.cells.append(self._current)

    def post_run_cell(self, result: Any) -> None:
        if self._current is not None:
            self._current.end = time.time()
            count = getattr(result, "execution_count", None)  # the cell's own "[n]" (pre_run_cell is too early)
            self._current.count = count if isinstance(count, int) else self._current.count
            self._current.failed = not getattr(result, "success", True)
            self._current = None

    def register(self) -> None:
        self.shell.events.register("pre_run_cell", self.pre_run_cell)
        self.shell.events.register("post_run_cell", self.post_run_cell)

    def unregister(self) -> None:
        for name, hook in (("pre_run_cell", self.pre_run_cell), ("post_run_cell", self.post_run_cell)):
            try:
                self.shell.events.unregister(name, hook)
            except ValueError:
                pass
        self.stop_watching()

    # -- the local watch (no server) ---------------------------------------------------------------
    @property
    def watching(self) -> bool:
        return self._sampler is not None

    def watch_locally(self) -> Any:
        """Lease the sampler and book this process's GPU memory per sample; the sampler."""
        if self._sampler is None:
            from ..widgets import leases

            self._sampler = leases.acquire()
            self._unsubscribe = self._sampler.subscribe(self._on_sample)
        return self._sampler

    def stop_watching(self) -> None:
        if self._sampler is not None:
            from ..widgets import leases

            self._unsubscribe()
            leases.release(self._sampler)
            self._sampler = self._unsubscribe = None

    def _on_sample(self, snap: Any) -> None:
        """In the sampler's thread: a snapshot with process lists is booked if it changed anything."""
        devices = snap.get("devices") or []
        if not any(d.get("processes") is not None for d in devices):
            return
        try:
            held, others = classify(devices, {os.getpid(): SELF}, self._owners)
        except Exception:  # the book must never break the sampler
            return
        mine, around = dict(held.get(SELF, {})), dict(others.get(SELF, {}))
        with self._lock:
            last = self.entries[-1] if self.entries else None
            if (last is None and mine) or (last is not None and (dict(last.held) != mine or dict(last.others) != around)):
                self.entries.append(Entry(float(snap["timestamp"]), mine, around))

    def between(self, t0: float, t1: float, after_s: float,
                next_start: float | None) -> tuple[list[Entry], Entry | None]:
        """The entries in effect during [t0, t1], and the first within ``after_s`` after t1 and
        before the next cell began (what the cell left behind, as the server's ledger does)."""
        with self._lock:
            entries = list(self.entries)
        before = [e for e in entries if e.t <= t0]
        limit = t1 + after_s if next_start is None else min(t1 + after_s, next_start - 1e-6)
        after = next((e for e in entries if t1 < e.t <= limit), None)
        return ([before[-1]] if before else []) + [e for e in entries if t0 < e.t <= t1], after
