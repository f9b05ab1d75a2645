"""One TrainingMonitor's run: its parts, the lifecycle that starts and stops them (a with-block,
finish(), fail(), interrupt(), the end of a notebook cell, the end of the process), and the
timer thread's tick that feeds them.

Parts: the run's state (run_state), its logged rows (Records), its GPU samples (run_gpus, into
a GpuTrace), its run log (run_recording), its charts (monitor_charts) in a ChartsView, its header
(monitor_header) and its PNG (static_image). A run read from a run log (load(), follow()) is fed
through run_feed.RunFeed. The monitor's thread holds this object only weakly.
"""
from __future__ import annotations

import atexit
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..runs.gpu_trace import GpuTrace
from ..runs.records import Records
from ..sampling.sampler import Sampler
from ..widgets import cell_hooks
from . import run_state
from .background import Resources, timer_loop
from .batches import SampleCounter, batch_size_of, device_of
from ..widgets.drawable import short_title
from ..widgets.final_output import static_bundle
from .monitor_charts import MonitorCharts, PlotSpec, gpu_charts
from .monitor_header import Progress, header_html, steps_done
from .profiling_hooks import ProfileSlot
from .memory_hooks import tell_oom
from .rank_timing import RankTiming
from ..widgets.process_gpus import Choice
from .run_feed import DRAW_CPU_SHARE, RunFeed
from .run_gpus import RunGpus
from .run_launch import other_rank
from .run_recording import RunWriter, all_gpu_rows, run_meta, save_run
from .run_state import ENDED, RunState, State
from ..widgets.png_cards import CachedPng
from .static_image import render_png
from ..widgets.view import ChartsView


_live: "weakref.WeakSet[MonitorRun]" = weakref.WeakSet()


