"""Reading a finished (or killed) run back: a run-log directory, its steps.jsonl, or a file
written by ``TrainingMonitor.save()`` with its GPU samples beside it. A run-log directory may also
hold ``data_wait.jsonl`` (the steps' wait for data) and ``alerts.jsonl`` (alert episodes); run
logs written before they existed load without them."""
from __future__ import annotations

import json
import math
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .gpu_trace import FIELDS, TORCH_FIELDS
from .run_files import RunFileError, as_float, check_format, gpu_sibling, read_numbered, shown, step_row
from .run_log import ALERTS, DATA_WAIT, GPU, META, STEPS


@dataclass
class SavedRun:
    source: Path
    meta: dict[str, Any]
    rows: list[dict[str, Any]]
    gpu_rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    data_wait_rows: list[dict[str, Any]] = field(default_factory=list)  # data_wait.jsonl's bins
    alert_rows: list[dict[str, Any]] = field(default_factory=list)  # alerts.jsonl's lines

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
    notes: list[str] = []
    if run_dir is not None:
        meta = _read_meta(run_dir / META, notes)
        steps_path, gpu_path = run_dir / STEPS, run_dir / GPU
        if not steps_path.is_file():
            raise FileNotFoundError(f"{run_dir} is not a gpu-widgets run: it has no {STEPS}")
    else:
        if not p.is_file():
            raise FileNotFoundError(f"no such run or file: {p}")
        check_format(p, "load")
        meta, steps_path, gpu_path = {}, p, gpu_sibling(p)
    raw, step_notes = read_numbered(steps_path)
    notes.extend(step_notes)
    run = SavedRun(run_dir or p, meta, [step_row(r, f"{steps_path}: line {n}") for n, r in raw], [], notes)
    if gpu_path.is_file():
        gpu_rows, gpu_notes = read_numbered(gpu_path)
        run.notes.extend(gpu_notes)
        run.gpu_rows = [_gpu_row(r, f"{gpu_path}: line {n}") for n, r in gpu_rows]
    wait_path = run_dir / DATA_WAIT if run_dir is not None else None
    if wait_path is not None and wait_path.is_file():
        wait_rows, wait_notes = read_numbered(wait_path)
        run.notes.extend(wait_notes)
        run.data_wait_rows = [data_wait_row(r, f"{wait_path}: line {n}") for n, r in wait_rows]
    alerts_path = run_dir / ALERTS if run_dir is not None else None
    if alerts_path is not None and alerts_path.is_file():
        alert_rows, alert_notes = read_numbered(alerts_path)
        run.notes.extend(alert_notes)
        run.alert_rows = [alert_row(r, f"{alerts_path}: line {n}") for n, r in alert_rows]
    for note in run.notes:  # a script that loads a run sees them too, not only the widget
        warnings.warn(f"TrainingMonitor.load: {note}", RuntimeWarning, stacklevel=3)
    if meta.get("error"):
        run.notes.insert(0, f"ended with {meta['error']}")
    return run


_META_TYPES: dict[str, tuple[type, ...]] = {
    "title": (str,), "status": (str,), "error": (str,), "batch_size": (int,), "total_steps": (int,),
    "started": (int, float), "ended": (int, float),
}


def _read_meta(path: Path, notes: list[str]) -> dict[str, Any]:
    """``run.json``: the run's title and status. The steps are the user's data and load without
    it; what cannot be read from it is left out, with a note."""
    try:
        meta = json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, RecursionError) as exc:
        notes.append(f"{path.name} could not be read ({type(exc).__name__}); the run's title and status are unknown")
        return {}
    if not isinstance(meta, dict):
        notes.append(f"{path.name} is not a JSON object; the run's title and status are unknown")
        return {}
    for key, types in _META_TYPES.items():
        v = meta.get(key)
        if v is None:
            continue
        bad = isinstance(v, bool) or not isinstance(v, types)
        if not bad and key in ("batch_size", "total_steps"):
            bad = v <= 0
        if not bad and key in ("started", "ended"):
            try:
                bad = not math.isfinite(v)
            except OverflowError:
                bad = True
        if bad:
            notes.append(f"{path.name}: {key!r} is not what gpu-widgets writes ({shown(v)}); left out")
            del meta[key]
    return meta


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
    """Check one data-wait bin: ``{"time", "wait_s", "step_s", "steps"}``, seconds 0 or more,
    the wait part of the steps, at least one step."""
    steps = raw.get("steps")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise RunFileError(f"{where}: 'steps' must be a whole number from 1, got {shown(steps)}")
    values = {k: as_float(raw.get(k), k, where) for k in ("time", "wait_s", "step_s")}
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
