"""Reading a whole launch back (its layout: launch_dir.py): the launch's run.json and, for each
rank, its run.json, status, steps done, host, recent data-wait bins and heartbeat.

Every file is untrusted, as in any run directory: a damaged or missing file is a note naming the
file (and the line), never an exception, and what is read is bounded: at most MAX_RANKS rank
directories (a larger world size in run.json is a note), run.json files of at most 1 MiB, and of
data_wait.jsonl only its last TAIL_BIN_BYTES (the recent bins: what the verdict judges).

``gpu-widgets runs`` reads launches with ``detail=False``: run.json of each rank and rank 0's
steps, a few small reads per rank, and no numpy (the bins' check, in saved_run, loads it).
"""
from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .file_reads import RunFileError, open_regular, parse_lines, steps_done
from .follow import status_word
from .launch_dir import MAX_RANKS, rank_dirs, read_heartbeat
from .run_log import DATA_WAIT, STEPS
from .run_meta import read_meta

TAIL_BIN_BYTES = 32 * 1024  # ~450 bins of ~70 bytes: minutes of half-second bins, far more than judged
MAX_BINS = 256
MAX_NOTES = 40  # per launch; then a count
MAX_NOTES_PER_FILE = 5
MAX_HOST = 256
MISSING = "missing"  # a rank the world size counts whose directory is not there (yet)
_LIVE = ("running", "idle")


@dataclass
class RankRun:
    """One rank of a launch as read from its directory."""

    rank: int
    path: Path | None  # None: missing
    meta: dict[str, Any] = field(default_factory=dict)
    status: str = MISSING
    steps: int | None = None  # steps done (listing's count); None when not read (detail=False)
    host: str | None = None
    bins: list[dict[str, Any]] = field(default_factory=list)  # its recent data-wait bins, oldest first
    heartbeat: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        """What ``TrainingMonitor.ranks`` lists for it."""
        return {"rank": self.rank, "host": self.host, "status": self.status, "step": self.steps or 0}


@dataclass
class Launch:
    path: Path
    meta: dict[str, Any]  # the launch's run.json, checked as any run.json
    title: str
    world_size: int
    status: str  # aggregated from the ranks (launch_status)
    hosts: list[str]
    ranks: list[RankRun]  # one per rank 0..world_size-1 (missing ones included), by rank
    notes: list[str]

    def span(self) -> tuple[float | None, float | None]:
        """The launch's wall time: from its first rank's start to its last rank's end (None while
        a rank runs); from the launch's run.json where no rank says."""
        starts = [r.meta["started"] for r in self.ranks if r.meta.get("started") is not None]
        ends = [r.meta["ended"] for r in self.ranks if r.meta.get("ended") is not None]
        started = min(starts) if starts else self.meta.get("started")
        if self.status == "running":
            return started, None
        return started, max(ends) if ends else self.meta.get("ended")


def launch_status(statuses: Iterable[str]) -> str:
    """A launch's status from its ranks': failed if any failed, else running while any runs (or
    is idle), else interrupted if any was, else finished when all finished, else unfinished."""
    seen = list(statuses)
    if "failed" in seen:
        return "failed"
    if any(s in _LIVE for s in seen):
        return "running"
    if "interrupted" in seen:
        return "interrupted"
    return "finished" if seen and all(s == "finished" for s in seen) else "unfinished"


def world_size(meta: dict[str, Any], ranks: Iterable[int], notes: list[str] | None = None) -> int:
    """The launch's world size: run.json's (a whole number from 1 to MAX_RANKS), else one more
    than the highest rank directory; never less than that."""
    top = max(ranks, default=-1) + 1
    given = meta.get("world_size")
    if type(given) is int and 1 <= given <= MAX_RANKS:
        if top > given and notes is not None:
            notes.append(f"run.json says world_size {given}, but there is a rank-{top - 1} directory")
        return max(given, top)
    if given is not None and notes is not None:
        notes.append(f"run.json: 'world_size' is not a whole number from 1 to {MAX_RANKS} ({str(given)[:40]}); "
                     "counted from the rank directories")
    return max(top, 1)


