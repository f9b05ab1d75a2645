"""TrainingMonitor: log metrics from a training loop; see them live beside the GPUs the loop uses.

The loop thread only appends to columns (``log()``, under a lock: any thread may log). A timer
thread does everything else: reads logged tensors, folds in GPU samples, writes the run log
(every 0.25 s), redraws (at most ``redraw_hz``, 4 Hz).
Problems of the monitor are caught, recorded and shown in the widget; they never reach the loop.
The loop's own exceptions are never caught: ``with monitor:`` and the cell hooks only look at them
to show "failed" or "interrupted".

This class is the facade: the loop's API (``log()`` runs here, it is the hot path) and what
users read. The run itself, its lifecycle and the timer's tick are in monitor_run.MonitorRun.
"""
from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..runs.saved_run import SavedRun
from ..sampling.sampler import Sampler
from ..widgets import cell_hooks
from . import run_state
from .arguments import MAX_STEP, check_monitor, checked_epoch, checked_epochs, checked_step, number_in, positive_int
from .compare import CompareRuns
from .follower import follow as _follow
from .history_frame import history_frame
from .loop_hooks import LoopHooks
from .monitor_header import Progress
from .monitor_run import MonitorRun
from .profiling_hooks import ProfileHooks
from .rank_timing import ModelHooks
from ..widgets.process_gpus import check_choice
from .run_recording import all_gpu_rows, run_root
from .run_state import State
from .world import WorldAttributes, read_any

READY, RUNNING, IDLE, FINISHED, FAILED, INTERRUPTED = (
    State.READY, State.RUNNING, State.IDLE, State.FINISHED, State.FAILED, State.INTERRUPTED)
MAX_REDRAW_HZ = 4.0
DEFAULT_GPU_WINDOW_S = 3600.0


