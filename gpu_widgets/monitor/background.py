"""The monitor's background thread, and everything a running monitor holds outside itself."""
from __future__ import annotations

import threading
import time
import weakref
from typing import Any, Callable

from ..sampling.sampler import Sampler
from ..widgets import leases
from ..runs.run_log import RunLog


class Resources:
    """What a running monitor holds outside itself; released by stop() or when it is collected."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.wake = threading.Event()  # a tick now: log() waits for the run log's writer
        self.thread: threading.Thread | None = None
        self.unsubscribe: Callable[[], None] | None = None
        self.leased: Sampler | None = None
        self.gpm = leases.GpmAsk("monitor")  # renewed by RunGpus on the monitor's timer
        self.run_log: RunLog | None = None

    def release(self, join: bool = True) -> None:
        self.stop.set()
        self.wake.set()
        if join and self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(timeout=5.0)
        self.thread = None
        if self.unsubscribe is not None:
            self.unsubscribe()
            self.unsubscribe = None
        self.gpm.release()
        if self.leased is not None:
            leases.release(self.leased)
            self.leased = None

    def abandon(self) -> None:
        """The monitor was garbage-collected while running: stop, and hand what the run log
        already holds to the OS (its run.json keeps saying "running": the run never finished)."""
        self.release(join=False)
        if self.run_log is not None and not self.run_log.closed:
            self.run_log.close()


def timer_loop(ref: "weakref.ref[Any]", stop: threading.Event, wake: threading.Event, period: float) -> None:
    # Holds the monitor only weakly: a monitor nobody references ends its thread. Ticks keep to
    # their schedule (a slow redraw does not delay the next write, which log() may be waiting
    # for); ``wake`` adds a tick now.
    due = time.monotonic() + period
    while True:
        wake.wait(max(0.0, due - time.monotonic()))
        wake.clear()
        if stop.is_set():
            return
        now = time.monotonic()
        if now >= due:
            due = max(due + period, now)
        monitor = ref()
        if monitor is None:
            return
        monitor.tick()
        del monitor
