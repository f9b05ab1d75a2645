"""Kernel events: a kernel of this server that died (and why, when it can be known) or was culled.

``KernelEvents`` keeps the last ``MAX_EVENTS``; ``GET gpu-widgets/api/v1/kernels/events`` serves them.
``DeathWatcher`` hangs a callback on each kernel's restarter (jupyter_client's KernelRestarter fires
'restart' when it finds the kernel process gone, 'dead' when it gives up): a shutdown asked for
stops the restarter first, so only a kernel that exited unasked reaches the callback. A kernel
without a restarter (``autorestart`` off) has nobody to notice: the watcher's own look polls its
process, and a shutdown asked for says so (``shutting_down``) before the process ends. What the
kernel held is remembered from the watcher's own periodic look (the kernel is gone by then).
"""
from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections import deque
from typing import Any

import psutil
from tornado.ioloop import PeriodicCallback

from ..service import process_family
from . import cgroup, kernels

MAX_EVENTS = 200
KEY = "gpu_widgets_kernel_events"
LOOK_S = 1.0
NEAR_LIMIT = 0.95  # GPU memory in use / total at which a death is put down as "near the limit"
OUTSIDE = {signal.SIGKILL: "killed by SIGKILL from outside the kernel",
           signal.SIGTERM: "stopped by SIGTERM from outside the kernel"}
CRASH = {signal.SIGSEGV: "crashed (SIGSEGV, a segmentation fault)", signal.SIGABRT: "crashed (SIGABRT, aborted)",
         signal.SIGBUS: "crashed (SIGBUS)"}
GIB = 1 << 30


class KernelEvents:
    def __init__(self, limit: int = MAX_EVENTS) -> None:
        self._events: deque[dict[str, Any]] = deque(maxlen=limit)
        self._next = 1
        self._expected: set[str] = set()
        self._lock = threading.Lock()

    def add(self, kind: str, kernel_id: str, notebook_path: str | None, reason: str,
            details: dict[str, Any] | None = None) -> dict[str, Any]:
        with self._lock:
            event = {"id": self._next, "kernel_id": kernel_id, "notebook_path": notebook_path, "time": time.time(),
                     "kind": kind, "reason": reason, "details": details or {}}
            self._next += 1
            self._events.append(event)
            return event

    def expect_shutdown(self, kernel_id: str) -> None:
        with self._lock:
            self._expected.add(kernel_id)
            if len(self._expected) > 4 * MAX_EVENTS:
                self._expected.pop()

    def expected(self, kernel_id: str) -> bool:
        with self._lock:
            return kernel_id in self._expected

    def events(self, since: int | None = None) -> list[dict[str, Any]]:
        with self._lock:
            return [e for e in self._events if since is None or e["id"] > since]


def exit_words(code: int | None) -> tuple[str, dict[str, Any]]:
    """The exit status in words, and its fields (Popen's returncode: -N for signal N)."""
    if code is None:
        return "exited (its exit status could not be read)", {"exit_code": None, "signal": None}
    if code < 0:
        try:
            sig = signal.Signals(-code)
        except ValueError:
            return f"killed by signal {-code}", {"exit_code": code, "signal": str(-code)}
        return OUTSIDE.get(sig) or CRASH.get(sig) or f"killed by {sig.name}", {"exit_code": code, "signal": sig.name}
    return f"exited with status {code}", {"exit_code": code, "signal": None}


def held_by(pids: set[int], snap: Any) -> dict[str, int]:
    """GPU index (as a string, a JSON key) -> bytes that ``pids`` hold in ``snap``."""
    out: dict[str, int] = {}
    for dev in (snap or {}).get("devices") or ():
        for proc in dev.get("processes") or ():
            if proc.get("pid") in pids and proc.get("used_memory_bytes"):
                out[str(dev["index"])] = out.get(str(dev["index"]), 0) + proc["used_memory_bytes"]
    return out


def _rss(pid: int) -> int:
    try:
        return psutil.Process(pid).memory_info().rss
    except psutil.Error:  # a member that ended meanwhile
        return 0


def look(roots: dict[int, str], snap: Any) -> dict[str, dict[str, Any]]:
    """kernel id -> its pids (itself and descendants), host memory and GPU memory now (a worker: /proc)."""
    out: dict[str, dict[str, Any]] = {}
    for pid, kernel_id in roots.items():
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                continue  # dead, not yet reaped: keep what the look before saw
        except psutil.Error:  # gone: its host memory is not known
            pids, rss = {pid}, None
        else:
            pids = process_family.family(pid) or {pid}
            rss = sum(_rss(m) for m in pids)
        out[kernel_id] = {"pids": pids, "host_memory_bytes": rss, "gpu": held_by(pids, snap), "time": time.time()}
    return out


