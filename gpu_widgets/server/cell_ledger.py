"""Which GPUs each kernel held, and how much, sample by sample: what a cell's GPU line is made of.

A periodic callback at the sampler's slow interval reads the latest sample (no NVML call of its
own: the processes are read on slow reads) and, in a worker thread (psutil walks /proc), books per
kernel of this server and per GPU the memory its processes held (the kernel, its children and
theirs: DataLoader workers, a torchrun started from a cell), and how many other processes were on
that GPU. An entry is kept only when something changed for that kernel, so an idle kernel costs
nothing. A kernel whose pid changed restarted: the time is kept.

Bounded: each kernel keeps at most ``max_entries`` changes and none older than the history's
window; at most MAX_KERNELS kernels; an ended kernel's book is kept ENDED_KEEP_S, so the line of
its last cell still answers.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tornado.ioloop import PeriodicCallback

from ..service.kernel_holdings import Entry, classify
from . import kernels

LEDGER_KEY = "gpu_widgets_cell_ledger"
MAX_KERNELS = 256
ENDED_KEEP_S = 3600.0
AFTER_SLACK_S = 0.5  # a round's own lateness (the worker thread's /proc walk)


@dataclass
class Book:
    entries: deque[Entry]
    restarts: list[float] = field(default_factory=list)  # unix times at which the kernel's pid changed
    root: int | None = None
    seen: float = 0.0  # monotonic: the last round the kernel was running


class KernelLedger:
    def __init__(self, service: Any, kernel_manager: Any, log: logging.Logger, interval_s: float,
                 window_s: float, max_entries: int = 20000) -> None:
        self.service, self.kernel_manager, self.log = service, kernel_manager, log
        self.interval_s, self.window_s, self.max_entries = interval_s, window_s, max_entries
        self.books: dict[str, Book] = {}
        self.rounds = 0
        self._owners: dict[int, str | None] = {}
        self._roots: dict[int, str] = {}
        self._last_sample: float | None = None
        self._processes_at: float | None = None
        self._periodic: PeriodicCallback | None = None
        self._running = False

    def start(self) -> None:
        self._periodic = PeriodicCallback(self.tick, max(0.1, self.interval_s) * 1000)
        self._periodic.start()

    def stop(self) -> None:
        if self._periodic is not None:
            self._periodic.stop()

    async def tick(self) -> None:
        if self._running:
            return
        self._running = True
        try:
            await self._round()
        except Exception:  # the next round tries again
            self.log.warning("gpu-widgets: could not book GPU memory per kernel", exc_info=True)
        finally:
            self._running = False

    async def _round(self) -> None:
        snap = self.service.latest() if self.service.ready else None
        if snap is None or snap.get("timestamp") == self._last_sample:
            return
        roots = kernels.kernel_root_pids(self.kernel_manager)
        if roots != self._roots:
            self._owners, self._roots = {}, roots
        loop = asyncio.get_running_loop()
        held, others = await loop.run_in_executor(None, classify, snap["devices"], roots, self._owners)
        self._last_sample = snap["timestamp"]
        sampler = getattr(self.service, "sampler", None)
        span = sampler.slow_read_span if sampler is not None else None
        read_at = snap["timestamp"]
        if span and span[1] <= snap["timestamp"]:  # (a slow read that ended after the sample is not in it)
            read_at = self._processes_at = span[0]  # the process lists are as of the slow read
        self.add(read_at, held, others, {k: pid for pid, k in roots.items()})

    def add(self, t: float, held: Mapping[str, Mapping[int, int | None]],
            others_of: Mapping[str, Mapping[int, int]], running: Mapping[str, int]) -> None:
        """One sample's booking (the round's; tests call it with made-up figures)."""
        now = time.monotonic()
        self.rounds += 1
        self._last_sample = t if self._last_sample is None else max(self._last_sample, t)
        for kernel_id, pid in running.items():
            book = self.books.get(kernel_id)
            if book is None:
                if len(self.books) >= MAX_KERNELS:
                    self._drop_oldest()
                book = self.books[kernel_id] = Book(deque(maxlen=self.max_entries), root=pid)
            elif book.root != pid:
                book.restarts.append(t)
                book.root = pid
            book.seen = now
            gpus = dict(held.get(kernel_id, {}))
            others = dict(others_of.get(kernel_id, {}))
            last = book.entries[-1] if book.entries else None
            if last is None and not gpus:
                continue  # never on a GPU yet: nothing to book
            if last is None or dict(last.held) != gpus or dict(last.others) != others:
                book.entries.append(Entry(t, gpus, others))
            while len(book.entries) > 1 and book.entries[1].t < t - self.window_s:
                book.entries.popleft()  # the first kept is the state at the window's start
        for kernel_id in [k for k, b in self.books.items() if k not in running and now - b.seen > ENDED_KEEP_S]:
            del self.books[kernel_id]

    def _drop_oldest(self) -> None:
        oldest = min(self.books, key=lambda k: self.books[k].seen)
        del self.books[oldest]

    @property
    def booked_until(self) -> float | None:
        """When the process lists of the newest booked sample were read (a slow read began): a
        cell that ended before it has its final figures."""
        if self._processes_at is None:
            return self._last_sample
        return None if self._last_sample is None else min(self._last_sample, self._processes_at)

    def known(self, kernel_id: str) -> bool:
        """A kernel of this server: running (booked or not yet), or ended within ENDED_KEEP_S."""
        if kernel_id in self.books:
            return True
        return kernel_id in self.kernel_manager

    def between(self, kernel_id: str, t0: float, t1: float,
                next_start: float | None = None) -> tuple[list[Entry], list[float], Entry | None]:
        """The entries in effect during [t0, t1] (the one before t0 first, where there is one), the
        restarts in it, and the first entry read after t1 if it came within one round and a half
        and before the kernel's next cell started (``next_start``, where the caller knows it): what
        the cell left behind (a child that exited, ``del model``) is seen only then."""
        book = self.books.get(kernel_id)
        if book is None:
            return [], [], None
        entries = list(book.entries)
        before = [e for e in entries if e.t <= t0]
        inside = [e for e in entries if t0 < e.t <= t1]
        limit = t1 + 1.5 * self.interval_s + AFTER_SLACK_S
        if next_start is not None:
            limit = min(limit, next_start - 1e-6)  # read after the next cell began: that cell's, maybe
        after = next((e for e in entries if t1 < e.t <= limit), None)
        return ([before[-1]] if before else []) + inside, [r for r in book.restarts if t0 <= r <= t1], after
