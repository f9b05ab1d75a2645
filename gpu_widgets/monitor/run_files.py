"""The file formats of a run: JSON Lines and CSV, for the logged steps and for the GPU samples.

Steps: one flat object per ``log()`` call, ``{"step": 12, "time": 1764680000.5, "loss": 0.31}``;
a key appears only in the rows it was logged in. Non-finite values are written as ``NaN``,
``Infinity`` and ``-Infinity`` (Python's ``json`` and ``pandas.read_json`` read them). In CSV an
empty cell is a key not logged in that row; ``nan``/``inf`` are the values.

GPU samples: one flat object per GPU per sample, ``{"time", "gpu", "name", "backend", <field>...}`` with
``throttle_reasons`` as a list (in CSV, the list as JSON). They live beside the steps: in a run
directory as ``gpu.jsonl``; for ``save("run.csv")`` as ``run.gpu.csv``.
"""
from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

FORMATS = (".jsonl", ".csv")
_INT = re.compile(r"-?\d+\Z")
_TEXT_COLUMNS = frozenset({"name", "backend"})  # GPU sample files: the GPU's name, where readings came from


class RunFileError(ValueError):
    """A file that is not a readable run; the message names the file and the line."""


def check_format(path: Path, verb: str = "save") -> str:
    suffix = path.suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"{verb}() reads and writes .jsonl or .csv files, got {str(path)!r}")
    return suffix


def gpu_sibling(path: Path) -> Path:
    """Where the GPU samples of a saved run go: ``run.csv`` -> ``run.gpu.csv``."""
    return path.with_name(f"{path.stem}.gpu{path.suffix}")


# One encoder for every row: json.dumps with options builds a new one per call (a third of the cost).
_ENCODER = json.JSONEncoder(separators=(",", ":"))


def dumps(row: Mapping[str, Any]) -> str:
    return _ENCODER.encode(row)


# -- writing ------------------------------------------------------------------------------------
def write_rows(path: Path, rows: Iterable[Mapping[str, Any]], columns: Sequence[str]) -> None:
    """Write rows as JSONL or CSV (by suffix). ``columns`` orders the CSV header."""
    if check_format(path) == ".jsonl":
        with open(path, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(dumps(row) + "\n")
        return
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        for row in rows:
            writer.writerow([_cell(row.get(c, _MISSING)) for c in columns])


_MISSING = object()


def _cell(v: Any) -> str:
    if v is _MISSING or v is None:
        return ""
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        return repr(v)  # round-trips exactly; nan/inf/-inf
    if isinstance(v, (list, tuple)):
        return json.dumps(list(v))
    return str(v)


# -- reading ------------------------------------------------------------------------------------
def read_rows(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Rows of a JSONL or CSV file, and notes about anything skipped (a torn last line)."""
    if check_format(path, "load") == ".jsonl":
        return _read_jsonl(path)
    return _read_csv(path), []


def _read_jsonl(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    rows, notes = [], []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            if n == len(lines):  # no newline after it: the writer was stopped mid-line
                notes.append(f"{path.name}: the last line was cut off (the process stopped while writing it); skipped")
                continue
            raise RunFileError(f"{path}: line {n} is not JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise RunFileError(f"{path}: line {n} is not a JSON object")
        rows.append(row)
    return rows, notes


def _parse_cell(column: str, text: str) -> Any:
    if column == "throttle_reasons":
        return json.loads(text)
    if column in _TEXT_COLUMNS:
        return text
    if _INT.match(text):
        return int(text)
    return float(text)


def _read_csv(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            return []
        rows = []
        for n, cells in enumerate(reader, 2):
            row = {}
            for column, text in zip(header, cells):
                if text == "":
                    continue
                try:
                    row[column] = _parse_cell(column, text)
                except ValueError:
                    raise RunFileError(f"{path}: line {n}, column {column!r}: {text!r} is not a number") from None
            rows.append(row)
        return rows


def step_row(raw: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Check one loaded step row: a whole step, a time, numeric values."""
    step = raw.get("step")
    if not isinstance(step, int) or isinstance(step, bool):
        raise RunFileError(f"{where}: 'step' must be a whole number, got {step!r}")
    t = raw.get("time")
    if t is not None and not isinstance(t, (int, float)):
        raise RunFileError(f"{where}: 'time' must be a number, got {t!r}")
    row: dict[str, Any] = {"step": step, "time": math.nan if t is None else float(t)}
    for k, v in raw.items():
        if k in ("step", "time"):
            continue
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            raise RunFileError(f"{where}: {k!r} must be a number, got {v!r}")
        row[k] = v
    return row