class MonitorRun(RunFeed):
    def __init__(self, title: str, progress: Progress, *, plot: PlotSpec, x_axis: str, max_points: int,
                 period: float, static_image: bool, choice: Choice, sampler: Sampler | None,
                 root: Path | None, flush_s: float, gpu_window_s: float | None) -> None:
        self.title = title
        self.progress = progress
        self.on_time = x_axis == "time"
        self.period = period
        self.static_image = static_image
        self.run = RunState()
        self.records = Records()
        self.trace = GpuTrace(t0=run_state.now(), max_points=max_points)
        self.res = Resources()
        self.writer = RunWriter(self.run, self.records, self.trace, self.res, root, flush_s, gpu_window_s)
        self.gpus = RunGpus(self.trace, self.res, choice, sampler)
        self.samples = SampleCounter()
        self.png = CachedPng()
        self.view = ChartsView("", time_domain=(0.0, None))
        self.charts = MonitorCharts(self.view, plot, x_axis, max_points, gpu_charts(self.trace.curve_specs))
        self.writer.waits = self.charts.waits  # the data-wait bins go to the run log too
        self.timing = RankTiming(self.charts.waits, self.records, self.run.problem)  # model=, heartbeat
        self.writer.alerts = self.gpus.alerts  # and the alert episodes
        self.writer.facts = self.facts  # and, in run.json, what the run learns as it goes
        self.steps = ProfileSlot(self.view)  # profile(): the loop's step boundaries, the result's place
        self.oom: dict[str, Any] | None = None  # an OOM's facts (memory_hooks.tell_oom)
        self.last_memory: Any = None  # record_memory()'s latest view
        self.memory_count = 0
        self.draw_due = 0.0
        self.cell_rows = -1
        self.display_handle: Any = None
        self.final_shown = False  # show_final() ran: a followed run is over too (live())
        # Nobody sees the charts until the widget is displayed (never, in a script): until then a
        # tick only records; the first display draws what is there (_repr_mimebundle_), and the
        # run's end draws once, for a display after it.
        self.shown = False
        self.tick_lock = threading.Lock()
        # log() from several threads: whole rows, one at a time. Re-entrant, so that a signal
        # handler that logs while log() runs on its thread queues its row instead of deadlocking.
        self.log_lock = threading.RLock()
        self.view.header.value = self.header_html()
        _live.add(self)

    # -- starting and stopping --------------------------------------------------------------------
    def start(self) -> None:
        """Running from now (the caller holds log_lock); errors if the run cannot log."""
        self.run.check_can_log()
        run, res = self.run, self.res
        resumed = run.begin()
        self.trace.t0 = run.t0
        run.guard("timing the model", self.timing.start)
        run.guard("GPU sampling", self.gpus.connect)
        p = self.progress
        run.guard("run log", self.writer.open, run_meta(self.title, run.t0, p.batch_size, p.total_steps), resumed)
        res.stop, res.wake = threading.Event(), threading.Event()
        # The first pass at once, and the first rows bound too: a loop that spins from its first
        # step starves this thread of the GIL, and opening the run directory alone is slow then.
        res.wake.set()
        self.writer.arm()
        res.thread = threading.Thread(
            target=timer_loop, args=(weakref.ref(self), res.stop, res.wake, self.writer.write_s),
            name="gpu-widgets-monitor", daemon=True,
        )
        res.thread.start()
        self.cell_rows = -1  # started in this cell: the cell's outcome is this run's
        cell_hooks.watch(self)
        if self.final_shown:  # resumed: the output shows the picture; the live widget again
            self.final_shown = False
            self.update_output()

    def ensure_running(self) -> None:
        with self.log_lock:
            if self.run.state is not State.RUNNING:
                self.start()

    def stop(self, status: State, error: BaseException | None = None) -> None:
        run = self.run
        was = run.state
        run.state, run.error = status, error
        if was != State.RUNNING:
            self.writer.mark()
            run.guard("drawing", self.draw, self.records.size)
        else:
            run.t_end = run_state.now()
            run.guard("stopping", self.res.release, join=True)
            self.tick(final=True, stopping=True)
            self.writer.close()
        run.guard("stopping", self.timing.stop, self.writer.run_dir)
        run.guard("stopping the profile", self.steps.ended)  # one the run did not finish fails
        run.guard("the out-of-memory post-mortem", tell_oom, self, error)
        cell_hooks.unwatch(self)
        self.show_final()

    def end(self, status: State, error: BaseException | None, how: str) -> None:
        """fail() and interrupt(): idempotent; a run that ended otherwise (or a loaded one) is
        left as it is, with a RuntimeWarning that says so."""
        with self.log_lock:  # not while log() starts the run on another thread
            state = self.run.state
            if self.run.readonly or (state in ENDED and state != status):
                why = "shows a loaded run" if self.run.readonly else f"already ended as {state}"
                warnings.warn(f"{how} changes nothing: this monitor {why}", RuntimeWarning, stacklevel=3)
            elif state != status:
                self.stop(status, error)

    # IPython cell hooks (see cell_hooks)
    def _cell_started(self) -> None:
        self.cell_rows = self.records.size

    def _cell_ended(self, error: BaseException | None) -> None:
        if self.run.state != State.RUNNING or self.records.size == self.cell_rows:
            return  # not driven by this cell (e.g. logging from a background thread)
        self.stop(State.IDLE if error is None else State.after(error), error)

    def tracked(self, iterable: Iterable[Any], epochs: int, log: Any) -> Iterator[Any]:
        """track()'s batches: each one counted (samples, device), each one a step."""
        self.progress.epochs = epochs
        for epoch in range(epochs):
            self.progress.epoch = epoch + 1
            for batch in iterable:
                if self.run.state is not State.RUNNING:
                    self.ensure_running()
                try:
                    size, device = batch_size_of(batch), device_of(batch)
                    if size:
                        self.samples.add(size, run_state.now())
                    if device is not None:
                        self.records.tensor_devices.add(device)
                except Exception as exc:  # an odd batch type must not break the loop
                    self.run.problem(f"reading a batch: {type(exc).__name__}: {exc}")
                mark = self.records.size
                yield batch
                if self.records.size == mark:
                    log()  # the step happened, with nothing logged

    def batch_size(self) -> int | None:
        """Samples per step: as given, else the first batch track() (or note_batch()) counted."""
        return self.progress.batch_size or self.samples.first_batch

    def facts(self) -> dict[str, Any]:
        """run.json's fields the run learns as it goes (on the monitor's thread)."""
        facts: dict[str, Any] = {"batch_size": self.batch_size()}
        if self.trace.last_snapshot is not None:  # which GPUs are shown is known from the first sample
            facts.update(self.gpus.used(self.records.tensor_devices))
        return facts

    # -- the monitor's thread -------------------------------------------------------------------
    def tick(self, final: bool = False, stopping: bool = False) -> None:
        if not self.tick_lock.acquire(timeout=10.0 if final else 0.0):
            return
        try:
            run, records, writer = self.run, self.records, self.writer
            n = records.size  # rows published now; their tensors are queued already
            for message in records.resolve_deferred():
                run.problem(message)
            run.guard("reading GPU samples", self.gpus.drain, writer.add_gpu_rows, writer.write_s)
            writer.write(n, stopping)
            while writer.due <= run_state.now() and records.size > n:
                # log() waits for this writer (it fell behind): catch up before drawing.
                n = records.size
                for message in records.resolve_deferred():
                    run.problem(message)
                writer.write(n, stopping)
            run.guard("heartbeat", self.timing.tick, writer.run_dir)
            if self.shown:  # rank 0 of a launch, displayed: its other ranks' lines too (run_feed)
                run.guard("reading the launch's ranks", self.read_live_ranks)
            now = time.monotonic()
            if final or self.shown and now >= self.draw_due:
                began, lines_before = time.thread_time(), self.view.line_count
                run.guard("drawing", self.draw, n)
                cost = time.thread_time() - began
                # Redraws use at most DRAW_CPU_SHARE of a core (this thread's own CPU time, so a
                # busy loop holding the GIL does not count): many GPUs or lines redraw less often.
                # Making new charts is a one-time cost and does not delay the next redraw.
                if self.view.line_count != lines_before:
                    cost = 0.0
                self.draw_due = now + max(self.period, cost / DRAW_CPU_SHARE)
        finally:
            self.tick_lock.release()

    def draw(self, n: int) -> None:
        shown = self.gpus.shown()
        lines = self.charts.lines(self.records, n, shown, self.run.t0, self.gpus.summarised())
        lines += self.gpus.alerts.lines(self.charts.gpu, shown, self.run.t0)
        self.view.update(self.header_html(), lines)
        self.steps.show()  # a profile's status, or its result

    def header_html(self) -> str:
        return header_html(self.title, self.run, self.records, self.charts, self.gpus, self.progress,
                           self.samples, self.writer.run_dir, self.world)

    # -- display ----------------------------------------------------------------------------------
    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        if not self.run.readonly and other_rank():
            return {"text/plain": repr(self)}  # rank 0 alone shows a launch's run
        if not self.shown:
            self.shown = True
            if self.run.state == State.RUNNING and self.tick_lock.acquire(timeout=1.0):
                try:  # what was recorded before anyone looked
                    self.run.guard("drawing", self.draw, self.records.size)
                finally:
                    self.tick_lock.release()
        if not self.live() and self.static_image:
            # A stopped run is its picture and header, no widget: a saved notebook reopens as
            # what it showed, not as "model not found" (final_output).
            key = (self.run.state, self.records.size, len(self.trace))
            has_data = self.records.size or len(self.trace)
            png = self.png.get(key, self.render_png if has_data else None, self.run.problem)
            if png is not None:
                head = self.view.header.value + self.steps.html_value()  # a profile's result under the header
                return static_bundle(head, png, repr(self), f"{short_title(self.title)}: charts")
        bundle = self.view.widget._repr_mimebundle_(**kwargs)
        bundle["text/plain"] = repr(self)
        return bundle

    def live(self) -> bool:
        """Still changing (running, or a followed run not over): its output is the widget."""
        if self.run.state is State.RUNNING:
            return True
        return getattr(self, "follower", None) is not None and not self.final_shown

    def __repr__(self) -> str:
        step = self.records.last_step
        steps = "no steps" if step is None else f"step {step}"
        return f"<TrainingMonitor {short_title(self.title)!r}: {self.run.state}, {steps}, keys {list(self.records.keys)}>"

    def display(self) -> None:
        """Show the run as the cell's output, with a display id so that it can be replaced when
        the run stops (show_final)."""
        from IPython.display import display as show

        if other_rank():
            return  # rank 0 alone displays; this rank printed where it records
        self.display_handle = show(self, display_id=True)

    def show_final(self) -> None:
        """Replace the displayed output by the run's picture and header (the run stopped)."""
        self.final_shown = True
        self.update_output()

    def update_output(self) -> None:
        """Re-render the displayed output in place (nothing when never displayed)."""
        if self.display_handle is not None and self.static_image:
            self.run.guard("updating the output", self.display_handle.update, self)

    def render_png(self) -> bytes:
        self.records.resolve_deferred()
        origin = (self.run.t0 or 0.0) if self.on_time else None
        shown, ranks = self.gpus.shown(), self.charts.ranks
        every, summary = self.charts.with_ranks(shown, self.gpus.summarised())  # a launch: every rank's GPUs
        return render_png(self.title, self.records, self.charts.plan, self.trace, every, origin,
                          summary=summary, data_wait=self.charts.waits.points(self.run.t0),
                          alerts=self.gpus.alerts.intervals(shown, self.run.t0 or 0.0),
                          by_rank=ranks.panels(self.charts.max_points) if ranks is not None else None)

    def gpu_file_rows(self) -> list[dict[str, Any]]:
        """The GPU samples as files hold them (labels where they change), for save()."""
        self.tick(final=False)
        return all_gpu_rows(self.trace, self.run, "changes")

    def save(self, path: Any, rows: Any, keys: tuple[str, ...], gpu: bool) -> Path:
        """TrainingMonitor.save(): the rows; beside them the GPU samples and alert episodes
        (unless ``gpu`` is False) and run.json's fields, so that load() shows what this run shows."""
        run = self.run  # no title: a saved file is named by its file name, as before
        meta = {"status": run.state, "started": run.t0, "ended": run.t_end, **self.writer.known_facts(),
                "total_steps": self.progress.total_steps, "steps": steps_done(self.records),
                "log_calls": self.records.size}
        alerts = list(self.gpus.alerts.episodes.values()) if gpu else None
        return save_run(path, rows, keys, self.gpu_file_rows if gpu else None, alerts, meta)


@atexit.register
def _finish_at_exit() -> None:
    # A script that ends without finish(): write out what is left. An uncaught exception
    # (sys.last_value, set before atexit runs) marks the run failed.
    # In an IPython shell sys.last_value is an earlier cell's error, not why the process ends.
    # ipywidgets imports IPython in scripts too, so ask for a running shell, not the module.
    failed = None if _in_ipython_shell() else getattr(sys, "last_value", None)
    for r in list(_live):
        if r.run.state == State.RUNNING:
            r.stop(State.after(failed), failed)


def _in_ipython_shell() -> bool:
    get_ipython = getattr(sys.modules.get("IPython"), "get_ipython", None)
    return get_ipython is not None and get_ipython() is not None
