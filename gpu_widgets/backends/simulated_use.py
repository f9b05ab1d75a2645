"""Simulated GPU use by a real process: what lets a demo notebook (or a test) be "on" a simulated GPU.

There is no CUDA behind simulated GPUs, so nothing of a kernel would ever show on them. A process
that calls ``hold(gpu, bytes)`` writes a small claim file; the simulated backend lists it as a
process on that GPU, holding that memory, for as long as the process lives (or until
``release()``), and counts it in the GPU's used memory. Only the simulated backend reads claims:
on real GPUs they do nothing.

Claims live in one directory per Jupyter runtime (``$GPU_WIDGETS_SIMULATED_USE_DIR``, else
``<jupyter runtime dir>/gpu-widgets-simulated-use``), one file per process. The reader treats them
as untrusted: at most MAX_CLAIMS files of at most MAX_FILE_BYTES, a pid that ended or was reused is
dropped.
"""
from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from .processes import ProcessDescriber
from .base import GPM_OFF
from .simulated_gpm import process_use

ENV_DIR = "GPU_WIDGETS_SIMULATED_USE_DIR"
MAX_CLAIMS = 256
MAX_FILE_BYTES = 4096
MAX_GPUS = 64
READ_EVERY_S = 0.2  # the fast and slow reads both ask; the directory is read at most this often

Claims = dict[int, list[tuple[int, int]]]  # GPU index -> [(pid, bytes)]


def claims_dir() -> Path:
    explicit = os.environ.get(ENV_DIR)
    if explicit:
        return Path(explicit)
    from jupyter_core.paths import jupyter_runtime_dir

    return Path(jupyter_runtime_dir()) / "gpu-widgets-simulated-use"


def _own_file() -> Path:
    return claims_dir() / f"{os.getpid()}.json"


def _read_own() -> dict[str, int]:
    try:
        data = json.loads(_own_file().read_text())
        return {str(k): int(v) for k, v in data.get("gpus", {}).items()}
    except (OSError, ValueError, AttributeError, TypeError):
        return {}


def hold(gpu: int, memory_bytes: int) -> None:
    """Show this process on simulated GPU ``gpu`` holding ``memory_bytes`` (0 lets go of it)."""
    if not isinstance(gpu, int) or isinstance(gpu, bool) or not 0 <= gpu < MAX_GPUS:
        raise ValueError(f"gpu must be a GPU index from 0 to {MAX_GPUS - 1}, got {gpu!r}")
    if not isinstance(memory_bytes, int) or isinstance(memory_bytes, bool) or memory_bytes < 0:
        raise ValueError(f"memory_bytes must be a whole number of bytes >= 0, got {memory_bytes!r}")
    gpus = _read_own()
    if memory_bytes:
        gpus[str(gpu)] = memory_bytes
    else:
        gpus.pop(str(gpu), None)
    _write(gpus)


def release(gpu: int | None = None) -> None:
    """Let go of simulated GPU ``gpu`` (every one when None)."""
    if gpu is None:
        _write({})
    else:
        hold(gpu, 0)


def _write(gpus: dict[str, int]) -> None:
    path = _own_file()
    if not gpus:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    me = psutil.Process()
    body = json.dumps({"pid": me.pid, "create_time": me.create_time(), "gpus": gpus})
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".claim-")
    with os.fdopen(fd, "w") as f:
        f.write(body)
    os.replace(tmp, path)  # a reader sees the old claim or the new one, never half of one


def _claim(path: Path) -> tuple[int, dict[int, int]] | None:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return None
        data = json.loads(path.read_text())
        pid, started = int(data["pid"]), float(data["create_time"])
        gpus = {int(k): int(v) for k, v in data["gpus"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if not all(0 <= g < MAX_GPUS and v >= 0 for g, v in gpus.items()):
        return None
    try:
        if abs(psutil.Process(pid).create_time() - started) > 1.0:
            return None  # the pid was reused: not the process that claimed
    except psutil.Error:
        return None  # it ended
    return pid, gpus


def read_claims() -> Claims:
    """Every live process's claims, per GPU."""
    out: Claims = {}
    try:
        with os.scandir(claims_dir()) as entries:
            names = [e.path for _, e in zip(range(MAX_CLAIMS), (e for e in entries if e.name.endswith(".json")))]
    except OSError:
        return out
    for name in sorted(names):
        claim = _claim(Path(name))
        if claim is None:
            continue
        pid, gpus = claim
        for gpu, held in gpus.items():
            if held:
                out.setdefault(gpu, []).append((pid, held))
    return out


class ClaimReader:
    """``read_claims()`` at most every READ_EVERY_S (the simulated backend asks on every read)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._at = -1e9
        self._claims: Claims = {}
        self.describer = ProcessDescriber()  # the claimers described as NVML's processes are

    def get(self) -> Claims:
        with self._lock:
            now = time.monotonic()
            if now - self._at >= READ_EVERY_S:
                self._claims, self._at = read_claims(), now
            return self._claims


def with_claims(values: dict[str, Any], claimed: list[tuple[int, int]]) -> dict[str, Any]:
    """A simulated GPU's readings with the claimed memory counted as used (at most what is free)."""
    if not claimed:
        return values
    held = min(sum(b for _, b in claimed), values["memory_free_bytes"])
    return {**values, "memory_used_bytes": values["memory_used_bytes"] + held,
            "memory_free_bytes": values["memory_free_bytes"] - held}


def claimers(reader: ClaimReader, claimed: list[tuple[int, int]], values: dict[str, Any], gpm: bool) -> list[Any]:
    """The real processes holding simulated memory on one GPU, described as NVML's would be."""
    if not claimed:
        return []
    share = 0.5 if values["_busy"] else 1.0
    return [{**e, **process_use(values, share, gpm, GPM_OFF)} for e in reader.describer.entries(list(claimed))]
