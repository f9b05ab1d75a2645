"""Keeps the orphan book (service/orphans.py) up to date from this server's kernels and samples.

Every ``WATCH_S`` a round reads the kernels and sessions here (cheap, on the loop) and hands the
/proc walk to a worker thread. It runs only while a GPU lists processes: an idle machine costs
nothing.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any

from tornado.ioloop import PeriodicCallback

from ..service.orphans import OrphanBook
from ..service.service import GpuService
from . import kernels

BOOK_KEY = "gpu_widgets_orphans"
WATCH_S = 2.0


class OrphanWatch:
    def __init__(self, service: GpuService, kernel_manager: Any, session_manager: Any,
                 log: logging.Logger, watch_s: float = WATCH_S) -> None:
        self.service, self.kernel_manager, self.session_manager = service, kernel_manager, session_manager
        self.log = log
        self.book = OrphanBook()
        self._periodic = PeriodicCallback(self.round, watch_s * 1000)
        self._busy = False

    def start(self) -> None:
        self._periodic.start()

    def stop(self) -> None:
        self._periodic.stop()

    async def round(self) -> None:
        if self._busy:
            return  # a slow /proc walk: never two at once
        self._busy = True
        try:
            snap = self.service.latest()
            pids = [p["pid"] for d in (snap or {}).get("devices", ()) for p in d.get("processes") or ()
                    if p["pid"] is not None]
            if not pids and not len(self.book):
                return
            live = frozenset(self.kernel_manager.list_kernel_ids())
            roots = kernels.kernel_root_pids(self.kernel_manager)
            paths = await kernels.notebook_paths(self.session_manager, self.log)
            await asyncio.get_running_loop().run_in_executor(None, self.book.note, pids, roots, paths, live)
        except Exception:  # the next round tries again
            self.log.warning("gpu-widgets: could not update the orphaned GPU processes", exc_info=True)
        finally:
            self._busy = False
