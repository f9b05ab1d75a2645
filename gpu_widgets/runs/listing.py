"""The runs in a run-log directory, newest first: what ``gpu-widgets runs`` prints.

Cheap on big runs: the step count comes from the first and the last line of steps.jsonl (a few
KB read from each end), never from reading the whole file.

A launch (every rank of a torch.distributed run, launch_dir.py) is one row: its world size, its
status aggregated over the ranks (launch_read.launch_status), rank 0's steps. Its rank-<r>
directories are never rows of their own.

Every run directory is untrusted: one that cannot be read (no permission, a damaged or hostile
run.json, a FIFO for steps.jsonl) is listed with a note saying why, and never stops the others.
"""
from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .file_reads import RunFileError, steps_done
from .follow import status_word
from .launch_dir import RANK_PREFIX, is_launch, rank_dirs
from .launch_read import read_launch
from .run_log import META, STEPS
from .run_meta import read_meta


@dataclass
class RunInfo:
    name: str  # the run's title
    status: str
    steps: int  # steps done, as the monitor's header counts them
    started: float | None  # seconds since the epoch
    updated: float | None  # the newest change to any of its files
    directory: str
    note: str | None = None  # why some of it could not be read
    world_size: int = 1  # ranks of a launch; 1 for a single-process run

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def list_runs(root: Path) -> list[RunInfo]:
    """Every run directory (one holding run.json) and launch directly under ``root``, newest start
    first. ``root`` itself that cannot be read raises OSError; a run that cannot is listed with a note."""
    runs = []
    for p in root.iterdir():
        try:
            if not p.is_dir() or p.name.startswith(RANK_PREFIX):  # a launch's rank (when root is a launch)
                continue
            os.lstat(p / META)
        except (FileNotFoundError, NotADirectoryError):
            if not _is_launch(p):  # a launch whose run.json is on another machine still has its ranks
                continue
        except OSError as exc:  # a directory we may not look into: perhaps a run, certainly unreadable
            runs.append(_unreadable(p, exc))
            continue
        try:
            runs.append(launch_info(p) if _is_launch(p) else run_info(p))
        except (OSError, RunFileError) as exc:
            runs.append(_unreadable(p, exc))
    runs.sort(key=lambda r: (r.started or r.updated or 0.0, r.directory), reverse=True)
    return runs


def _is_launch(path: Path) -> bool:
    try:
        return is_launch(path)
    except RecursionError:  # a run.json nested thousands deep: not a launch (run_info says why)
        return False


def _unreadable(path: Path, exc: BaseException) -> RunInfo:
    why = str(exc) if isinstance(exc, RunFileError) else f"cannot be read ({getattr(exc, 'strerror', None) or exc})"
    return RunInfo(name=path.name, status="unreadable", steps=0, started=None, updated=None, directory=str(path),
                   note=why)


def run_info(path: Path) -> RunInfo:
    meta, notes = read_meta(path)
    updated = _newest(path)
    title = meta.get("title")
    steps, steps_note = steps_done(path / STEPS)
    if steps_note:
        notes.append(steps_note)
    return RunInfo(
        name=title if isinstance(title, str) and title else path.name,
        status=status_word(meta),
        steps=steps,
        started=_time(meta.get("started")),
        updated=_time(updated),
        directory=str(path),
        note="; ".join(notes) or None,
    )


def launch_info(path: Path) -> RunInfo:
    """A launch as one row: rank 0's steps, the ranks' status, the newest change in any rank."""
    launch = read_launch(path, detail=False)
    rank0 = launch.ranks[0]
    updated = max([t for t in [_newest(path), *(_newest(d) for _, d in rank_dirs(path))] if t is not None],
                  default=None)
    return RunInfo(
        name=launch.title, status=launch.status, steps=rank0.steps or 0,
        started=_time(launch.meta.get("started")) or _time(rank0.meta.get("started")), updated=_time(updated),
        directory=str(path), note="; ".join(launch.notes) or None, world_size=launch.world_size,
    )


def _newest(path: Path) -> float | None:
    """The newest change to a file directly in ``path``."""
    updated = None
    for f in path.iterdir():
        try:
            updated = max(updated or 0.0, f.stat().st_mtime)
        except OSError:
            continue
    return updated


def _time(v: Any) -> float | None:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    return float(v) if ok else None
