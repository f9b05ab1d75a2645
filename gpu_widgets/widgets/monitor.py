"""TrainingMonitor: log metrics from a training loop; see them live beside the GPUs the loop uses.

The loop thread only appends to columns (``log()``, under a lock: any thread may log). A timer
thread does everything else: reads logged tensors, folds in GPU samples, writes the run log
(every 0.25 s), redraws (at most ``redraw_hz``, 4 Hz).
Problems of the monitor are caught, recorded and shown in the widget; they never reach the loop.
The loop's own exceptions are never caught: ``with monitor:`` and the cell hooks only look at them
to show "failed" or "interrupted".
"""
from __future__ import annotations

import atexit
import base64
import logging
import math
import os
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..sampling.sampler import Sampler
from . import cell_hooks
from . import leases
from .advice import advice_for_run
from .arguments import MAX_STEP, checked_step, number_in, positive_int
from .background import Resources, timer_loop
from .batches import batch_size_of, device_of
from .charts import ChartPlan
from ..store.decimator import Decimator
from ..runs.gpu_trace import GpuTrace, episode_line
from .header import MonitorText, render_monitor
from .process_gpus import check_choice, watched
from ..runs.records import Records
from ..runs.run_files import check_format, gpu_sibling, write_rows
from ..runs.run_log import GPU as GPU_FILE
from ..runs.run_log import RunLog, default_root, enabled_by_env, max_bytes_from_env
from ..runs.saved_run import read_run
from .torch_probe import TorchState, probe, torch_fields
from .view import ChartsView, color

log = logging.getLogger(__name__)
_now = time.time

READY, RUNNING, IDLE, FINISHED, FAILED, INTERRUPTED = "ready", "running", "idle", "finished", "failed", "interrupted"
MAX_REDRAW_HZ = 4.0
RATE_WINDOW_S = 10.0
MAX_ERRORS = 20
THROTTLE_COLOR = "#d62728"
# The GPU charts: name -> (title, y label, y min, y max)
GPU_CHARTS = {
    "gpu_util": ("GPU busy (%)", "%", 0.0, 100.0),  # throttle episodes: a red band named in the legend
    "gpu_memory": ("GPU memory (GiB)", "GiB", 0.0, None),
    "gpu_temperature": ("GPU temperature (°C)", "°C", None, None),
    "gpu_power": ("GPU power (W)", "W", 0.0, None),
}

_live: "weakref.WeakSet[TrainingMonitor]" = weakref.WeakSet()


# The GPU lines of each shown GPU: (curve, chart, label, line style).
GPU_LINES: tuple[tuple[str, str, str, str], ...] = (
    ("util", "gpu_util", "{name}", "solid"),
    ("memory", "gpu_memory", "{name} used", "solid"),
    ("torch_allocated", "gpu_memory", "{name} PyTorch allocated", "dashed"),
    ("torch_reserved", "gpu_memory", "{name} PyTorch reserved", "dotted"),
    ("temperature", "gpu_temperature", "{name}", "solid"),
    ("power", "gpu_power", "{name}", "solid"),
)
# Redrawing is the monitor's only work that can wait; keeping it to 0.3 % of one core
# keeps the whole monitor under 1 % of a training loop (docs/benchmarks.md, section 3).
DRAW_CPU_SHARE = 0.003
DEFAULT_GPU_WINDOW_S = 3600.0
# GPU samples are forgotten (they stay in the run log) in chunks of at least this many, or a
# sixteenth of those kept: each drop moves the kept columns (about 1 ms for an hour of 8 GPUs).
MIN_GPU_DROP = 256
METRIC_WEIGHT = 4  # a metric line gets this many times a GPU line's share of max_points
MIN_LINE_POINTS = 16  # a line's share never goes below this, however many lines there are
# The run log's writer runs every WRITE_TICK_S (or flush_s if shorter). A loop that logs faster
# than rows can be written waits in log() once the oldest unwritten row is a pass + WRITE_SLACK_S
# old, so a killed kernel still loses under a second; a writer that keeps log() waiting
# WAIT_LIMIT_S (a hung disk) is not waited for again.
WRITE_TICK_S = 0.25
WRITE_SLACK_S = 0.1
WAIT_LIMIT_S = 5.0
# Rows per write (about 0.1 s of serialising): each chunk reaches the OS as soon as it is built.
CHUNK_VALUES = 100_000


