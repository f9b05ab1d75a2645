"""``TrainingMonitor.follow(run_dir)``: a monitor that shows, live, a run another process writes
(a script, a batch job, another kernel), read from its run log.

The monitor is the read-only kind ``load()`` makes; a thread of its own (holding it weakly, like
the monitor's timer) reads the lines added to the run log every ``poll_s``, folds them into the
same records and GPU trace a live run fills, and redraws with the same bounds: lines decimated to
``max_points``, redraws within DRAW_CPU_SHARE of a core (all through run_feed.RunFeed). A run log of millions of steps is read a
chunk at a time with a redraw between chunks, so the view fills in while it catches up and only
the compact columns stay in memory. Once run.json says the run ended (and every line is read), or
its process died without ending it, the monitor shows it as ended and the thread stops.

A launch (every rank of a torch.distributed run) is followed through its rank 0 (the loss, the
GPUs), and the whole launch is read again every WORLD_EVERY_S for its ranks and the straggler
verdict (world.py), until rank 0's run ends.
"""
from __future__ import annotations

import os
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from ..runs.follow import ENDED_WORDS, RunTail, writer_alive
from ..runs.launch_read import read_launch
from ..runs.run_log import GPU
from ..runs.saved_run import SavedRun
from ..widgets import cell_hooks
from .arguments import number_in
from .launch_tails import LaunchTails
from .monitor_run import MonitorRun
from .run_recording import MIN_GPU_DROP
from .run_state import State
from .world import launch_of, rank0_of, world_of

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
WORLD_EVERY_S = 0.5  # a launch's ranks re-read this often: as often as their data-wait bins close


def follow(cls: Any, run_dir: str | os.PathLike, *, display: bool = True, poll_s: float = POLL_S,
           max_points: int = 2000, x_axis: str = "time") -> Any:
    """Show, live, a run that another process writes: a script in a terminal, a batch job,
    another kernel. ``run_dir`` is its run-log directory (``gpu-widgets runs`` lists them; the
    script prints it). The monitor has the same charts and header as the live run and follows it
    until it ends (finished, failed, interrupted, or unfinished when its process died), then stays
    as that run. It is read-only: ``log()`` on it raises. Reading happens on a thread of its own,
    every ``poll_s`` seconds (over 0.01, up to 60), never in the caller's loop."""
    poll_s = number_in("poll_s", poll_s, 0.01, 60.0)
    launch = launch_of(run_dir)
    tail = RunTail(run_dir if launch is None else rank0_of(launch))
    meta = tail.meta()  # its notes come with the first pass
    saved = SavedRun(tail.path if launch is None else launch, meta)
    if launch is not None:
        saved.launch = read_launch(launch)
    mon = cls(_title(meta, tail), run_log=False, display=False, saved_run=saved, max_points=max_points,
              x_axis=x_axis)
    r: MonitorRun = mon.parts
    follower = Follower(r, tail, poll_s, launch)
    r.follow_with(follower, f"following: read every {poll_s:g} s until the run ends", tail.path / GPU)
    follower.apply_meta(r, meta)
    if display and cell_hooks.in_kernel():
        r.display()  # replaced by the static picture at the end
    follower.start()
    return mon


def _title(meta: dict[str, Any], tail: RunTail) -> str:
    title = meta.get("title")
    return title if isinstance(title, str) and title.strip() else tail.path.name


