"""Why is my GPU not busy? The time each step waited for its data, and what it says.

The loop side (``track()``, the framework callbacks, ``TrainingMonitor.note_data_wait``) stamps
``time.perf_counter()`` around the wait and calls :meth:`StepTimes.add`: two deque appends, no
lock (CPython's deque appends are atomic), nothing that can raise. The monitor's thread drains
the steps into time bins for the "data wait (%)" chart; anyone reads :meth:`StepTimes.share`.
Each closed bin is also a line of the run log's ``data_wait.jsonl`` (``take_unsaved``: the bin's
start, wait, step seconds and step count), from which ``load()`` and ``follow()`` rebuild the chart
and the share (``add_saved``): bounded by time, not by steps.

With a forward timer (``TrainingMonitor(model=...)``, parallel/forward_timer.py) each bin also
sums the seconds its steps spent in the model's forward (``forward_s``). A forward belongs to the
step whose wait follows it (a step is the loop's work, then its wait for the next batch), so on
CPU each forward lands in its own step's bin; a CUDA forward read after its step was binned goes
to the bin being filled (at most a bin late). The forward of the last batch, whose step is never
counted, is not either. Until a forward was timed (a model whose forward the loop never calls:
Lightning's ``training_step`` need not call ``self(x)``), bins have no ``forward_s``: unknown.

The first batch of each epoch is not counted: its wait is the loader starting up (worker
processes, opening files), a one-off cost that would otherwise dominate the first ~20 steps.

Diagnosis (``diagnose``), from the share of recent step time spent waiting for data and, when
this process's GPUs are known, how busy they were lately:

* input-bound: a large share waiting (>= 25 %) and the GPU not busy (< 80 %, or not known);
* CPU-bound: little waiting (< 10 %) yet the GPU busy under 50 %: it idles between kernels
  while Python prepares the next ones;
* otherwise nothing: compute-bound (the healthy case), or between the two.
"""
from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from ..runs.gpu_trace import DeviceTrace
from ..store.decimator import Decimator
from . import run_state
from .advice import Advice

WINDOW_STEPS = 50  # data_wait_share: over the last 50 steps
MIN_STEPS = 8  # fewer steps counted: no share, no diagnosis
BIN_S = 0.5  # one chart point per half second of steps (a noisy per-step line read as a band)
INPUT_BOUND = 0.25
CPU_BOUND = 0.10
GPU_BUSY = 80.0
GPU_IDLE_BETWEEN = 50.0
GPU_RECENT_S = 10.0  # "the GPU lately": its samples of the last 10 s
CHART = "data_wait"
CHART_TITLE = "data wait (%)"
LINE = "now"  # the latest half-second bin; the header's figure is over the last 50 steps
COLOR = "#6a1b9a"


