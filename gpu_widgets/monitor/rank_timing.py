"""What each rank measures besides its metrics: the model's forward time and its heartbeat.

``TrainingMonitor(model=...)`` (or ``watch_model()``, which the framework callbacks call) times the
model's forward (parallel/forward_timer.py) into the data-wait bins' ``forward_s``. The hooks are
on the model while the run runs: set when it starts or resumes, removed when it stops. The model
is held weakly, so a monitor does not keep a deleted model (and its GPU memory) alive.

The heartbeat (parallel/heartbeat.py) is told the loop's phase by ``track()``, the callbacks and
the forward hooks. Only a rank of a multi-rank launch writes it (``heartbeat.json`` in its run
directory, once a second, on the monitor's thread); a single-process run writes nothing new.
"""
from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any, Callable

from ..parallel.env import rank_env
from ..parallel.forward_timer import ForwardTimer, check_model
from ..parallel.heartbeat import Heartbeat, HeartbeatWriter
from ..runs.records import Records
from .data_wait import StepTimes


class ModelHooks:
    """TrainingMonitor's method for the model it times (kept here: monitor.py has a line budget)."""

    _r: Any

    def watch_model(self, model: Any) -> None:
        """Time ``model``'s forward (a torch.nn.Module, or its DDP/FSDP wrapper), as ``model=``
        does: each data-wait bin of the run log gets ``forward_s``, and on a multi-rank launch
        the heartbeat tells "forward" from "after_forward". Another model replaces it; None stops."""
        self._r.timing.watch(model, owner="watch_model(model)")


class RankTiming:
    """One run's forward timer and heartbeat (MonitorRun.timing)."""

    def __init__(self, waits: StepTimes, records: Records, problem: Callable[[str], None]) -> None:
        self.waits = waits
        self.problem = problem  # the run's own problems (recorded, shown, never raised)
        self.beat = Heartbeat()
        self.writer = HeartbeatWriter(self.beat, lambda: records.size, lambda: _last_time(records))
        self.model: Callable[[], Any] | None = None  # a weak reference to the model to time
        self.events: Callable[[], Any] | None = None  # a timing-event factory (tests: a fake CUDA event)
        self.timer: ForwardTimer | None = None
        self.running = False
        self.multi_rank = False  # decided when the run starts (a process group may come later)
        self.reported: set[str] = set()

    def watch(self, model: Any, events: Callable[[], Any] | None = None,
              owner: str = "TrainingMonitor(model=...)") -> None:
        """The model to time from now on (checked here: a TypeError for anything but a module)."""
        if model is None:
            self.model = None
            self._unhook()
            self.waits.timer = None  # bins from now on without forward_s
            return
        check_model(model, owner)
        if self.model is not None and self.model() is model and events is self.events:
            return
        self._unhook()
        self.model, self.events = weakref.ref(model), events
        if self.running:
            self._hook()

    def start(self) -> None:
        """The run starts or resumes (the loop's thread, under log_lock)."""
        self.running = True
        self.beat.set("idle")
        try:
            self.multi_rank = rank_env() is not None
        except ValueError:  # a bad RANK / WORLD_SIZE: the run log says so (run_recording)
            self.multi_rank = False
        self._hook()

    def stop(self, run_dir: Path | None) -> None:
        """The run stopped (its last pass drained the forwards): unhook, and a last heartbeat
        that says "idle", so that readers see a rank that ended rather than one stuck."""
        self.running = False
        self._unhook()
        self.beat.set("idle")
        if self.multi_rank:
            self.writer.write(run_dir, force=True)

    def tick(self, run_dir: Path | None) -> None:
        """The monitor's pass: the heartbeat when due; why the timing stopped, once."""
        timer = self.timer
        if timer is not None and timer.problem and timer.problem not in self.reported:
            self.reported.add(timer.problem)
            self.problem(timer.problem)
        if self.multi_rank:
            self.writer.write(run_dir)

    def _hook(self) -> None:
        model = self.model() if self.model is not None else None
        if model is None or self.timer is not None:
            return
        self.timer = ForwardTimer(model, self.beat, self.events)
        self.waits.timer = self.timer

    def _unhook(self) -> None:
        timer, self.timer = self.timer, None
        if timer is not None:
            timer.remove()


def _last_time(records: Records) -> float | None:
    """When the last row was logged (epoch s): the current step began about then."""
    n = records.size
    return float(records.times[n - 1]) if n else None
