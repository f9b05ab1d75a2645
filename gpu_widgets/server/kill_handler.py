"""``POST {base_url}gpu-widgets/api/v1/processes/{pid}/kill``: end a GPU process that a kernel of
this server left behind (orphan_watch.py), so that the memory it holds comes back.

Only the server's own user's processes, and only orphans of this server's kernels: anything else
is a 403 that says which rule refused it. SIGTERM first, SIGKILL after ``GRACE_S`` if it is still
there; the waiting happens in a worker thread, never on the event loop. Jupyter's XSRF check
applies as to every write (APIHandler).
"""
from __future__ import annotations

import asyncio
import signal
import time
from typing import Any

import psutil
from tornado import web

from ..service import privacy
from ..service.orphans import OrphanBook
from .handlers import BaseApiHandler
from .orphan_watch import BOOK_KEY

GRACE_S = 5.0


def held_bytes(snap: Any, pid: int) -> dict[int, int]:
    """GPU index -> the memory ``pid`` holds there, in the latest sample."""
    held: dict[int, int] = {}
    for dev in (snap or {}).get("devices", ()):
        for proc in dev.get("processes") or ():
            if proc["pid"] == pid and proc.get("used_memory_bytes") is not None:
                held[dev["index"]] = held.get(dev["index"], 0) + proc["used_memory_bytes"]
    return held


def gone(proc: psutil.Process) -> bool:
    """Ended: no longer running, or a zombie (its memory is back; a parent that does not reap it,
    as PID 1 in some containers, leaves only the table entry)."""
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def wait_gone(proc: psutil.Process, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not gone(proc):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def terminate(proc: psutil.Process, grace_s: float) -> list[str]:
    """SIGTERM, then SIGKILL after ``grace_s``: the signals sent. Blocks: run it in a worker."""
    sent = []
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            proc.send_signal(sig)
        except psutil.Error:
            break  # ended meanwhile
        sent.append(sig.name)
        if wait_gone(proc, grace_s):
            break
    return sent


class KillHandler(BaseApiHandler):
    grace_s = GRACE_S

    @property
    def book(self) -> OrphanBook:
        return self.settings[BOOK_KEY]

    @web.authenticated
    async def post(self, raw_pid: str) -> None:
        self.check_params()
        if not raw_pid.isdigit() or not 0 < int(raw_pid) < 1 << 31:
            raise web.HTTPError(400, f"{raw_pid!r} is not a process id (a positive integer)", reason="bad_parameter")
        pid = int(raw_pid)
        snap = self.service.latest()
        held = held_bytes(snap, pid)
        try:
            proc = psutil.Process(pid)
            uid = proc.uids().real
            started = proc.create_time()
        except psutil.Error:
            proc = None
        if proc is None or gone(proc) or not held and self.book.started(pid) is None:
            raise web.HTTPError(404, f"no GPU process with pid {pid} (it may have ended already)", reason="not_found")
        if uid != privacy.server_uid():
            raise web.HTTPError(403, f"process {pid} belongs to another user (uid {uid}): this server ends only "
                                "its own user's processes", reason="not_yours")
        orphan = self.book.orphan_of(pid)
        if orphan is None or self.book.started(pid) != started:
            raise web.HTTPError(403, f"process {pid} is not an orphan of this server's kernels: only a GPU process "
                                "left behind by a kernel that ended can be killed here (a live kernel's "
                                "processes end with Shut down kernel)", reason="not_an_orphan")
        sent = await asyncio.get_running_loop().run_in_executor(None, terminate, proc, self.grace_s)
        ended = gone(proc)
        if ended:
            self.book.forget(pid)
        self.log.info("gpu-widgets: %s sent to pid %d, orphan of kernel %s (%s)", "+".join(sent) or "nothing",
                      pid, orphan["kernel_id"], orphan["notebook_path"])
        self.send({"pid": pid, "signals": sent, "ended": ended, "orphan_of": orphan,
                   "freed_bytes": sum(held.values()) if ended else 0,
                   "gpus": sorted(held)})
