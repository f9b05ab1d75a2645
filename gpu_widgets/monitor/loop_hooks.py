"""What a training loop, or a framework's callback, tells a TrainingMonitor besides ``log()``:
each batch's samples, each step's wait for data, the device its tensors live on.

The public methods check what a user passes. ``recorders()`` is the hook for gpu_widgets'
framework callbacks (gpu_widgets.integrations): the same recorders without the checks, for values
that are always sound, called once per step. Nothing here reaches into the monitor's parts from
outside: they are the monitor's own methods (kept here, as monitor.py has a line budget).
"""
from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, Callable, NamedTuple

from . import run_state
from .batches import checked_samples
from .data_wait import TimedBatches, checked_wait


class Recorders(NamedTuple):
    """The per-step recorders of one run, unchecked (``TrainingMonitor.recorders()``)."""

    data_wait: Callable[[float, float, float], None]  # (wait_s, step_s, perf_counter when the wait began)
    batch: Callable[[int, float], None]  # (samples, time.time() of the step)


class LoopHooks:
    """TrainingMonitor's methods for what the loop tells it besides ``log()``."""

    _r: Any

    def note_batch(self, samples: int) -> None:
        """Count one step's samples, as ``track()`` does for each batch: feeds samples/s and the
        batch-size advice when the loop does not go through ``track()``."""
        self._r.samples.add(checked_samples(samples), run_state.now())

    def note_data_wait(self, wait_s: float, step_s: float) -> None:
        """One step's timing, for loops that do not use ``track()``: ``wait_s`` seconds of its
        ``step_s`` (the whole step, the wait included) were spent waiting for the data. Feeds
        ``data_wait_share``, the "data wait (%)" chart and the input-bound / CPU-bound diagnosis."""
        wait, step = checked_wait(wait_s, step_s)
        self._r.charts.waits.add(wait, step, time.perf_counter() - step)

    def note_device(self, kind: str | None) -> None:
        """Where the model's tensors live, as a torch device type ("cpu", "cuda", "mps"...), for
        loops that log plain floats: feeds the "training runs on the CPU" tip as the tensors
        ``log()`` and ``track()`` see do. None or "meta" (weights not materialised yet) tells nothing."""
        if kind is not None and not isinstance(kind, str):
            raise TypeError(f"note_device(kind) takes a device type such as 'cuda', got {type(kind).__name__} {kind!r}")
        if kind and kind != "meta":
            self._r.records.tensor_devices.add(kind)

    def recorders(self) -> Recorders:
        """The run's per-step recorders without the checks of ``note_data_wait()`` and
        ``note_batch()``: for gpu_widgets' framework callbacks, whose values are always sound."""
        r = self._r
        return Recorders(data_wait=r.charts.waits.add, batch=r.samples.add)

    @property
    def data_wait_share(self) -> float | None:
        """The share (0-1) of the recent steps' time (last 50) spent waiting for data: from
        ``track()``, the framework callbacks or ``note_data_wait()``; None before 8 steps."""
        return self._r.charts.waits.share()

    def _timed(self, iterable: Iterable[Any]) -> TimedBatches:
        return TimedBatches(iterable, self._r.charts.waits, self._r.timing.beat, self._r.steps)
