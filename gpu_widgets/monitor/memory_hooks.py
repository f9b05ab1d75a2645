"""TrainingMonitor's ``record_memory()``, ``last_memory`` and ``oom``: where the GPU memory of the
loop's next steps went, and the post-mortem of an out-of-memory error that left the loop
(gpu_widgets.memory, docs/memory.md). ProfileHooks takes this mixin in (monitor.py's line budget).

A recording counts the loop's steps at the same boundaries as ``profile()`` (ProfileSlot: track()'s
batches, the callbacks', else ``log()`` calls) and stops by itself after them, or when the run
ends; its snapshot and PNG go to the run directory, its view to the cell. The post-mortem is told by
the run's ``stop()``: a monitor knows the batch size, so it can say which batch would have fit.
"""
from __future__ import annotations

import sys
import threading
from typing import Any

from ..widgets.cell_hooks import in_kernel
from .run_state import State

MAX_STEPS = 10_000


def own_loop(r: Any, call: str, does: str, verb: str) -> None:
    """What profile() and record_memory() ask of a monitor: this process's own run, not ended."""
    if r.run.readonly or getattr(r, "follower", None) is not None:
        raise RuntimeError(f"{call} {does} this process's own loop: this monitor shows a loaded or followed run; "
                           "call it on the TrainingMonitor the loop logs to")
    if r.run.state == State.FINISHED:
        raise RuntimeError(f"{call}: this run has finished; {verb} a running (or not yet started) run")


class MemorySteps:
    """One pending recording, stepped at the loop's boundaries (the training thread)."""

    def __init__(self, recording: Any, steps: int, done: Any) -> None:
        self.recording, self.steps, self.done = recording, steps, done
        self.seen = 0
        self.lock = threading.Lock()

    def step(self) -> None:
        self.seen += 1
        if self.seen >= self.steps:
            self.finish()

    def finish(self) -> None:
        with self.lock:  # the loop's last step and the run's end may both finish it
            recording, self.recording = self.recording, None
        if recording is not None:
            self.done(recording, recording.stop())


class MemoryHooks:
    _r: Any
    run_dir: Any

    def record_memory(self, steps: int = 20) -> None:
        """Record PyTorch's CUDA allocator for the loop's next ``steps`` steps, then show where the
        memory went (``last_memory``; the snapshot and its PNG in the run directory). Without CUDA it
        says so in one line and records nothing: the loop runs on."""
        if isinstance(steps, bool) or not isinstance(steps, int):
            raise TypeError(f"record_memory(steps=...) takes a whole number of steps, got {type(steps).__name__} {steps!r}")
        if not 1 <= steps <= MAX_STEPS:
            raise ValueError(f"record_memory(steps={steps}): record between 1 and {MAX_STEPS:,} steps")
        r = self._r
        own_loop(r, "record_memory()", "records", "record")
        slot = r.steps
        if slot.memory is not None:
            raise RuntimeError("a memory recording is already running on this monitor: one at a time")
        from ..memory.recording import MemoryRecording

        # the run directory when the recording stops (ProfileHooks._trace_dir: made by then)
        recording = MemoryRecording(getattr(self, "_trace_dir", lambda: self.run_dir),
                                    name=f"memory-{r.memory_count + 1}")
        why = recording.start()
        if why is not None:
            print(f"gpu-widgets: record_memory: {why}", file=sys.stderr, flush=True)
            return
        r.memory_count += 1
        slot.memory = MemorySteps(recording, steps, self._recorded)

    def _recorded(self, recording: Any, view: Any) -> None:
        r = self._r
        r.steps.memory = None
        r.last_memory = view
        if view is None:
            print(f"gpu-widgets: record_memory: {recording.problem or 'nothing was recorded'}", file=sys.stderr)
        elif in_kernel():
            from IPython.display import display

            display(view)
        else:
            where = f" (saved in {recording.path})" if recording.path is not None else ""
            print(f"gpu-widgets: record_memory: {view.summary}{where}", file=sys.stderr, flush=True)

    @property
    def last_memory(self) -> Any:
        """The latest recording's view (a ``MemorySnapshot``: ``peak_bytes``, ``sites_at_peak``...), or None."""
        return self._r.last_memory

    @property
    def oom(self) -> dict[str, Any] | None:
        """After a CUDA out-of-memory error left this run: its facts as numbers (``gpu``,
        ``requested_bytes``, ``free_bytes``, ``total_bytes``, ``allocated_bytes``,
        ``reserved_unallocated_bytes``, ``others``...; docs/memory.md), else None."""
        return self._r.oom


def tell_oom(r: Any, error: BaseException | None) -> None:
    """The run stopped on ``error`` (MonitorRun.stop): an OOM gets its post-mortem, once."""
    from ..memory.postmortem import is_oom

    if not is_oom(error):
        return
    from ..memory.postmortem_view import tell
    from .advice import memory_facts

    facts = memory_facts(r.gpus.shown()) if r.trace.devices else None
    pm = tell(error, in_kernel=in_kernel(), batch_size=r.batch_size(),
              fixed_bytes=facts.fixed_bytes if facts is not None and facts.from_torch else None)
    if pm is not None:
        r.oom = pm.facts
