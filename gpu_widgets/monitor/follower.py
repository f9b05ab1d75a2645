"""``TrainingMonitor.follow(run_dir)``: a monitor that shows, live, a run another process writes
(a script, a batch job, another kernel), read from its run log.

The monitor is the read-only kind ``load()`` makes; a thread of its own (holding it weakly, like
the monitor's timer) reads the lines added to the run log every ``poll_s``, folds them into the
same records and GPU trace a live run fills, and redraws with the same bounds: lines decimated to
``max_points``, redraws within DRAW_CPU_SHARE of a core. A run log of millions of steps is read a
chunk at a time with a redraw between chunks, so the view fills in while it catches up and only
the compact columns stay in memory. Once run.json says the run ended (and every line is read), or
its process died without ending it, the monitor shows it as ended and the thread stops.
"""
from __future__ import annotations

import os
import threading
import time
import weakref
from typing import Any

from ..runs.follow import ENDED_WORDS, RunTail, writer_alive
from ..runs.gpu_trace import GpuTrace
from ..runs.run_log import GPU
from ..runs.saved_run import SavedRun
from ..widgets import cell_hooks
from .arguments import number_in, positive_int
from .monitor_run import DRAW_CPU_SHARE, MonitorRun
from .run_recording import MIN_GPU_DROP
from .run_state import State

POLL_S = 0.5
STEP_BYTES = 2 << 20  # read per pass (~25k rows): then a redraw, so a long log fills in visibly
GPU_BYTES = 4 << 20
WAIT_BYTES = 1 << 20  # data_wait.jsonl: ~70 bytes per half second of steps
ALERT_BYTES = 1 << 20  # alerts.jsonl: ~250 bytes per episode's start or end
GPU_WINDOW_S = 3600.0  # GPU samples kept in memory, as a live run keeps them; older ones stay in gpu.jsonl
# Shown as the status while the run is followed: equal to "running" everywhere a status is
# compared, but not State.RUNNING itself, so log() on this monitor tries to start a run and is
# refused as read-only instead of mixing the user's rows into someone else's run.
FOLLOWING = str(State.RUNNING)
MAX_NOTES = 20


def follow(cls: Any, run_dir: str | os.PathLike, *, display: bool = True, poll_s: float = POLL_S,
           max_points: int = 2000, x_axis: str = "time") -> Any:
    """Show, live, a run that another process writes: a script in a terminal, a batch job,
    another kernel. ``run_dir`` is its run-log directory (``gpu-widgets runs`` lists them; the
    script prints it). The monitor has the same charts and header as the live run and follows it
    until it ends (finished, failed, interrupted, or unfinished when its process died), then stays
    as that run. It is read-only: ``log()`` on it raises. Reading happens on a thread of its own,
    every ``poll_s`` seconds (over 0.01, up to 60), never in the caller's loop."""
    poll_s = number_in("poll_s", poll_s, 0.01, 60.0)
    tail = RunTail(run_dir)
    meta = tail.meta()  # its notes come with the first pass
    saved = SavedRun(tail.path, meta)
    mon = cls(_title(meta, tail), run_log=False, display=False, saved_run=saved, max_points=max_points,
              x_axis=x_axis)
    r: MonitorRun = mon._r
    r.run.notes.append(f"following: read every {poll_s:g} s until the run ends")
    follower = r.follower = Follower(r, tail, poll_s)
    follower.apply_meta(r, meta)
    if display and cell_hooks.in_kernel():
        from IPython.display import display as show

        r.display_handle = show(r, display_id=True)  # replaced by the static picture at the end
    follower.start()
    return mon


def _title(meta: dict[str, Any], tail: RunTail) -> str:
    title = meta.get("title")
    return title if isinstance(title, str) and title.strip() else tail.path.name


