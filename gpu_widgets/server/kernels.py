"""Which notebook holds a GPU: map GPU processes to this server's kernels and their sessions."""
from __future__ import annotations

from typing import Any

import psutil


def kernel_root_pids(kernel_manager: Any) -> dict[int, str]:
    """pid of each local kernel process -> kernel id (remote/gateway kernels have no local pid)."""
    roots: dict[int, str] = {}
    for kernel_id in list(kernel_manager.list_kernel_ids()):
        try:
            km = kernel_manager.get_kernel(kernel_id)
        except KeyError:
            continue  # shut down meanwhile
        provisioner = getattr(km, "provisioner", None)
        pid = getattr(provisioner, "pid", None)
        if isinstance(pid, int):
            roots[pid] = kernel_id
    return roots


async def notebook_paths(session_manager: Any, log: Any) -> dict[str, str]:
    """kernel id -> the path of its session's notebook. A failure to list the sessions is logged and
    leaves the processes without notebook (their GPU figures still count)."""
    paths: dict[str, str] = {}
    try:
        for session in await session_manager.list_sessions():
            kernel = session.get("kernel") or {}
            if kernel.get("id"):
                paths[kernel["id"]] = session.get("path")
    except Exception:
        log.warning("gpu-widgets: could not list sessions for kernel attribution", exc_info=True)
    return paths


def owning_kernel(pid: int, roots: dict[int, str]) -> str | None:
    """The kernel whose process is ``pid`` or one of its ancestors (a DataLoader worker, a
    ``!python train.py`` started from the notebook)."""
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
