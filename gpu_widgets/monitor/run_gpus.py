"""The GPUs a TrainingMonitor's run watches: samples from the sampler, folded into the run's
GPU trace on the monitor's thread, and which GPUs are shown (``gpus=``, or those PyTorch uses).
The alert rules (monitor_alerts) run on the same samples, for the GPUs shown."""
from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any, Callable

from ..runs.gpu_trace import DeviceTrace, GpuTrace
from ..sampling.sampler import Sampler
from ..widgets import leases
from . import run_state
from .background import Resources
from ..widgets.gpu_summary import summarised
from .monitor_alerts import MonitorAlerts
from ..widgets.process_gpus import AUTO, Choice, watched
from ..widgets.torch_probe import TorchState, probe, torch_fields


class RunGpus:
    def __init__(self, trace: GpuTrace, res: Resources, choice: Choice, sampler: Sampler | None) -> None:
        self.trace = trace
        self.res = res
        self.choice = choice
        self.sampler = sampler  # the user's own; None: a lease on the shared one while running
        self.inbox: deque[dict[str, Any]] = deque(maxlen=3600)  # the sampler's thread appends
        self.torch: TorchState | None = None
        self.config_error: str | None = None
        self.readonly = False  # a loaded run: the GPUs it used (run.json), else every GPU it recorded
        self.saved_used: frozenset[int] | None = None  # a loaded run's "gpus_used" (None: not known)
        self.saved_summary = False  # a loaded run's "gpu_summary": its live view showed one summary
        self.alerts = MonitorAlerts()

    def connect(self) -> None:
        """Subscribe to the sampler (the shared one is leased: started while someone watches)."""
        res = self.res
        if self.sampler is not None:
            sampler = self.sampler
        else:
            try:
                sampler = res.leased = leases.acquire()
            except leases.ConfigError as exc:
                self.config_error = str(exc)
                return
        latest = sampler.latest
        if latest is not None and latest["timestamp"] > run_state.now() - 2 * sampler.interval_s:
            self.inbox.append(latest)  # a fresh sample now rather than one interval later
        res.unsubscribe = sampler.subscribe(self.inbox.append)
        res.gpm.renew(sampler, sampler.interval_s)  # a running monitor looks: SM active, tensor active

    def drain(self, written: Callable[[list[dict[str, Any]]], None], period_s: float = 1.0) -> None:
        """Fold the samples received into the trace; ``written`` gets their rows for the run log.
        Called on the monitor's timer (every ``period_s``), which also renews the GPM lease."""
        res = self.res
        if res.unsubscribe is not None:  # connected, not stopped
            res.gpm.renew(self.sampler or res.leased, period_s)
        if not self.inbox:
            return
        self._probe_torch(self.inbox[-1])  # once per tick: PyTorch's memory now
        extra = torch_fields(self.torch)
        while self.inbox:
            snap = self.inbox.popleft()
            shown = self.watched(snap)
            written(self.trace.add_snapshot(snap, shown, extra))
            self.alerts.feed(snap, shown)

    def _probe_torch(self, snap: Mapping[str, Any]) -> None:
        uuids: list[str | None] = []
        for d in snap.get("devices", ()):
            uuids.extend([None] * (d["index"] + 1 - len(uuids)))
            uuids[d["index"]] = d.get("uuid")
        self.torch = probe(uuids, snap.get("cuda_visible_devices"))

    def watched(self, snap: Mapping[str, Any]) -> frozenset[int] | None:
        return watched(self.choice, snap, self.torch)

    def adopt_saved(self, meta: Mapping[str, Any]) -> None:
        """A loaded run shows its GPUs as its live view did: run.json's ``gpus_used`` (indices;
        ``[]``: none, the machine's GPUs were shown) and ``gpu_summary``. Older runs say neither."""
        used = meta.get("gpus_used")
        self.saved_used = frozenset(used) if isinstance(used, list) else None
        self.saved_summary = meta.get("gpu_summary") is True

    def used(self, tensor_devices: set[str]) -> dict[str, Any]:
        """What run.json keeps of the GPUs, so that load() and compare() show what this view shows."""
        none = self.uses_no_gpu(tensor_devices)
        return {"gpus_used": [] if none else [d.index for d in self.shown()], "gpu_summary": self.summarised()}

    def shown(self) -> list[DeviceTrace]:
        """The GPUs the charts and the header show, by index."""
        snap = self.trace.last_snapshot
        if self.readonly:
            keep = self.saved_used or None  # none used: the machine's GPUs, as the live view showed
        else:
            keep = None if snap is None else self.watched(snap)
        return [d for i, d in sorted(self.trace.devices.items()) if keep is None or i in keep]

    def summarised(self) -> bool:
        """Many GPUs shown only because this process uses none (``gpus="auto"``): the charts and
        the header show them as one summary (gpu_summary). A loaded run: as its live view did."""
        if self.readonly:
            return self.saved_summary
        return summarised(self.choice, self.trace.last_snapshot, self.torch)

    def uses_no_gpu(self, tensor_devices: set[str]) -> bool:
        """The GPUs shown are the machine's, none of them this run's: ``gpus="auto"`` fell back to
        all, no tensor reached a GPU, and PyTorch never started CUDA (or, without PyTorch, the
        summary already says this process uses none). A loaded run: its run.json's ``gpus_used: []``."""
        snap = self.trace.last_snapshot
        if self.readonly:
            return self.saved_used is not None and not self.saved_used
        if self.choice != AUTO or snap is None or self.watched(snap) is not None:
            return False
        if tensor_devices - {"cpu"}:
            return False
        return self.summarised() or (self.torch is not None and not self.torch.cuda_initialized)

    def freshness(self, running: bool) -> tuple[str | None, str | None]:
        """The backend's status and reason for the header ("stale" when the sampler is stuck)."""
        trace = self.trace
        return leases.freshness(self.sampler or self.res.leased if running else None, trace.status, trace.reason)
