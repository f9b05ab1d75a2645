"""Which local processes hold which GPU's device file: how GPU processes are found in a container.

In a pid namespace of its own (a Docker container, a Kubernetes pod without ``hostPID``) the
server cannot use NVML's pids: the driver reports host pids, which name no process here. A
process with a CUDA context holds ``/dev/nvidia<minor>`` open (NVML gives each GPU's minor number)
and ``/dev/nvidia-uvm``; NVML alone (a sampler, nvidia-smi) opens the GPU's file but not
nvidia-uvm, so where nvidia-uvm exists only its holders count. MIG instances are reached through
``/dev/nvidia-caps/nvidia-cap<N>``: the cap numbers are kept, the instance they stand for is not
known here. Reading ``/proc/<pid>/fd`` needs the right to inspect the process: another user's is
skipped unless the server runs as root, and counted, so the answer can say why it may be short.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

ENV = "GPU_WIDGETS_NVIDIA_DEVICE_DIR"
DEFAULT_DIR = "/dev"
PROC = "/proc"
# The inode of the host's pid namespace (PROC_PID_INIT_INO): the same on every Linux.
INIT_PID_NAMESPACE = 0xEFFFFFFC
MAX_PROCESSES = 65536  # a bound on one scan, whatever /proc holds
MAX_FDS = 65536  # per process
LIST_EVERY_S = 30.0  # /proc listed again at most this often between refreshes (new pids, forked holders)
# Refreshes use at most this share of one core (0.75 ms a second, 1.5 ms per 2 s slow read): after one
# that took t seconds the next waits t / share (1,000 processes: ~50 ms, so ~65 s). A change after a
# quiet spell is read at once; a storm of them (other containers' contexts coming and going) at this pace.
REFRESH_SHARE = 0.00075


def device_dir() -> str:
    """Where the NVIDIA device files are: $GPU_WIDGETS_NVIDIA_DEVICE_DIR, else /dev."""
    return os.environ.get(ENV) or DEFAULT_DIR


def pid_namespace_is_init(proc: str = PROC) -> bool | None:
    """Whether this process sees the host's pids (bare metal, ``--pid=host``); None when unknown."""
    try:
        return os.stat(f"{proc}/self/ns/pid").st_ino == INIT_PID_NAMESPACE
    except OSError:
        return None


@dataclass(frozen=True)
class Held:
    """The NVIDIA files one process holds open."""

    minors: frozenset[int] = frozenset()
    uvm: bool = False
    caps: frozenset[int] = frozenset()

    @property
    def any(self) -> bool:
        return bool(self.minors or self.uvm or self.caps)


NOTHING = Held()


@dataclass
class Holders:
    """One scan: GPU minor -> local pids with a CUDA context there, and what could not be read."""

    by_minor: dict[int, set[int]] = field(default_factory=dict)
    caps: dict[int, frozenset[int]] = field(default_factory=dict)  # pid -> MIG cap numbers it holds
    parents: dict[int, int] = field(default_factory=dict)  # holder pid -> its parent's pid
    denied: int = 0  # processes whose open files this server may not read (another user's)
    scanned: int = 0

    def of(self, minor: int | None) -> set[int]:
        return set() if minor is None else self.by_minor.get(minor, set())


