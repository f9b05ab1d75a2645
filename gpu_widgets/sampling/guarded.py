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
from .snapshot import take
from .stall import STALE, stale_after_s, waiting_on


class GuardedReader:
    """Opens the backend and takes snapshots on a worker; one read in flight at a time."""

    def __init__(self, choice: str | None, interval_s: float = 1.0) -> None:
        self.choice, self.interval_s = choice, interval_s
        self.backend: Backend | None = None
        self._job: tuple[threading.Thread, Future[dict[str, Any]]] | None = None
        self._last: dict[str, Any] | None = None
        self._since = time.monotonic()  # of the last snapshot, or of the start

    @property
    def stuck(self) -> bool:
        """A read is still inside the driver (the process must not wait for it at exit)."""
        return self._job is not None and self._job[0].is_alive()

    def snapshot(self) -> dict[str, Any]:
        """A fresh snapshot with its ``sample_age_s``, or the stale answer once the deadline passed.
        Raises what opening the backend raised (ConfigError for a bad setting)."""
        if self._job is None:
            future: Future[dict[str, Any]] = Future()
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
        return _fresh(snap, snap["status"], snap["reason"], round(max(0.0, time.time() - snap["timestamp"]), 3))

    def _read(self, future: Future[dict[str, Any]]) -> None:
        try:
            if self.backend is None:
                self.backend = open_backend(self.choice)
            future.set_result(take(self.backend, time.time()))
        except BaseException as exc:  # handed to the caller's thread
            future.set_exception(exc)

    def _stale(self, thread: threading.Thread) -> dict[str, Any]:
        why = waiting_on(thread) or "the read has not finished"
        if self.backend is None:
            why += " (opening the GPU backend)"
        last = self._last
        if last is None:
            system = self.backend.system if self.backend is not None else {}
            empty = {"backend": self.backend.name if self.backend is not None else None, "timestamp": time.time(),
                     "driver_version": system.get("driver_version"),
                     "cuda_driver_version": system.get("cuda_driver_version"),
                     "nvml_version": system.get("nvml_version"), "cuda_visible_devices": None, "devices": []}
            return _fresh(empty, STALE, why, None)
        return _fresh(last, STALE, why, round(time.time() - last["timestamp"], 3))


def _fresh(snap: dict[str, Any], status: str, reason: str | None, age_s: float | None) -> dict[str, Any]:
    """``snap`` with status, reason and sample_age_s after its backend (the documented order)."""
    out = {"backend": snap.get("backend"), "status": status, "reason": reason, "sample_age_s": age_s}
    out.update((k, v) for k, v in snap.items() if k not in out)
    return out
