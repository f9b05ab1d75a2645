"""How a reader of a run log feeds a read-only MonitorRun: ``load()`` all at once (``show_saved``),
``follow()`` pass after pass (follower.Follower). These are the only ways in: the reader never
touches the run's parts (records, GPU trace, charts, alerts, state) itself. A launch's ranks and
verdict (world.World) come in through ``set_world``.
"""
from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Callable

from ..runs.saved_run import SavedRun
from .arguments import positive_int
from .run_state import State
from .launch_tails import LaunchTails
from .world import world_of

# Redrawing is a monitor's only work that can wait; keeping it to 0.3 % of one core keeps the
# whole monitor under 1 % of a training loop (docs/benchmarks.md, section 3). Live runs
# (MonitorRun.tick) and followed ones (redraw) are paced by it.
DRAW_CPU_SHARE = 0.003
# A launch's other ranks keep their GPU samples in memory as a followed rank 0 does (follower.py):
# the last hour, dropped in chunks (their gpu.jsonl holds the rest).
RANK_GPU_WINDOW_S = 3600.0
RANK_GPU_DROP = 256
LIVE_RANKS_S = 1.0  # rank 0's live view reads its other ranks this often (their bins close every 0.5 s)
LIVE_BYTES = 64 << 10  # per file and pass: the training loop shares this process (and its GIL)


