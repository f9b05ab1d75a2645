"""Where a rank is in its step right now, for the other ranks' readers: ``heartbeat.json``.

The loop's thread (``track()``'s timed ``next()``, the framework callbacks, the forward hooks)
only stores attributes on a :class:`Heartbeat`: ``state``, one ``(phase, perf_counter)`` tuple
so that a reader never sees a phase with another phase's start, and ``step_started``. Nothing in
``log()``: the step count is the number of rows the monitor already holds, read on its thread.

:class:`HeartbeatWriter` runs on the monitor's thread: each pass it may rewrite
``<run dir>/heartbeat.json`` atomically, at most once a second, and only for a rank of a
multi-rank launch; a single-process run writes nothing new. Its ``time`` is when it was written,
so a rank stuck in its loader (its phase "data" since long ago) still writes fresh heartbeats,
while a rank whose process died stops writing.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable

from ..runs.launch_dir import HEARTBEAT, PHASES
from ..runs.run_log import write_json

__all__ = ["HEARTBEAT", "PHASES", "Heartbeat", "HeartbeatWriter"]
WRITE_EVERY_S = 1.0


class Heartbeat:
    """The loop's side: attribute stores only (any thread may store; the writer reads)."""

    __slots__ = ("state", "step_started")

    def __init__(self) -> None:
        self.state: tuple[str, float] = ("idle", time.perf_counter())  # (phase, perf_counter it began)
        self.step_started: float | None = None  # perf_counter when the current step began

    def set(self, phase: str, at: float | None = None) -> None:
        """``phase`` from ``at`` (perf_counter; now by default): for code off the hot path."""
        self.state = (phase, time.perf_counter() if at is None else at)


class HeartbeatWriter:
    """Writes ``heartbeat.json`` for one rank, on the monitor's thread."""

    def __init__(self, beat: Heartbeat, steps: Callable[[], int], last_log: Callable[[], float | None],
                 every_s: float = WRITE_EVERY_S) -> None:
        self.beat = beat
        self.steps = steps  # log() calls so far
        self.last_log = last_log  # epoch s of the last log() row: a loop without track() or callbacks
        self.every_s = every_s
        self.written_at = -float("inf")  # monotonic time of the last write
        self.writes = 0

    def snapshot(self, now: float | None = None) -> dict[str, Any]:
        """The heartbeat as written now (``now``: epoch seconds)."""
        wall = time.time() if now is None else now
        to_epoch = wall - time.perf_counter()
        phase, since = self.beat.state
        started = self.beat.step_started
        return {"time": wall, "pid": os.getpid(), "step": self.steps(), "phase": phase,
                "phase_since": since + to_epoch,
                "step_started": started + to_epoch if started is not None else self.last_log()}

    def write(self, run_dir: Path | None, force: bool = False) -> bool:
        """Rewrite ``run_dir/heartbeat.json`` when a second has passed since the last write (or
        ``force``: the run stops); True when it wrote. OSError goes to the caller (the monitor
        records it as its problem)."""
        if run_dir is None:
            return False
        t = time.monotonic()
        if not force and t - self.written_at < self.every_s:
            return False
        self.written_at = t
        write_json(Path(run_dir) / HEARTBEAT, self.snapshot())
        self.writes += 1
        return True
