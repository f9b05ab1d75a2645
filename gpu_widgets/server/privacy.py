"""Other users' GPU processes: listed with pid and memory only, unless the server is told otherwise."""
from __future__ import annotations

import getpass
from typing import Any

HIDDEN = ("name", "user", "command")
REASON = "belongs to another user (hidden; set GpuWidgets.show_other_users_processes=True to show)"
UNKNOWN_OWNER = "owner unknown, so hidden like another user's process"


def server_user() -> str:
    return getpass.getuser()


def redact_process(proc: dict[str, Any], me: str) -> dict[str, Any]:
    """A copy of ``proc`` with name, user and command nulled when it is not ``me``'s."""
    owner = proc.get("user")
    if owner == me:
        return proc
    reason = REASON if owner is not None else UNKNOWN_OWNER
    out = dict(proc)
    unavailable = dict(proc.get("unavailable") or {})
    for key in HIDDEN:
        out[key] = None
        unavailable[key] = reason
    out["unavailable"] = unavailable
    return out


def redact_snapshot(snapshot: dict[str, Any], me: str) -> dict[str, Any]:
    """A shallow copy of a snapshot whose processes are redacted (the original is shared)."""
    devices = []
    for dev in snapshot["devices"]:
        procs = dev.get("processes")
        if procs:
            dev = {**dev, "processes": [redact_process(p, me) for p in procs]}
        devices.append(dev)
    return {**snapshot, "devices": devices}
