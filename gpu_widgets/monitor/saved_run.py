"""Reading a finished (or killed) run back: a run-log directory, its steps.jsonl, or a file
written by ``TrainingMonitor.save()`` with its GPU samples beside it."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .run_files import RunFileError, check_format, gpu_sibling, read_rows, step_row
from .run_log import GPU, META, STEPS, read_meta


@dataclass
class SavedRun:
    source: Path
    meta: dict[str, Any]
    rows: list[dict[str, Any]]
    gpu_rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def title(self) -> str:
        return self.meta.get("title") or self.source.stem

    @property
    def started(self) -> float | None:
        times = [r["time"] for r in self.rows if not math.isnan(r["time"])]
        return self.meta.get("started") or (min(times) if times else None)

    @property
    def ended(self) -> float | None:
        times = [r["time"] for r in self.rows if not math.isnan(r["time"])]
        return self.meta.get("ended") or (max(times) if times else None)


def read_run(path: str | os.PathLike) -> SavedRun:
    p = Path(path).expanduser()
    if p.is_dir():
        run_dir: Path | None = p
    elif p.name == STEPS and (p.parent / META).is_file():
        run_dir = p.parent
    else:
        run_dir = None
    if run_dir is not None:
        meta = read_meta(run_dir)
        steps_path, gpu_path = run_dir / STEPS, run_dir / GPU
        if not steps_path.is_file():
            raise FileNotFoundError(f"{run_dir} is not a gpu-widgets run: it has no {STEPS}")
    else:
        if not p.is_file():
            raise FileNotFoundError(f"no such run or file: {p}")
        check_format(p, "load")
        meta, steps_path, gpu_path = {}, p, gpu_sibling(p)
    raw, notes = read_rows(steps_path)
    run = SavedRun(run_dir or p, meta, [step_row(r, f"{steps_path}, row {i}") for i, r in enumerate(raw, 1)], [], notes)
    if gpu_path.is_file():
        gpu_rows, gpu_notes = read_rows(gpu_path)
        run.notes.extend(gpu_notes)
        for i, r in enumerate(gpu_rows, 1):
            if not isinstance(r.get("time"), (int, float)) or not isinstance(r.get("gpu"), int):
                raise RunFileError(f"{gpu_path}, row {i}: a GPU sample needs a numeric 'time' and 'gpu'")
        run.gpu_rows = gpu_rows
    if meta.get("error"):
        run.notes.insert(0, f"ended with {meta['error']}")
    return run
