"""A process and its descendants, found in time that grows with the family, not with the machine.

psutil's ``children(recursive=True)`` reads the parent of every process on the machine: on a shared
node with a thousand processes that is ~50 ms, and the server's death watcher asks it for every
kernel every second. Linux lists each thread's children in ``/proc/<pid>/task/<tid>/children``
(CONFIG_PROC_CHILDREN, on in the common distributions' kernels); reading those for the family
alone costs a few files per member. Where the kernel has no such files, psutil's walk is used.
"""
from __future__ import annotations

import os
import threading

import psutil

PROC = "/proc"
LIMIT = 4096  # members at most: a fork bomb in a notebook does not make the look unbounded


def _has_children_files() -> bool:
    return os.path.exists(f"{PROC}/self/task/{threading.get_native_id()}/children")


HAS_CHILDREN_FILES = _has_children_files()


def family(pid: int, limit: int = LIMIT) -> set[int] | None:
    """``pid`` and every process below it (at most ``limit``); None when ``pid`` is gone."""
    if not HAS_CHILDREN_FILES:
        return _family_by_psutil(pid, limit)
    if not os.path.isdir(f"{PROC}/{pid}/task"):
        return None
    members, todo = {pid}, [pid]
    while todo and len(members) < limit:
        for child in _children(todo.pop()):
            if child not in members and len(members) < limit:
                members.add(child)
                todo.append(child)
    return members


def _children(pid: int) -> list[int]:
    """The children of all of ``pid``'s threads (a child's parent is the thread that forked it)."""
    try:
        tids = os.listdir(f"{PROC}/{pid}/task")
    except OSError:  # ended meanwhile
        return []
    out: list[int] = []
    for tid in tids:
        try:
            with open(f"{PROC}/{pid}/task/{tid}/children", "rb") as f:
                out.extend(int(n) for n in f.read().split())
        except (OSError, ValueError):  # a thread that ended meanwhile
            continue
    return out


def _family_by_psutil(pid: int, limit: int) -> set[int] | None:
    try:
        below = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return None
    return {pid, *(p.pid for p in below[:max(0, limit - 1)])}