def read_launch(path: str | os.PathLike, *, detail: bool = True) -> Launch:
    """The launch in directory ``path``. ``detail``: also each rank's steps, recent bins and
    heartbeat (without it, only rank 0's steps)."""
    path = Path(path)
    notes: list[str] = []
    meta, meta_notes = read_meta(path)
    notes.extend(meta_notes)
    found = dict(rank_dirs(path, notes))
    size = world_size(meta, found, notes)
    ranks = []
    for rank in range(size):
        where = found.get(rank)
        ranks.append(RankRun(rank, None) if where is None else _rank(rank, where, detail or rank == 0, detail, notes))
    absent = [r.rank for r in ranks if r.path is None]
    if absent:
        shown = ", ".join(map(str, absent[:8])) + (f" and {len(absent) - 8} more" if len(absent) > 8 else "")
        many = len(absent) > 1
        notes.append(f"{path}: no {'directories' if many else 'directory'} for rank{'s' if many else ''} {shown} "
                     f"(of {size})")
    if found:
        status = launch_status(r.status for r in ranks)
    else:  # only rank 0's view of itself, in the launch's run.json
        status = status_word(meta)
    hosts = sorted({r.host for r in ranks if r.host})
    if not hosts and isinstance(meta.get("hosts"), list):
        hosts = sorted({h[:MAX_HOST] for h in meta["hosts"][:MAX_RANKS] if isinstance(h, str) and h})
    title = meta.get("title")
    if len(notes) > MAX_NOTES:
        notes[MAX_NOTES:] = [f"{path}: {len(notes) - MAX_NOTES} more notes"]
    return Launch(path, meta, title if isinstance(title, str) and title else path.name, size, status, hosts,
                  ranks, notes)


def _rank(rank: int, path: Path, steps: bool, detail: bool, notes: list[str]) -> RankRun:
    meta, meta_notes = read_meta(path)
    notes.extend(f"{path.name}: {n}" for n in meta_notes)
    host = meta.get("host")
    run = RankRun(rank, path, meta, status_word(meta), host=host[:MAX_HOST] if isinstance(host, str) and host else None)
    if steps:
        run.steps, note = steps_done(path / STEPS)
        if note:
            notes.append(note)
    if detail:
        run.bins = recent_bins(path / DATA_WAIT, notes)
        run.heartbeat = read_heartbeat(path, notes)  # nesting too deep is a note there (load_json)
    return run


def recent_bins(path: Path, notes: list[str]) -> list[dict[str, Any]]:
    """The last bins of a data_wait.jsonl (at most MAX_BINS, from its last TAIL_BIN_BYTES), each
    checked as load() checks them; a bad line is a note naming it (counted from the end when the
    file is longer than what is read)."""
    from .saved_run import data_wait_row  # loads numpy: only when bins are wanted

    try:
        with open_regular(path) as f:
            size = f.seek(0, os.SEEK_END)
            start = max(0, size - TAIL_BIN_BYTES)
            f.seek(start)
            data = f.read(TAIL_BIN_BYTES)
    except FileNotFoundError:
        return []  # a rank that timed no data wait
    except RunFileError as exc:
        notes.append(f"{exc}: not read")
        return []
    except OSError as exc:
        notes.append(f"{path} cannot be read ({exc.strerror or type(exc).__name__})")
        return []
    lines = data.split(b"\n")
    lines.pop()  # after the last line end: empty, or a line still being written
    if start > 0 and lines:
        lines.pop(0)  # cut by the start of the read
    total = len(lines)

    def where(n: int) -> str:
        return f"{path}: line {n}" if start == 0 else f"{path}: line {total - n + 1} from the end"

    bad: list[str] = []
    rows, unread = parse_lines(lines, 1)
    bad += [f"{where(n)} {why}: skipped" for n, why in unread]
    out = []
    for n, row in rows:
        try:
            out.append(data_wait_row(row, where(n)))
        except RunFileError as exc:
            bad.append(f"{exc}: skipped")
    notes.extend(bad[:MAX_NOTES_PER_FILE])
    if len(bad) > MAX_NOTES_PER_FILE:
        notes.append(f"{path}: {len(bad) - MAX_NOTES_PER_FILE} more lines skipped")
    return out[-MAX_BINS:]
