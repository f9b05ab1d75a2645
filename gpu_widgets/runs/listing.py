"""The runs in a run-log directory, newest first: what ``gpu-widgets runs`` prints.

Cheap on big runs: the step count comes from the first and the last line of steps.jsonl (a few
KB read from each end), never from reading the whole file.

Every run directory is untrusted: one that cannot be read (no permission, a damaged or hostile
run.json, a FIFO for steps.jsonl) is listed with a note saying why, and never stops the others.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .file_reads import MAX_LINE_BYTES, RunFileError, open_regular
from .follow import status_word
from .run_log import META, STEPS
from .run_meta import read_meta

TAIL_BYTES = 64 * 1024  # the last line of steps.jsonl lies within this many bytes of the end


@dataclass
class RunInfo:
    name: str  # the run's title
    status: str
    steps: int  # steps done, as the monitor's header counts them
    started: float | None  # seconds since the epoch
    updated: float | None  # the newest change to any of its files
    directory: str
    note: str | None = None  # why some of it could not be read

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def list_runs(root: Path) -> list[RunInfo]:
    """Every run directory (one holding run.json) directly under ``root``, newest start first.
    ``root`` itself that cannot be read raises OSError; a run that cannot is listed with a note."""
    runs = []
    for p in root.iterdir():
        try:
            if not p.is_dir():
                continue
            os.lstat(p / META)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:  # a directory we may not look into: perhaps a run, certainly unreadable
            runs.append(_unreadable(p, exc))
            continue
        try:
            runs.append(run_info(p))
        except (OSError, RunFileError) as exc:
            runs.append(_unreadable(p, exc))
    runs.sort(key=lambda r: (r.started or r.updated or 0.0, r.directory), reverse=True)
    return runs


def _unreadable(path: Path, exc: BaseException) -> RunInfo:
    why = str(exc) if isinstance(exc, RunFileError) else f"cannot be read ({getattr(exc, 'strerror', None) or exc})"
    return RunInfo(name=path.name, status="unreadable", steps=0, started=None, updated=None, directory=str(path),
                   note=why)


def run_info(path: Path) -> RunInfo:
    meta, notes = read_meta(path)
    updated = None
    for f in path.iterdir():
        try:
            updated = max(updated or 0.0, f.stat().st_mtime)
        except OSError:
            continue
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


def _time(v: Any) -> float | None:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    return float(v) if ok else None


def steps_done(steps_file: Path) -> tuple[int, str | None]:
    """Steps done: the last step logged + 1 when steps count from 0, else the last step (as the
    monitor's header shows it); 0 without a readable row. And why the file could not be read."""
    try:
        with open_regular(steps_file) as f:
            first = _step(f.readline(MAX_LINE_BYTES + 1))
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - TAIL_BYTES))
            lines = f.read(TAIL_BYTES).split(b"\n")
    except FileNotFoundError:
        return 0, None
    except RunFileError as exc:
        return 0, str(exc)
    except OSError as exc:
        return 0, f"{steps_file} cannot be read ({exc.strerror or type(exc).__name__})"
    for line in reversed(lines):
        last = _step(line)
        if last is not None:
            return (last + 1 if first == 0 else last), None
    return 0, None


def _step(line: bytes) -> int | None:
    try:
        step = json.loads(line).get("step")
    except (ValueError, AttributeError, RecursionError):
        return None
    return step if type(step) is int and 0 <= step < 2**63 else None
