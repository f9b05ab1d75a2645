"""The file formats of a run: JSON Lines and CSV, for the logged steps and for the GPU samples.

Steps: one flat object per ``log()`` call, ``{"step": 12, "time": 1764680000.5, "loss": 0.31}``;
a key appears only in the rows it was logged in. Non-finite values are written as ``NaN``,
``Infinity`` and ``-Infinity`` (Python's ``json`` and ``pandas.read_json`` read them). In CSV an
empty cell is a key not logged in that row; ``nan``/``inf`` are the values.

Beside a file written by ``save("run.csv")`` (a run directory has its own ``run.json`` and
``alerts.jsonl``) go ``run.meta.json`` (what ``run.json`` says: batch size, the GPUs used) and,
for a run that had alerts, ``run.alerts.csv`` (the episodes, their texts as text cells).

GPU samples: one flat object per GPU per sample, ``{"time", "gpu", "name", "backend", <field>...}`` with
``throttle_reasons`` as a list (in CSV, the list as JSON). They live beside the steps: in a run
directory as ``gpu.jsonl``; for ``save("run.csv")`` as ``run.gpu.csv``.

CSV text cells (the header's keys, GPU names) that a spreadsheet would run as a formula (they start
with ``= + - @``, a tab or a carriage return: OWASP's list) get a leading apostrophe, as does text
that starts with one, so reading strips exactly one and gives the text back. Numbers are written
as numbers (``-0.5`` stays a number). JSON Lines hold the text as it is.

Reading names the file and line of anything that is not a run's row (``RunFileError``); the one
exception is a last line without its line end that does not read: the process stopped while
writing it, so it is skipped with a note. Only regular files are read, each line bounded
(``file_reads``).
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .file_reads import RunFileError, line_chunks, not_json, open_regular, parse_lines

__all__ = ["RunFileError"]  # raised here, defined beside the readers (gpu_widgets.RunFileError)
FORMATS = (".jsonl", ".csv")
_INT = re.compile(r"-?\d+\Z")
GPU_TEXT = frozenset({"name", "backend"})  # GPU sample files: the GPU's name, where readings came from
ALERT_TEXT = frozenset({"id", "kind", "severity", "uuid", "message"})  # an alerts file's text cells


def check_format(path: Path, verb: str = "save") -> str:
    suffix = path.suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"{verb}() reads and writes .jsonl or .csv files, got {str(path)!r}")
    return suffix


def gpu_sibling(path: Path) -> Path:
    """Where the GPU samples of a saved run go: ``run.csv`` -> ``run.gpu.csv``."""
    return path.with_name(f"{path.stem}.gpu{path.suffix}")


def alerts_sibling(path: Path) -> Path:
    """Where the alert episodes of a saved run go: ``run.csv`` -> ``run.alerts.csv``."""
    return path.with_name(f"{path.stem}.alerts{path.suffix}")


def meta_sibling(path: Path) -> Path:
    """Where what run.json would say of a saved run goes: ``run.csv`` -> ``run.meta.json``."""
    return path.with_name(f"{path.stem}.meta.json")


# One encoder for every row: json.dumps with options builds a new one per call (a third of the cost).
_ENCODER = json.JSONEncoder(separators=(",", ":"))


def dumps(row: Mapping[str, Any]) -> str:
    return _ENCODER.encode(row)


# -- writing ------------------------------------------------------------------------------------
def write_rows(path: Path, rows: Iterable[Mapping[str, Any]], columns: Sequence[str]) -> None:
    """Write rows as JSONL or CSV (by suffix). ``columns`` orders the CSV header. The file appears
    whole or not at all (written beside it, then renamed), so a kill mid-save tears nothing."""
    suffix = check_format(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8", newline="" if suffix == ".csv" else None) as f:
            if suffix == ".jsonl":
                for row in rows:
                    f.write(dumps(row) + "\n")
            else:
                writer = csv.writer(f)
                writer.writerow([_text(str(c)) for c in columns])
                for row in rows:
                    writer.writerow([_cell(row.get(c, _MISSING)) for c in columns])
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


_MISSING = object()
_FORMULA = ("=", "+", "-", "@", "\t", "\r", "'")  # OWASP's formula starters, and the escape itself


def _text(s: str) -> str:
    """A CSV text cell a spreadsheet shows as text instead of running it as a formula."""
    return "'" + s if s.startswith(_FORMULA) else s


def _untext(s: str) -> str:
    return s[1:] if s.startswith("'") else s


def _cell(v: Any) -> str:
    if v is _MISSING or v is None:
        return ""
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        return repr(v)  # round-trips exactly; nan/inf/-inf
    if isinstance(v, int):
        return str(v)  # exact at any size
    if isinstance(v, (list, tuple)):
        return json.dumps(list(v))  # starts with "[": never a formula
    return _text(str(v))


# -- reading ------------------------------------------------------------------------------------
Numbered = list[tuple[int, dict[str, Any]]]  # (line in the file, row)


def read_rows(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Rows of a JSONL or CSV file, and notes about anything skipped (a torn last line)."""
    rows, notes = read_numbered(path)
    return [r for _, r in rows], notes