class StepTimes:
    """Per-step (seconds waiting for data, seconds in the whole step), recent and for the chart."""

    def __init__(self, max_points: int = 2000) -> None:
        self.recent: deque[tuple[float, float]] = deque(maxlen=WINDOW_STEPS)
        self.inbox: deque[tuple[float, float, float]] = deque(maxlen=8192)  # + perf_counter at the step's start
        self.curve = Decimator(max_points)
        self.open_bin: list[float] | None = None  # [first step's start (epoch s), wait, total, steps, forward]
        self.changed = False  # points added since the chart's last redraw
        self.unsaved: list[list[float]] | None = None  # closed bins for the run log; None: no run log
        self.timer: Any = None  # a ForwardTimer: bins get forward_s (a 5th slot)
        self.forwards: deque[tuple[float, float]] = deque(maxlen=8192)  # (perf_counter, s) not binned yet
        self.counted_until = -math.inf  # perf_counter at the end of the last step binned
        self.forward_seen = False  # a forward was timed: bins say forward_s (0 is then a real 0)
        self.waited = 0.0  # all steps' waits, summed: a profile's data wait is its window's difference

    def add(self, wait_s: float, step_s: float, at: float) -> None:
        """One step (the loop's thread): ``wait_s`` of its ``step_s`` spent waiting for data;
        ``at``: perf_counter when the wait began."""
        self.recent.append((wait_s, step_s))
        self.inbox.append((at, wait_s, step_s))
        self.waited += wait_s

    @property
    def has_data(self) -> bool:
        return bool(self.recent)

    @property
    def counted(self) -> int:
        return len(self.recent)

    def share(self) -> float | None:
        """Waiting for data / whole step time over the recent steps, 0-1; None before MIN_STEPS."""
        steps = list(self.recent)  # a copy: the loop appends meanwhile
        if len(steps) < MIN_STEPS:
            return None
        total = sum(s for _, s in steps)
        return min(1.0, sum(w for w, _ in steps) / total) if total > 0 else None

    # -- the monitor's thread ---------------------------------------------------------------------
    def drain(self, t0: float | None) -> None:
        """Fold new steps into half-second bins, timed in run_state.now()'s clock (epoch seconds,
        as the run log's other times); ``t0``: the run's start, x = 0 of the chart."""
        to_epoch = run_state.now() - time.perf_counter()
        timed = self.timer is not None
        forwards = self.forwards
        if timed:
            forwards.extend(self.timer.take())
            self.forward_seen = self.forward_seen or bool(forwards)
        while self.inbox:
            at, wait, step = self.inbox.popleft()
            epoch_at = at + to_epoch
            b = self.open_bin
            if b is not None and epoch_at - b[0] >= BIN_S:
                self.close_bin(t0)
                b = None
            if b is None:
                b = self.open_bin = [epoch_at, 0.0, 0.0, 0, 0.0]
            b[1] += wait
            b[2] += step
            b[3] += 1
            if timed:
                end = at + wait
                while forwards and forwards[0][0] <= end:
                    t, seconds = forwards.popleft()
                    # this step's own, or one of a step binned before (CUDA: read late); not one
                    # of the steps in between that were not counted (an epoch's first batch)
                    if t >= end - step or t < self.counted_until:
                        b[4] += seconds
                self.counted_until = end
            self.changed = True
        while forwards and forwards[0][0] < self.counted_until:  # late, no step since
            seconds = forwards.popleft()[1]
            if self.open_bin is not None:
                self.open_bin[4] += seconds

    def close_bin(self, t0: float | None) -> None:
        """The bin being filled is complete: a point of the chart, and a line for the run log."""
        b, self.open_bin = self.open_bin, None
        if b is None:
            return
        if b[2] > 0:
            self.curve.extend([b[0] - (t0 or 0.0)], [100.0 * min(1.0, b[1] / b[2])])
        if self.unsaved is not None:
            self.unsaved.append(b)

    def take_unsaved(self, t0: float | None, final: bool = False) -> list[dict[str, float]]:
        """The bins closed since the last call, as run-log rows (``data_wait.jsonl``); ``final``:
        the run stops, so the bin being filled is closed and given too."""
        self.drain(t0)
        if final:
            self.close_bin(t0)
            self.forwards.clear()  # the last batch's: its step is not counted
        bins = self.unsaved or []
        if self.unsaved is not None:
            self.unsaved = []
        rows = [{"time": b[0], "wait_s": round(b[1], 6), "step_s": round(b[2], 6), "steps": int(b[3])} for b in bins]
        if self.timer is not None and self.forward_seen:  # a model whose forward never ran: unknown
            for row, b in zip(rows, bins):
                row["forward_s"] = round(b[4], 6)
        return rows

    def add_saved(self, rows: Iterable[dict[str, Any]], t0: float) -> None:
        """Bins read back from a run log (load(), follow()): the chart's points, and for the share
        each bin's steps as that many steps of its mean wait and length (the last 50 are kept)."""
        for r in rows:
            n, wait, step = r["steps"], float(r["wait_s"]), float(r["step_s"])
            if step > 0:
                self.curve.extend([float(r["time"]) - t0], [100.0 * min(1.0, wait / step)])
            self.recent.extend([(wait / n, step / n)] * min(n, WINDOW_STEPS))
            self.changed = True

    def points(self, t0: float | None, n: int | None = None) -> tuple[Any, Any]:
        """The chart's points (seconds since ``t0``, %): at most ``n`` of closed bins (min/max
        bucketed), then the bin being filled."""
        self.drain(t0)
        xs, ys = self.curve.points(n) if self.curve.count else ((), ())
        b = self.open_bin
        if b is not None and b[2] > 0:
            xs, ys = [*xs, b[0] - (t0 or 0.0)], [*ys, 100.0 * min(1.0, b[1] / b[2])]
        return np.asarray(xs, np.float32), np.asarray(ys, np.float32)

    def line(self, t0: float | None, n: int, force: bool = False) -> tuple[Any, ...] | None:
        """The chart's line as the view takes it (LineData), when new steps came (or ``force``);
        else None."""
        self.drain(t0)
        if not (self.changed or force and self.has_data):
            return None
        self.changed = False
        return (CHART, LINE, COLOR, "solid", *self.points(t0, n))