class TrainingMonitor:
    """A live view of a training run: metrics you ``log()``, and the GPUs the loop uses.

    Parameters (all keyword-only except ``title``):

    * ``batch_size``: samples per step; adds samples/s and batch-size advice.
    * ``total_steps``: steps the run will take; adds progress and an ETA.
    * ``plot``: which keys are charted (see :mod:`gpu_widgets.widgets.charts`).
    * ``x_axis``: ``"time"`` (default: metrics and GPUs on one time axis, seconds since the
      start) or ``"step"`` (metrics against the step).
    * ``gpus``: ``"auto"`` (the GPUs PyTorch uses in this process, else those in
      ``CUDA_VISIBLE_DEVICES``, else all), ``"all"``, or NVML indices such as ``[0, 1]``.
    * ``run_log``: True (default: write the run to ``$GPU_WIDGETS_RUN_DIR`` or the user data
      directory), False (off), or a directory to write runs to.
    * ``max_points``: most points all the plotted lines hold together (default 2000): split
      over the lines, a metric line getting 4 times a GPU line's share, each line at least 16;
      min/max-bucketed, so peaks and dips survive. Bounds the bytes per redraw (~20 KB).
    * ``redraw_hz``: redraws per second, at most 4 (default 4); fewer when redrawing is costly
      (many GPUs or lines): redraws use at most 0.3 % of one core.
    * ``flush_s``: the run log reaches the disk at least this often (default 1 s, at most 5).
    * ``gpu_window_s``: seconds of GPU samples kept in memory (default 3600). Older ones are in
      the run log, and ``gpu_rows()`` and ``save()`` read them back from it; so memory stays
      bounded on long runs. None keeps them all; without a run log all are kept.
    * ``display``: show the widget now (default True, in a notebook).
    * ``static_image``: when the run stops, add a PNG of the charts to the displayed output, for
      notebooks viewed where widgets do not render (default True; needs matplotlib).
    * ``sampler``: a :class:`gpu_widgets.sampling.sampler.Sampler` to read instead of the shared one;
      it is yours to start and stop.
    """

    def __init__(
        self,
        title: str | None = None,
        *,
        batch_size: int | None = None,
        total_steps: int | None = None,
        plot: Any = None,
        x_axis: str = "time",
        gpus: Any = "auto",
        run_log: bool | str | os.PathLike = True,
        max_points: int = 2000,
        redraw_hz: float = MAX_REDRAW_HZ,
        flush_s: float = 1.0,
        gpu_window_s: float | None = DEFAULT_GPU_WINDOW_S,
        display: bool = True,
        static_image: bool = True,
        sampler: Sampler | None = None,
    ) -> None:
        if title is not None and not isinstance(title, str):
            raise TypeError(f"title must be a string, got {type(title).__name__}")
        self.title = title or "Training"
        self.batch_size = positive_int("batch_size", batch_size)
        self.total_steps = positive_int("total_steps", total_steps)
        self._plan = ChartPlan(plot)
        if x_axis not in ("time", "step"):
            raise ValueError(f"x_axis must be 'time' or 'step', got {x_axis!r}")
        self._x_axis = x_axis
        self._static_image = bool(static_image)
        self._gpus = check_choice(gpus)
        if isinstance(max_points, bool) or not isinstance(max_points, int) or not 4 <= max_points <= 100_000:
            raise ValueError(f"max_points must be a whole number from 4 to 100000, got {max_points!r}")
        self.max_points = max_points
        self._period = 1.0 / number_in("redraw_hz", redraw_hz, 0.0, MAX_REDRAW_HZ)
        self._flush_s = number_in("flush_s", flush_s, 0.0, 5.0)
        self._write_s = min(WRITE_TICK_S, self._flush_s)
        self._write_lag = self._write_s + WRITE_SLACK_S
        self._gpu_window_s = None if gpu_window_s is None else number_in("gpu_window_s", gpu_window_s, 0.0, math.inf)
        if sampler is not None and not isinstance(sampler, Sampler):
            raise TypeError(f"sampler must be a gpu_widgets.sampling.sampler.Sampler, got {type(sampler).__name__}")
        self._sampler_arg = sampler
        if run_log is True:
            self._run_root = default_root() if enabled_by_env() else None
        elif run_log is False or run_log is None:
            self._run_root = None
        elif isinstance(run_log, (str, os.PathLike)):
            self._run_root = Path(run_log).expanduser()
        else:
            raise TypeError(f"run_log must be True, False or a directory, got {run_log!r}")
        self._run_max_bytes = max_bytes_from_env() if self._run_root is not None else 0

        self._records = Records()
        self._state = READY
        self._error: BaseException | None = None
        self._errors: list[str] = []
        self._notes: list[str] = []
        self._readonly = False
        self._t0: float | None = None
        self._t_end: float | None = None
        self._trace = GpuTrace(t0=_now(), max_points=max_points)
        self._inbox: deque[dict[str, Any]] = deque(maxlen=3600)
        self._gpu_unwritten: list[dict[str, Any]] = []
        self._written_rows = 0
        self._curves: dict[str, Decimator] = {}
        self._curve_pos: dict[str, int] = {}
        self._gpu_drawn: dict[int, int] = {}
        self._drawn_shares: tuple[int, int] | None = None
        self._config_error: str | None = None
        self._torch: TorchState | None = None
        self._draw_due = 0.0
        self._cell_rows = -1
        self._epoch: int | None = None  # set by track()
        self._epochs: int | None = None
        self._samples_total = 0
        self._sample_marks: deque[tuple[float, int]] = deque(maxlen=4096)  # (wall time, samples so far)
        self._batch_seen: int | None = None
        self._display_handle: Any = None
        self._png_cache: tuple[Any, bytes | None] = (None, None)
        self._tick_lock = threading.Lock()
        # log() from several threads: whole rows, one at a time. Re-entrant, so that a signal
        # handler that logs while log() runs on its thread queues its row instead of deadlocking.
        self._log_lock = threading.RLock()
        self._logging = False  # log() is running on the thread that holds _log_lock
        self._reentered: list[tuple[Any, dict[str, Any]]] = []
        self._write_due = math.inf  # log() waits for the run log's writer from this time.time() on
        self._written = threading.Event()  # set after each pass of the writer
        self._writer_stuck = False  # it once kept log() waiting WAIT_LIMIT_S: never waited for again
        self._res = Resources()
        weakref.finalize(self, self._res.abandon)

        self._view = ChartsView(self._header_html(), time_domain=(0.0, None))
        on_time = x_axis == "time"
        self._view.define_chart("*", shared_x=on_time, x_label="seconds since start" if on_time else "step", rank=0)
        for rank, (name, (title, unit, lo, hi)) in enumerate(GPU_CHARTS.items(), 1):
            self._view.define_chart(name, shared_x=True, title=title, x_label="seconds since start", y_label=unit,
                                    y_min=lo, y_max=hi, rank=rank)
        _live.add(self)
        if display and cell_hooks.in_kernel():
            from IPython.display import display as show

            # A display id lets the output be replaced when the run stops (see _show_final).
            self._display_handle = show(self, display_id=True)

    # -- the loop's API ---------------------------------------------------------------------------
    def log(self, step: int | None = None, **values: Any) -> None:
        """Record values for one step: ``log(loss=0.31, lr=3e-4)`` or ``log(step, loss=...)``.

        Without ``step`` the step is the previous one + 1 (the first is 0). Values are numbers:
        int, float, bool, NumPy scalars, or one-element tensors (a tensor on a GPU is read on the
        monitor's thread, so the loop does not wait for the GPU). NaN and inf are kept and
        flagged. To add values to the current step later, pass ``step=monitor.step``.

        Any thread may call it: each call is one whole row. A loop that logs faster than the run
        log can be written (nothing but ``log()`` in it) waits here while the writer catches up.
        """
        with self._log_lock:  # Records takes one appender at a time
            if self._logging:  # a signal handler interrupted log() on this thread: its row comes next
                self._reentered.append((step, values))
                return
            try:
                self._logging = True
                if self._state is not RUNNING:
                    self._before_log()
                if step is None:
                    step = self._records.next_step
                elif type(step) is not int or step < 0 or step > MAX_STEP:
                    step, values = checked_step(step, values)
                    if step < 0:
                        step = self._records.next_step
                t = _now()
                if t >= self._write_due:
                    t = self._wait_for_writer()
                self._records.append(step, t, values)
            finally:
                self._logging = False
                if self._reentered:
                    self._log_reentered()

    def _log_reentered(self) -> None:
        """The rows of log() calls made by signal handlers while log() ran on their thread. Their
        errors cannot reach the handler (it has returned): they are the monitor's problems."""
        while self._reentered:
            step, values = self._reentered.pop(0)
            try:
                self.log(step, **values)
            except Exception as exc:
                self._problem(f"log() in a signal handler: {type(exc).__name__}: {exc}")

    def _start(self) -> None:
        with self._log_lock:
            if self._state is not RUNNING:
                self._before_log()

    def _wait_for_writer(self) -> float:
        """The run log's writer is behind: the loop logs faster than rows can be written. Wait
        (the GIL released) while the writer catches up, so that rows on disk stay at most about
        a second old. A writer stuck longer than WAIT_LIMIT_S (a hung disk) is waited for no more."""
        res = self._res
        give_up = time.monotonic() + WAIT_LIMIT_S
        while True:
            now = _now()
            if now < self._write_due:
                return now
            thread = res.thread
            if thread is None or not thread.is_alive():
                return now  # the run is stopping: its last pass writes everything
            if time.monotonic() > give_up:
                break
            self._written.clear()
            res.wake.set()
            self._written.wait(0.05)  # re-checked: a pass that was under way may not have caught up
        self._writer_stuck = True
        self._write_due = math.inf
        self._problem(f"the run log fell more than {WAIT_LIMIT_S:g} s behind; log() no longer waits for it, "
                      "so a killed kernel may lose more than the last second of rows")
        return _now()

    def _before_log(self) -> None:
        if self._readonly:
            raise RuntimeError("this monitor shows a loaded run and is read-only; create a TrainingMonitor() for a new run")
        if self._state == FINISHED:
            raise RuntimeError(
                "this run has finished (finish() was called or its with-block ended); "
                "create a new TrainingMonitor() for another run"
            )
        self._activate()

    def __enter__(self) -> "TrainingMonitor":
        self._start()
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        if exc is None:
            self.finish()
        elif isinstance(exc, KeyboardInterrupt):
            self._stop(INTERRUPTED, exc)
        else:
            self._stop(FAILED, exc)
        return False  # the loop's exception goes on, untouched

    def finish(self) -> None:
        """End the run: final redraw, run log closed. Idempotent."""
        if self._readonly or self._state == FINISHED:
            return
        self._stop(FINISHED)

    def track(self, iterable: Iterable[Any], epochs: int = 1) -> Iterator[Any]:
        """Yield the batches of ``iterable``, ``epochs`` times over, counting steps and samples.

        ``for batch in monitor.track(loader, epochs=3): ...`` gives the header its epoch, its
        samples/s (the batch size is read from each batch) and, when ``len(loader)`` is known, a
        total for the progress and the ETA. Each batch is a step: ``log()`` values in the loop
        body as usual; a batch that logged nothing still counts as a step.
        """
        epochs = positive_int("epochs", epochs)
        if epochs is None:
            raise ValueError("epochs must be a positive whole number, got None")
        if epochs > 1 and iter(iterable) is iterable:
            raise ValueError(
                f"track(..., epochs={epochs}) needs something that can be iterated again (a DataLoader, a list), "
                "not an iterator or generator: it would be empty after the first epoch"
            )
        try:
            per_epoch = len(iterable)  # type: ignore[arg-type]
        except TypeError:
            per_epoch = None  # a stream: no total, no ETA
        if per_epoch is not None and self.total_steps is None:
            self.total_steps = self._records.next_step + per_epoch * epochs if self._records.size else per_epoch * epochs
        return self._tracked(iterable, epochs)

    def _tracked(self, iterable: Iterable[Any], epochs: int) -> Iterator[Any]:
        self._epochs = epochs
        for epoch in range(epochs):
            self._epoch = epoch
            for batch in iterable:
                if self._state is not RUNNING:
                    self._start()
                self._note_batch(batch)
                mark = self._records.size
                yield batch
                if self._records.size == mark:
                    self.log()  # the step happened, with nothing logged

    def _note_batch(self, batch: Any) -> None:
        try:
            size = batch_size_of(batch)
            if size:
                self._samples_total += size
                self._sample_marks.append((_now(), self._samples_total))
                if self._batch_seen is None:
                    self._batch_seen = size
            device = device_of(batch)
            if device is not None:
                self._records.tensor_devices.add(device)
        except Exception as exc:  # an odd batch type must not break the loop
            self._problem(f"reading a batch: {type(exc).__name__}: {exc}")

    @property
    def history(self) -> Any:
        """Everything logged: a pandas DataFrame when pandas is installed, else a list of row dicts."""
        try:
            return self.to_pandas()
        except ImportError:
            return self.rows()

    # -- state --------------------------------------------------------------------------------------
    @property
    def status(self) -> str:
        """ready, running, idle, finished, failed or interrupted (a loaded run: as it was saved)."""
        return self._state

    @property
    def error(self) -> BaseException | None:
        """The exception that ended the run (failed or interrupted), else None."""
        return self._error

    @property
    def errors(self) -> list[str]:
        """The monitor's own problems (never raised into the loop), oldest first."""
        return list(self._errors)

    @property
    def step(self) -> int | None:
        """The last logged step, or None."""
        return self._records.last_step

    @property
    def keys(self) -> tuple[str, ...]:
        return self._records.keys

    @property
    def run_dir(self) -> Path | None:
        """This run's directory in the run log (None when off or not yet written)."""
        rl = self._res.run_log
        return rl.path if rl is not None else getattr(self, "_loaded_from", None)

    @property
    def widget(self) -> Any:
        return self._view.widget

    # -- lifecycle ----------------------------------------------------------------------------------
    def _activate(self) -> None:
        resumed = self._state in (IDLE, FAILED, INTERRUPTED)
        self._state = RUNNING
        self._error = None
        self._t_end = None
        if self._t0 is None:
            self._t0 = _now()
            self._trace.t0 = self._t0
        try:
            self._connect_sampler()
        except Exception as exc:
            self._problem(f"GPU sampling: {type(exc).__name__}: {exc}")
        try:
            self._open_run_log(resumed)
        except Exception as exc:
            self._problem(f"run log: {type(exc).__name__}: {exc}")
        res = self._res
        res.stop, res.wake = threading.Event(), threading.Event()
        # The first pass at once, and the first rows bound too: a loop that spins from its first
        # step starves this thread of the GIL, and opening the run directory alone is slow then.
        res.wake.set()
        waits = res.run_log is not None and not self._writer_stuck
        self._write_due = _now() + self._write_lag if waits else math.inf
        res.thread = threading.Thread(
            target=timer_loop, args=(weakref.ref(self), res.stop, res.wake, self._write_s),
            name="gpu-widgets-monitor", daemon=True,
        )
        res.thread.start()
        self._cell_rows = -1  # started in this cell: the cell's outcome is this run's
        cell_hooks.watch(self)

    def _connect_sampler(self) -> None:
        res = self._res
        if self._sampler_arg is not None:
            sampler = self._sampler_arg
        else:
            try:
                sampler = res.leased = leases.acquire()
            except leases.ConfigError as exc:
                self._config_error = str(exc)
                return
        latest = sampler.latest
        if latest is not None and latest["timestamp"] > _now() - 2 * sampler.interval_s:
            self._inbox.append(latest)  # a fresh sample now rather than one interval later
        res.unsubscribe = sampler.subscribe(self._inbox.append)

    def _open_run_log(self, resumed: bool) -> None:
        if self._run_root is None:
            return
        if resumed and self._res.run_log is not None:
            return  # the monitor's thread reopens the files of this run
        self._res.run_log = RunLog(
            self._run_root,
            {
                "title": self.title, "status": RUNNING, "started": self._t0, "ended": None,
                "batch_size": self.batch_size, "total_steps": self.total_steps,
                "pid": os.getpid(), "host": _hostname(), "gpu_widgets_version": _version(),
            },
            self._run_max_bytes,
        )  # the directory is made on the monitor's thread: no I/O in the loop

    def _stop(self, status: str, error: BaseException | None = None) -> None:
        was = self._state
        self._state = status
        self._error = error
        if was != RUNNING:
            if status == FINISHED and self._res.run_log is not None:
                self._guard("run log", self._res.run_log.update_meta, status=status, ended=self._t_end or _now())
            self._guard("drawing", self._draw, self._records.size)
            cell_hooks.unwatch(self)
            self._show_final()
            return
        self._t_end = _now()
        try:
            self._res.release(join=True)
        except Exception as exc:
            self._problem(f"stopping: {type(exc).__name__}: {exc}")
        self._tick(final=True, stopping=True)
        rl = self._res.run_log
        if rl is not None and rl.path is not None:
            detail = None if error is None else f"{type(error).__name__}: {error}"
            self._guard("closing the run log", rl.close, status=status, ended=self._t_end,
                        steps=self._records.size, error=detail)
        cell_hooks.unwatch(self)
        self._show_final()

    # IPython cell hooks (see cell_hooks)
    def _cell_started(self) -> None:
        self._cell_rows = self._records.size

    def _cell_ended(self, error: BaseException | None) -> None:
        if self._state != RUNNING or self._records.size == self._cell_rows:
            return  # not driven by this cell (e.g. logging from a background thread)
        if error is None:
            self._stop(IDLE)
        elif isinstance(error, KeyboardInterrupt):
            self._stop(INTERRUPTED, error)
        else:
            self._stop(FAILED, error)

    # -- the monitor's thread -------------------------------------------------------------------
    def _problem(self, message: str) -> None:
        if len(self._errors) < 3 or message not in self._errors:
            log.warning("gpu-widgets monitor: %s", message)
        self._errors.append(message)
        del self._errors[:-MAX_ERRORS]

    def _guard(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        try:
            fn(*args, **kwargs)
        except Exception as exc:
            self._problem(f"{what}: {type(exc).__name__}: {exc}")

    def refresh(self) -> None:
        """Draw and write everything logged so far, now (the timer does this on its own)."""
        self._tick(final=True)

    def _tick(self, final: bool = False, stopping: bool = False) -> None:
        if not self._tick_lock.acquire(timeout=10.0 if final else 0.0):
            return
        try:
            n = self._records.size  # rows published now; their tensors are queued already
            for message in self._records.resolve_deferred():
                self._problem(message)
            self._guard("reading GPU samples", self._drain_samples)
            self._write_run_log(n, final, stopping)
            while self._write_due <= _now() and self._records.size > n:
                # log() waits for this writer (it fell behind): catch up before drawing.
                n = self._records.size
                for message in self._records.resolve_deferred():
                    self._problem(message)
                self._write_run_log(n, final, stopping)
            now = time.monotonic()
            if final or now >= self._draw_due:
                began, lines_before = time.thread_time(), self._view.line_count
                self._guard("drawing", self._draw, n)
                cost = time.thread_time() - began
                # Redraws use at most DRAW_CPU_SHARE of a core (this thread's own CPU time, so a
                # busy loop holding the GIL does not count): many GPUs or lines redraw less often.
                # Making new charts is a one-time cost and does not delay the next redraw.
                if self._view.line_count != lines_before:
                    cost = 0.0
                self._draw_due = now + max(self._period, cost / DRAW_CPU_SHARE)
        finally:
            self._tick_lock.release()

    def _drain_samples(self) -> None:
        if not self._inbox:
            return
        self._probe_torch(self._inbox[-1])  # once per tick: PyTorch's memory now
        extra = torch_fields(self._torch)
        while self._inbox:
            snap = self._inbox.popleft()
            rows = self._trace.add_snapshot(snap, self._watched(snap), extra)
            if self._res.run_log is not None:
                self._gpu_unwritten.extend(rows)

    def _probe_torch(self, snap: Mapping[str, Any]) -> None:
        uuids: list[str | None] = []
        for d in snap.get("devices", ()):
            uuids.extend([None] * (d["index"] + 1 - len(uuids)))
            uuids[d["index"]] = d.get("uuid")
        self._torch = probe(uuids, snap.get("cuda_visible_devices"))

    def _watched(self, snap: Mapping[str, Any]) -> frozenset[int] | None:
        return watched(self._gpus, snap, self._torch)

    def _write_run_log(self, n: int, final: bool, stopping: bool) -> None:
        rl = self._res.run_log
        if rl is None:
            return
        try:
            if rl.path is None:
                rl.open()
                self._notes.extend(f"run log: removed old run {p.name} (over the size limit)" for p in rl.pruned[:3])
            elif rl.closed:
                if not (self._state == RUNNING or stopping):
                    return  # closed when the run stopped; only a resumed run reopens it
                rl.reopen(status=RUNNING)
            chunk = max(100, CHUNK_VALUES // (2 + len(self._records.series)))
            while self._written_rows < n:
                end = min(n, self._written_rows + chunk)
                rl.write_steps(self._records.jsonl(self._written_rows, end))
                self._written_rows = end
                rl.flush()
            if self._gpu_unwritten:
                rows, self._gpu_unwritten = self._gpu_unwritten, []
                rl.write_gpu(rows)
            rl.flush()
            self._caught_up(n)
            if self._gpu_window_s is not None and rl.gpu_lines_flushed:
                trace = self._trace
                trace.spill_path = rl.path / GPU_FILE
                trace.drop_oldest(self._gpu_window_s, rl.gpu_lines_flushed, max(MIN_GPU_DROP, trace.kept // 16))
        except Exception as exc:
            self._res.run_log = None
            self._gpu_unwritten = []
            self._write_due = math.inf
            self._written.set()
            self._problem(f"run log stopped ({type(exc).__name__}: {exc}); the data stay in memory: monitor.save(path) writes them")

    def _caught_up(self, n: int) -> None:
        """Rows before ``n`` are on disk: log() may run on until the oldest row after them is two
        passes old (a row logged later than now is younger than now)."""
        now = _now()
        records = self._records
        if not self._writer_stuck:
            self._write_due = (records.times[n] if records.size > n else now) + self._write_lag
        self._written.set()

    def _shares(self, devices: list[Any]) -> tuple[int, int]:
        """Points per metric line and per GPU line: ``max_points`` split over all the lines drawn,
        a metric line getting ``METRIC_WEIGHT`` times a GPU line's share (GPUs are sampled at
        1 Hz; the loss is what users read closely). Never below ``MIN_LINE_POINTS``."""
        n_metric = sum(1 for key in self._records.keys if self._plan.chart_of(key) is not None)
        n_gpu = sum(1 for d in devices for curve, *_ in GPU_LINES if d.curves[curve].count)
        units = METRIC_WEIGHT * n_metric + n_gpu
        if not units:
            return self.max_points, self.max_points
        per = self.max_points / units
        return max(MIN_LINE_POINTS, int(per * METRIC_WEIGHT)), max(MIN_LINE_POINTS, int(per))

    def _draw(self, n: int) -> None:
        devices = self._shown_devices()
        shares = self._shares(devices)
        metric_points, gpu_points = shares
        redraw_all = shares != self._drawn_shares  # a line appeared: every line gets its new share
        if redraw_all:
            self._drawn_shares = shares
            self._gpu_drawn.clear()
        lines = []
        for i, key in enumerate(self._records.keys):
            dec = self._curves.get(key)
            if dec is None:
                dec = self._curves[key] = Decimator(self.max_points)
            pos = self._curve_pos.get(key)
            origin = (self._t0 or 0.0) if self._x_axis == "time" else None
            xs, ys, end = self._records.points(key, pos or 0, n, origin)
            if end == (pos or 0) and not (redraw_all and pos is not None):
                continue
            dec.extend(xs, ys)
            self._curve_pos[key] = end
            chart = self._plan.chart_of(key)
            if chart is not None:
                px, py = dec.points(metric_points)
                # x (seconds since start, or steps) in float32: ~ms for days, steps exact to 16 M.
                # y stays float64: the values logged, exactly.
                lines.append((chart, key, color(i), "solid", np.asarray(px, np.float32), np.asarray(py, np.float64)))
        for d in devices:
            if self._gpu_drawn.get(d.index) != d.samples:
                self._gpu_drawn[d.index] = d.samples
                lines.extend(self._gpu_lines(d, gpu_points))
        self._view.update(self._header_html(), lines)

    def _gpu_lines(self, d: Any, points: int | None = None) -> list[tuple]:
        c, name = color(d.index), f"GPU {d.index}"
        out = []
        for curve, chart, label, style in GPU_LINES:
            dec = d.curves[curve]
            if dec.count:
                px, py = dec.points(points)
                # float32 both ways: percents, GiB, °C and W need far fewer than 7 digits.
                out.append((chart, label.format(name=name), c, style, np.asarray(px, np.float32),
                            np.asarray(py, np.float32)))
        if d.episodes:
            out.append(("gpu_util", f"{name} throttled", THROTTLE_COLOR, "band", *episode_line(d.episodes, 97.0)))
        return out

    def _shown_devices(self) -> list[Any]:
        snap = self._trace.last_snapshot
        watched = None if snap is None or self._readonly else self._watched(snap)
        keep = None if watched is None else set(watched)
        return [d for i, d in sorted(self._trace.devices.items()) if keep is None or i in keep]

    # -- the header -------------------------------------------------------------------------------
    def _header_html(self) -> str:
        status = self._state
        detail = None
        if self._error is not None:
            detail = f"{type(self._error).__name__}: {self._error}"[:400]
        notes = self._notes
        if self._readonly:
            notes = [f"loaded from {getattr(self, '_loaded_from', '')}", *notes]
        end = self._t_end if self._t_end is not None else (_now() if self._state == RUNNING else None)
        elapsed = None if self._t0 is None or end is None else max(0.0, end - self._t0)
        nonfinite = {}
        for key, dec in list(self._curves.items()):
            if dec.first_nonfinite is not None:
                position, value = dec.first_nonfinite
                row = self._records.series[key].rows[position]
                nonfinite[key] = (self._records.steps[row], value, dec.nonfinite)
        rl = self._res.run_log
        devices = self._shown_devices()
        latest = self._records.latest()
        window = RATE_WINDOW_S if self._state == RUNNING else None
        steps_per_s = self._records.rate(window)
        energies = [d.energy_j for d in devices if d.energy_j is not None]
        devices_seen = self._records.tensor_devices
        backend_status, backend_reason = leases.freshness(
            self._sampler_arg or self._res.leased if self._state == RUNNING else None, self._trace.status, self._trace.reason)
        return render_monitor(MonitorText(
            title=self.title, status=status, status_detail=detail, step=self.step, rows=self._records.size,
            total_steps=self.total_steps, epoch=self._epoch_text(latest), elapsed_s=elapsed,
            steps_per_s=steps_per_s, samples_per_s=self._samples_rate(window, steps_per_s),
            energy_j=sum(energies) if energies else None,
            latest=latest, nonfinite=nonfinite, backend=self._trace.backend,
            backend_status=backend_status, backend_reason=backend_reason, config_error=self._config_error,
            devices=devices, torch=self._torch, errors=self._errors,
            advice=advice_for_run(
                devices, self.batch_size or self._batch_seen,
                cpu_tensors_only="torch" in sys.modules and devices_seen == {"cpu"},
                gpus_present=self._trace.status == "ok" and bool(self._trace.devices),
            ),
            notes=notes, run_dir=str(rl.path) if rl is not None and rl.path is not None else None,
        ))

    def _epoch_text(self, latest: Mapping[str, Any]) -> str | None:
        if self._epoch is not None:
            return f"{self._epoch + 1}/{self._epochs}"
        value = latest.get("epoch")
        return None if value is None or value != value else f"{value:g}"

    def _samples_rate(self, window_s: float | None, steps_per_s: float | None) -> float | None:
        marks = list(self._sample_marks)  # a copy: the loop appends meanwhile
        if len(marks) >= 2:  # counted from the batches track() saw
            t_end, n_end = marks[-1]
            first = marks[0]
            if window_s is not None:
                first = next((m for m in marks if m[0] >= t_end - window_s), marks[0])
            dt = t_end - first[0]
            return (n_end - first[1]) / dt if dt > 0 else None
        if steps_per_s and self.batch_size:
            return steps_per_s * self.batch_size
        return None

    # -- display ----------------------------------------------------------------------------------
    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = self._view.widget._repr_mimebundle_(**kwargs)
        bundle["text/plain"] = repr(self)
        if self._state != RUNNING and self._static_image:
            # Where widgets do not render (GitHub, nbviewer, an untrusted notebook), the picture does.
            png = self._final_png()
            if png is not None:
                bundle["image/png"] = base64.b64encode(png).decode("ascii")
        return bundle

    def _final_png(self) -> bytes | None:
        key = (self._state, self._records.size, len(self._trace))
        if self._png_cache[0] == key:
            return self._png_cache[1]
        png = None
        if self._records.size or len(self._trace):
            try:
                png = self._render_png()
            except ImportError:
                png = None  # no matplotlib: the text/plain line is the fallback
            except Exception as exc:
                self._problem(f"drawing the static image: {type(exc).__name__}: {exc}")
        self._png_cache = (key, png)
        return png

    def _show_final(self) -> None:
        """Replace the displayed output: the same live widget, now with its static picture."""
        if self._display_handle is not None and self._static_image:
            self._guard("updating the output", self._display_handle.update, self)

    def __repr__(self) -> str:
        step = "no steps" if self.step is None else f"step {self.step}"
        return f"<TrainingMonitor {self.title!r}: {self._state}, {step}, keys {list(self.keys)}>"

    # -- data out ---------------------------------------------------------------------------------
    def rows(self) -> list[dict[str, Any]]:
        """Every logged row: ``{"step", "time", key: value...}``, in logging order."""
        self._records.resolve_deferred()
        return self._records.rows(0)

    def series(self, key: str) -> tuple[list[int], list[int | float]]:
        """Steps and values of one key."""
        if key not in self._records.series:
            raise KeyError(f"{key!r} was never logged; logged keys: {list(self.keys)}")
        self._records.resolve_deferred()
        return self._records.series_values(key)

    def gpu_rows(self) -> list[dict[str, Any]]:
        """The GPU samples of this run: one ``{"time", "gpu", field...}`` per GPU per sample."""
        self._tick(final=False)
        return self._all_gpu_rows("all")

    def _all_gpu_rows(self, labels: str) -> list[dict[str, Any]]:
        try:
            return self._trace.rows(labels)
        except (OSError, ValueError) as exc:  # the run log lost the oldest samples (deleted, pruned)
            self._problem(f"the oldest {self._trace.dropped} GPU samples could not be read back from the run log "
                          f"({type(exc).__name__}: {exc}); only the last {self._trace.kept} are given")
            return self._trace.rows(labels, spilled=False)

    def to_pandas(self) -> Any:
        """The logged rows as a pandas DataFrame (needs pandas)."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("to_pandas() needs pandas: pip install pandas") from None
        return pd.DataFrame(self.rows(), columns=["step", "time", *self.keys])

    def to_png(self, path: str | os.PathLike | None = None) -> bytes:
        """A static picture of the charts (needs matplotlib), e.g. for a notebook shared as a file."""
        self.refresh()
        png = self._render_png()
        if path is not None:
            Path(path).write_bytes(png)
        return png

    def _render_png(self) -> bytes:
        from .static_image import render_png

        self._records.resolve_deferred()
        return render_png(self.title, self._records, self._plan, self._trace, self._shown_devices(),
                          time_origin=(self._t0 or 0.0) if self._x_axis == "time" else None)

    def save(self, path: str | os.PathLike, *, gpu: bool = True) -> Path:
        """Write the logged rows to ``path`` (.csv or .jsonl); GPU samples beside it
        (``run.csv`` -> ``run.gpu.csv``) unless ``gpu=False``. Returns the path."""
        p = Path(path).expanduser()
        check_format(p)
        write_rows(p, self.rows(), ["step", "time", *self.keys])
        if gpu:
            self._tick(final=False)
            gpu_rows = self._all_gpu_rows("changes")
            if gpu_rows:
                columns = list(dict.fromkeys(k for r in gpu_rows for k in r))
                write_rows(gpu_sibling(p), gpu_rows, columns)
        return p

    @classmethod
    def load(cls, path: str | os.PathLike, *, display: bool = False) -> "TrainingMonitor":
        """Show a finished run again, read-only: a run-log directory, its steps.jsonl, or a file
        written by :meth:`save` (its GPU samples are read from beside it). A damaged file raises
        :class:`gpu_widgets.RunFileError` naming the file and line; a torn last line is skipped
        with a ``RuntimeWarning``."""
        run = read_run(path)
        mon = cls(run.title, batch_size=run.meta.get("batch_size"), total_steps=run.meta.get("total_steps"),
                  run_log=False, display=False)
        mon._readonly = True
        mon._loaded_from = run.source
        mon._notes = run.notes
        mon._records.extend_rows(run.rows)
        mon._t0, mon._t_end = run.started, run.ended
        mon._trace.t0 = mon._t0 or 0.0
        for r in run.gpu_rows:
            mon._trace.add_row(r)
        mon._trace.status = "ok" if run.gpu_rows else None
        status = run.meta.get("status") or FINISHED
        mon._state = "unfinished" if status == RUNNING else status
        mon._draw(mon._records.size)
        if display and cell_hooks.in_kernel():
            from IPython.display import display as show

            show(mon)
        return mon


def _hostname() -> str:
    try:
        return os.uname().nodename
    except AttributeError:  # Windows
        return os.environ.get("COMPUTERNAME", "")


def _version() -> str:
    from .._version import __version__

    return __version__


@atexit.register
def _finish_at_exit() -> None:
    # A script that ends without finish(): write out what is left. An uncaught exception
    # (sys.last_value, set before atexit runs) marks the run failed.
    failed = getattr(sys, "last_value", None) if "IPython" not in sys.modules else None
    for monitor in list(_live):
        if monitor._state == RUNNING:
            monitor._stop(FAILED if failed is not None else FINISHED, failed)
