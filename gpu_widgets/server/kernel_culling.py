"""Idle GPU memory is given back (opt-in, ``c.GpuWidgets.cull_idle_gpu_kernels_after_s``).

A kernel of this server that holds at least ``alert_idle_kernel_memory_gib`` on GPUs it has not
used for the window, and ran no cell within it, is shut down through jupyter_server's kernel
manager, as its own kernel culling does. The kernel events (kernel_events.py, helper of the same
server) get a "culled" event first, so that every tab is told and no "died" event follows.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from jupyter_core.utils import ensure_async
from jupyter_server._tz import utcnow

GIB = 1024 ** 3
EVENTS_KEY = "gpu_widgets_kernel_events"  # web_app.settings: the KernelEvents object
SETTING = "c.GpuWidgets.cull_idle_gpu_kernels_after_s"


def check_window(value: float) -> float:
    """0 (off) or at least 1 s; a ValueError in words otherwise."""
    if value != value or value < 0 or 0 < value < 1 or value == float("inf"):
        raise ValueError(f"GpuWidgets.cull_idle_gpu_kernels_after_s must be 0 (off) or at least 1 s, got {value!r}")
    return value


def _num(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


class KernelCuller:
    def __init__(self, after_s: float, memory_gib: float, serverapp: Any, log: logging.Logger) -> None:
        self.after_s, self.memory_gib = after_s, memory_gib
        self.serverapp, self.log = serverapp, log
        self.culled: list[str] = []  # kernel ids, oldest first (tests, logs)
        self._pending: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def check(self, holdings: Mapping[tuple[str, int], Any], now: float) -> None:
        """Called after each activity round with its holdings (gpu_activity.Holding by kernel, GPU)."""
        by_kernel: dict[str, list[Any]] = {}
        for h in holdings.values():
            by_kernel.setdefault(h.kernel_id, []).append(h)
        for kernel_id, held in by_kernel.items():
            if kernel_id in self._pending:
                continue
            idle = min(h.idle_s(now) for h in held)  # a GPU used within the window spares the kernel
            total = sum(h.memory_bytes for h in held)
            if idle < self.after_s or total < self.memory_gib * GIB or not self._quiet(kernel_id):
                continue
            self._cull(kernel_id, held, idle, total)

    def _quiet(self, kernel_id: str) -> bool:
        """Ran no cell within the window: not busy now, and no kernel message for that long."""
        try:
            kernel = self.serverapp.kernel_manager.get_kernel(kernel_id)
        except KeyError:
            return False
        # Only "busy" spares it: a kernel no client ever talked to stays "starting" for good in
        # jupyter_server (no status message reaches it), however long it has held the GPU; one that
        # is really starting has a last activity within the window.
        if getattr(kernel, "execution_state", None) == "busy":
            return False
        last = getattr(kernel, "last_activity", None)
        return last is None or (utcnow() - last).total_seconds() >= self.after_s

    def _cull(self, kernel_id: str, held: list[Any], idle: float, total: int) -> None:
        gpus = ", ".join(str(h.gpu) for h in sorted(held, key=lambda h: h.gpu))
        path = next((h.notebook_path for h in held if h.notebook_path), None)
        reason = (f"shut down after {_num(self.after_s)} s holding {_num(total / GIB)} GiB of GPU {gpus} unused "
                  f"({SETTING} = {_num(self.after_s)})")
        details = {"memory_bytes": total, "idle_s": round(idle, 1), "after_s": self.after_s,
                   "gpus": {str(h.gpu): h.memory_bytes for h in held}}
        events = self.serverapp.web_app.settings.get(EVENTS_KEY)
        if events is not None:
            events.expect_shutdown(kernel_id)
            events.add("culled", kernel_id, path, reason, details)
        self.log.info("gpu-widgets: kernel %s (%s) %s", kernel_id, path or "no notebook", reason)
        self._pending.add(kernel_id)
        task = asyncio.ensure_future(self._shutdown(kernel_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _shutdown(self, kernel_id: str) -> None:
        try:
            await ensure_async(self.serverapp.kernel_manager.shutdown_kernel(kernel_id))
            self.culled.append(kernel_id)
        except Exception:
            self.log.warning("gpu-widgets: could not shut down idle kernel %s", kernel_id, exc_info=True)
        finally:
            self._pending.discard(kernel_id)
