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
from dataclasses import dataclass, field

ENV = "GPU_WIDGETS_NVIDIA_DEVICE_DIR"
DEFAULT_DIR = "/dev"
PROC = "/proc"
# The inode of the host's pid namespace (PROC_PID_INIT_INO): the same on every Linux.
INIT_PID_NAMESPACE = 0xEFFFFFFC
MAX_PROCESSES = 65536  # a bound on one scan, whatever /proc holds
MAX_FDS = 65536  # per process


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
    denied: int = 0  # processes whose open files this server may not read (another user's)
    scanned: int = 0

    def of(self, minor: int | None) -> set[int]:
        return set() if minor is None else self.by_minor.get(minor, set())


class DeviceFileScan:
    """Reads /proc/<pid>/fd of the local processes, caching each one's answer.

    A process's open NVIDIA files are read once, and again only when ``refresh`` is asked: the
    backend asks it when NVML's process lists changed, which is when a context was made or ended.
    A new pid is always read. A holder's start time is checked on every scan, so a pid the OS hands
    to a new process is never taken for the old holder (others: a new context would change NVML's
    lists, and so refresh).
    """

    def __init__(self, dev_dir: str | None = None, proc: str = PROC, own_pid: int | None = None) -> None:
        self.dev_dir = os.path.normpath(dev_dir or device_dir())
        self.proc = proc
        self.own_pid = os.getpid() if own_pid is None else own_pid
        self._gpu_prefix = os.path.join(self.dev_dir, "nvidia")
        self._uvm = os.path.join(self.dev_dir, "nvidia-uvm")
        self._caps_prefix = os.path.join(self.dev_dir, "nvidia-caps", "nvidia-cap")
        self._lock = threading.Lock()
        self._cache: dict[int, Held | None] = {}  # None: not readable (another user's)
        self._started: dict[int, str | None] = {}  # holders only: pid -> start time (/proc/<pid>/stat)
        self.reads = 0  # processes whose fds were listed (benchmarks, tests)

    def holders(self, refresh: bool = False) -> Holders:
        with self._lock:
            return self._scan(refresh)

    def _scan(self, refresh: bool) -> Holders:
        try:
            names = os.listdir(self.proc)
        except OSError:
            return Holders()
        pids = [int(n) for n in names if n.isdigit()][:MAX_PROCESSES]
        cache, started = self._cache, self._started
        if refresh:
            cache.clear()
        live = set(pids)
        for pid in [p for p in cache if p not in live]:
            del cache[pid]
            started.pop(pid, None)
        # CUDA users hold nvidia-uvm; where the folder has none (a stand-in, an odd setup) the GPU file alone counts.
        need_uvm = os.path.exists(self._uvm)
        out = Holders(scanned=len(pids))
        missing = object()
        for pid in pids:
            held = cache.get(pid, missing)
            if held is NOTHING:  # most processes: no NVIDIA file, nothing more to do
                continue
            if pid == self.own_pid and not need_uvm:
                continue  # this process opens the GPU files for NVML only; nvidia-uvm tells them apart elsewhere
            if held is missing:
                held = self._read(pid)
            elif pid in started and started[pid] != _start_time(self.proc, pid):
                held = self._read(pid)  # the pid now names another process
            if held is None:
                out.denied += 1
                continue
            if not held.any or (need_uvm and not held.uvm):
                continue
            for minor in held.minors:
                out.by_minor.setdefault(minor, set()).add(pid)
            if held.caps:
                out.caps[pid] = held.caps
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
        else:
            self._started.pop(pid, None)
        return held


def _start_time(proc: str, pid: int) -> str | None:
    """Field 22 of /proc/<pid>/stat (start time in clock ticks), as text; None when gone."""
    try:
        with open(f"{proc}/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: count from its closing one.
    fields = stat[stat.rfind(b")") + 2:].split()
    return fields[19].decode() if len(fields) > 19 else None
