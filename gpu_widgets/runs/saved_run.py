"""Reading a finished (or killed) run back: a run-log directory, its steps.jsonl, or a file
written by ``TrainingMonitor.save()`` with its GPU samples beside it. A run-log directory may also
hold ``data_wait.jsonl`` (the steps' wait for data) and ``alerts.jsonl`` (alert episodes); run
logs written before they existed load without them. A saved file may have ``.meta.json`` (run.json's
fields) and ``.alerts.csv``/``.alerts.jsonl`` beside it (``run_files``).

Every file is untrusted (``file_reads``: regular files only, lines bounded). The steps go straight
into the compact columns a live run fills (``Records``), a chunk of lines at a time, so loading
holds about the file's size, never a dict per row. A damaged step line raises ``RunFileError``
naming the file and line (the steps are the run); a damaged line in a side file (GPU samples,
data wait, alerts) is left out with a note and the rest loads."""
from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .file_reads import checked_rows, line_chunks, open_regular, parse_lines
from .gpu_trace import FIELDS, TORCH_FIELDS
from .records import Records
from .run_files import (ALERT_TEXT, GPU_TEXT, RunFileError, alerts_sibling, as_float, check_format, gpu_sibling, meta_sibling,
                        read_numbered, shown, step_row, torn_note)
from .run_log import ALERTS, DATA_WAIT, GPU, META, STEPS
from .run_meta import read_meta, read_meta_file

MAX_NOTES_PER_FILE = 20  # a file of a million bad lines says so in a few lines, not a million


@dataclass
class SavedRun:
    source: Path
    meta: dict[str, Any]
    records: Records = field(default_factory=Records)  # the steps, in columns
    gpu_rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    data_wait_rows: list[dict[str, Any]] = field(default_factory=list)  # data_wait.jsonl's bins
    alert_rows: list[dict[str, Any]] = field(default_factory=list)  # alerts.jsonl's lines
    launch: Any = None  # launch_read.Launch when a launch was loaded (the rest is its rank 0's run)

    @property
    def rows(self) -> list[dict[str, Any]]:
        """The steps as flat dicts (made on each call: ``records`` is what is kept)."""
        return self.records.rows()

    @property
    def title(self) -> str:
        return self.meta.get("title") or self.source.stem

    @property
    def started(self) -> float | None:
        times = [t for t in self.records.times if not math.isnan(t)]
        return self.meta.get("started") or (min(times) if times else None)

    @property
    def ended(self) -> float | None:
        times = [t for t in self.records.times if not math.isnan(t)]
        return self.meta.get("ended") or (max(times) if times else None)


def read_run(path: str | os.PathLike) -> SavedRun:
    p = Path(path).expanduser()
    if p.is_dir():
        run_dir: Path | None = p
    elif p.name == STEPS and _exists(p.parent / META):
        run_dir = p.parent
    else:
        run_dir = None
    notes: list[str] = []
    if run_dir is not None:
        meta, meta_notes = read_meta(run_dir)
        notes.extend(meta_notes)
        steps_path, gpu_path = run_dir / STEPS, run_dir / GPU
        if not _exists(steps_path):
            raise FileNotFoundError(f"{run_dir} is not a gpu-widgets run: it has no {STEPS}")
    else:
        if not _exists(p):
            raise FileNotFoundError(f"no such run or file: {p}")
        check_format(p, "load")
        meta, meta_notes = read_meta_file(meta_sibling(p))  # save() writes it; a file of your own has none
        notes.extend(meta_notes)
        steps_path, gpu_path = p, gpu_sibling(p)
    run = SavedRun(run_dir or p, meta, read_steps(steps_path, notes), notes=notes)
    run.gpu_rows = _side_file(gpu_path, _gpu_row, notes)
    if run_dir is not None:
        run.data_wait_rows = _side_file(run_dir / DATA_WAIT, data_wait_row, notes)
    run.alert_rows = _side_file(run_dir / ALERTS if run_dir is not None else alerts_sibling(p), alert_row, notes,
                                ALERT_TEXT)
    for note in run.notes:  # a script that loads a run sees them too, not only the widget
        warnings.warn(f"TrainingMonitor.load: {note}", RuntimeWarning, stacklevel=3)
    if meta.get("error"):
        run.notes.insert(0, f"ended with {meta['error']}")
    return run


def read_steps(path: Path, notes: list[str]) -> Records:
    """The steps of a JSONL or CSV file in columns, checked as ``log()`` checks them."""
    records = Records()
    if check_format(path, "load") == ".csv":
        rows, torn = read_numbered(path)
        notes.extend(torn)
        _append(records, rows, path)
        return records
    with open_regular(path) as f:
        for first, lines, complete in line_chunks(f, path):
            rows, bad = parse_lines(lines, first)
            if bad:
                n, why = bad[0]
                if complete:
                    raise RunFileError(f"{path}: line {n} {why}")
                notes.append(torn_note(path, n, why))
            _append(records, rows, path)
    return records


def _append(records: Records, rows: list[tuple[int, dict[str, Any]]], path: Path) -> None:
    for n, raw in rows:
        row = step_row(raw, f"{path}: line {n}")
        step, t = row.pop("step"), row.pop("time")
        try:
            records.append(step, t, row)
        except (ValueError, TypeError) as exc:
            raise RunFileError(f"{path}: line {n}: {exc}") from None