class DeathWatcher:
    def __init__(self, kernel_manager: Any, session_manager: Any, service: Any, events: KernelEvents,
                 cgroup_root: str, log: Any, look_s: float = LOOK_S) -> None:
        self.km, self.sessions, self.service, self.events = kernel_manager, session_manager, service, events
        self.cgroup_root, self.log = cgroup_root, log
        self._watched: set[str] = set()
        self._seen_dead: set[str] = set()  # restarter-less kernels whose death is recorded
        self._last: dict[str, dict[str, Any]] = {}
        self._paths: dict[str, str] = {}
        # (time, oom_kill) of the recent looks: the restarter notices a death up to time_to_dead late.
        self._ooms: deque[tuple[float, int | None]] = deque(maxlen=64)
        self._periodic = PeriodicCallback(self.refresh, look_s * 1000)
        self._busy = False

    def start(self) -> None:
        self._periodic.start()

    def stop(self) -> None:
        self._periodic.stop()

    async def refresh(self) -> None:
        """Watch new kernels; remember what each holds and the cgroup's oom_kill count."""
        if self._busy:
            return
        self._busy = True
        try:
            live = set(self.km.list_kernel_ids())
            for kernel_id in live - self._watched:
                self._watch(kernel_id)
            # Bounded by the kernels alive now (a death's figures were taken at its callback).
            self._watched &= live
            self._seen_dead &= live
            for kernel_id in self._watched - self._seen_dead:
                self._poll_unrestarted(kernel_id)
            for book in (self._last, self._paths):
                for gone in set(book) - live:
                    del book[gone]
            self._paths.update(await kernels.notebook_paths(self.sessions, self.log))
            roots = kernels.kernel_root_pids(self.km)
            loop = asyncio.get_running_loop()
            self._last.update(await loop.run_in_executor(None, look, roots, self.service.latest()))
            memory = await loop.run_in_executor(None, cgroup.read_memory, self.cgroup_root)
            self._ooms.append((time.time(), memory["oom_kill"]))
        except Exception:
            self.log.warning("gpu-widgets kernel events: could not look at the kernels", exc_info=True)
        finally:
            self._busy = False

    def _watch(self, kernel_id: str) -> None:
        try:
            km = self.km.get_kernel(kernel_id)
        except KeyError:
            return
        for event in ("restart", "dead"):
            km.add_restart_callback(lambda k=kernel_id, m=km: self._died(k, m), event)
        self._watched.add(kernel_id)

    def _poll_unrestarted(self, kernel_id: str) -> None:
        """A kernel with no restarter to call back: its process has exited, and nobody asked."""
        try:
            km = self.km.get_kernel(kernel_id)
        except KeyError:
            return
        if getattr(km, "_restarter", None) is not None or getattr(km, "shutting_down", False):
            return
        process = getattr(getattr(km, "provisioner", None), "process", None)
        if process is not None and process.poll() is not None:
            self._seen_dead.add(kernel_id)
            self._died(kernel_id, km)

    def _died(self, kernel_id: str, km: Any) -> None:
        """The restarter's callback (on the loop): read what must be read now, the rest in a task."""
        restarter = getattr(km, "_restarter", None)
        if getattr(restarter, "_restart_count", 1) != 1 or self.events.expected(kernel_id):
            return  # a restart that failed again, or a shutdown asked for: one event per death
        process = getattr(getattr(km, "provisioner", None), "process", None)
        code = process.poll() if process is not None else None
        # The count before the death: from a look older than the restarter's poll interval.
        cutoff = time.time() - getattr(restarter, "time_to_dead", 3.0) - self._periodic.callback_time / 1000
        before = [n for t, n in self._ooms if t <= cutoff] or [n for _, n in list(self._ooms)[:1]]
        asyncio.ensure_future(self._record(kernel_id, code, self._last.get(kernel_id), before[-1] if before else None))

    async def _record(self, kernel_id: str, code: int | None, last: dict[str, Any] | None, oom_before: int | None) -> None:
        try:
            memory = await asyncio.get_running_loop().run_in_executor(None, cgroup.read_memory, self.cgroup_root)
            reason, details = exit_words(code)
            causes = []
            details["cgroup"] = memory
            if memory["oom_kill"] is not None and oom_before is not None and memory["oom_kill"] > oom_before:
                limit = memory["memory_max_bytes"]
                used = memory["memory_current_bytes"]
                causes.append("killed by the container's memory limit (cgroup oom_kill went up"
                              + (f"; limit {limit / GIB:.1f} GiB" if limit else "")
                              + (f", {used / GIB:.1f} GiB in use" if used is not None else "") + ")")
            snap = self.service.latest()
            gpus = (last or {}).get("gpu") or {}
            details["held"] = {"host_memory_bytes": (last or {}).get("host_memory_bytes"), "gpu_memory_bytes": gpus,
                               "seen": (last or {}).get("time")}
            for dev in (snap or {}).get("devices") or ():
                if str(dev.get("index")) not in gpus:
                    continue
                if dev.get("status") == "lost":
                    causes.append(f"GPU {dev['index']} was lost at that moment")
                used, total = dev.get("memory_used_bytes"), dev.get("memory_total_bytes")
                if used and total and used / total >= NEAR_LIMIT:
                    causes.append(f"GPU {dev['index']} was near its memory limit ({used / total:.0%} in use)")
            held = ", ".join(f"{b / GIB:.1f} GiB on GPU {g}" for g, b in sorted(gpus.items()))
            words = "; ".join(causes + [reason]) + (f"; it held {held}" if held else "")
            self.events.add("died", kernel_id, self._paths.get(kernel_id), f"The kernel died: {words}", details)
        except Exception:
            self.log.warning("gpu-widgets kernel events: could not record a kernel's death", exc_info=True)


from tornado import web  # noqa: E402  (the handler below; kept with the events it serves)

from . import params  # noqa: E402
from .handlers import BaseApiHandler  # noqa: E402


class KernelEventsHandler(BaseApiHandler):
    """``GET kernels/events[?since=<event id>]``: the events after that id (all without it)."""

    allowed_params = ("since",)

    @web.authenticated
    def get(self) -> None:
        self.check_params()
        with params.as_bad_request():
            since = params.bounded_int(self.request.arguments, "since", 0, 0, 1 << 62) \
                if self.request.arguments.get("since") else None
        self.send({"events": self.settings[KEY].events(since)})
