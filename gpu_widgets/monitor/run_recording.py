"""A run's record on disk: the run log's writer, its spill policy for GPU samples, the wait it
imposes on a loop that logs faster than rows can be written, and export to files.

The writer runs on the monitor's thread every WRITE_TICK_S (or flush_s if shorter). A loop that
logs faster than rows can be written waits in log() once the oldest unwritten row is a pass +
WRITE_SLACK_S old, so a killed kernel still loses under a second; a writer that keeps log()
waiting WAIT_LIMIT_S (a hung disk) is not waited for again.
"""
from __future__ import annotations

import math
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable

from ..runs.gpu_trace import GpuTrace
from ..runs.records import Records
from ..runs.run_files import alerts_sibling, check_format, gpu_sibling, meta_sibling, write_rows
from ..runs.run_log import GPU as GPU_FILE
from ..runs.run_log import RunLog, default_root, enabled_by_env, max_bytes_from_env, write_json
from . import run_state
from .background import Resources
from .monitor_header import steps_done
from .run_launch import LaunchRecording
from .run_state import RunState, State

WRITE_TICK_S = 0.25
WRITE_SLACK_S = 0.1
WAIT_LIMIT_S = 5.0
# Rows per write (about 0.1 s of serialising): each chunk reaches the OS as soon as it is built.
CHUNK_VALUES = 100_000
# GPU samples are forgotten (they stay in the run log) in chunks of at least this many, or a
# sixteenth of those kept: each drop moves the kept columns (about 1 ms for an hour of 8 GPUs).
MIN_GPU_DROP = 256


def run_root(run_log: Any) -> Path | None:
    """Where runs are written for the ``run_log=`` argument; None: not written."""
    if run_log is True:
        return default_root() if enabled_by_env() else None
    if run_log is False or run_log is None:
        return None
    if isinstance(run_log, (str, os.PathLike)):
        return Path(run_log).expanduser()
    raise TypeError(f"run_log must be True, False or a directory, got {run_log!r}")


def run_meta(title: str, started: float | None, batch_size: int | None, total_steps: int | None) -> dict[str, Any]:
    """run.json of a run that starts now (``gpus_used`` and ``gpu_summary`` once it has a sample;
    ``steps`` and ``log_calls`` when it stops)."""
    return {
        "title": title, "status": State.RUNNING, "started": started, "ended": None,
        "batch_size": batch_size, "total_steps": total_steps, "gpus_used": None, "gpu_summary": None,
        "pid": os.getpid(), "host": _hostname(), "gpu_widgets_version": _version(),
    }


def _hostname() -> str:
    try:
        return os.uname().nodename
    except AttributeError:  # Windows
        return os.environ.get("COMPUTERNAME", "")


def _version() -> str:
    from .._version import __version__

    return __version__


