"""Snapshots for the command line, read on a worker thread so a hung driver call cannot hang
the terminal: past the staleness deadline the caller gets the last snapshot (or an empty one)
with ``status: "stale"`` and the call it waits on, like the server's answer."""
from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from ..backends import Backend, open_backend
from ..metrics.samples import Snapshot
from .snapshot import aged, empty, take
from .stall import STALE, stale_after_s, waiting_on


class GuardedReader:
    """Opens the backend and takes snapshots on a worker; one read in flight at a time."""

    def __init__(self, choice: str | None, interval_s: float = 1.0) -> None:
        self.choice, self.interval_s = choice, interval_s
        self.backend: Backend | None = None
        self._job: tuple[threading.Thread, Future[Snapshot]] | None = None
        self._last: Snapshot | None = None
        self._since = time.monotonic()  # of the last snapshot, or of the start
        self._reads = 0  # GPM: the first read takes two samples, each later one compares with the last

    @property
    def stuck(self) -> bool:
        """A read is still inside the driver (the process must not wait for it at exit)."""
        return self._job is not None and self._job[0].is_alive()

    def snapshot(self) -> dict[str, Any]:
        """A fresh snapshot with its ``sample_age_s``, or the stale answer once the deadline passed
        (``snapshot.public`` gives its JSON). Raises what opening the backend raised (ConfigError
        for a bad setting)."""
        if self._job is None:
            future: Future[Snapshot] = Future()
            thread = threading.Thread(target=self._read, args=(future,), name="gpu-widgets-read", daemon=True)
            self._job = (thread, future)
            thread.start()
        thread, future = self._job
        deadline = self._since + stale_after_s(self.interval_s, self._last is None)
        try:
            snap = future.result(timeout=max(0.0, deadline - time.monotonic()))
        except FutureTimeout:
            return self._stale(thread)
        finally:
            if future.done():
                self._job = None
        self._last, self._since = snap, time.monotonic()
        return aged(snap, snap["status"], snap["reason"], round(max(0.0, time.time() - snap["timestamp"]), 3))

    def _read(self, future: Future[Snapshot]) -> None:
        try:
            if self.backend is None:
                self.backend = open_backend(self.choice)
            snap = take(self.backend, time.time(), gpm=True, prime=self._reads == 0)
            self._reads += 1
            future.set_result(snap)
        except BaseException as exc:  # handed to the caller's thread
            future.set_exception(exc)

    def _stale(self, thread: threading.Thread) -> dict[str, Any]:
        why = waiting_on(thread) or "the read has not finished"
        if self.backend is None:
            why += " (opening the GPU backend)"
        last = self._last
        if last is None:
            return aged(empty(STALE, why, self.backend), STALE, why, None)
        return aged(last, STALE, why, round(time.time() - last["timestamp"], 3))
