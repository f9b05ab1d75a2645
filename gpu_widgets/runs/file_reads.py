"""Reading the files of a run directory, which are untrusted: anyone may have put anything there.

* Only regular files are read. A FIFO would block the reader forever and ``/dev/zero`` would fill
  memory, so a file is opened with ``O_NONBLOCK`` (opening a FIFO then returns at once) and its
  type is checked on the open descriptor (``fstat``), which leaves no gap for a swap between a check
  and the open. Anything else is a ``RunFileError`` that says what the file is.
* Every line read is bounded: ``MAX_LINE_BYTES``, far above the longest row gpu-widgets writes (a
  ``log()`` of a thousand keys is ~40 KB). Files are read in chunks of ``CHUNK_BYTES``, so the
  memory a read holds is a chunk plus one line, whatever the file's size.
* ``run.json`` is read whole, up to ``MAX_META_BYTES``.
* JSON nested deeper than Python's reader follows (``[`` a hundred thousand times) is a
  ``RunFileError`` that says so (``load_json``), not a bare ``RecursionError``.
"""
from __future__ import annotations

import codecs
import json
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

MAX_LINE_BYTES = 1 << 20  # 1 MiB
MAX_META_BYTES = 1 << 20
TAIL_BYTES = 64 * 1024  # the last line of steps.jsonl lies within this many bytes of the end
CHUNK_BYTES = 1 << 20
# A JSON string, or an unclosed one running to the end: possessive, so never rescanned (linear time).
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*+(?:"|\\?\Z)', re.S)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)


class RunFileError(ValueError):
    """A file that is not a readable run (damaged, or not written by gpu-widgets); the message
    names the file and the line."""


def load_json(data: bytes | str, what: Path | str) -> Any:
    """``json.loads`` of an untrusted file's text; ``what`` names it in the error. Nesting too deep
    for Python's reader is a ``RunFileError`` in words; other ``ValueError`` as json raises them."""
    try:
        return json.loads(data)
    except RecursionError:
        raise RunFileError(f"{what} is nested too deeply to read ({nesting(data):,} levels deep)") from None


def nesting(data: bytes | str) -> int:
    """How deep ``data``'s brackets nest, outside strings (only on the error path: a Python loop)."""
    raw = data.encode("utf-8", "replace") if isinstance(data, str) else data
    depth = deepest = 0
    for c in _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS):
        depth += 1 if c in b"[{" else -1
        deepest = max(deepest, depth)
    return deepest


