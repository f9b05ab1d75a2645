"""The world a monitor shows: the ranks of a torch.distributed launch, and the straggler among
them (TrainingMonitor's ``world_size``, ``ranks`` and ``straggler``).

A launch's directory (runs/launch_dir.py) is read whole by runs/launch_read.py; ``world_of``
turns it into a ``World`` (the ranks as dicts, and parallel/straggler.py's verdict), which reaches
the run through RunFeed's hook (``set_world``): once for ``load()``, every second for ``follow()``.
The header shows ``World.line()``. A single-process run has no World: it is one rank, itself.
"""
from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..parallel.env import host_name, rank_env
from ..parallel.straggler import RankTiming, Straggler, verdict
from ..runs.launch_dir import RANK_PREFIX, is_launch, rank_dir
from ..runs.launch_read import Launch, read_launch
from ..runs.saved_run import SavedRun, read_run
from .monitor_header import steps_done

ENDED = frozenset({"finished", "failed", "interrupted", "missing"})  # a rank that writes no heartbeat, rightly
LIVE_READ_S = 1.0  # a live rank 0 reads its launch at most this often (heartbeats change once a second)


@dataclass(frozen=True)
class World:
    world_size: int
    hosts: tuple[str, ...]
    ranks: tuple[dict[str, Any], ...]
    straggler: Straggler | None
    read_at: float = 0.0  # time.monotonic() when it was read
    status: str = "unknown"  # the launch's (launch_read.launch_status): failed if a rank failed...
    span: tuple[float | None, float | None] = (None, None)  # its wall time (Launch.span)

    def line(self) -> str:
        """"2 ranks on 2 hosts · rank 1 (node-b) waits ...", or the ranks' statuses when balanced."""
        n, h = self.world_size, len(self.hosts)
        head = f"{n} rank{'s' if n != 1 else ''}" + (f" on {h} host{'s' if h != 1 else ''}" if h else "")
        if self.straggler is not None:
            return f"{head} · {self.straggler.text}"
        counts: dict[str, int] = {}
        for r in self.ranks:
            counts[r["status"]] = counts.get(r["status"], 0) + 1
        return f"{head} · " + ", ".join(f"{c} {s}" for s, c in counts.items())


def world_of(launch: Launch, now: float | None = None) -> World:
    """The launch's ranks and the verdict at ``now`` (epoch seconds; default: now)."""
    now = time.time() if now is None else now
    timings = [RankTiming(r.rank, r.host, r.bins, r.heartbeat, live=r.status not in ENDED) for r in launch.ranks]
    return World(launch.world_size, tuple(launch.hosts), tuple(r.as_dict() for r in launch.ranks),
                 verdict(timings, now), time.monotonic(), launch.status, launch.span())


def launch_of(path: str | os.PathLike) -> Path | None:
    """``path`` when it is a launch directory (not one rank's run), else None."""
    if not isinstance(path, (str, os.PathLike)):
        return None
    p = Path(path).expanduser()
    try:
        return p if is_launch(p) else None
    except RecursionError:  # a run.json nested thousands deep: not a launch; reading it says why
        return None


def rank0_of(launch: Path) -> Path:
    """Rank 0's run directory: what load() and follow() show of a launch (its loss, its GPUs)."""
    first = rank_dir(launch, 0)
    if not first.is_dir():
        raise FileNotFoundError(f"{launch} is a launch without a rank-0 directory: rank 0 has not started yet "
                                "(or this machine does not share rank 0's run root); its other ranks are "
                                f"{', '.join(d.name for d in sorted(launch.glob(RANK_PREFIX + '*'))) or 'none'}")
    return first


def read_any(path: str | os.PathLike) -> SavedRun:
    """``read_run`` for load(): a launch is rank 0's run, with the launch beside it (``launch``)."""
    launch = launch_of(path)
    if launch is None:
        return read_run(path)
    saved = read_run(rank0_of(launch))
    saved.source = launch
    saved.launch = read_launch(launch)
    for note in saved.launch.notes:  # as read_run says its own
        warnings.warn(f"TrainingMonitor.load: {note}", RuntimeWarning, stacklevel=3)
    saved.notes.extend(saved.launch.notes)
    return saved


class WorldAttributes:
    """TrainingMonitor's ``world_size``, ``ranks`` and ``straggler``: of the launch it shows
    (loaded, followed, or live on rank 0), else of the single process it is."""

    _r: Any

    def _world(self) -> World | None:
        r = self._r
        if not r.run.readonly:  # live: a rank of a launch reads it (at most every LIVE_READ_S)
            w = r.world
            if w is None or time.monotonic() - w.read_at >= LIVE_READ_S:
                launch = _live_launch(r.writer.run_dir if r.res.run_log is not None else None)
                if launch is not None:
                    r.set_world(world_of(read_launch(launch)))
        return r.world

    @property
    def world_size(self) -> int:
        """Ranks in the launch this monitor shows; 1 for a single-process run."""
        w = self._world()
        return w.world_size if w is not None else 1

    @property
    def ranks(self) -> list[dict[str, Any]]:
        """One dict per rank: ``rank``, ``host``, ``status``, ``step`` (steps done)."""
        w = self._world()
        if w is not None:
            return [dict(d) for d in w.ranks]
        r = self._r
        host = r.host if r.run.readonly else host_name()
        return [{"rank": 0, "host": host, "status": str(r.run.state), "step": steps_done(r.records) or 0}]

    @property
    def straggler(self) -> dict[str, Any] | None:
        """None, or the rank that holds the launch back: ``rank``, ``host``, ``cause`` ("input",
        "compute" or "stalled") and ``excess_s`` (the seconds per step it loses against the
        median of the others). Its sentence is in the header."""
        w = self._world()
        return None if w is None or w.straggler is None else w.straggler.as_dict()


def _live_launch(run_dir: Path | None) -> Path | None:
    """The launch a live run records into: its run directory is one rank's, rank-<r>."""
    if run_dir is None or not run_dir.name.startswith(RANK_PREFIX):
        return None
    try:
        if rank_env() is None:
            return None
    except ValueError:
        return None
    return launch_of(run_dir.parent)
