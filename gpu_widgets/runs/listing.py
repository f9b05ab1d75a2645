"""The runs in a run-log directory, newest first: what ``gpu-widgets runs`` prints.

Cheap on big runs: the step count comes from the first and the last line of steps.jsonl (a few
KB read from each end), never from reading the whole file.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .follow import status_word
from .run_log import META, STEPS, read_meta

TAIL_BYTES = 64 * 1024  # the last line of steps.jsonl lies within this many bytes of the end


@dataclass
class RunInfo:
    name: str  # the run's title
    status: str
    steps: int  # steps done, as the monitor's header counts them
    started: float | None  # seconds since the epoch
    updated: float | None  # the newest change to any of its files
    directory: str

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def list_runs(root: Path) -> list[RunInfo]:
    """Every run directory (one holding run.json) directly under ``root``, newest start first."""
    runs = []
    for p in root.iterdir():
        if p.is_dir() and (p / META).is_file():
            runs.append(run_info(p))
    runs.sort(key=lambda r: (r.started or r.updated or 0.0, r.directory), reverse=True)
    return runs


def run_info(path: Path) -> RunInfo:
    meta = read_meta(path)
    updated = None
    for f in path.iterdir():
        try:
            updated = max(updated or 0.0, f.stat().st_mtime)
        except OSError:
            continue
    title = meta.get("title")
    return RunInfo(
        name=title if isinstance(title, str) and title else path.name,
        status=status_word(meta),
        steps=steps_done(path / STEPS),
        started=_time(meta.get("started")),
        updated=updated,
        directory=str(path),
    )


def _time(v: Any) -> float | None:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    return float(v) if ok else None


def steps_done(steps_file: Path) -> int:
    """Steps done: the last step logged + 1 when steps count from 0, else the last step (as the
    monitor's header shows it); 0 without a readable row."""
    try:
        with open(steps_file, "rb") as f:
            first = _step(f.readline())
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - TAIL_BYTES))
            lines = f.read().split(b"\n")
    except OSError:
        return 0
    for line in reversed(lines):
        last = _step(line)
        if last is not None:
            return last + 1 if first == 0 else last
    return 0


def _step(line: bytes) -> int | None:
    try:
        step = json.loads(line).get("step")
    except (ValueError, AttributeError, RecursionError):
        return None
    return step if type(step) is int and step >= 0 else None