class TimedBatches:
    """``iterable`` as ``track()`` walks it, each ``next()`` timed: one epoch per ``iter()``. A
    step is from one batch's arrival to the next one's; the wait is the time inside ``next()``.
    The loader's own exceptions pass through untouched."""

    def __init__(self, iterable: Iterable[Any], times: StepTimes, beat: Any = None, steps: Any = None) -> None:
        self.iterable = iterable
        self.times = times
        self.beat = beat if beat is not None else _NoBeat()  # parallel.heartbeat.Heartbeat: the phase
        self.steps = steps  # profiling_hooks.ProfileSlot: each batch is a profile's step boundary

    def __iter__(self) -> Iterator[Any]:
        clock, add, beat = time.perf_counter, self.times.add, self.beat
        batches = iter(self.iterable)
        last = None  # the first batch of an epoch is the loader starting up: not counted
        steps = self.steps if self.steps is not None else _NoSteps()
        steps.batch_loops += 1  # in a batch loop, log() is not a profile's step boundary
        try:
            while True:
                began = clock()
                beat.state = ("data", began)
                try:
                    batch = next(batches)
                except StopIteration:
                    beat.state = ("idle", clock())
                    return
                got = clock()
                beat.state = ("forward", got)  # it has its batch, its forward not done (hooks tell more)
                beat.step_started = got
                if last is not None:
                    add(got - began, got - last, began)
                last = got
                if steps.wanted:  # a step ends as the next batch arrives
                    steps.batch()
                yield batch
        finally:
            steps.batch_loops -= 1


class _NoBeat:
    """A heartbeat nobody reads (no monitor gave one)."""

    __slots__ = ("state", "step_started")


class _NoSteps:
    """No profile counts these batches (no monitor gave a ProfileSlot)."""

    session = None
    wanted = False
    batch_loops = 0


def checked_wait(wait_s: Any, step_s: Any) -> tuple[float, float]:
    """``note_data_wait(wait_s, step_s)``: seconds, 0 <= wait_s <= step_s (a hair over is rounding)."""
    for name, v in (("wait_s", wait_s), ("step_s", step_s)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) and not hasattr(v, "__float__"):
            raise TypeError(f"note_data_wait({name}=...) takes seconds as a number, got {type(v).__name__} {v!r}")
    wait, step = float(wait_s), float(step_s)
    if not (math.isfinite(wait) and math.isfinite(step)) or wait < 0 or step < 0:
        raise ValueError(f"note_data_wait(wait_s={wait_s!r}, step_s={step_s!r}): seconds must be finite and 0 or more")
    if wait > step * 1.001 + 1e-6:
        raise ValueError(f"note_data_wait(wait_s={wait_s!r}, step_s={step_s!r}): the wait is part of the step, "
                         "so it cannot be longer than the step")
    return min(wait, step), step


def recent_busy(devices: Sequence[DeviceTrace], window_s: float = GPU_RECENT_S) -> float | None:
    """Mean utilization of ``devices`` over their samples of the last ``window_s``; None without any."""
    values: list[float] = []
    for d in devices:
        col = d.columns.get("utilization_gpu_percent")
        if not col or not len(d.times):
            continue
        end = d.times[-1]
        i = len(d.times)
        while i > 0 and d.times[i - 1] >= end - window_s:
            i -= 1
        values.extend(v for v in col[i:] if v == v)  # NaN: not read
    return sum(values) / len(values) if values else None


def diagnose(share: float | None, gpu_busy: float | None) -> Advice | None:
    """Input-bound, CPU-bound, or None (compute-bound: healthy, or not enough known)."""
    if share is None:
        return None
    if share >= INPUT_BOUND and (gpu_busy is None or gpu_busy < GPU_BUSY):
        gpu = "" if gpu_busy is None else f" while the GPU was busy only {gpu_busy:.0f} % of the time"
        return Advice(
            "input-bound",
            f"Input-bound: the loop spent {100 * share:.0f} % of each step waiting for its data{gpu}. Feed it faster: "
            "more DataLoader workers (num_workers=4 or more, persistent_workers=True), pin_memory=True, "
            "prefetching (prefetch_factor), or a faster data format (pre-decoded, memory-mapped or "
            "pre-tokenized data instead of decoding files every step).",
        )
    if share < CPU_BOUND and gpu_busy is not None and gpu_busy < GPU_IDLE_BETWEEN:
        return Advice(
            "cpu-bound",
            f"CPU-bound: the data is ready ({100 * share:.0f} % of each step waiting for it), yet the GPU was busy "
            f"only {gpu_busy:.0f} % of the time: it idles between kernels while Python prepares the next ones. "
            "A larger batch, fewer small operations and .item() calls per step, torch.compile or CUDA graphs "
            "give it more work per launch.",
        )
    return None
