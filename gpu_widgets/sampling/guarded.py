"""Driver reads on a worker thread, so a hung driver call cannot hang the caller.

``GuardedReader`` gives the command line its snapshots: past the staleness deadline the caller
gets the last snapshot (or an empty one) with ``status: "stale"`` and the call it waits on, like
the server's answer. ``run_guarded`` runs one job (``pick_gpus()``'s reads) with a deadline and
raises ``HungCall`` naming the call it waits on. Workers are daemon threads: one stuck in the
driver never keeps the interpreter from exiting."""
from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Callable, TypeVar

from ..backends import Backend, inflight, open_backend
from ..metrics.samples import Snapshot
from .snapshot import aged, empty, take
from .stall import STALE, stale_after_s, waiting_on

T = TypeVar("T")


class HungCall(TimeoutError):
    """A guarded job did not finish by its deadline; ``str(exc)`` names the call it waits on."""


def start_worker(job: Callable[[], T], name: str = "gpu-widgets-read") -> tuple[threading.Thread, Future[T]]:
    """Run ``job`` on a new daemon thread; its result (or exception) lands in the future."""
    future: Future[T] = Future()

    def settle() -> None:
        inflight.here().enter(job)  # named by waiting_on if it hangs outside an NVML call
        try:
            future.set_result(job())
        except BaseException as exc:  # handed to the caller's thread
            future.set_exception(exc)

    thread = threading.Thread(target=settle, name=name, daemon=True)
    thread.start()
    return thread, future


def run_guarded(job: Callable[[], T], timeout_s: float, name: str = "gpu-widgets-read") -> T:
    """``job()``'s result, or ``HungCall`` once it has run ``timeout_s`` seconds; it then goes on
    in the background (daemon) and its result is dropped. Re-raises what ``job`` raised."""
    thread, future = start_worker(job, name)
    try:
        return future.result(timeout=timeout_s)
    except FutureTimeout:
        if future.done():  # finished just now: its answer is good
            return future.result()
        raise HungCall(waiting_on(thread) or "the read has not finished") from None


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
            self._job = start_worker(self._read)
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

    def _read(self) -> Snapshot:
        if self.backend is None:
            self.backend = open_backend(self.choice)
        snap = take(self.backend, time.time(), gpm=True, prime=self._reads == 0)
        self._reads += 1
        return snap

    def _stale(self, thread: threading.Thread) -> dict[str, Any]:
        why = waiting_on(thread) or "the read has not finished"
        if self.backend is None:
            why += " (opening the GPU backend)"
        last = self._last
        if last is None:
            return aged(empty(STALE, why, self.backend), STALE, why, None)
        return aged(last, STALE, why, round(time.time() - last["timestamp"], 3))
