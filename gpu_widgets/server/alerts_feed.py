"""Feeds the alert engine in a running server: the sampler's snapshots, and this server's kernels.

The engine subscribes to the sampler once the backend has opened (that happens on a thread, see
gpu_widgets/service/service.py). Every few seconds, and only while GPU processes and kernels both
exist, the GPU processes are matched to this server's kernels (a /proc walk, so in a worker
thread) and the result handed to the engine; the sampler thread never waits for that.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from tornado.ioloop import PeriodicCallback

from ..alerts import AlertEngine, KernelRef
from ..service.attribution import owning_kernel
from ..service.service import GpuService
from . import kernels

ATTRIBUTION_S = 5.0


def owners_of(pids: Iterable[int], roots: dict[int, str], paths: dict[str, str]) -> dict[int, KernelRef]:
    """pid -> the kernel that owns it (the kernel's process or a descendant); others are left out."""
    out = {}
    for pid in set(pids):
        kernel_id = owning_kernel(pid, roots)
        if kernel_id is not None:
            out[pid] = KernelRef(kernel_id, paths.get(kernel_id))
    return out


def gpu_pids(snap: Any) -> Iterator[int]:
    """The pid of every process on every GPU of ``snap`` (consumed by ``owners_of`` in the worker)."""
    return (p["pid"] for d in snap["devices"] for p in d.get("processes") or () if p["pid"] is not None)


class AlertsFeed:
    def __init__(self, service: GpuService, engine: AlertEngine, kernel_manager: Any, session_manager: Any,
                 log: logging.Logger, attribution_s: float = ATTRIBUTION_S) -> None:
        self.service, self.engine = service, engine
        self.kernel_manager, self.session_manager = kernel_manager, session_manager
        self.log = log
        self._periodic = PeriodicCallback(self.refresh_kernels, attribution_s * 1000)
        self._stopped = threading.Event()
        self._unsubscribe: Any = None

    def start(self) -> None:
        if not self.engine.enabled:
            return
        threading.Thread(target=self._subscribe_when_open, name="gpu-widgets-alerts", daemon=True).start()
        self._periodic.start()

    def stop(self) -> None:
        self._stopped.set()
        self._periodic.stop()
        if self._unsubscribe is not None:
            self._unsubscribe()

    def _subscribe_when_open(self) -> None:
        while not self._stopped.is_set():
            if self.service.wait_ready(1.0):
                if self.service.sampler is not None and not self._stopped.is_set():
                    self._unsubscribe = self.service.sampler.subscribe(self.engine.on_sample)
                return

    async def refresh_kernels(self) -> None:
        """Match GPU processes to kernels now (the periodic callback; tests may call it)."""
        try:
            snap = self.service.latest()
            live = frozenset(self.kernel_manager.list_kernel_ids())
            # Kernels first (a few): the GPU processes can be 64 GPUs x 1000, gathered in the worker.
            roots = kernels.kernel_root_pids(self.kernel_manager) if snap and snap["devices"] else {}
            if not roots:
                self.engine.set_kernels({}, live)
                return
            paths: dict[str, str] = {}
            for session in await self.session_manager.list_sessions():
                kernel = session.get("kernel") or {}
                if kernel.get("id"):
                    paths[kernel["id"]] = session.get("path")
            owners = await asyncio.get_running_loop().run_in_executor(None, owners_of, gpu_pids(snap), roots, paths)
            self.engine.set_kernels(owners, live)
        except Exception:  # the next round tries again; the alerts keep the last attribution
            self.log.warning("gpu-widgets alerts: could not match GPU processes to kernels", exc_info=True)
