"""Who a GPU process is: name, owner (uid and user) and command line from the OS, via psutil.

NVML gives only pids and memory. The OS may not tell us more: the pid can live in another
container's pid namespace, belong to another user on a hardened /proc, or have ended since
NVML listed it. Each missing value is None with its reason, like every other field.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

import psutil

from ..metrics.samples import ProcessEntry
from .base import USAGE_OFF
from .pid_match import PID, Match, by_pid

_DETAILS = ("name", "uid", "user", "command")
# A command line can be 2 MB (ARG_MAX); it goes out in every sample, so it is cut to this many
# bytes of UTF-8, the cut marked at its end.
COMMAND_MAX_BYTES = 4096
# How often a cached pid's identity (pid + start time) is checked again. forget_except() already
# drops a pid the moment it leaves every GPU's list, so a reused pid would have to start and
# open a GPU context within one slow read; psutil's is_running() is ~12 µs a process, which on
# 8 GPUs x 8 processes was 60 % of the slow read.
REVALIDATE_S = 10.0


class ProcessDescriber:
    """Describes pids, caching what it learnt while the same process (pid + start time) lives."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cache: dict[int, tuple[psutil.Process, dict[str, Any], float]] = {}
        # One GPU's process list, keyed by its (pid, memory) pairs: a training run's list rarely
        # changes between slow reads, and rebuilding it was a third of the slow read's cost.
        self._lists: dict[tuple[tuple[int, int | None], ...], tuple[list[ProcessEntry], float]] = {}

    def entries(self, used: list[tuple[int, int | None]]) -> list[ProcessEntry]:
        """The public entries of one GPU's processes, ``used`` being (pid, GPU memory) pairs that
        NVML gave and that name local processes (see ``matched``)."""
        return self.matched(by_pid(used))

    def matched(self, matches: list[Match]) -> list[ProcessEntry]:
        """The public entries of one GPU's processes, matched to local ones (pid_match.py).

        The same list object comes back while the matches stay the same (up to REVALIDATE_S):
        callers must not modify it (the server and the widgets copy before they change anything).
        """
        key = tuple(matches)
        now = time.monotonic()
        with self._lock:
            hit = self._lists.get(key)
        if hit is not None and now - hit[1] < REVALIDATE_S:
            return hit[0]
        built = [process_entry(m.pid, m.memory, self.describe(m.pid) if m.pid is not None else _outside(m), m)
                 for m in matches]
        with self._lock:
            if len(self._lists) >= 256:  # bounded however often the lists change
                self._lists.clear()
            self._lists[key] = (built, now)
        return built

    def describe(self, pid: int) -> dict[str, Any]:
        """``{"name", "uid", "user", "command", "unavailable"}`` for one pid; never raises."""
        with self._lock:
            cached = self._cache.get(pid)
        now = time.monotonic()
        if cached is not None:
            proc, details, checked = cached
            if now - checked < REVALIDATE_S:
                return details
            try:
                if proc.is_running():  # also false when the pid was reused by a new process
                    with self._lock:
                        self._cache[pid] = (proc, details, now)
                    return details
            except psutil.Error:
                pass
        details = _look_up(pid)
        if details["_proc"] is not None:
            with self._lock:
                self._cache[pid] = (details["_proc"], details, now)
        return details

    def forget_except(self, pids: set[int]) -> None:
        """Drop cached entries for processes no longer on any GPU."""
        with self._lock:
            for pid in list(self._cache):
                if pid not in pids:
                    del self._cache[pid]
            for key in [k for k in self._lists if any(m.pid is not None and m.pid not in pids for m in k)]:
                del self._lists[key]


def _look_up(pid: int) -> dict[str, Any]:
    details: dict[str, Any] = {"name": None, "uid": None, "user": None, "command": None, "unavailable": {},
                               "_proc": None}
    try:
        proc = psutil.Process(pid)
    except psutil.NoSuchProcess:
        reason = "process not visible here (it ended, or runs in another container)"
        details["unavailable"] = dict.fromkeys(_DETAILS, reason)
        return details
    except psutil.Error as exc:
        details["unavailable"] = dict.fromkeys(_DETAILS, f"cannot inspect process: {exc}")
        return details
    details["_proc"] = proc
    # username() is the passwd name of the real uid, or the uid as text when it has none
    # (arbitrary-uid containers), so it never fails for want of a passwd entry.
    for key, read in (("name", lambda: _readable(proc.name())), ("uid", lambda: proc.uids().real),
                      ("user", lambda: _readable(proc.username())), ("command", lambda: _command(proc))):
        try:
            details[key] = read()
        except psutil.AccessDenied:
            details["unavailable"][key] = "access denied by the operating system"
        except psutil.NoSuchProcess:
            details["unavailable"][key] = "process ended"
        except Exception as exc:  # e.g. a uid with no passwd entry inside a container
            details["unavailable"][key] = f"unknown: {type(exc).__name__}"
    if details["command"] is None and "command" not in details["unavailable"]:
        details["unavailable"]["command"] = "no command line (kernel thread or zombie)"
    return details


def _readable(text: str) -> str:
    """``text`` with bytes that were not valid in the filesystem encoding as U+FFFD.

    psutil decodes /proc with surrogateescape: such bytes come back as lone surrogates, which are
    not valid UTF-8 and which strict JSON parsers refuse.
    """
    return os.fsencode(text).decode(sys.getfilesystemencoding(), "replace")


def _command(proc: psutil.Process) -> str | None:
    args = proc.cmdline()
    return capped_command(args) if args else None


def capped_command(args: list[str]) -> str:
    """``args`` joined by spaces, readable, and at most COMMAND_MAX_BYTES of UTF-8.

    A longer one keeps its start and ends with ``… (cut: N bytes in all)``, N being the length of
    the whole command line as the process has it.
    """
    raw = b" ".join(os.fsencode(arg) for arg in args)
    text = raw.decode(sys.getfilesystemencoding(), "replace")
    encoded = text.encode("utf-8")
    if len(encoded) <= COMMAND_MAX_BYTES:
        return text
    mark = f"… (cut: {len(raw)} bytes in all)"
    room = COMMAND_MAX_BYTES - len(mark.encode("utf-8"))
    # "ignore" drops a character split by the cut, so the head stays whole characters.
    return encoded[:room].decode("utf-8", "ignore") + mark


def _outside(match: Match) -> dict[str, Any]:
    """An NVML entry with no local process: nothing but its memory is known."""
    return {**dict.fromkeys(_DETAILS), "unavailable": dict.fromkeys(_DETAILS, match.note)}


def process_entry(pid: int | None, used_memory_bytes: int | None, details: dict[str, Any],
                  match: Match | None = None) -> ProcessEntry:
    """The public JSON shape of one GPU process."""
    unavailable = {**details["unavailable"], "sm_percent": USAGE_OFF, "memory_bandwidth_percent": USAGE_OFF}
    if match is not None and match.pid is not None and match.note:
        unavailable["used_memory_bytes"] = match.note
    return {
        "pid": pid,
        "used_memory_bytes": used_memory_bytes,
        "name": details["name"],
        "uid": details["uid"],
        "user": details["user"],
        "command": details["command"],
        # Filled by the backend while someone looks (Sampler.want_gpm); the cached lists keep these.
        "sm_percent": None,
        "memory_bandwidth_percent": None,
        # How the entry was tied to a local process (pid_match.py); the pid the driver gave, where known.
        "matched_by": match.matched_by if match is not None else PID,
        "nvml_pid": match.nvml_pid if match is not None else pid,
        "unavailable": unavailable,
    }