class Follower:
    """Reads one run's new lines into a read-only MonitorRun, on a thread of its own."""

    def __init__(self, r: MonitorRun, tail: RunTail, poll_s: float, launch: Path | None = None) -> None:
        self.tail = tail
        self.launch = launch  # a launch followed through its rank 0 (tail): its ranks are read too
        self.world_due = 0.0
        self.rank_tails = LaunchTails(launch) if launch is not None else None  # every rank's bins and GPUs
        self.ranks: list[tuple[int, str | None]] = []  # (rank, host) as the launch was last read
        self.poll_s = poll_s
        self.stop = threading.Event()
        self.done = threading.Event()  # the run ended and everything was read (or following failed)
        self.passes = 0
        self.notes = 0
        self.dead_seen = False
        self.meta_notes: set[str] = set()  # said already: run.json is read every pass
        self._ref = weakref.ref(r)
        self.thread = threading.Thread(target=self._loop, name="gpu-widgets-follow", daemon=True)

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
                    r.note(f"following stopped: {type(exc).__name__}: {exc}")
                    if r.state == FOLLOWING:
                        r.state = State.UNFINISHED
                    r.redraw(now_anyway=True)
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
        notes += r.add_rows(rows)
        gpu_rows, gpu_notes = self.tail.gpu_rows(GPU_BYTES)
        r.add_gpu_rows(gpu_rows)
        if not self.tail.gpu.skipped:
            # line i of gpu.jsonl is sample i: old samples can be read back from it
            r.drop_old_gpu(GPU_WINDOW_S, self.tail.gpu.lines, MIN_GPU_DROP)
        bins, wait_notes = self.tail.data_wait_rows(WAIT_BYTES)
        alerts, alert_notes = self.tail.alert_rows(ALERT_BYTES)
        r.add_alerts(alerts)
        for note in (*notes, *gpu_notes, *wait_notes, *alert_notes):
            self._note(r, note)
        r.settle_start()
        r.add_waits(bins)
        self.apply_meta(r, meta)
        status = meta.get("status")
        caught_up = self.tail.caught_up
        ended = caught_up and status in ENDED_WORDS
        # The writer dies right after it writes "finished": a dead writer is believed only on
        # the pass after, which reads run.json again (and the rows before it) first.
        dead = caught_up and not ended and writer_alive(meta) is False
        gone, self.dead_seen = dead and self.dead_seen, dead
        self.read_world(r, now_anyway=ended or gone)
        if self.rank_tails is not None:  # the by-rank charts: what every rank added since
            (self.rank_tails.read_all if ended or gone else self.rank_tails.read)(r, self.ranks)
        if ended or gone:
            why = [f"ended with {meta['error']}"] if meta.get("error") else []
            if gone:
                why.append(f"the process writing this run (pid {meta.get('pid')}) is gone: it was killed "
                           "or crashed before ending the run")
            r.ended(State.saved(status) if ended else State.UNFINISHED, meta.get("ended"), why, "following:")
            return True
        r.state = FOLLOWING if status == State.RUNNING or not isinstance(status, str) else State.saved(status)
        # Behind (a long log being read): draw after every chunk, so the charts take in one
        # chunk's points at a time (a draw holds the new points as Python lists: all of a
        # million rows at once would be ~130 MB). Caught up: the live monitor's redraw pace.
        r.redraw(now_anyway=not caught_up)
        return False

    def read_world(self, r: MonitorRun, now_anyway: bool) -> None:
        """The launch's ranks and verdict, every WORLD_EVERY_S (RunFeed.set_world). A launch that
        cannot be read is a note; following rank 0 goes on."""
        if self.launch is None or (not now_anyway and time.monotonic() < self.world_due):
            return
        self.world_due = time.monotonic() + WORLD_EVERY_S
        try:
            launch = read_launch(self.launch)
        except OSError as exc:
            self._note(r, f"the launch {self.launch} could not be read ({type(exc).__name__}: {exc})")
            return
        for note in launch.notes:
            if note not in self.meta_notes and len(self.meta_notes) < MAX_NOTES:
                self.meta_notes.add(note)
                self._note(r, note)
        self.ranks = [(rank.rank, rank.host) for rank in launch.ranks]
        r.set_world(world_of(launch))

    def apply_meta(self, r: MonitorRun, meta: dict[str, Any]) -> None:
        """What run.json says about the run's shape (RunFeed.adopt_meta); a run shown as
        unfinished that run.json says runs again is followed again."""
        r.adopt_meta(meta)
        if r.state == State.UNFINISHED and meta.get("status") == State.RUNNING:
            r.state = FOLLOWING

    def _note(self, r: MonitorRun, note: str) -> None:
        self.notes += 1
        if self.notes <= MAX_NOTES:
            r.note(note)