def read_numbered(path: Path, skipped: list[str] | None = None,
                  text: frozenset[str] = GPU_TEXT) -> tuple[Numbered, list[str]]:
    """``read_rows`` with each row's line number, for messages about its values. A regular file
    only, every line bounded (``file_reads``); with ``skipped``, JSON lines that do not read are
    left out with a note there instead of raising. ``text``: the CSV columns read as text."""
    suffix = check_format(path, "load")
    with open_regular(path) as f:
        if suffix == ".jsonl":
            return _read_jsonl(f, path, skipped)
        # CSV: a quoted cell may hold a line end, so the csv module reads the text whole
        pieces = [b"\n".join(lines) + (b"\n" if complete else b"") for _, lines, complete in line_chunks(f, path)]
    return _read_csv(path, b"".join(pieces), text)


def torn_note(path: Path, n: int, why: str) -> str:
    return f"{path.name}: the last line was cut off (line {n}: {why}; the process stopped while writing it): skipped"


def _read_jsonl(f: Any, path: Path, skipped: list[str] | None) -> tuple[Numbered, list[str]]:
    rows: Numbered = []
    notes: list[str] = []
    for first, lines, complete in line_chunks(f, path, skipped):
        got, bad = parse_lines(lines, first)
        rows.extend(got)
        for n, why in bad:
            if not complete:  # no line end after it: the writer was stopped mid-line
                notes.append(torn_note(path, n, why))
            elif skipped is not None:
                skipped.append(f"{path}: line {n} {why}: skipped")
            else:
                raise RunFileError(f"{path}: line {n} {why}")
    return rows, notes


def _read_csv(path: Path, data: bytes, text_columns: frozenset[str] = GPU_TEXT) -> tuple[Numbered, list[str]]:
    notes: list[str] = []
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        n = data.count(b"\n", 0, exc.start) + 1
        last = data.rfind(b"\n") + 1  # where a line without a line end starts
        if exc.start < last:
            raise RunFileError(f"{path}: line {n} {not_json(exc)}") from None
        notes.append(torn_note(path, n, not_json(exc)))
        text = data[:last].decode("utf-8")  # the damage was all in that last line
    reader = csv.reader(io.StringIO(text, newline=""))
    records = []
    try:
        records = [(reader.line_num, cells) for cells in reader if cells]
    except csv.Error as exc:
        raise RunFileError(f"{path}: line {max(reader.line_num, 1)} is not CSV ({exc})") from None
    if not records:
        return [], notes
    n, cells = records[0]
    header = [_untext(c) for c in cells]
    dupes = sorted({c for c in header if header.count(c) > 1})
    if dupes:
        raise RunFileError(f"{path}: line {n}: the header names {dupes} more than once")
    rows: Numbered = []
    for i, (n, cells) in enumerate(records[1:], 2):
        try:
            rows.append((n, _csv_row(path, n, header, cells, text_columns)))
        except RunFileError as exc:
            if i < len(records) or text.endswith("\n"):
                raise
            notes.append(torn_note(path, n, str(exc).removeprefix(f"{path}: line {n}").lstrip(", ")))
    return rows, notes


def _csv_row(path: Path, n: int, header: list[str], cells: list[str], text_columns: frozenset[str]) -> dict[str, Any]:
    if len(cells) != len(header):
        raise RunFileError(f"{path}: line {n} has {len(cells)} cells, the header {len(header)}")
    row = {}
    for column, text in zip(header, cells):
        if text == "":
            continue
        try:
            row[column] = _parse_cell(column, text, text_columns)
        except (ValueError, RecursionError):
            raise RunFileError(f"{path}: line {n}, column {column!r}: {shown(text)} is not "
                               f"{'a JSON list' if column == 'throttle_reasons' else 'a number'}") from None
    return row


def _parse_cell(column: str, text: str, text_columns: frozenset[str]) -> Any:
    if column == "throttle_reasons":
        return json.loads(text)
    if column in text_columns:
        return _untext(text)
    if _INT.match(text):
        return int(text)
    return float(text)


def shown(v: Any) -> str:
    """A value for a message: damaged files can hold megabytes in one cell."""
    text = repr(v)
    return text if len(text) <= 80 else text[:60] + f"... ({len(text)} characters)"


def step_row(raw: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Check one loaded step row: a whole step, a time, numeric values (what ``log()`` accepts)."""
    step = raw.get("step")
    if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step < 2**63:
        raise RunFileError(f"{where}: 'step' must be a whole number from 0 to 2**63-1, got {shown(step)}")
    t = raw.get("time")
    row: dict[str, Any] = {"step": step, "time": math.nan if t is None else as_float(t, "time", where)}
    for k, v in raw.items():
        if k in ("step", "time"):
            continue
        as_float(v, k, where)  # log() refuses ints beyond a float's range too: they cannot be plotted
        row[k] = v
    return row


def as_float(v: Any, key: str, where: str) -> float:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        try:
            return float(v)
        except OverflowError:
            raise RunFileError(f"{where}: {key!r} is an int of {v.bit_length()} bits, beyond a float's range") from None
    raise RunFileError(f"{where}: {key!r} must be a number, got {shown(v)}")
