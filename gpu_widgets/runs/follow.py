"""Reading a run log while another process writes it: only the lines added since the last read.

``RunTail`` keeps a byte offset per file and reads at most a given number of bytes a call, up to
the last complete line: a line the writer has not finished is read on a later call, whole. So a
reader of a run log of millions of steps holds one chunk at a time, never the whole file, and a
caller that draws between chunks shows progress while it catches up.

A damaged line in the middle is skipped with a note naming the file and line (the writer may
still be running: one bad line must not stop the view). Whether the writing process is still
alive is read from ``run.json`` (``pid``, ``host``): on the same host a dead pid means the run
was killed and will never end by itself.

The files are untrusted (``file_reads``): a file that is not a regular one (a FIFO) is named in a
note and not read; a line over ``MAX_LINE_BYTES`` is skipped with a note, never held whole. A file
that shrinks below what was read, or is replaced by another (a new inode), was truncated or
rewritten under the reader: reading on would mix two runs, so ``RunFileError`` says so.
"""
from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import Any

from .file_reads import MAX_LINE_BYTES, RunFileError, checked_rows, open_regular, parse_lines, too_long
from .run_log import ALERTS, DATA_WAIT, GPU, META, STEPS
from .run_meta import MAX_PID, read_meta

I64 = 2**63
ENDED_WORDS = frozenset({"finished", "failed", "interrupted"})


def resolve_run_dir(path: str | os.PathLike) -> Path:
    """The run directory for ``path`` (a run directory or its steps.jsonl), or an error saying
    what is wrong with it."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"follow() takes a run directory (a path), got {type(path).__name__} {path!r}")
    p = Path(path).expanduser()
    try:
        if p.is_file() and p.name == STEPS:
            p = p.parent
        if not p.exists():
            raise FileNotFoundError(f"no such run directory: {p} (`gpu-widgets runs` lists the recent runs)")
        if not p.is_dir():
            raise NotADirectoryError(f"{p} is a file, not a run directory; follow() takes the directory that "
                                     f"holds {META} and {STEPS} (load() reads saved files)")
        os.lstat(p / META)  # a FIFO or a damaged run.json is a note later; a missing one is not a run
    except FileNotFoundError:
        if p.is_dir():
            raise FileNotFoundError(f"{p} is not a gpu-widgets run: it has no {META}") from None
        raise
    except (NotADirectoryError, TypeError):
        raise
    except OSError as exc:  # no permission to look inside
        raise PermissionError(f"{p} cannot be read ({exc.strerror or type(exc).__name__}): follow() reads its "
                              f"{META} and {STEPS}") from None
    return p


def writer_alive(meta: dict[str, Any]) -> bool | None:
    """Whether the process that writes the run is alive: None when that cannot be told (another
    host, no pid in run.json, or Windows, where signal 0 is not a harmless probe)."""
    pid, host = meta.get("pid"), meta.get("host")
    if sys.platform == "win32" or not isinstance(pid, int) or isinstance(pid, bool) or not 0 < pid <= MAX_PID:
        return None
    if host and host != _hostname():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, another user's
    except (OSError, OverflowError):
        return None
    return True


def _hostname() -> str:
    try:
        return os.uname().nodename
    except AttributeError:
        return socket.gethostname()


def status_word(meta: dict[str, Any]) -> str:
    """The run's status as run.json says it, "unfinished" for a run whose writer died without
    ending it (killed), "unknown" when run.json says nothing."""
    status = meta.get("status")
    if not isinstance(status, str) or not status:
        return "unknown"
    if status in ("running", "idle") and writer_alive(meta) is False:
        return "unfinished"
    return status


class RunTail:
    """The new lines of one run directory's steps.jsonl and gpu.jsonl, read incrementally."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = resolve_run_dir(path)
        self.steps = _Tail(self.path / STEPS)
        self.gpu = _Tail(self.path / GPU)
        self.waits = _Tail(self.path / DATA_WAIT)  # absent in runs that time no data wait, and in older ones
        self.alerts = _Tail(self.path / ALERTS)  # absent in runs without alerts, and in older ones

    def meta(self) -> dict[str, Any]:
        return read_meta(self.path)[0]

    def meta_noted(self) -> tuple[dict[str, Any], list[str]]:
        """run.json, and notes about what could not be read from it."""
        return read_meta(self.path)

    def step_rows(self, max_bytes: int) -> tuple[list[tuple[int, float, dict[str, Any]]], list[str]]:
        """(step, time, values) of the complete new lines of steps.jsonl, and notes about lines skipped."""
        out: list[tuple[int, float, dict[str, Any]]] = []
        rows, notes = self.steps.read(max_bytes)
        where = self.steps.file
        for n, row in rows:
            step = row.pop("step", None)
            t = row.pop("time", None)
            if type(step) is not int or not 0 <= step < I64:
                notes.append(f"{where}: line {n}: 'step' is not a whole number from 0: skipped")
                continue
            if type(t) is not float:
                t = float(t) if type(t) is int else float("nan")
            out.append((step, t, row))
        return out, notes

    def gpu_rows(self, max_bytes: int) -> tuple[list[dict[str, Any]], list[str]]:
        from .saved_run import _gpu_row  # here: `gpu-widgets runs` imports this module and must stay numpy-free

        return _checked(self.gpu, max_bytes, _gpu_row)

    def data_wait_rows(self, max_bytes: int) -> tuple[list[dict[str, Any]], list[str]]:
        """The new bins of data_wait.jsonl (checked as load() checks them), and notes about lines skipped."""
        from .saved_run import data_wait_row

        return _checked(self.waits, max_bytes, data_wait_row)

    def alert_rows(self, max_bytes: int) -> tuple[list[dict[str, Any]], list[str]]:
        """The new lines of alerts.jsonl (checked as load() checks them), and notes about lines skipped."""
        from .saved_run import alert_row

        return _checked(self.alerts, max_bytes, alert_row)

    @property
    def caught_up(self) -> bool:
        """Everything complete in the four files has been read."""
        return self.steps.caught_up and self.gpu.caught_up and self.waits.caught_up and self.alerts.caught_up


