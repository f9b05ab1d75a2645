"""A multi-rank launch on disk: one directory for every rank of a torch.distributed launch::

    <root>/<launch>/        <launch> named as a run (run_log.py): <YYYYmmdd-HHMMSS>-<slug>-<6 hex>
        run.json            the launch: {"format", "kind": "launch", "title", "world_size", "status",
                            "hosts", "started", "ended", "gpu_widgets_version", "launch_key"}, by rank 0
        rank-<r>/           one per global rank (no zero padding): that rank's run, in today's files,
                            its run.json with "rank", "world_size", "local_rank", "host", "launch"
            heartbeat.json  {"time", "pid", "step", "phase", "phase_since", "step_started"}

Names and write helpers first; the readers of a whole launch follow (launch_read.py reads more).
Every file here may be damaged or planted: reads are bounded and checked, oddities are notes.
"""
from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any

from .file_reads import MAX_META_BYTES, RunFileError, load_json, read_small
from .run_log import FORMAT_VERSION, META, RANK_DIR_PREFIX, write_json

# -- names and write helpers (the launch's writers: parallel/rendezvous.py, monitor/run_launch.py) --
LAUNCH_KIND = "launch"
RANK_PREFIX = RANK_DIR_PREFIX  # "rank-"
HEARTBEAT = "heartbeat.json"
MAX_RANKS = 4096  # rank directories read per launch: far above any launch that writes here
MAX_HEARTBEAT_BYTES = 4096
MAX_LAUNCH_META_BYTES = 1 << 16
PHASES = ("idle", "data", "forward", "after_forward")
_RANK_DIR = re.compile(r"rank-(0|[1-9][0-9]{0,8})\Z")


def rank_dir(launch: Path, rank: int) -> Path:
    if type(rank) is not int or rank < 0:
        raise ValueError(f"a rank is a whole number >= 0, got {rank!r}")
    return Path(launch) / f"{RANK_PREFIX}{rank}"


def launch_meta(title: str, world_size: int, hosts: list[str], started: float | None, launch_key: str,
                version: str, status: str = "running", ended: float | None = None) -> dict[str, Any]:
    """The launch's run.json (status is rank 0's view; readers aggregate the ranks')."""
    return {"format": FORMAT_VERSION, "kind": LAUNCH_KIND, "title": title, "world_size": world_size,
            "status": status, "hosts": sorted(set(hosts)), "started": started, "ended": ended,
            "gpu_widgets_version": version, "launch_key": launch_key}


def write_launch_meta(launch: Path, meta: dict[str, Any]) -> None:
    write_json(Path(launch) / META, meta)  # atomic: a reader never sees half of it


def rank_hosts(launch: Path, known: dict[int, str], notes: list[str] | None = None) -> dict[int, str]:
    """``known`` (rank -> host) with the hosts of the rank directories not in it yet, read from
    their run.json (ranks whose run.json is not there yet are read on a later call)."""
    out = dict(known)
    for rank, path in rank_dirs(launch, notes):
        if rank in out:
            continue
        meta = _small_json(path / META, MAX_META_BYTES, notes)
        host = meta.get("host") if meta is not None else None
        if isinstance(host, str) and host:
            out[rank] = host[:256]
    return out


# -- readers ---------------------------------------------------------------------------------------
def is_launch(path: Path) -> bool:
    """A launch directory: its run.json says kind "launch", or it holds rank-<r> directories (a
    machine whose ranks did not share rank 0's run root has those alone)."""
    path = Path(path)
    if not path.is_dir():
        return False
    meta = _small_json(path / META, MAX_LAUNCH_META_BYTES, None)
    if meta is not None:
        return meta.get("kind") == LAUNCH_KIND
    try:
        with os.scandir(path) as entries:
            return any(_RANK_DIR.match(e.name) and e.is_dir(follow_symlinks=False) for e in entries)
    except OSError:
        return False


def rank_dirs(launch: Path, notes: list[str] | None = None) -> list[tuple[int, Path]]:
    """``(rank, directory)`` of each rank-<r> directory, by rank; other names are ignored. At most
    MAX_RANKS are read (a note says when there were more)."""
    found: list[tuple[int, Path]] = []
    more = False
    try:
        with os.scandir(launch) as entries:
            for e in entries:
                if _RANK_DIR.match(e.name) and e.is_dir(follow_symlinks=False):
                    if len(found) >= MAX_RANKS:
                        more = True
                        break
                    found.append((int(e.name[len(RANK_PREFIX):]), Path(e.path)))
    except OSError as exc:
        _note(notes, f"{launch}: cannot list its rank directories ({type(exc).__name__}: {exc})")
        return []
    if more:
        _note(notes, f"{launch}: more than {MAX_RANKS} rank directories; only {MAX_RANKS} are read")
    return sorted(found)


def read_heartbeat(path: Path, notes: list[str] | None = None) -> dict[str, Any] | None:
    """A rank's heartbeat (``path``: heartbeat.json or its rank directory), checked field by
    field; None when missing or odd, with the reason in ``notes``."""
    path = Path(path)
    if path.is_dir():
        path = path / HEARTBEAT
    beat = _small_json(path, MAX_HEARTBEAT_BYTES, notes, missing_ok=True)
    if beat is None:
        return None
    problem = _heartbeat_problem(beat)
    if problem:
        _note(notes, f"{path}: {problem}; the heartbeat is ignored")
        return None
    return {k: beat[k] for k in ("time", "pid", "step", "phase", "phase_since", "step_started")}


def _heartbeat_problem(beat: dict[str, Any]) -> str | None:
    for key in ("time", "phase_since"):
        if not _time(beat.get(key)):
            return f"{key!r} is not a time ({beat.get(key)!r})"
    if beat.get("step_started") is not None and not _time(beat["step_started"]):
        return f"'step_started' is neither a time nor null ({beat['step_started']!r})"
    for key in ("pid", "step"):
        value = beat.get(key)
        if type(value) is not int or value < 0:
            return f"{key!r} is not a whole number >= 0 ({value!r})"
    if beat.get("phase") not in PHASES:
        return f"'phase' is {beat.get('phase')!r}, not one of {', '.join(PHASES)}"
    return None


def _time(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value) and value >= 0


def _small_json(path: Path, limit: int, notes: list[str] | None, missing_ok: bool = True) -> dict[str, Any] | None:
    try:
        data = load_json(read_small(path, limit), path)
    except FileNotFoundError:
        if not missing_ok:
            _note(notes, f"{path} is missing")
        return None
    except RunFileError as exc:  # not a regular file, too big, nested too deeply: it names the file
        _note(notes, str(exc))
        return None
    except (OSError, ValueError) as exc:  # not JSON, not UTF-8
        _note(notes, f"{path}: unreadable ({type(exc).__name__}: {exc})")
        return None
    if not isinstance(data, dict):
        _note(notes, f"{path}: not a JSON object")
        return None
    return data


def _note(notes: list[str] | None, text: str) -> None:
    if notes is not None:
        notes.append(text)
