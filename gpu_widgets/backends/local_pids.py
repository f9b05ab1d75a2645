"""Whether NVML's pids are this server's, and the local processes behind them when they are not.

One object per backend, asked once per GPU in each slow read. Where the server sees the host's pids
it costs nothing (NVML's pids are used as they are). In a container it scans the device files the
local processes hold (device_files.py), once per slow read, re-reading every process only when
NVML's lists changed (paced: see REFRESH_SHARE), and matches (pid_match.py).
"""
from __future__ import annotations

from collections.abc import Callable

import psutil

from .device_files import PROC, DeviceFileScan, Holders, pid_namespace_is_init
from .pid_match import Match, by_device_files, by_pid

FIX = ("To see every process with its own memory, run the container with --pid=host (docker run) or "
       "hostPID: true (a Kubernetes pod); nothing else is needed.")


class LocalPids:
    def __init__(self, dev_dir: str | None = None, proc: str = PROC,
                 exists: Callable[[int], bool] = psutil.pid_exists) -> None:
        self._dev_dir, self._proc, self._exists = dev_dir, proc, exists
        self.init_namespace = pid_namespace_is_init(proc)
        self._scan: DeviceFileScan | None = None
        self._holders: Holders | None = None
        self._refreshed = False
        self._last: dict[int, frozenset[int]] = {}  # GPU index -> NVML's pids in the last read
        self.host_pids = False  # NVML's pids named no local process in the last read
        self.scans = 0  # device-file scans made (none where the server sees the host's pids)

    def begin_read(self) -> None:
        """A slow read starts: the device files are scanned again on first need."""
        self._holders, self._refreshed = None, False

    def match(self, gpu: int, minor: int | None, listed: list[tuple[int, int | None]]) -> list[Match]:
        if not self._host_pids(listed):
            return by_pid(listed)
        self.host_pids = True
        now = frozenset(pid for pid, _ in listed)
        changed = self._last.get(gpu) != now
        self._last[gpu] = now
        if minor is None:
            return by_device_files(listed, set())  # no device file to look for: all apart
        if self._scan is None:
            self._scan = DeviceFileScan(self._dev_dir, self._proc)
        if self._holders is None or (changed and not self._refreshed):
            self._holders = self._scan.holders(refresh=changed)
            self.scans += 1
            self._refreshed = self._refreshed or changed
        return by_device_files(listed, self._holders.of(minor), self._holders.parents)

    def _host_pids(self, listed: list[tuple[int, int | None]]) -> bool:
        if self.init_namespace is not None:
            return not self.init_namespace
        # The namespace could not be read: host pids if none of NVML's names a process here.
        return bool(listed) and not any(self._exists(pid) for pid, _ in listed)

    def note(self) -> str | None:
        """One line for the status: what works, what does not, and the fix; None where pids are the host's."""
        if not self.host_pids:
            return None
        denied = self._holders.denied if self._holders is not None else 0
        short = (f" {denied} processes of other users could not be looked at (the server does not run as root): "
                 "their GPU use shows as outside this container." if denied else "")
        return ("This server runs in a container and the NVIDIA driver reports host pids: its GPU processes are "
                "found by the device files they hold (/dev/nvidia*), each with its memory where the driver's "
                "counts decide it (else 'memory unknown'), and other containers' processes are listed as outside. "
                "Kernels, culling, orphans and the OOM post-mortem work on these processes." + short + " " + FIX)