class _Tail:
    """One JSON Lines file read from where the last read stopped."""

    def __init__(self, file: Path) -> None:
        self.file = file
        self.offset = 0
        self.lines = 0  # complete lines read (line numbers for notes, sample counts for spilling)
        self.skipped = 0  # of those, lines that were not a row
        self.caught_up = False
        self.identity: tuple[int, int] | None = None  # (device, inode) of the file read so far
        self.not_regular = False  # said once, then the file is left alone
        self.in_long_line = False  # reading past a line over MAX_LINE_BYTES

    def read(self, max_bytes: int) -> tuple[list[tuple[int, dict[str, Any]]], list[str]]:
        if self.not_regular:
            self.caught_up = True
            return [], []
        try:
            f = open_regular(self.file)
        except FileNotFoundError:
            if self.identity is not None:
                raise RunFileError(f"{self.file} was removed while being followed, after {self.lines:,} lines") from None
            self.caught_up = True  # made a moment after run.json, or a run without GPU samples
            return [], []
        except RunFileError as exc:
            self.not_regular = self.caught_up = True
            return [], [f"{exc}: not read"]
        with f:
            self._same_file(os.fstat(f.fileno()))
            f.seek(self.offset)
            data = f.read(max_bytes)
            more = bool(data) and len(data) == max_bytes and bool(f.read(1))
            whole_line = self.in_long_line or (more and data.rfind(b"\n") < 0)
            if whole_line:  # one line longer than a chunk: read it whole while it is bounded, else past it
                f.seek(self.offset)
                data = f.readline(MAX_LINE_BYTES + 1)
                more = data.endswith(b"\n") or len(data) > MAX_LINE_BYTES
        if whole_line and (self.in_long_line or len(data) > MAX_LINE_BYTES):
            self.caught_up = not more
            return [], self._past_long_line(data)
        end = data.rfind(b"\n") + 1
        self.caught_up = not more
        if end == 0:
            return [], []
        lines = data[:end - 1].split(b"\n")
        first = self.lines + 1
        self.offset += end
        self.lines += len(lines)
        rows, bad = parse_lines(lines, first)
        notes = [f"{self.file}: line {n} {why}: skipped" for n, why in bad]
        self.skipped += len(lines) - len(rows)
        return rows, notes

    def _past_long_line(self, data: bytes) -> list[str]:
        """Skip a line over MAX_LINE_BYTES as far as it is written now (the rest on later reads)."""
        notes = []
        if not self.in_long_line:
            notes.append(f"{too_long(self.file, self.lines + 1)}: skipped")
            self.in_long_line = True
        self.offset += len(data)
        if data.endswith(b"\n"):
            self.in_long_line = False
            self.lines += 1
            self.skipped += 1
        return notes

    def _same_file(self, st: os.stat_result) -> None:
        identity = (st.st_dev, st.st_ino)
        if self.identity is not None and identity != self.identity:
            raise RunFileError(f"{self.file} was replaced by another file while being followed (after "
                               f"{self.lines:,} lines): reading on would mix two runs")
        if st.st_size < self.offset:
            raise RunFileError(f"{self.file} shrank to {st.st_size:,} bytes while being followed ({self.offset:,} "
                               "were read): it was truncated or rewritten, and reading on would mix two runs")
        self.identity = identity


def _checked(tail: Any, max_bytes: int, check: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """A file's new lines, each through ``check`` (load()'s own row check); a bad line is a note, skipped."""
    rows, notes = tail.read(max_bytes)
    out, skipped = checked_rows(rows, tail.file, check)
    return out, notes + skipped