class Follower:
    """Reads one run's new lines into a read-only MonitorRun, on a thread of its own."""

    def __init__(self, r: MonitorRun, tail: RunTail, poll_s: float) -> None:
        self.tail = tail
        self.poll_s = poll_s
        self.stop = threading.Event()
        self.done = threading.Event()  # the run ended and everything was read (or following failed)
        self.passes = 0
        self.notes = 0
        self.draw_due = 0.0
        self.dead_seen = False
        self.meta_notes: set[str] = set()  # said already: run.json is read every pass
        self._ref = weakref.ref(r)
        self.thread = threading.Thread(target=self._loop, name="gpu-widgets-follow", daemon=True)
        r.trace.spill_path = tail.path / GPU

    def start(self) -> None:
        self.thread.start()

    def _loop(self) -> None:
        try:
            while not self.stop.is_set():
                r = self._ref()
                if r is None:
                    return  # nobody holds the monitor any more
                try:
                    ended = self.step(r)
                except Exception as exc:  # the view must say why it stopped, never die silently
                    r.run.problem(f"following stopped: {type(exc).__name__}: {exc}")
                    r.run.state = State.UNFINISHED if r.run.state == FOLLOWING else r.run.state
                    r.run.guard("drawing", self._draw, r, True)
                    return
                behind = not self.tail.caught_up
                del r
                if ended:
                    return
                if not behind:
                    self.stop.wait(self.poll_s)
        finally:
            self.done.set()

    def step(self, r: MonitorRun) -> bool:
        """One pass: run.json, then the new lines. True once the run has ended and all is read."""
        self.passes += 1
        meta, meta_notes = self.tail.meta_noted()  # first: when it says "ended", every row is already on disk
        for note in meta_notes:
            if note not in self.meta_notes and len(self.meta_notes) < MAX_NOTES:
                self.meta_notes.add(note)
                unknown = "status" not in meta and writer_alive(meta) is None
                self._note(r, f"{note}; following cannot tell when the run ends" if unknown else note)
        if not self.tail.path.is_dir():
            raise FileNotFoundError(f"{self.tail.path} was removed")
        rows, notes = self.tail.step_rows(STEP_BYTES)
        records, run = r.records, r.run
        for step, t, values in rows:
            try:
                records.append(step, t, values)
            except (ValueError, TypeError) as exc:
                notes.append(f"step {step}: {exc}: skipped")
        gpu_rows, gpu_notes = self.tail.gpu_rows(GPU_BYTES)
        self._add_gpu(r.trace, gpu_rows)
        bins, wait_notes = self.tail.data_wait_rows(WAIT_BYTES)
        alerts, alert_notes = self.tail.alert_rows(ALERT_BYTES)
        r.gpus.alerts.add_saved(alerts)  # marks and header lines, as the live run drew them
        for note in (*notes, *gpu_notes, *wait_notes, *alert_notes):
            self._note(r, note)
        if run.t0 is None and records.size:
            run.t0 = r.trace.t0 = records.times[0]
        if bins:  # the "data wait (%)" chart and the header's share and diagnosis
            r.charts.waits.add_saved(bins, run.t0 if run.t0 is not None else bins[0]["time"])
        self.apply_meta(r, meta)
        status = meta.get("status")
        caught_up = self.tail.caught_up
        ended = caught_up and status in ENDED_WORDS
        # The writer dies right after it writes "finished": a dead writer is believed only on
        # the pass after, which reads run.json again (and the rows before it) first.
        dead = caught_up and not ended and writer_alive(meta) is False
        gone, self.dead_seen = dead and self.dead_seen, dead
        if ended or gone:
            run.state = State.saved(status) if ended else State.UNFINISHED
            run.t_end = meta.get("ended") if _number(meta.get("ended")) else (records.times[-1] if records.size else None)
            if meta.get("error"):
                run.notes.append(f"ended with {meta['error']}")
            if gone:
                run.notes.append(f"the process writing this run (pid {meta.get('pid')}) is gone: it was killed "
                                 "or crashed before ending the run")
            run.notes[:] = [n for n in run.notes if not n.startswith("following:")]
            self._draw(r, True)
            r.show_final()
            return True
        run.state = FOLLOWING if status == State.RUNNING or not isinstance(status, str) else State.saved(status)
        # Behind (a long log being read): draw after every chunk, so the charts take in one
        # chunk's points at a time (a draw holds the new points as Python lists: all of a
        # million rows at once would be ~130 MB). Caught up: the live monitor's redraw pace.
        self._draw(r, not caught_up)
        return False

    def apply_meta(self, r: MonitorRun, meta: dict[str, Any]) -> None:
        """What run.json says about the run's shape; values that are not what gpu-widgets writes are ignored."""
        run, progress = r.run, r.progress
        started = meta.get("started")
        if run.t0 is None and _number(started):
            run.t0 = r.trace.t0 = float(started)
        r.gpus.adopt_saved(meta)  # which GPUs it uses is written after its first sample
        for name in ("batch_size", "total_steps"):
            try:
                setattr(progress, name, positive_int(name, meta.get(name)))
            except (TypeError, ValueError):
                pass
        if run.state == State.UNFINISHED and meta.get("status") == State.RUNNING:
            run.state = FOLLOWING

    def _add_gpu(self, trace: GpuTrace, rows: list[dict[str, Any]]) -> None:
        for row in rows:
            trace.add_row(row)
        if rows:
            trace.status = "ok"
        tail = self.tail.gpu
        if not tail.skipped:  # line i of gpu.jsonl is sample i: old samples can be read back from it
            trace.drop_oldest(GPU_WINDOW_S, tail.lines, max(MIN_GPU_DROP, trace.kept // 16))

    def _note(self, r: MonitorRun, note: str) -> None:
        self.notes += 1
        if self.notes <= MAX_NOTES:
            r.run.problem(note)

    def _draw(self, r: MonitorRun, now_anyway: bool) -> None:
        now = time.monotonic()
        if not now_anyway and now < self.draw_due:
            return
        if not r.tick_lock.acquire(timeout=10.0):
            return
        try:
            began = time.thread_time()
            r.run.guard("drawing", r.draw, r.records.size)
            self.draw_due = now + max(r.period, (time.thread_time() - began) / DRAW_CPU_SHARE)
        finally:
            r.tick_lock.release()


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf")