class DeviceFileScan:
    """Reads /proc/<pid>/fd of the local processes, caching each one's answer.

    A process's open NVIDIA files are read once, and again only when ``refresh`` is asked: the
    backend asks it when NVML's process lists changed, which is when a context was made or ended.
    Between refreshes /proc is listed (new pids read) at most every ``list_every_s``: a new context
    changes NVML's lists anyway, so a listing only catches processes that inherited a holder's files
    (a forked DataLoader worker, an orphan). Every scan checks each holder's start time, so a pid the
    OS hands to a new process is never taken for the old holder. Refreshes are paced to
    ``refresh_share`` of a core; one asked for too soon is made as soon as the pace allows.
    """

    def __init__(self, dev_dir: str | None = None, proc: str = PROC, own_pid: int | None = None,
                 list_every_s: float = LIST_EVERY_S, refresh_share: float = REFRESH_SHARE) -> None:
        self.dev_dir = os.path.normpath(dev_dir or device_dir())
        self.proc = proc
        self.own_pid = os.getpid() if own_pid is None else own_pid
        self._gpu_prefix = os.path.join(self.dev_dir, "nvidia")
        self._uvm = os.path.join(self.dev_dir, "nvidia-uvm")
        self._caps_prefix = os.path.join(self.dev_dir, "nvidia-caps", "nvidia-cap")
        self._lock = threading.Lock()
        self._cache: dict[int, Held | None] = {}  # None: not readable (another user's)
        self._started: dict[int, str | None] = {}  # holders only: pid -> start time (/proc/<pid>/stat)
        self._parents: dict[int, int] = {}  # holders only: pid -> parent pid
        self.list_every_s, self.refresh_share = list_every_s, refresh_share
        self._refresh_due = 0.0  # monotonic time before which a refresh waits
        self.pending = False  # a refresh was asked for and waits for the pace
        self._listed: tuple[float, set[int], int] | None = None  # (when, pids, denied) of the last listing
        self.reads = 0  # processes whose fds were listed (benchmarks, tests)
        self.listings = 0  # times /proc was listed

    def holders(self, refresh: bool = False) -> Holders:
        with self._lock:
            now = time.monotonic()
            refresh = refresh or self.pending
            if refresh and now < self._refresh_due:
                self.pending, refresh = True, False
            last = self._listed
            if not refresh and last is not None and now - last[0] < self.list_every_s:
                return self._collect(last[1], last[2])
            t = time.perf_counter()
            out = self._scan(refresh)
            if refresh or last is None:  # the first scan reads every process too
                self.pending = False
                self._refresh_due = time.monotonic() + (time.perf_counter() - t) / self.refresh_share
            return out

    def _scan(self, refresh: bool) -> Holders:
        try:
            names = os.listdir(self.proc)
        except OSError:
            return Holders()
        self.listings += 1
        pids = [int(n) for n in names if n.isdigit()][:MAX_PROCESSES]
        cache, started = self._cache, self._started
        if refresh:
            cache.clear()
            started.clear()
            self._parents.clear()
        live = set(pids)
        for pid in [p for p in cache if p not in live]:
            del cache[pid]
            started.pop(pid, None)
            self._parents.pop(pid, None)
        for pid in pids:
            if pid not in cache:
                self._read(pid)
        denied = sum(1 for pid in pids if cache.get(pid, NOTHING) is None)
        self._listed = (time.monotonic(), live, denied)
        return self._collect(live, denied)

    def _collect(self, live: set[int], denied: int) -> Holders:
        """The holders among the cached answers, each holder's start time checked first."""
        cache, started = self._cache, self._started
        for pid in list(started):
            if pid in live and started[pid] != _start_time(self.proc, pid):
                self._read(pid)  # ended, or the pid now names another process
        # CUDA users hold nvidia-uvm; where the folder has none (a stand-in, an odd setup) the GPU file alone counts.
        need_uvm = os.path.exists(self._uvm)
        out = Holders(scanned=len(live), denied=denied)
        for pid in started:
            held = cache.get(pid)
            if pid not in live or held is None or not held.any or (need_uvm and not held.uvm):
                continue
            if pid == self.own_pid and not need_uvm:
                continue  # this process opens the GPU files for NVML only; nvidia-uvm tells them apart elsewhere
            for minor in held.minors:
                out.by_minor.setdefault(minor, set()).add(pid)
            if held.caps:
                out.caps[pid] = held.caps
            if pid in self._parents:
                out.parents[pid] = self._parents[pid]
        return out

    def _read(self, pid: int) -> Held | None:
        self.reads += 1
        fd_dir = f"{self.proc}/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)[:MAX_FDS]
        except PermissionError:
            self._cache[pid] = None
            return None
        except OSError:  # ended meanwhile, or a kernel thread
            self._cache[pid] = NOTHING
            return NOTHING
        minors: set[int] = set()
        caps: set[int] = set()
        uvm = False
        for fd in fds:
            try:
                target = os.readlink(f"{fd_dir}/{fd}")
            except OSError:
                continue
            if not target.startswith(self._gpu_prefix):
                continue
            if target == self._uvm:
                uvm = True
            elif target.startswith(self._caps_prefix):
                rest = target[len(self._caps_prefix):]
                if rest.isdigit():
                    caps.add(int(rest))
            else:
                rest = target[len(self._gpu_prefix):]
                if rest.isdigit():
                    minors.add(int(rest))
        held = Held(frozenset(minors), uvm, frozenset(caps)) if (minors or uvm or caps) else NOTHING
        self._cache[pid] = held
        if held.any:
            self._started[pid] = _start_time(self.proc, pid)
            parent = _parent(self.proc, pid)
            if parent is not None:
                self._parents[pid] = parent
        else:
            self._started.pop(pid, None)
            self._parents.pop(pid, None)
        return held


def _stat_fields(proc: str, pid: int) -> list[bytes]:
    """/proc/<pid>/stat from field 3 on (empty when gone)."""
    try:
        with open(f"{proc}/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return []
    # The command name (field 2) may hold spaces and parentheses: count from its closing one.
    return stat[stat.rfind(b")") + 2:].split()


def _start_time(proc: str, pid: int) -> str | None:
    """Field 22 of /proc/<pid>/stat (start time in clock ticks), as text; None when gone."""
    fields = _stat_fields(proc, pid)
    return fields[19].decode() if len(fields) > 19 else None


def _parent(proc: str, pid: int) -> int | None:
    """Field 4 of /proc/<pid>/stat: the parent's pid; None when gone."""
    fields = _stat_fields(proc, pid)
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None