class RunWriter:
    """Writes one run's rows and GPU samples to its run log (``res.run_log``), on the monitor's thread."""

    def __init__(self, run: RunState, records: Records, trace: GpuTrace, res: Resources, root: Path | None,
                 flush_s: float, gpu_window_s: float | None) -> None:
        self.run, self.records, self.trace, self.res = run, records, trace, res
        self.root = root
        self.max_bytes = max_bytes_from_env() if root is not None else 0
        self.gpu_window_s = gpu_window_s
        self.write_s = min(WRITE_TICK_S, flush_s)
        self.lag = self.write_s + WRITE_SLACK_S
        self.gpu_unwritten: list[dict[str, Any]] = []
        self.written_rows = 0
        self.due = math.inf  # log() waits for this writer from this run_state.now() on
        self.written = threading.Event()  # set after each pass
        self.stuck = False  # it once kept log() waiting WAIT_LIMIT_S: never waited for again
        self.waits: Any = None  # the charts' StepTimes (data_wait): its half-second bins go to the run log too
        self.alerts: Any = None  # the run's MonitorAlerts: each episode's start and end go to alerts.jsonl
        # What the run learns as it goes (track()'s batch size, the GPUs it uses): run.json fields
        self.facts: Callable[[], dict[str, Any]] | None = None
        self.launch = LaunchRecording()  # a multi-rank run's place in its launch (run_launch)
        if root is not None:
            self.launch.check()  # RANK / WORLD_SIZE set but unsound: said now, not at the first step

    def open(self, meta: dict[str, Any], resumed: bool) -> None:
        """Start the run log (its directory is made on the monitor's thread: no I/O in the loop)."""
        if self.root is None or (resumed and self.res.run_log is not None):
            return  # off, or a resumed run: the monitor's thread reopens this run's files
        try:
            self.launch.start()
        except ValueError as exc:  # the variables changed since the monitor was made
            self.launch.ranks = None
            self.run.problem(f"recorded as a single process: {exc}")
        self.res.run_log = RunLog(self.root, meta, self.max_bytes)
        if self.waits is not None:
            self.waits.unsaved = []  # from now on closed bins wait here for the writer
        if self.alerts is not None:
            self.alerts.unsaved = []

    def arm(self) -> None:
        """A run starts or resumes: log() waits for the writer from one pass from now."""
        # Not while the ranks agree on their directory: rank 0 may start later than this rank.
        waits = self.res.run_log is not None and not self.stuck and not self.launch.pending(self.res.run_log)
        self.due = run_state.now() + self.lag if waits else math.inf

    def add_gpu_rows(self, rows: list[dict[str, Any]]) -> None:
        if self.res.run_log is not None:
            self.gpu_unwritten.extend(rows)

    def wait(self) -> float:
        """The writer is behind: the loop logs faster than rows can be written. Wait (the GIL
        released) while it catches up, so that rows on disk stay at most about a second old. A
        writer stuck longer than WAIT_LIMIT_S (a hung disk) is waited for no more."""
        res = self.res
        give_up = time.monotonic() + WAIT_LIMIT_S
        while True:
            now = run_state.now()
            if now < self.due:
                return now
            thread = res.thread
            if thread is None or not thread.is_alive():
                return now  # the run is stopping: its last pass writes everything
            if time.monotonic() > give_up:
                break
            self.written.clear()
            res.wake.set()
            self.written.wait(0.05)  # re-checked: a pass that was under way may not have caught up
        self.stuck = True
        self.due = math.inf
        self.run.problem(f"the run log fell more than {WAIT_LIMIT_S:g} s behind; log() no longer waits for it, "
                         "so a killed kernel may lose more than the last second of rows")
        return run_state.now()

    def write(self, n: int, stopping: bool) -> None:
        """Write rows before ``n`` and the GPU samples not yet written; forget GPU samples the
        file holds that are older than ``gpu_window_s``."""
        if self.waits is not None:  # here, not only when drawing: an undisplayed monitor draws only at its end
            self.waits.drain(self.run.t0)
        rl = self.res.run_log
        if rl is None:
            return
        records = self.records
        try:
            if rl.path is None:
                if self.launch.ranks is not None:
                    self.run.notes.extend(self.launch.open(rl))
                else:
                    rl.open()
                self.run.notes.extend(f"run log: removed old run {p.name} (over the size limit)" for p in rl.pruned[:3])
            elif rl.closed:
                if not (self.run.state == State.RUNNING or stopping):
                    return  # closed when the run stopped; only a resumed run reopens it
                rl.reopen(status=State.RUNNING)
                self.run.guard("the launch's run.json", self.launch.reopened)
            chunk = max(100, CHUNK_VALUES // (2 + len(records.series)))
            while self.written_rows < n:
                end = min(n, self.written_rows + chunk)
                rl.write_steps(records.jsonl(self.written_rows, end))
                self.written_rows = end
                rl.flush()
            if self.gpu_unwritten:
                rows, self.gpu_unwritten = self.gpu_unwritten, []
                rl.write_gpu(rows)
            if self.waits is not None and self.waits.unsaved is not None:
                rl.write_data_wait(self.waits.take_unsaved(self.run.t0, final=stopping))
            if self.alerts is not None:
                rl.write_alerts(self.alerts.take_unsaved())
            rl.flush()
            self._note_facts(rl)
            self.run.guard("the launch's run.json", self.launch.tick)
            self.caught_up(n)
            if self.gpu_window_s is not None and rl.gpu_lines_flushed:
                trace = self.trace
                trace.spill_path = rl.path / GPU_FILE
                trace.drop_oldest(self.gpu_window_s, rl.gpu_lines_flushed, max(MIN_GPU_DROP, trace.kept // 16))
        except Exception as exc:
            self.res.run_log = None
            self.gpu_unwritten = []
            if self.waits is not None:
                self.waits.unsaved = None
            if self.alerts is not None:
                self.alerts.unsaved = None
            self.due = math.inf
            self.written.set()
            self.run.problem(f"run log stopped ({type(exc).__name__}: {exc}); the data stay in memory: "
                             "monitor.save(path) writes them")

    def known_facts(self) -> dict[str, Any]:
        """``facts()``, or nothing when they cannot be told now (the problem is recorded)."""
        out: dict[str, Any] = {}
        if self.facts is not None:
            self.run.guard("run log", lambda: out.update(self.facts()))  # type: ignore[misc]
        return out

    def _note_facts(self, rl: RunLog) -> None:
        """run.json rewritten (atomically) when a fact changed: a few times a run, not per pass,
        so a killed run's run.json still holds the batch size and GPUs its monitor showed."""
        changed = {k: v for k, v in self.known_facts().items() if rl.meta.get(k) != v}
        if changed:
            rl.update_meta(**changed)

    def caught_up(self, n: int) -> None:
        """Rows before ``n`` are on disk: log() may run on until the oldest row after them is two
        passes old (a row logged later than now is younger than now)."""
        records = self.records
        if not self.stuck:
            self.due = (records.times[n] if records.size > n else run_state.now()) + self.lag
        self.written.set()

    def close(self) -> None:
        """The run stopped: its last rows are written; run.json says how it ended."""
        rl = self.res.run_log
        if rl is not None and rl.path is not None:
            run = self.run
            run.guard("closing the run log", rl.close, status=run.state, ended=run.t_end, **self.known_facts(),
                      steps=steps_done(self.records), log_calls=self.records.size, error=run.detail())
            run.guard("closing the launch's run.json", self.launch.close, run.state, run.t_end)

    def mark(self) -> None:
        """A run that was not running ended (finish() or fail() after an idle cell): run.json says so."""
        rl = self.res.run_log
        if rl is not None and self.run.state in (State.FINISHED, State.FAILED, State.INTERRUPTED):
            run = self.run
            fields: dict[str, Any] = {"status": run.state, "ended": run.t_end or run_state.now()}
            if run.state != State.FINISHED:
                fields["error"] = run.detail()
            run.guard("run log", rl.update_meta, **fields)
            run.guard("the launch's run.json", self.launch.close, run.state, fields["ended"])

    @property
    def run_dir(self) -> Path | None:
        rl = self.res.run_log
        return rl.path if rl is not None else None


def all_gpu_rows(trace: GpuTrace, run: RunState, labels: str) -> list[dict[str, Any]]:
    """Every GPU sample of the run, those spilled to the run log read back from it."""
    try:
        return trace.rows(labels)
    except (OSError, ValueError) as exc:  # the run log lost the oldest samples (deleted, pruned)
        run.problem(f"the oldest {trace.dropped} GPU samples could not be read back from the run log "
                    f"({type(exc).__name__}: {exc}); only the last {trace.kept} are given")
        return trace.rows(labels, spilled=False)


def save_run(path: str | os.PathLike, rows: Callable[[], list[dict[str, Any]]], keys: tuple[str, ...],
             gpu_rows: Callable[[], list[dict[str, Any]]] | None,
             alerts: list[dict[str, Any]] | None = None, meta: dict[str, Any] | None = None) -> Path:
    """Write ``rows()`` to ``path`` (.csv or .jsonl) and beside it: when ``gpu_rows()`` gives
    any, the GPU samples (``run.csv`` -> ``run.gpu.csv``); the ``alerts`` episodes
    (``run.alerts.csv``); ``meta``, what run.json would say (``run.meta.json``)."""
    p = Path(path).expanduser()
    check_format(p)
    write_rows(p, rows(), ["step", "time", *keys])
    samples = gpu_rows() if gpu_rows is not None else []
    if samples:
        columns = list(dict.fromkeys(k for r in samples for k in r))
        write_rows(gpu_sibling(p), samples, columns)
    if alerts:
        write_rows(alerts_sibling(p), alerts, list(dict.fromkeys(k for r in alerts for k in r)))
    elif alerts is not None:
        alerts_sibling(p).unlink(missing_ok=True)  # an earlier save's to this path: not this run's
    if meta is not None:
        write_json(meta_sibling(p), meta)
    return p
