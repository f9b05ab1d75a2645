"""Where a TrainingMonitor's run stands: its state, when it began and ended, what ended it, and
the monitor's own problems (recorded and shown, never raised into the loop)."""
from __future__ import annotations

import logging
import time
from enum import Enum
from typing import Any, Callable

log = logging.getLogger("gpu_widgets.monitor")

# The run's clock, read through this module by every part of the monitor so that a benchmark
# can replace it with a simulated one in one place.
now: Callable[[], float] = time.time

MAX_ERRORS = 20


class State(str, Enum):
    """A run's state; each compares equal to (and prints as) the string ``monitor.status`` gives."""

    READY = "ready"  # made, nothing logged yet
    RUNNING = "running"  # logging; the monitor's thread draws and writes
    IDLE = "idle"  # the cell ended without finish(): log() continues the run
    FINISHED = "finished"  # finish() or a with-block that ended cleanly: no more log()
    FAILED = "failed"  # an exception (with-block, cell, or fail()); log() resumes the run
    INTERRUPTED = "interrupted"  # KeyboardInterrupt (or interrupt()); log() resumes the run
    UNFINISHED = "unfinished"  # a loaded run whose log has no end

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @classmethod
    def after(cls, error: BaseException | None) -> "State":
        """How a run ends after ``error``: finished, interrupted (KeyboardInterrupt) or failed."""
        if error is None:
            return cls.FINISHED
        return cls.INTERRUPTED if isinstance(error, KeyboardInterrupt) else cls.FAILED

    @classmethod
    def saved(cls, text: Any) -> "State | str":
        """A saved run's status: "running" in its run.json means it never ended. An unknown word
        is kept as written (a newer version may have more states)."""
        if not text:
            return cls.FINISHED
        if text == cls.RUNNING:
            return cls.UNFINISHED
        try:
            return cls(text)
        except ValueError:
            return str(text)


ENDED = frozenset({State.FINISHED, State.FAILED, State.INTERRUPTED})


class RunState:
    """The state of one run and the monitor's problems; changed only by the monitor."""

    def __init__(self) -> None:
        self.state: State | str = State.READY
        self.error: BaseException | None = None
        self.t0: float | None = None
        self.t_end: float | None = None
        self.readonly = False
        self.loaded_from: Any = None
        self.followed = False  # follow(): read as it grows, not loaded once
        self.errors: list[str] = []
        self.notes: list[str] = []

    def check_can_log(self) -> None:
        if self.readonly:
            raise RuntimeError("this monitor shows a loaded run and is read-only; create a TrainingMonitor() for a new run")
        if self.state == State.FINISHED:
            raise RuntimeError(
                "this run has finished (finish() was called or its with-block ended); "
                "create a new TrainingMonitor() for another run"
            )

    def begin(self) -> bool:
        """Running from now; True when a paused or failed run resumes."""
        resumed = self.state in (State.IDLE, State.FAILED, State.INTERRUPTED)
        self.state = State.RUNNING
        self.error = None
        self.t_end = None
        if self.t0 is None:
            self.t0 = now()
        return resumed

    def detail(self) -> str | None:
        """What ended the run, as the header and the run log say it."""
        return None if self.error is None else f"{type(self.error).__name__}: {self.error}"

    def elapsed(self) -> float | None:
        end = self.t_end if self.t_end is not None else (now() if self.state == State.RUNNING else None)
        return None if self.t0 is None or end is None else max(0.0, end - self.t0)

    def problem(self, message: str) -> None:
        if len(self.errors) < 3 or message not in self.errors:
            log.warning("gpu-widgets monitor: %s", message)
        self.errors.append(message)
        del self.errors[:-MAX_ERRORS]

    def guard(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        try:
            fn(*args, **kwargs)
        except Exception as exc:
            self.problem(f"{what}: {type(exc).__name__}: {exc}")
