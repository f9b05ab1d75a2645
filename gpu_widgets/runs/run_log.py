"""The run log: every run's steps and GPU samples written to disk as they happen.

Location: ``$GPU_WIDGETS_RUN_DIR``, else ``<user data dir>/gpu-widgets/runs``
(``~/.local/share/gpu-widgets/runs`` on Linux, ``~/Library/Application Support/gpu-widgets/runs``
on macOS, ``%LOCALAPPDATA%\\gpu-widgets\\runs`` on Windows). One directory per run::

    20261202-153012-my-model-3f9a1c/
        run.json      title, times, status, batch size, GPUs used, steps (rewritten on each status
                      change, and when the batch size or the GPUs used become known)
        steps.jsonl   one flat object per log() call (see run_files)
        gpu.jsonl     one flat object per GPU per sample
        data_wait.jsonl  the steps' wait for data, one object per half second of timed steps
                      (only for runs that timed it: track(), the framework callbacks, note_data_wait)
        alerts.jsonl  the alert episodes of the GPUs shown: a line when one opens, another when it
                      ends (the latest line of an id wins; only for runs that had any)

Writing happens on the monitor's thread, never in ``log()``. Each pass of that thread (every
0.25 s, or every ``flush_s`` if shorter) writes the new lines in chunks and hands each chunk to
the OS at once, so a killed kernel loses well under ``flush_s`` + 0.25 s of rows. A loop that logs
faster than lines can be written waits in ``log()`` for the writer (see monitor.py).
The directory is bounded: when a run starts, the oldest runs are removed until all runs fit in
``$GPU_WIDGETS_RUN_DIR_MAX_MB`` (default 200 MB). Only directories this module made are ever
removed, never the current run and never one written to in the last 10 minutes (another
kernel's live run). A multi-rank launch (launch_dir.py: a directory of rank-<r> run directories)
is one run: sized, dated and removed whole. ``GPU_WIDGETS_RUN_LOG=0`` turns the run log off everywhere.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import stat
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .run_files import dumps

ENV_DIR = "GPU_WIDGETS_RUN_DIR"
ENV_MAX_MB = "GPU_WIDGETS_RUN_DIR_MAX_MB"
ENV_ENABLED = "GPU_WIDGETS_RUN_LOG"
DEFAULT_MAX_MB = 200.0
LIVE_GRACE_S = 600.0
META, STEPS, GPU, DATA_WAIT, ALERTS = "run.json", "steps.jsonl", "gpu.jsonl", "data_wait.jsonl", "alerts.jsonl"
FORMAT_VERSION = 1
RANK_DIR_PREFIX = "rank-"  # launch_dir.RANK_PREFIX (that module imports this one)
# A run's name; a launch named without its start time (parallel/rendezvous.py) has the date alone.
_RUN_NAME = re.compile(r"\d{8}(-\d{6})?-[a-z0-9-]*-[0-9a-f]{6}\Z")


def enabled_by_env(env: Mapping[str, str] | None = None) -> bool:
    value = (os.environ if env is None else env).get(ENV_ENABLED, "").strip().lower()
    return value not in ("0", "false", "no", "off")


def default_root(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    if env.get(ENV_DIR, "").strip():
        return Path(env[ENV_DIR]).expanduser()
    return _user_data_dir() / "runs"


def _user_data_dir() -> Path:
    try:
        import platformdirs  # a jupyter_core dependency, so present wherever Jupyter is

        return Path(platformdirs.user_data_dir("gpu-widgets", appauthor=False))
    except ImportError:
        pass
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local")) / "gpu-widgets"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "gpu-widgets"
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "gpu-widgets"


def max_bytes_from_env(env: Mapping[str, str] | None = None) -> int:
    raw = (os.environ if env is None else env).get(ENV_MAX_MB, "").strip()
    if not raw:
        return int(DEFAULT_MAX_MB * 1e6)
    try:
        mb = float(raw)
    except ValueError:
        raise ValueError(f"{ENV_MAX_MB}={raw!r} is not a number of megabytes") from None
    if not mb > 0:
        raise ValueError(f"{ENV_MAX_MB}={raw!r} must be a positive number of megabytes")
    return int(mb * 1e6)


def slug(title: str | None) -> str:
    text = re.sub(r"[^a-z0-9]+", "-", (title or "run").lower()).strip("-")
    return text[:40].strip("-") or "run"


def run_name(title: str | None) -> str:
    """A new run's directory name: its start, its title, six random hex digits."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{slug(title)}-{secrets.token_hex(3)}"


def _size_and_mtime(path: Path, depth: int = 1) -> tuple[int, float]:
    """Bytes and latest change of a run's files; a launch's rank directories (one level down) count."""
    size, mtime = 0, 0.0
    for f in path.iterdir():
        try:
            st = f.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            if depth > 0:
                sub_size, sub_mtime = _size_and_mtime(f, depth - 1)
                size, mtime = size + sub_size, max(mtime, sub_mtime)
            continue
        size += st.st_size
        mtime = max(mtime, st.st_mtime)
    return size, mtime


def _is_run(p: Path) -> bool:
    """A directory this module (or a launch's ranks) made: a run's name, and a run.json in it or,
    for a launch whose rank 0 wrote elsewhere, in a rank directory."""
    if not (p.is_dir() and _RUN_NAME.match(p.name)):
        return False
    if (p / META).is_file():
        return True
    try:
        return any(q.name.startswith(RANK_DIR_PREFIX) and (q / META).is_file() for q in p.iterdir())
    except OSError:
        return False