def _side_file(path: Path, check: Callable[[dict[str, Any], str], dict[str, Any]], notes: list[str],
               text: frozenset[str] = GPU_TEXT) -> list[dict[str, Any]]:
    """A side file's rows that read and pass ``check``; the rest are notes (at most
    MAX_NOTES_PER_FILE, then a count). Absent: no rows, no note. ``text``: its CSV text columns."""
    skipped: list[str] = []
    try:
        rows, torn = read_numbered(path, skipped, text)
    except FileNotFoundError:
        return []
    except (OSError, RunFileError) as exc:  # not a regular file, unreadable, a damaged CSV
        notes.append(f"{_why(exc, path)}: {path.name} was not loaded")
        return []
    notes.extend(torn)
    out, bad = checked_rows(rows, path, check)
    skipped += bad
    notes.extend(skipped[:MAX_NOTES_PER_FILE])
    if len(skipped) > MAX_NOTES_PER_FILE:
        notes.append(f"{path}: {len(skipped) - MAX_NOTES_PER_FILE:,} more lines skipped")
    return out


def _exists(path: Path) -> bool:
    """Whether anything is there; one that cannot be looked at (no permission) counts, so that
    opening it says why it cannot be read."""
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError:
        return True
    return True


def _why(exc: BaseException, path: Path) -> str:
    if isinstance(exc, RunFileError):
        return str(exc)
    return f"{path} could not be read ({getattr(exc, 'strerror', None) or type(exc).__name__})"


def _gpu_row(raw: dict[str, Any], where: str) -> dict[str, Any]:
    """Check one loaded GPU sample: the types the monitor's GPU columns hold."""
    gpu = raw.get("gpu")
    if isinstance(gpu, bool) or not isinstance(gpu, int) or not 0 <= gpu < 2**31:
        raise RunFileError(f"{where}: 'gpu' must be a GPU index (a whole number from 0), got {shown(gpu)}")
    as_float(raw.get("time"), "time", where)
    for f in (*FIELDS, *TORCH_FIELDS):
        if raw.get(f) is not None:
            as_float(raw[f], f, where)
    for f in ("name", "backend"):
        if raw.get(f) is not None and not isinstance(raw[f], str):
            raise RunFileError(f"{where}: {f!r} must be text, got {shown(raw[f])}")
    reasons = raw.get("throttle_reasons")
    if reasons is not None and not (isinstance(reasons, list) and all(isinstance(r, str) for r in reasons)):
        raise RunFileError(f"{where}: 'throttle_reasons' must be a list of names, got {shown(reasons)}")
    if raw.get("lost") not in (None, True, False, 0, 1):
        raise RunFileError(f"{where}: 'lost' must be true or false, got {shown(raw['lost'])}")
    return raw


def data_wait_row(raw: dict[str, Any], where: str) -> dict[str, Any]:
    """Check one data-wait bin: ``{"time", "wait_s", "step_s", "steps", "forward_s"?}``, seconds
    0 or more, the wait part of the steps, at least one step; ``forward_s`` (the model's forward
    over the bin's steps) only when the run timed a model."""
    steps = raw.get("steps")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise RunFileError(f"{where}: 'steps' must be a whole number from 1, got {shown(steps)}")
    keys = ("time", "wait_s", "step_s", *(("forward_s",) if "forward_s" in raw else ()))
    values = {k: as_float(raw.get(k), k, where) for k in keys}
    for k, v in values.items():
        if not math.isfinite(v) or (k != "time" and v < 0):
            raise RunFileError(f"{where}: {k!r} must be a finite number{'' if k == 'time' else ' of seconds, 0 or more'}, "
                               f"got {shown(raw.get(k))}")
    if values["wait_s"] > values["step_s"] * 1.001 + 1e-6:
        raise RunFileError(f"{where}: 'wait_s' ({shown(raw['wait_s'])}) is longer than 'step_s' "
                           f"({shown(raw['step_s'])}); the wait is part of the steps")
    return {**values, "steps": steps}


def alert_row(raw: dict[str, Any], where: str) -> dict[str, Any]:
    """Check one alert episode: ``id`` and ``kind`` text, ``gpu`` an index, ``start`` a time,
    ``end`` a time not before it or null (it lasted to the end of the run)."""
    for k in ("id", "kind"):
        if not isinstance(raw.get(k), str) or not raw[k]:
            raise RunFileError(f"{where}: {k!r} must be text, got {shown(raw.get(k))}")
    gpu = raw.get("gpu")
    if isinstance(gpu, bool) or not isinstance(gpu, int) or not 0 <= gpu < 2**31:
        raise RunFileError(f"{where}: 'gpu' must be a GPU index (a whole number from 0), got {shown(gpu)}")
    start = as_float(raw.get("start"), "start", where)
    end = None if raw.get("end") is None else as_float(raw["end"], "end", where)
    if not math.isfinite(start) or end is not None and not (math.isfinite(end) and end >= start):
        raise RunFileError(f"{where}: 'start' and 'end' must be finite times, the end not before the start, "
                           f"got {shown(raw.get('start'))} and {shown(raw.get('end'))}")
    for k in ("severity", "uuid", "message"):
        if raw.get(k) is not None and not isinstance(raw[k], str):
            raise RunFileError(f"{where}: {k!r} must be text, got {shown(raw[k])}")
    return {**raw, "start": start, "end": end}