class RunFeed:
    """MonitorRun's methods for a run read from its run log, not recorded here."""

    # Set by MonitorRun.__init__ (the parts these methods fill).
    run: Any
    records: Any
    trace: Any
    gpus: Any
    charts: Any
    progress: Any
    period: float
    draw_due: float
    tick_lock: Any
    follower: Any = None  # follower.Follower while another process's run is followed
    world: Any = None  # world.World: the launch shown (set_world); None: a single-process run
    host: str | None = None  # the host a loaded run was recorded on (its run.json)
    writer: Any
    live_tails: Any = None  # rank 0's live view of its launch: its other ranks, read (read_live_ranks)
    live_due = 0.0

    draw: Callable[[int], None]
    show_final: Callable[[], None]

    def show_saved(self, saved: SavedRun) -> None:
        """Show a saved run, read-only (TrainingMonitor.load)."""
        run, trace = self.run, self.trace
        run.readonly = self.gpus.readonly = True
        run.loaded_from = saved.source
        run.notes.extend(saved.notes)
        self.records.adopt(saved.records)  # the loaded columns themselves: no row is copied
        run.t0, run.t_end = saved.started, saved.ended
        trace.t0 = run.t0 or 0.0
        for r in saved.gpu_rows:
            trace.add_row(r)
        trace.status = "ok" if saved.gpu_rows else None
        self.gpus.adopt_saved(saved.meta)  # the GPUs its live view showed, shown the same way
        self.charts.waits.add_saved(saved.data_wait_rows, trace.t0)
        self.gpus.alerts.add_saved(saved.alert_rows)
        run.state = State.saved(saved.meta.get("status"))
        host = saved.meta.get("host")
        self.host = host if isinstance(host, str) else None
        if saved.launch is not None:
            self.set_world(world_of(saved.launch))
        self.draw(self.records.size)

    def read_ranks(self) -> None:
        """load() of a launch: every rank's bins and GPUs, read to their end (launch_tails) and drawn.
        (follow() reads them pass after pass on its thread instead.)"""
        launch, world = self.run.loaded_from, self.world
        if world is not None and launch is not None:
            LaunchTails(launch).read_all(self, [(d["rank"], d["host"]) for d in world.ranks])
            self.draw(self.records.size)

    def set_world(self, world: Any) -> None:
        """The launch's ranks and straggler verdict as read now (world.World), for the
        attributes and the header: once for load(), every second for follow(), on demand live.
        A launch read back (not rank 0's live view) gets its by-rank charts and labels from the start."""
        self.world = world
        if world is not None and self.run.readonly:
            for d in world.ranks:
                self._ranks(d["rank"], d["host"])

    # -- a launch's other ranks (launch_tails): its one view's by-rank charts and GPUs ---------------
    def add_rank_bins(self, rank: int, host: str | None, bins: Sequence[dict[str, Any]]) -> None:
        """A rank's data-wait bins: its lines on "step time by rank" and "data wait by rank"."""
        ranks = self._ranks(rank, host)
        if bins:
            ranks.add_bins(rank, bins, self.run.t0 if self.run.t0 is not None else bins[0]["time"])

    def add_rank_gpus(self, rank: int, host: str | None, rows: Sequence[dict[str, Any]], tail: Any) -> None:
        """A rank's (> 0) GPU samples; ``tail``: where they are read from (its gpu.jsonl: line i is
        sample i), so older samples leave memory as rank 0's do."""
        trace = self._ranks(rank, host).add_gpu_rows(rank, rows, self.trace.t0)
        if not tail.skipped:
            trace.spill_path = tail.file
            trace.drop_oldest(RANK_GPU_WINDOW_S, tail.lines, max(RANK_GPU_DROP, trace.kept // 16))

    def read_live_ranks(self) -> None:
        """Rank 0's live run, while displayed (the monitor's thread): what the launch's other ranks
        wrote, at most every LIVE_RANKS_S. Any other run: nothing (one attribute read)."""
        rec = self.writer.launch
        if rec.meta is None or rec.launch is None or rec.ranks is None or time.monotonic() < self.live_due:
            return
        self.live_due = time.monotonic() + LIVE_RANKS_S
        if self.live_tails is None:
            self.live_tails = LaunchTails(rec.launch)
        hosts = dict(rec.hosts)
        self.charts.by_rank().set_hosts(list(hosts.values()))
        self.live_tails.read(self, [(r, hosts.get(r)) for r in range(rec.ranks.world_size)], LIVE_BYTES)

    def _ranks(self, rank: int, host: str | None) -> Any:
        ranks = self.charts.by_rank()
        ranks.rank(rank, host)
        if self.world is not None:
            ranks.set_hosts(self.world.hosts)
        return ranks

    # -- follow(): a pass at a time -------------------------------------------------------------
    def follow_with(self, follower: Any, note: str, gpu_file: Path) -> None:
        """Followed from now by ``follower``; ``gpu_file``: the run's gpu.jsonl, from which GPU
        samples dropped from memory are read back (as a live run spills to its own)."""
        self.follower = follower
        self.run.followed = True
        self.run.notes.append(note)
        self.trace.spill_path = gpu_file

    def note(self, text: str) -> None:
        """A problem or remark the header shows (bounded by the run's own limits)."""
        self.run.problem(text)

    @property
    def state(self) -> Any:
        return self.run.state

    @state.setter
    def state(self, state: Any) -> None:
        self.run.state = state

    def started_at(self, t: float) -> None:
        """The run's start (seconds since the epoch), unless already known."""
        if self.run.t0 is None:
            self.run.t0 = self.trace.t0 = float(t)

    def add_rows(self, rows: Iterable[tuple[Any, float, dict[str, Any]]]) -> list[str]:
        """Logged steps (step, time, values); a row the records refuse is skipped, with a note."""
        notes = []
        for step, t, values in rows:
            try:
                self.records.append(step, t, values)
            except (ValueError, TypeError) as exc:
                notes.append(f"step {step}: {exc}: skipped")
        return notes

    def settle_start(self) -> None:
        """A start still unknown is the first logged row's time."""
        if self.records.size:
            self.started_at(self.records.times[0])

    def add_gpu_rows(self, rows: Sequence[dict[str, Any]]) -> None:
        for row in rows:
            self.trace.add_row(row)
        if rows:
            self.trace.status = "ok"

    def drop_old_gpu(self, window_s: float, lines: int, at_least: int) -> None:
        """Keep ``window_s`` of GPU samples in memory; ``lines`` of gpu.jsonl hold them all."""
        self.trace.drop_oldest(window_s, lines, max(at_least, self.trace.kept // 16))

    def add_alerts(self, rows: Sequence[dict[str, Any]]) -> None:
        self.gpus.alerts.add_saved(rows)  # marks and header lines, as the live run drew them

    def add_waits(self, bins: Sequence[dict[str, Any]]) -> None:
        """data_wait.jsonl's bins: the "data wait (%)" chart, the header's share and diagnosis."""
        if bins:
            self.charts.waits.add_saved(bins, self.run.t0 if self.run.t0 is not None else bins[0]["time"])

    def adopt_meta(self, meta: dict[str, Any]) -> None:
        """What run.json says about the run's shape; values gpu-widgets does not write are ignored."""
        started = meta.get("started")
        if _number(started):
            self.started_at(started)
        self.gpus.adopt_saved(meta)  # which GPUs it uses is written after its first sample
        for name in ("batch_size", "total_steps"):
            try:
                setattr(self.progress, name, positive_int(name, meta.get(name)))
            except (TypeError, ValueError):
                pass

    def ended(self, state: State, ended: Any, notes: Sequence[str], drop_prefix: str) -> None:
        """The followed run is over: its state, when it ended (else its last row's time), why;
        the notes starting with ``drop_prefix`` (about following) go. Drawn and shown as ended."""
        run = self.run
        run.state = state
        run.t_end = ended if _number(ended) else (self.records.times[-1] if self.records.size else None)
        run.notes.extend(notes)
        run.notes[:] = [n for n in run.notes if not n.startswith(drop_prefix)]
        self.redraw(now_anyway=True)
        self.show_final()

    def redraw(self, now_anyway: bool) -> None:
        """Draw what was fed, at the live run's pace (``period``, and at most DRAW_CPU_SHARE of
        a core), or now. Skipped when a draw holds the lock too long."""
        now = time.monotonic()
        if not now_anyway and now < self.draw_due:
            return
        if not self.tick_lock.acquire(timeout=10.0):
            return
        try:
            began = time.thread_time()
            self.run.guard("drawing", self.draw, self.records.size)
            self.draw_due = now + max(self.period, (time.thread_time() - began) / DRAW_CPU_SHARE)
        finally:
            self.tick_lock.release()


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf")
