"""Other users' GPU processes: listed with pid and memory only, unless the server is told otherwise.

"Other" is decided by the real uid, as the OS reports it: never by a user name, which may come from
``$USER`` (anyone can set it) or be missing (a uid with no passwd entry, as in arbitrary-uid
containers).
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

HIDDEN = ("name", "uid", "user", "command")
REASON = "belongs to another user (hidden; set GpuWidgets.show_other_users_processes=True to show)"
UNKNOWN_OWNER = "owner unknown, so hidden like another user's process"


def server_uid() -> int:
    """The real uid of the server process: whose processes it shows in full."""
    return os.getuid()


def full_view_uid(show_other_users_processes: bool) -> int | None:
    """The uid whose processes are shown in full; None when every process is
    (``GpuWidgets.show_other_users_processes``, ``--show-other-users-processes``)."""
    return None if show_other_users_processes else server_uid()


def redact_process(proc: Mapping[str, Any], me: int) -> Mapping[str, Any]:
    """A copy of ``proc`` with name, uid, user and command nulled when uid ``me`` does not own it."""
    owner = proc.get("uid")
    if owner is not None and owner == me or proc.get("pid") is None:  # no local process: nothing to hide
        return proc
    reason = REASON if owner is not None else UNKNOWN_OWNER
    out = dict(proc)
    unavailable = dict(proc.get("unavailable") or {})
    for key in HIDDEN:
        out[key] = None
        unavailable[key] = reason
    out["unavailable"] = unavailable
    return out


def redact_snapshot(snapshot: Mapping[str, Any], me: int) -> dict[str, Any]:
    """A shallow copy of a snapshot (or of its JSON form) whose processes are redacted (the
    original is shared)."""
    devices = []
    for dev in snapshot["devices"]:
        procs = dev.get("processes")
        if procs:
            dev = {**dev, "processes": [redact_process(p, me) for p in procs]}
        devices.append(dev)
    return {**snapshot, "devices": devices}
