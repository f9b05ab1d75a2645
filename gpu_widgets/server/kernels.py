"""This server's kernels and their notebooks, read from jupyter_server's kernel and session managers.

The maps made here (kernel pid -> kernel id, kernel id -> notebook path) are what
gpu_widgets/service/attribution.py matches GPU processes against.
"""
from __future__ import annotations

from typing import Any


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
