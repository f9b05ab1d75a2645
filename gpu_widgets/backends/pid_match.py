"""NVML's process entries matched to local processes, where it can be done honestly.

Where the server sees the host's pids (bare metal, ``--pid=host``) NVML's pid is the process:
``matched_by = "pid"``. In a container the driver reports host pids, and the local processes that
hold a GPU's device file (device_files.py) are matched to its entries only where the counts decide
it: one left on each side, or as many on each side with the same memory each (any pairing then gives
every process its true figure). A holder whose parent holds the same GPU's file is taken, where that
decides it, for a forked child that inherited the files (a DataLoader worker: a forked process
cannot use CUDA), not a context of its own. Otherwise the local processes are listed with their
memory unknown and NVML's entries apart, with no local pid: a wrong memory figure on a process is
worse than none.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PID, DEVICE_FILES = "pid", "device_files"
MEMORY_UNKNOWN = "memory unknown (the driver reports host pids)"
OUTSIDE = "outside this container (the driver reports host pids)"
NOT_TOLD = "not told apart from this container's processes (the driver reports host pids)"


@dataclass(frozen=True)
class Match:
    pid: int | None  # the local pid; None for an entry no local process could be matched to
    nvml_pid: int | None  # the pid the driver gave, where known
    memory: int | None
    matched_by: str | None  # PID, DEVICE_FILES or None
    note: str | None = None  # why the memory (local entry) or the process (None pid) is unknown


def pid_label(proc: Mapping[str, Any]) -> str:
    """A process entry's pid as text: the local one, else the driver's as ``host:N`` (no local process)."""
    return str(proc["pid"]) if proc.get("pid") is not None else f"host:{proc.get('nvml_pid')}"


def by_pid(listed: list[tuple[int, int | None]]) -> list[Match]:
    """The server sees the host's pids: NVML's entries as they are."""
    return [Match(pid, pid, mem, PID) for pid, mem in listed]


def by_device_files(listed: list[tuple[int, int | None]], holders: set[int],
                    parents: Mapping[int, int] | None = None) -> list[Match]:
    """The driver reports host pids; ``holders`` are the local pids holding this GPU's file,
    ``parents`` their parents' pids where known."""
    if not listed:
        # No context on this GPU: a local holder only opened its file (CUDA opens every GPU's).
        return []
    out = [Match(pid, pid, mem, PID) for pid, mem in listed if pid in holders]  # a driver that translates
    rest = [(pid, mem) for pid, mem in listed if pid not in holders]
    local = sorted(holders - {m.pid for m in out})
    if not rest:
        return out  # holders left over hold the file but no context here
    decided = _decide(rest, local)
    if decided is None and parents and len(local) > len(rest):
        # Forked children hold their parent's files without a context of their own.
        decided = _decide(rest, [pid for pid in local if parents.get(pid) not in holders])
    if decided is not None:
        return out + decided
    out += [Match(pid, None, None, DEVICE_FILES, MEMORY_UNKNOWN) for pid in local]
    return out + [Match(None, npid, mem, None, NOT_TOLD if local else OUTSIDE) for npid, mem in rest]


def _decide(rest: list[tuple[int, int | None]], local: list[int]) -> list[Match] | None:
    """The matches where the counts decide them, else None."""
    if len(rest) == len(local) == 1:
        return [Match(local[0], rest[0][0], rest[0][1], DEVICE_FILES)]
    mems = {mem for _, mem in rest}
    if local and len(rest) == len(local) and len(mems) == 1 and None not in mems:
        # Which host pid is which stays unknown; each process's memory does not.
        return [Match(pid, None, rest[0][1], DEVICE_FILES) for pid in local]
    return None
