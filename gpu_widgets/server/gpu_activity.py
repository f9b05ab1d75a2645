"""GPU work is activity: a busy GPU that runs this server's processes keeps the server (and the busy
kernel) from looking idle to JupyterHub's idle culler and to jupyter_server's kernel culling.

A periodic callback on the server's event loop reads the sampler's latest sample (no NVML call of
its own); matching GPU processes to kernels and to this server walks /proc, so that part runs in a
worker thread. The same round keeps, per kernel and GPU, the memory held and when the GPU was last
busy with it: the culling policy (kernel_culling.py) and the /metrics gauges read that.
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import psutil
from jupyter_server._tz import utcnow
from tornado.ioloop import PeriodicCallback

from ..service.attribution import owning_kernel
from . import kernels

# Seconds between two looks at the latest sample, and the most often last activity is advanced.
# Module constants so that tests may lower them (monkeypatch before the server starts).
TICK_S = 5.0
ACTIVITY_EVERY_S = 60.0
ACTIVITY_KEY = "gpu_widgets_gpu"  # its entry in web_app.settings["last_activity_times"]
TRACKER_KEY = "gpu_widgets_gpu_activity"
# A machine with thousands of GPU processes: the /proc walk of one round stays bounded.
MAX_PROCESSES = 4096


@dataclass
class Holding:
    """One kernel's processes on one GPU."""

    kernel_id: str
    notebook_path: str | None
    gpu: int
    memory_bytes: int
    seen_since: float  # monotonic: when this server first saw the kernel on that GPU
    last_busy: float | None = None  # monotonic: the last round the GPU was busy with it

    def idle_s(self, now: float) -> float:
        return now - (self.last_busy if self.last_busy is not None else self.seen_since)


@dataclass
class Round:
    """What one sample says, worked out in the worker."""

    ours_busy: bool  # a GPU is busy with a process of this server (and of our uid)
    busy_kernels: set[str]
    held: dict[tuple[str, int], int]  # (kernel id, GPU index) -> bytes its processes hold
    busy_pairs: set[tuple[str, int]]  # (kernel id, GPU index): the GPU was busy with that kernel


def _uid_of(pid: int) -> int | None:
    try:
        return psutil.Process(pid).uids().real
    except psutil.Error:
        return None


def _descends_from(pid: int, server_pid: int) -> bool:
    """Whether ``pid`` is a child (or deeper) of this server: a terminal's shell and what it runs."""
    try:
        return any(p.pid == server_pid for p in psutil.Process(pid).parents())
    except psutil.Error:
        return False


def classify(devices: Iterable[Mapping[str, Any]], roots: dict[int, str], busy_percent: float,
             server_pid: int, uid: int) -> Round:
    """Runs in a worker thread (psutil reads /proc). Another uid's process never counts as ours."""
    out = Round(False, set(), {}, set())
    seen = 0
    for dev in devices:
        util = dev.get("utilization_gpu_percent")
        busy = isinstance(util, (int, float)) and util >= busy_percent
        for proc in dev.get("processes") or ():
            seen += 1
            if seen > MAX_PROCESSES:
                return out
            pid = proc["pid"]
            if pid is None:
                continue  # outside this container (pid_match.py): never this server's
            kernel_id = owning_kernel(pid, roots) if roots else None
            if kernel_id is not None:
                key = (kernel_id, dev["index"])
                out.held[key] = out.held.get(key, 0) + int(proc.get("used_memory_bytes") or 0)
            if not busy or _uid_of(pid) != uid:
                continue
            if kernel_id is not None:
                out.busy_kernels.add(kernel_id)
                out.busy_pairs.add((kernel_id, dev["index"]))
                out.ours_busy = True
            elif pid == server_pid or _descends_from(pid, server_pid):
                out.ours_busy = True
    return out


class GpuActivity:
    """The periodic round. ``culler`` (kernel_culling.KernelCuller or None) is asked after each."""

    def __init__(self, service: Any, serverapp: Any, log: logging.Logger, enabled: bool = True,
                 busy_percent: float = 10.0, culler: Any = None) -> None:
        self.service, self.serverapp, self.log = service, serverapp, log
        self.enabled, self.busy_percent, self.culler = enabled, busy_percent, culler
        self.holdings: dict[tuple[str, int], Holding] = {}
        self.advanced = 0  # how often last activity was advanced (tests, logs)
        self._last_advance: float | None = None
        self._periodic: PeriodicCallback | None = None
        self._running = False

    def start(self) -> None:
        # Runs with both settings off too: the /metrics gauges come from its rounds.
        self._periodic = PeriodicCallback(self.tick, TICK_S * 1000)
        self._periodic.start()

    def stop(self) -> None:
        if self._periodic is not None:
            self._periodic.stop()

    async def tick(self) -> None:
        if self._running:  # a slow /proc walk: never two rounds at once
            return
        self._running = True
        try:
            await self._round()
        except Exception:  # the next round tries again
            self.log.warning("gpu-widgets: could not match GPU work to this server", exc_info=True)
        finally:
            self._running = False

    async def _round(self) -> None:
        snap = self.service.latest() if self.service.ready else None
        if snap is None:
            return
        km = self.serverapp.kernel_manager
        roots = kernels.kernel_root_pids(km)
        loop = asyncio.get_running_loop()
        found = await loop.run_in_executor(None, classify, snap["devices"], roots, self.busy_percent,
                                           os.getpid(), os.getuid())
        paths = await kernels.notebook_paths(self.serverapp.session_manager, self.log) if found.held else {}
        now = time.monotonic()
        self._remember(found, paths, now)
        if self.enabled and found.ours_busy:
            self._advance(found.busy_kernels, now)
        if self.culler is not None:
            await self.culler.check(self.holdings, now)

    def _remember(self, found: Round, paths: dict[str, str], now: float) -> None:
        kept = {}
        for (kernel_id, gpu), size in found.held.items():
            h = self.holdings.get((kernel_id, gpu)) or Holding(kernel_id, None, gpu, size, now)
            h.memory_bytes, h.notebook_path = size, paths.get(kernel_id, h.notebook_path)
            if (kernel_id, gpu) in found.busy_pairs:
                h.last_busy = now
            kept[(kernel_id, gpu)] = h
        self.holdings = kept  # a kernel gone from a GPU starts afresh if it comes back

    def _advance(self, busy_kernels: set[str], now: float) -> None:
        """jupyter_server's own activity settings, at most once every ACTIVITY_EVERY_S."""
        if self._last_advance is not None and now - self._last_advance < ACTIVITY_EVERY_S:
            return
        self._last_advance = now
        stamp = utcnow()
        self.serverapp.web_app.settings["last_activity_times"][ACTIVITY_KEY] = stamp
        km = self.serverapp.kernel_manager
        for kernel_id in busy_kernels:
            try:
                km.get_kernel(kernel_id).last_activity = stamp
            except KeyError:
                continue  # shut down meanwhile
        self.advanced += 1

    def kernel_rows(self) -> list[dict[str, Any]]:
        """Per kernel and GPU, for the /metrics gauges: memory held and seconds unused."""
        now = time.monotonic()
        return [{"kernel_id": h.kernel_id, "notebook_path": h.notebook_path or "", "gpu": h.gpu,
                 "memory_bytes": h.memory_bytes, "idle_s": max(0.0, h.idle_s(now))}
                for h in list(self.holdings.values())]