def _kind(mode: int) -> str:
    for test, words in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                        (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return words
    return "not a regular file"


def open_regular(path: Path) -> BinaryIO:
    """``path`` opened for reading in binary, or ``RunFileError`` when it is not a regular file
    (``FileNotFoundError`` and other ``OSError`` as ``open`` raises them)."""
    fd = os.open(path, _OPEN_FLAGS)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise RunFileError(f"{path} is {_kind(mode)}, not a regular file (only those are read)")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_small(path: Path, limit: int) -> bytes:
    """A whole small file (``run.json``), refused when it is over ``limit`` bytes."""
    with open_regular(path) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise RunFileError(f"{path} is over {limit:,} bytes, far more than gpu-widgets writes there")
    return data


def too_long(path: Path, n: int) -> str:
    return f"{path}: line {n} is longer than {MAX_LINE_BYTES:,} bytes, the most a run's line may hold"


def line_chunks(f: BinaryIO, path: Path, skipped: list[str] | None = None,
                chunk_bytes: int = CHUNK_BYTES) -> Iterator[tuple[int, list[bytes], bool]]:
    """The lines of ``f`` in chunks: (number of the first line, lines without their line end,
    whether they are complete). The last line, when it has no line end, comes alone and not
    complete. A line over ``MAX_LINE_BYTES`` raises ``RunFileError``, or with ``skipped`` is left
    out (read past, never held) with a note there; the lines after it keep their numbers."""
    n, carry, skipping, first = 1, b"", False, True
    while data := f.read(chunk_bytes):
        if first:
            data, first = data.removeprefix(codecs.BOM_UTF8), False  # Excel's byte-order mark
        if skipping:  # inside a line that is too long: up to its end
            i = data.find(b"\n")
            if i < 0:
                continue
            data, skipping, n = data[i + 1:], False, n + 1
        data = carry + data if carry else data
        end = data.rfind(b"\n") + 1
        carry = data[end:]
        if end:
            lines = data[:end - 1].split(b"\n")
            if max(map(len, lines)) > MAX_LINE_BYTES:
                lines = [_bounded(line, path, n + i, skipped) for i, line in enumerate(lines)]
            yield n, lines, True
            n += len(lines)
        if len(carry) > MAX_LINE_BYTES:
            _bounded(carry, path, n, skipped)
            carry, skipping = b"", True
    if carry:
        yield n, [carry], False


def first_lines(f: BinaryIO, path: Path, n: int) -> Iterator[bytes]:
    """The first ``n`` lines of ``f`` (fewer at its end), each bounded by MAX_LINE_BYTES."""
    for i in range(1, n + 1):
        line = f.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        if len(line) > MAX_LINE_BYTES:
            raise RunFileError(too_long(path, i))
        yield line


def _bounded(line: bytes, path: Path, n: int, skipped: list[str] | None) -> bytes:
    if len(line) <= MAX_LINE_BYTES:
        return line
    if skipped is None:
        raise RunFileError(too_long(path, n))
    skipped.append(f"{too_long(path, n)}: skipped")
    return b""  # a blank line: its number stays taken


def not_json(exc: BaseException) -> str:
    """Why a line did not read, in words."""
    if isinstance(exc, UnicodeDecodeError):
        return f"is not UTF-8 text (byte {exc.start + 1}: {exc.reason})"
    if isinstance(exc, json.JSONDecodeError):
        return f"is not JSON ({exc.msg}, column {exc.colno})"
    if isinstance(exc, RecursionError):
        return "is not a run's row (JSON nested too deeply to read)"
    return "holds a number of more than 4300 digits"  # what int() refuses to read


Bad = list[tuple[int, str]]  # (line, why it is not a row)


def parse_lines(lines: list[bytes], first: int) -> tuple[list[tuple[int, dict[str, Any]]], Bad]:
    """Rows of lines numbered from ``first`` (blank lines skipped), and the lines that are not
    one. One json.loads for the whole chunk (the common case, several times faster than a call
    per line); line by line only when that fails."""
    text = b",".join(line for line in lines if line.strip())
    try:
        rows = json.loads(b"[" + text + b"]")
        if all(type(r) is dict for r in rows):
            if len(rows) == len(lines):
                return list(enumerate(rows, first)), []
            it = iter(rows)  # blank lines among them: number the rows by their lines
            return [(n, next(it)) for n, line in enumerate(lines, first) if line.strip()], []
    except (ValueError, RecursionError):
        pass
    out: list[tuple[int, dict[str, Any]]] = []
    bad: Bad = []
    for n, line in enumerate(lines, first):
        if not line.strip():
            continue
        try:
            row = json.loads(line.decode("utf-8"))
        except (ValueError, RecursionError) as exc:
            bad.append((n, not_json(exc)))
            continue
        if type(row) is not dict:
            bad.append((n, f"is not a JSON object, got {type(row).__name__}"))
            continue
        out.append((n, row))
    return out, bad


def checked_rows(rows: Any, file: Any, check: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """``(n, row)`` pairs through ``check(row, where)`` (load()'s row checks): the rows that pass, and a
    note for each that does not ("<file>: line n: why: skipped")."""
    out, skipped = [], []
    for n, row in rows:
        try:
            out.append(check(row, f"{file}: line {n}"))
        except RunFileError as exc:
            skipped.append(f"{exc}: skipped")
    return out, skipped


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