class TrainingMonitor(LoopHooks, ModelHooks, ProfileHooks, WorldAttributes, CompareRuns):  # + profile(), compare()...
    """A live view of a training run: metrics you ``log()``, and the GPUs the loop uses.

    Parameters (all keyword-only except ``title``):

    * ``batch_size``: samples per step; adds samples/s and batch-size advice.
    * ``total_steps``: steps the run will take; adds progress and an ETA (settable later).
    * ``plot``: which keys are charted (see :mod:`gpu_widgets.monitor.charts`).
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
    * ``static_image``: when the run stops, its displayed output becomes a PNG of the charts under
      the header, without the widget: a saved notebook reopens showing it (default True; matplotlib).
    * ``sampler``: a :class:`gpu_widgets.sampling.sampler.Sampler` to read instead of the shared one;
      it is yours to start and stop.
    * ``saved_run``: a :class:`gpu_widgets.runs.saved_run.SavedRun` to show read-only, with no
      run log (what :meth:`load` passes).
    * ``model``: a torch module whose forward is timed while the run runs (see ``watch_model``).
    """

    def __init__(
        self, title: str | None = None, *, batch_size: int | None = None, total_steps: int | None = None,
        plot: Any = None, x_axis: str = "time", gpus: Any = "auto", run_log: bool | str | os.PathLike = True,
        max_points: int = 2000, redraw_hz: float = MAX_REDRAW_HZ, flush_s: float = 1.0,
        gpu_window_s: float | None = DEFAULT_GPU_WINDOW_S, display: bool = True, static_image: bool = True,
        sampler: Sampler | None = None, saved_run: SavedRun | None = None, model: Any = None,
    ) -> None:
        check_monitor(title, x_axis, max_points, sampler, saved_run)
        progress = Progress(positive_int("batch_size", batch_size), positive_int("total_steps", total_steps))
        choice = check_choice(gpus)
        self.max_points = max_points
        period = 1.0 / number_in("redraw_hz", redraw_hz, 0.0, MAX_REDRAW_HZ)
        flush_s = number_in("flush_s", flush_s, 0.0, 5.0)
        window = None if gpu_window_s is None else number_in("gpu_window_s", gpu_window_s, 0.0, math.inf)
        root = None if saved_run is not None else run_root(run_log)
        self._sampler_arg = sampler
        r = self._r = MonitorRun(
            title or "Training", progress, plot=plot, x_axis=x_axis, max_points=max_points, period=period,
            static_image=bool(static_image), choice=choice, sampler=sampler, root=root, flush_s=flush_s,
            gpu_window_s=window,
        )
        r.timing.watch(model)  # a TypeError for anything but a torch module
        # The parts log() touches (the hot path: one attribute each).
        self._run, self._records, self._writer, self._log_lock = r.run, r.records, r.writer, r.log_lock
        self._logging = False  # log() is running on the thread that holds _log_lock
        self._reentered: list[tuple[Any, dict[str, Any]]] = []
        if saved_run is not None:
            r.show_saved(saved_run)
        if display and cell_hooks.in_kernel():
            r.display()

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
        if self._r.steps.wanted:
            self._r.steps.logged()  # a profile counts log() calls as steps (profiling_hooks)
        with self._log_lock:  # Records takes one appender at a time
            if self._logging:  # a signal handler interrupted log() on this thread: its row comes next
                self._reentered.append((step, values))
                return
            try:
                self._logging = True
                if self._run.state is not RUNNING:
                    self._r.start()
                if step is None:
                    step = self._records.next_step
                elif type(step) is not int or step < 0 or step > MAX_STEP:
                    step, values = checked_step(step, values)
                    if step < 0:
                        step = self._records.next_step
                t = run_state.now()
                if t >= self._writer.due:
                    t = self._writer.wait()
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
                self._run.problem(f"log() in a signal handler: {type(exc).__name__}: {exc}")

    def __enter__(self) -> "TrainingMonitor":
        self._r.ensure_running()
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        if exc is None:
            self.finish()
        else:
            self._r.stop(State.after(exc), exc)
        return False  # the loop's exception goes on, untouched

    def finish(self) -> None:
        """End the run: final redraw, run log closed. Idempotent."""
        if not self._run.readonly and self._run.state != FINISHED:
            self._r.stop(FINISHED)

    def fail(self, exc: BaseException | None = None) -> None:
        """End the run as failed, without a ``with`` block: ``exc`` (or a note that fail() was
        called) is shown in the header and written to the run log. Idempotent; on a run that
        already ended otherwise it changes nothing and warns (RuntimeWarning)."""
        if exc is not None and not isinstance(exc, BaseException):
            raise TypeError(f"fail(exc) takes an exception or None, got {type(exc).__name__} {exc!r}")
        self._r.end(FAILED, exc if exc is not None else RuntimeError("fail() was called"), "fail()")

    def interrupt(self) -> None:
        """End the run as interrupted (as a KeyboardInterrupt in a ``with`` block would).
        Idempotent; on a run that already ended otherwise it changes nothing and warns."""
        self._r.end(INTERRUPTED, None, "interrupt()")

    def track(self, iterable: Iterable[Any], epochs: int = 1) -> Iterator[Any]:
        """Yield the batches of ``iterable``, ``epochs`` times over, counting steps and samples.

        ``for batch in monitor.track(loader, epochs=3): ...`` gives the header its epoch, its
        samples/s (the batch size is read from each batch) and, when ``len(loader)`` is known, a
        total for the progress and the ETA. Each batch is a step: ``log()`` values in the loop
        body as usual; a batch that logged nothing still counts as a step.
        """
        epochs = checked_epochs(iterable, epochs)
        try:
            per_epoch = len(iterable)  # type: ignore[arg-type]
        except TypeError:
            per_epoch = None  # a stream: no total, no ETA
        if per_epoch is not None and self.total_steps is None:
            self.total_steps = self._records.next_step + per_epoch * epochs if self._records.size else per_epoch * epochs
        return self._r.tracked(self._timed(iterable), epochs, self.log)  # next() timed: data wait

    def set_epoch(self, epoch: int, epochs: int | None = None) -> None:
        """The epoch the header shows, as given: ``set_epoch(3, 10)`` shows "epoch 3/10".
        ``epochs`` None keeps the total given before (if any)."""
        progress = self._r.progress
        progress.epoch, progress.epochs = checked_epoch(epoch, epochs, progress.epochs)

    @property
    def total_steps(self) -> int | None:
        """Steps the run will take (progress and ETA), or None; settable at any time."""
        return self._r.progress.total_steps

    @total_steps.setter
    def total_steps(self, value: int | None) -> None:
        self._r.progress.total_steps = positive_int("total_steps", value)
        if self._r.res.run_log is not None:
            self._r.res.run_log.meta["total_steps"] = value  # in run.json from its next write

    @property
    def batch_size(self) -> int | None:
        return self._r.progress.batch_size

    @batch_size.setter
    def batch_size(self, value: int | None) -> None:
        self._r.progress.batch_size = positive_int("batch_size", value)

    @property
    def title(self) -> str:
        return self._r.title

    @title.setter
    def title(self, value: str) -> None:
        self._r.title = value

    @property
    def history(self) -> Any:
        """Everything logged: ``to_pandas()`` when pandas is installed, else a list of row dicts."""
        try:
            return self.to_pandas()
        except ImportError:
            return self.rows()

    # -- state --------------------------------------------------------------------------------------
    @property
    def status(self) -> str:
        """ready, running, idle, finished, failed or interrupted (a loaded run: as it was saved);
        a :class:`State`, which compares equal to these strings."""
        return self._run.state

    @property
    def error(self) -> BaseException | None:
        """The exception that ended the run (failed or interrupted), else None."""
        return self._run.error

    @property
    def errors(self) -> list[str]:
        """The monitor's own problems (never raised into the loop), oldest first."""
        return list(self._run.errors)

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
        return self._writer.run_dir if self._r.res.run_log is not None else self._run.loaded_from

    @property
    def widget(self) -> Any:
        self._r.shown = True  # to be displayed: the timer draws from now on
        return self._r.view.widget

    @property
    def gpu_chart_titles(self) -> tuple[str, ...]:
        """Titles of the GPU charts this monitor draws, from the metric catalogue (a chart shows
        once its first sample arrives): ("GPU busy (%)", "GPU memory (GiB)", ...)."""
        return tuple(chart.title for chart in self._r.charts.gpu)

    @property
    def parts(self) -> MonitorRun:
        """The run's parts (monitor_run.MonitorRun: state, records, GPU trace, view, charts, run
        log, samples counted, follower), for tests, benchmarks and tools that read what it holds.
        Internal: their shape may change between versions."""
        return self._r

    # -- display and data out ---------------------------------------------------------------------
    def refresh(self) -> None:
        """Draw and write everything logged so far, now (the timer does this on its own)."""
        self._r.tick(final=True)

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        return self._r._repr_mimebundle_(**kwargs)

    def __repr__(self) -> str:
        return repr(self._r)

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
        self._r.tick(final=False)
        return all_gpu_rows(self._r.trace, self._run, "all")

    def to_pandas(self) -> Any:
        """The logged rows as a pandas DataFrame (needs pandas): ``step``, ``elapsed_s`` (since the
        start), ``wall_time`` (UTC), the keys, and ``time`` (the exact epoch seconds) last."""
        return history_frame(self.rows(), self.keys, self._run.t0)

    def to_png(self, path: str | os.PathLike | None = None) -> bytes:
        """A static picture of the charts (needs matplotlib), e.g. for a notebook shared as a file."""
        self.refresh()
        png = self._r.render_png()
        if path is not None:
            Path(path).write_bytes(png)
        return png

    def save(self, path: str | os.PathLike, *, gpu: bool = True) -> Path:
        """Write the logged rows to ``path`` (.csv or .jsonl); beside it ``run.meta.json`` and, unless
        ``gpu=False``, the GPU samples and alerts (``run.gpu.csv``, ``run.alerts.csv``). Returns the path."""
        return self._r.save(path, self.rows, self.keys, gpu)

    follow = classmethod(_follow)  # a run another process writes, live: see follower.follow

    @classmethod
    def load(cls, path: str | os.PathLike, *, display: bool = False) -> "TrainingMonitor":
        """Show a finished run again, read-only: a run-log directory (a launch's: rank 0's run, with ``ranks``), its
        steps.jsonl, or a file written by :meth:`save` (its GPU samples are read from beside it). A damaged steps file
        raises :class:`gpu_widgets.RunFileError` naming the file and line; a torn last line, and bad lines
        of the side files, are skipped with a ``RuntimeWarning``."""
        run = read_any(path)  # a launch: rank 0's run, and the launch's ranks (world.py)
        mon = cls(run.title, batch_size=run.meta.get("batch_size"), total_steps=run.meta.get("total_steps"),
                  run_log=False, display=display, saved_run=run)
        mon._r.read_ranks()  # a launch: every rank's step times, data waits and GPUs (rank_charts)
        return mon
