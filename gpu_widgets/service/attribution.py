"""Which kernel a GPU process belongs to, given the pids of the kernels (``roots``) and their notebooks.

Where ``roots`` and the notebook paths come from (this Jupyter server's kernel and session
managers) is the web layer's business (gpu_widgets/server/kernels.py); here they are plain maps.
"""
from __future__ import annotations

from typing import Any

import psutil


def owning_kernel(pid: int | None, roots: dict[int, str]) -> str | None:
    """The kernel whose process is ``pid`` or one of its ancestors (a DataLoader worker, a
    ``!python train.py`` started from the notebook). None for a pid that names no local process
    (an entry of the driver's list outside this container: pid_match.py)."""
    if pid is None:
        return None
    if pid in roots:
        return roots[pid]
    try:
        for parent in psutil.Process(pid).parents():
            if parent.pid in roots:
                return roots[parent.pid]
    except psutil.Error:
        pass
    return None


def attribute(devices: list[dict[str, Any]], roots: dict[int, str], paths: dict[str, str]) -> list[dict[str, Any]]:
    """Per device, its processes with ``kernel_id`` and ``notebook_path`` (null when not ours).

    Runs in a worker thread: psutil reads /proc.
    """
    out = []
    for dev in devices:
        procs = []
        for proc in dev.get("processes") or ():
            kernel_id = owning_kernel(proc["pid"], roots) if roots else None
            procs.append({**proc, "kernel_id": kernel_id, "notebook_path": paths.get(kernel_id) if kernel_id else None})
        unavailable = {}
        if dev.get("processes") is None:
            reason = (dev.get("unavailable") or {}).get("processes", "not available")
            unavailable["processes"] = reason
        out.append({
            "index": dev["index"],
            "uuid": dev.get("uuid"),
            "name": dev.get("name"),
            "status": dev.get("status"),
            "processes": procs if dev.get("processes") is not None else None,
            "unavailable": unavailable,
        })
    return out