def prune(root: Path, max_bytes: int, keep: Path | None = None, now: float | None = None) -> list[Path]:
    """Remove the oldest run directories under ``root`` until the runs fit in ``max_bytes``."""
    now = time.time() if now is None else now
    runs = []
    for p in root.iterdir() if root.is_dir() else ():
        if _is_run(p):
            size, mtime = _size_and_mtime(p)
            runs.append((mtime, size, p))
    total = sum(size for _, size, _ in runs)
    removed = []
    for mtime, size, p in sorted(runs, key=lambda r: r[0]):
        if total <= max_bytes:
            break
        if keep is not None and p.resolve() == keep.resolve():
            continue
        if now - mtime < LIVE_GRACE_S:
            continue  # maybe another kernel's run in progress
        shutil.rmtree(p, ignore_errors=True)
        total -= size
        removed.append(p)
    return removed


def write_meta(run_dir: Path, meta: Mapping[str, Any]) -> None:
    write_json(run_dir / META, meta)


def write_json(path: Path, obj: Mapping[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=1), encoding="utf-8")
    os.replace(tmp, path)  # readers never see half a file


class RunLog:
    """One run's directory. Not thread-safe: only the monitor's thread (or finish) calls it."""

    def __init__(self, root: Path, meta: Mapping[str, Any], max_bytes: int) -> None:
        self.root = Path(root)
        self.meta = {"format": FORMAT_VERSION, **meta}
        self.max_bytes = max_bytes
        self.path: Path | None = None
        self.pruned: list[Path] = []
        self._steps = None
        self._gpu = None
        self._waits = None  # data_wait.jsonl, opened with its first line: most runs time no data wait
        self._alerts = None  # alerts.jsonl, the same way: most runs have no alert
        self._dirty = False
        self.gpu_lines = 0  # lines written to gpu.jsonl
        self.gpu_lines_flushed = 0  # of those, handed to the OS: readable from the file

    def open(self, path: Path | None = None, *, keep: Path | None = None, prune_root: bool = True) -> Path:
        """Make the run's directory: ``path`` when given (a rank's, inside its launch, which is
        ``keep``: never pruned), else a new name under the root. ``prune_root`` False leaves
        the pruning to another process (one rank per machine prunes)."""
        self.root.mkdir(parents=True, exist_ok=True)
        if path is None:
            path = self.root / run_name(self.meta.get("title"))
            path.mkdir()
        else:
            path.mkdir(parents=True)
        self.path = path
        write_meta(path, self.meta)
        self._steps = open(path / STEPS, "a", encoding="utf-8")
        self._gpu = open(path / GPU, "a", encoding="utf-8")
        if prune_root:
            self.pruned = prune(self.root, self.max_bytes, keep=keep or path)
        return path

    def reopen(self, **fields: Any) -> None:
        """Continue a closed run log in the same directory (a run resumed after a pause)."""
        if self.path is None:
            self.open()
        elif self._steps is None:
            self._steps = open(self.path / STEPS, "a", encoding="utf-8")
            self._gpu = open(self.path / GPU, "a", encoding="utf-8")
        if fields:
            self.update_meta(**fields)

    def write_steps(self, lines: str) -> None:
        """Append JSON lines (``Records.jsonl``) to the steps file."""
        self._write(self._steps, lines)

    def write_gpu(self, rows: Iterable[Mapping[str, Any]]) -> None:
        lines = [dumps(r) + "\n" for r in rows]
        if self._write(self._gpu, "".join(lines)):
            self.gpu_lines += len(lines)

    def write_data_wait(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Append data-wait bins (``StepTimes.take_unsaved``): ``{"time", "wait_s", "step_s", "steps"}``."""
        text = "".join(dumps(r) + "\n" for r in rows)
        if text and self._waits is None and self.path is not None:
            self._waits = open(self.path / DATA_WAIT, "a", encoding="utf-8")
        self._write(self._waits, text)

    def write_alerts(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Append alert episodes (``MonitorAlerts.take_unsaved``): ``{"id", "kind", "severity",
        "gpu", "uuid", "start", "end", "message"}``, ``end`` null while the episode lasts."""
        text = "".join(dumps(r) + "\n" for r in rows)
        if text and self._alerts is None and self.path is not None:
            self._alerts = open(self.path / ALERTS, "a", encoding="utf-8")
        self._write(self._alerts, text)

    def _write(self, f: Any, text: str) -> bool:
        if text and f is not None:
            f.write(text)
            self._dirty = True
            return True
        return False

    def flush(self) -> None:
        """Hand the written lines to the OS (after every write: a few small writes a second
        cost far less than the rows a killed kernel would lose while they wait)."""
        if self._dirty:
            for f in (self._steps, self._gpu, self._waits, self._alerts):
                if f is not None:
                    f.flush()
            self._dirty = False
            self.gpu_lines_flushed = self.gpu_lines

    def update_meta(self, **fields: Any) -> None:
        self.meta.update(fields)
        if self.path is not None:
            write_meta(self.path, self.meta)

    def close(self, **fields: Any) -> None:
        try:
            self.flush()
        finally:
            for f in (self._steps, self._gpu, self._waits, self._alerts):
                if f is not None:
                    f.close()
            self._steps = self._gpu = self._waits = self._alerts = None
        if fields:
            self.update_meta(**fields)

    @property
    def closed(self) -> bool:
        return self._steps is None
