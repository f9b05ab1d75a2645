"""``%%gpuwatch --profile``: torch.profiler around a whole cell, read by the same analysis.

A cell without a monitored loop is one step (the whole cell). A TrainingMonitor whose loop runs
in the cell marks each of its steps (``tick()``, from the monitor's step boundary), so the trace
has a ``ProfilerStep#`` per loop step; the span before its first step (setup) and after its last
(teardown) are left out of the analysis. At most MAX_STEPS steps are profiled (the rest of the cell
runs unprofiled), so a long cell does not grow the trace without end.
"""
from __future__ import annotations

import os
import tempfile
import time
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from . import kineto
from .analysis import STEP_PREFIX, analyze
from .result import Profile, ProfileError
from .trace_file import read_trace

MAX_STEPS = 200
_active: CellProfile | None = None  # the cell being profiled, if any (one kernel, one cell at a time)


def tick() -> None:
    """A monitored loop's step boundary (the training thread): marks a step of the cell's profile."""
    cell = _active
    if cell is not None:
        cell.step()


class CellProfile:
    def __init__(self) -> None:
        self.prof: Any = None
        self.steps = 0  # step boundaries seen
        self.running = False
        self.t0 = self.t1 = 0.0

    def start(self) -> None:
        global _active
        try:
            import torch
            from torch.profiler import ProfilerActivity, profile, schedule
        except ImportError:
            raise ProfileError("%%gpuwatch --profile needs PyTorch (torch.profiler): pip install torch") from None
        if kineto.running():
            raise ProfileError("%%gpuwatch --profile cannot start torch.profiler: another profile runs in this "
                               "process (a mon.profile(), or a torch.profiler of your own); a second one would "
                               "silently end it")
        kineto.quiet()
        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            activities.append(ProfilerActivity.CUDA)
        with warnings.catch_warnings():  # no warm-up step: the cell runs once, all of it counts
            warnings.simplefilter("ignore")
            self.prof = profile(activities=activities, with_stack=True,
                                schedule=schedule(wait=0, warmup=0, active=MAX_STEPS + 2, repeat=1))
            try:
                self.prof.start()
            except RuntimeError as exc:  # another profiler runs in this process (a mon.profile())
                raise ProfileError(f"%%gpuwatch --profile cannot start torch.profiler: {exc}") from None
        self.running, self.t0 = True, time.time()
        _active = self

    def step(self) -> None:
        if not self.running:
            return
        self.steps += 1
        if self.steps > MAX_STEPS:
            self._stop()
        else:
            self.prof.step()

    def _stop(self) -> None:
        global _active
        if _active is self:
            _active = None
        if self.running:
            self.running, self.t1 = False, time.time()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self.prof.stop()

    def finish(self, gpu_rows: Iterable[Mapping[str, Any]] = ()) -> Profile:
        """Stop (if still running), export, analyse; the trace file is removed."""
        self._stop()
        fd, name = tempfile.mkstemp(prefix="gpuwatch-cell-", suffix=".pt.trace.json")
        os.close(fd)
        path = Path(name)
        try:
            self.prof.export_chrome_trace(str(path))
            trace = read_trace(path)
        finally:
            path.unlink(missing_ok=True)
        marks = sorted((e for e in trace.events if e.name.startswith(STEP_PREFIX)), key=lambda e: e.ts)
        if len(marks) >= 3:  # a monitored loop: its steps, without the cell's setup and teardown
            edges = {id(marks[0]), id(marks[-1])}
            trace.events = [e for e in trace.events if id(e) not in edges]
        rows = [r for r in gpu_rows if self.t0 <= r.get("time", 0) <= (self.t1 or time.time())]
        return analyze(trace, gpu_rows=rows)
