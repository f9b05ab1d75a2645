"""The NVML backend: real GPUs through pynvml, every failure turned into data.

Before each NVML call the backend writes the function and the GPU into its thread's slot
(backends/inflight.py): one attribute store per call, so a call that hangs can be named.
"""
from __future__ import annotations

import threading
import time
from typing import Any

from ...metrics.samples import FastRead, SlowRead
from ..base import GPM_OFF, LOST, NO_GPU, OK, Backend, DeviceDict, lost_device, null_fields
from ..inflight import Doing, calling, here
from ..local_pids import LocalPids
from ..processes import ProcessDescriber
from .errors import LOST as LOST_KIND
from .errors import NO_GPU as NO_GPU_KIND
from .errors import TRANSIENT, UNSUPPORTED, Failure, classify
from .gpm import DeviceGpm, null
from .library import NVML, NoGpu, Nvml
from .mig import minor_number, read_instances
from .readers import (FAST_QUERIES, SLOW_QUERIES, STATIC_QUERIES, BoundReader, Query, bind, call_of, calls,
                      peak_memory_bandwidth, text)
from .usage import UsageReader, processes_with_usage

STATIC_FIELDS = tuple(f for q in STATIC_QUERIES for f in q.fields) + ("memory_bandwidth_bytes_per_s",)

# The identity of a GPU: field -> pynvml getter. A GPU that cannot say these is still a GPU.
IDENTITY = (("uuid", "nvmlDeviceGetUUID"), ("name", "nvmlDeviceGetName"))

# What a failed GPM / MIG read is recorded under (only its failure is used).
_MIG_QUERY = Query("mig_instances", ("mig_instances",), lambda nv, h, out: None)
# How often a lost GPU is asked again whether it is back (well inside the 15 s promise).
LOST_RETRY_S = 5.0


class _Device:
    """What we know about one GPU between reads."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.handle: Any = None
        self.uuid: str | None = None
        self.name: str | None = None
        self.lost_reason: str | None = None
        self.lost_since: float | None = None
        self.next_retry = 0.0
        self.unsupported: dict[str, str] = {}  # query key -> reason, never asked again
        self.identity_gaps: dict[str, str] = {}  # "uuid"/"name" -> why it is null
        self.identity_retry = False  # a gap was transient: read the identity again next tick
        self.info: DeviceDict | None = None
        self.lock = threading.Lock()
        self.gpm = DeviceGpm()  # GPM buffers and support, read only while someone looks
        self.usage = UsageReader()
        self.owners: dict[int, tuple[int, int]] = {}  # pid -> MIG (gpu, compute) instance ids
        self.minor: int | None | bool = False  # /dev/nvidia<minor>; False: not read yet, None: unknown
        self.losses = self.gpm_losses = 0  # times lost; the GPM state belongs to gpm_losses


class NvmlBackend(Backend):
    name = "nvml"

    def __init__(self, nvml: Nvml = NVML, clock: Any = time.monotonic) -> None:
        super().__init__()
        self._nvml = nvml
        self._clock = clock
        self._nv: Any = None
        self._fast: list[tuple[Query, BoundReader, str | None]] = []  # with the NVML function each calls
        self._slow: list[tuple[Query, BoundReader, str | None]] = []
        self._devices: list[_Device] = []
        self._describer = ProcessDescriber()
        self._process_query = Query("processes", ("processes",), self._processes)
        self._owners: dict[int, tuple[int, int]] = {}  # filled by _processes for the device being read
        self._reading: _Device | None = None  # the device whose process list is being read
        self._local = LocalPids()  # NVML's pids are host pids in a container (local_pids.py)
        self._opened = False

    # -- set-up ------------------------------------------------------------------------------
    def open(self) -> None:
        if self._opened:
            return
        here().gpu = None  # no GPU's call until _attach
        try:
            nv = self._nvml.ensure()
        except NoGpu as exc:
            self.status, self.reason = NO_GPU, str(exc)
            self._opened = True
            return
        self._nv = nv
        # pynvml's functions are looked up once: the fast loop calls them 12 times per GPU per tick.
        self._fast = [(q, bind(q, nv), call_of(q)) for q in FAST_QUERIES]
        self._slow = [(q, bind(q, nv), call_of(q)) for q in SLOW_QUERIES]
        try:
            calling("nvmlDeviceGetCount")
            count = nv.nvmlDeviceGetCount()
        except Exception as exc:
            self.status, self.reason = NO_GPU, f"NVML could not count GPUs: {classify(exc).reason}"
            self._opened = True
            return
        self.system = {
            "driver_version": self._system("nvmlSystemGetDriverVersion"),
            "nvml_version": self._system("nvmlSystemGetNVMLVersion"),
            "cuda_driver_version": _cuda_version(self._cuda_driver_version()),
        }
        self._devices = [_Device(i) for i in range(count)]
        for dev in self._devices:
            self._attach(dev, self._clock())
        self.status, self.reason = OK, None
        if count == 0:
            self.status, self.reason = NO_GPU, "the NVIDIA driver is loaded but reports no GPUs"
        self._opened = True

    def _system(self, fn: str) -> str | None:
        calling(fn)
        try:
            return str(getattr(self._nv, fn)())
        except Exception:
            return None

    def _cuda_driver_version(self) -> int | None:
        for fn in ("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"):
            calling(fn)
            try:
                return int(getattr(self._nv, fn)())
            except Exception:
                continue
        return None

    def _attach(self, dev: _Device, now: float) -> bool:
        """Get the handle and identity of a device; mark it lost only if it stopped answering."""
        doing = here()
        doing.gpu, doing.call = dev.index, "nvmlDeviceGetHandleByIndex"
        try:
            handle = self._nv.nvmlDeviceGetHandleByIndex(dev.index)
        except Exception as exc:  # without a handle nothing can be read
            self._mark_lost(dev, classify(exc), now)
            return False
        ident: dict[str, str | None] = {}
        gaps: dict[str, str] = {}
        retry = False
        for field, getter in IDENTITY:
            doing.call = getter
            try:
                ident[field] = text(getattr(self._nv, getter), handle)
            except Exception as exc:
                failure = classify(exc)
                if failure.kind in (LOST_KIND, NO_GPU_KIND):
                    self._mark_lost(dev, failure, now)
                    return False
                # NotSupported, no permission, a timeout: this field is null, the GPU is fine.
                ident[field], gaps[field] = None, failure.reason
                retry = retry or failure.kind == TRANSIENT
        uuid, name = ident["uuid"], ident["name"]
        if dev.uuid is not None and uuid != dev.uuid:
            # Another board now sits at this index (hot swap / reset reorder): start afresh.
            dev.unsupported.clear()
            dev.info = None
            dev.losses += 1  # another board: its GPM state starts afresh
        elif dev.info is not None and (dev.name != name or dev.identity_gaps != gaps):
            dev.info = None  # the spec card shows the identity: build it again
        dev.handle, dev.uuid, dev.name = handle, uuid, name
        dev.identity_gaps, dev.identity_retry = gaps, retry
        dev.lost_reason = dev.lost_since = None
        return True

    def _mark_lost(self, dev: _Device, failure: Failure, now: float) -> None:
        with dev.lock:
            if dev.lost_reason is None:
                dev.lost_since = now
            dev.lost_reason = failure.reason
            dev.next_retry = now + LOST_RETRY_S
            dev.losses += 1  # the slow thread frees the GPM buffers (it alone uses them)

    # -- static info ---------------------------------------------------------------------------
    def device_info(self) -> list[DeviceDict]:
        return [self._info(dev) for dev in self._devices]

    def _info(self, dev: _Device) -> DeviceDict:
        if dev.info is not None:
            return dev.info
        info: DeviceDict = {"index": dev.index, "uuid": dev.uuid, "name": dev.name}
        if dev.lost_reason is not None:
            values, reasons = null_fields(STATIC_FIELDS, dev.lost_reason)
            return {**info, **values, "status": LOST, "unavailable": reasons}  # not cached: asked again once back
        unavailable: dict[str, str] = dict(dev.identity_gaps)
        here().gpu = dev.index
        for q in STATIC_QUERIES:
            self._run(dev, q, info, unavailable, now=self._clock())
        info["memory_bandwidth_bytes_per_s"] = peak_memory_bandwidth(
            info.get("max_memory_clock_mhz"), info.get("memory_bus_width_bits")
        )
        if info["memory_bandwidth_bytes_per_s"] is None:
            unavailable["memory_bandwidth_bytes_per_s"] = "needs the max memory clock and the bus width"
        info["status"] = OK if dev.lost_reason is None else LOST
        info["unavailable"] = unavailable
        if dev.lost_reason is None:
            dev.info = info
        return info

    # -- reads ---------------------------------------------------------------------------------
    def _run(self, dev: _Device, q: Query, out: DeviceDict, unavailable: dict[str, str], now: float) -> bool:
        """Run one query into ``out``; False when the device turned out to be lost."""
        known = dev.unsupported.get(q.key)
        if known is not None:
            for f in q.fields:
                out[f] = None
                unavailable[f] = known
            return True
        try:
            calling(call_of(q))
            q.read(self._nv, dev.handle, out)
            return True
        except Exception as exc:
            return self._failed(dev, q, exc, out, unavailable, now)

    def _failed(self, dev: _Device, q: Query, exc: BaseException, out: DeviceDict, unavailable: dict[str, str],
                now: float) -> bool:
        """Record a failed query as nulls with the reason; False when the device is lost."""
        failure = classify(exc)
        for f in q.fields:
            out[f] = None
            unavailable[f] = failure.reason
        if failure.kind == UNSUPPORTED:
            dev.unsupported[q.key] = failure.reason
        elif failure.kind in (LOST_KIND, NO_GPU_KIND):
            self._mark_lost(dev, failure, now)
            return False
        return True

    def _read_bound(self, dev: _Device, queries: list[tuple[Query, BoundReader, str | None]], out: DeviceDict,
                    unavailable: dict[str, str], now: float, doing: Doing) -> bool:
        """``_run`` for bound queries, inlined for the common path; False when the device was lost."""
        handle, unsupported = dev.handle, dev.unsupported
        for q, read, call in queries:
            if unsupported and q.key in unsupported:
                self._run(dev, q, out, unavailable, now)
                continue
            doing.call = call
            try:
                read(handle, out)
            except Exception as exc:
                if not self._failed(dev, q, exc, out, unavailable, now):
                    return False
        return True

    def read_fast(self, t: float) -> list[FastRead]:
        if self.status != OK:
            return []
        now = self._clock()
        doing = here()
        samples: list[Any] = []
        for dev in self._devices:
            doing.gpu = dev.index
            if (dev.lost_reason is not None and now >= dev.next_retry) or dev.identity_retry:
                self._attach(dev, now)
            if dev.lost_reason is not None:
                samples.append(lost_device(dev.index, dev.uuid, dev.name, dev.lost_reason))
                continue
            sample: DeviceDict = {"index": dev.index, "uuid": dev.uuid, "name": dev.name, "status": OK}
            unavailable: dict[str, str] = dict(dev.identity_gaps) if dev.identity_gaps else {}
            self._read_bound(dev, self._fast, sample, unavailable, now, doing)
            if dev.lost_reason is not None:
                samples.append(lost_device(dev.index, dev.uuid, dev.name, dev.lost_reason))
                continue
            sample["unavailable"] = unavailable
            samples.append(sample)
        doing.call = doing.gpu = None
        return samples

    def read_slow(self, t: float) -> list[SlowRead]:
        if self.status != OK:
            return []
        now = self._clock()
        out: list[Any] = []
        seen: set[int] = set()
        doing = here()
        self._local.begin_read()
        for dev in self._devices:
            doing.gpu = dev.index
            if dev.losses != dev.gpm_losses:
                # A lost GPU's samples mean nothing once it is back (it may have been reset).
                dev.gpm.free(self._nv)
                dev.gpm, dev.usage, dev.gpm_losses = DeviceGpm(), UsageReader(), dev.losses
            if dev.lost_reason is not None:
                continue  # the fast path reports it lost and probes it
            part: DeviceDict = {"index": dev.index}
            unavailable: dict[str, str] = {}
            alive = self._read_bound(dev, self._slow, part, unavailable, now, doing)
            if alive:
                self._owners = dev.owners = {}
                self._reading = dev
                alive = self._run(dev, self._process_query, part, unavailable, now)
            if alive:
                alive = self._read_looked(dev, part, unavailable, now)
            if not alive:
                continue
            seen.update(p["pid"] for p in part["processes"] or () if p["pid"] is not None)
            part["unavailable"] = unavailable
            out.append(part)
        doing.call = doing.gpu = None
        self._describer.forget_except(seen)
        return out

    def _read_looked(self, dev: _Device, part: DeviceDict, unavailable: dict[str, str], now: float) -> bool:
        """GPM, per-process use and MIG instances; False when the GPU was lost on the way."""
        mig = self._info(dev).get("mig_mode") == "enabled"
        try:
            if not self.gpm:
                dev.gpm.pause()
                dev.usage.reset()
                null(part, unavailable, GPM_OFF)
            else:
                dev.gpm.read(self._nv, dev.handle, part, unavailable)
                if part["processes"]:
                    part["processes"] = processes_with_usage(self._nv, dev.handle, dev.usage, part["processes"])
            part["mig_instances"] = (read_instances(self._nv, dev.handle, dev.gpm if self.gpm else None, dev.owners)
                                     if mig else [])
        except Exception as exc:  # a lost GPU, or MIG instances that cannot be listed
            return self._failed(dev, _MIG_QUERY, exc, part, unavailable, now)
        return True

    def prime_gpm(self) -> bool:
        # The first GPM sample (and the start of the per-process window) for a one-shot snapshot.
        if self.status != OK or not self.gpm:
            return False
        return bool(self.read_slow(time.time()))

    @calls("nvmlDeviceGetComputeRunningProcesses_v3")
    def _processes(self, nv: Any, h: Any, out: DeviceDict) -> None:
        used: dict[int, int | None] = {}
        for kind in ("Compute", "Graphics"):
            try:
                found = _running_processes(nv, h, kind)
            except Exception as exc:
                # Compute GPUs may not support the graphics query; any other failure means the
                # list would be incomplete, and an incomplete list is worse than null + reason.
                if kind == "Graphics" and classify(exc).kind == UNSUPPORTED:
                    continue
                raise
            for p in found:
                # A pid can hold a compute and a graphics context; keep the larger figure.
                prev = used.get(p.pid)
                mem = p.usedGpuMemory
                used[p.pid] = mem if prev is None else max(prev, mem or 0)
                gi = getattr(p, "gpuInstanceId", None)
                if gi is not None and gi != 0xFFFFFFFF:
                    self._owners[p.pid] = (gi, p.computeInstanceId)
        dev = self._reading
        assert dev is not None
        minor = self._minor(nv, dev) if self._local.init_namespace is not True else None
        matches = self._local.match(dev.index, minor, sorted(used.items()))
        if any(m.matched_by != "pid" for m in matches):
            # MIG instance ids are NVML's, keyed by its pids: moved to the local pid where the match is one to one.
            self._owners = dev.owners = {m.pid: self._owners[m.nvml_pid] for m in matches
                                         if m.pid is not None and m.nvml_pid in self._owners}
        here().call = None  # psutil from here: not an NVML call
        out["processes"] = self._describer.matched(matches)

    def _minor(self, nv: Any, dev: _Device) -> int | None:
        """The GPU's device-file number (/dev/nvidia<minor>), read once; None where NVML cannot tell."""
        if dev.minor is False:
            dev.minor = minor_number(nv, dev.handle)
        return dev.minor  # type: ignore[return-value]

    def process_note(self) -> str | None:
        return self._local.note()

    def close(self) -> None:
        for dev in self._devices:
            dev.gpm.free(self._nv)
        self._devices = []
        self._opened = False


def _running_processes(nv: Any, h: Any, kind: str) -> list[Any]:
    # Call the versioned functions: pynvml's unversioned wrappers turn FunctionNotFound into
    # an exception that is not an NVMLError. v3 needs driver 510+; v2 covers older drivers.
    v3 = f"nvmlDeviceGet{kind}RunningProcesses_v3"
    calling(v3)
    try:
        return getattr(nv, v3)(h)
    except Exception as exc:
        if classify(exc).kind != UNSUPPORTED:
            raise
    v2 = f"nvmlDeviceGet{kind}RunningProcesses_v2"
    calling(v2)
    return getattr(nv, v2)(h)


def _cuda_version(value: int | None) -> str | None:
    """NVML's 13000 -> "13.0" (major*1000 + minor*10)."""
    if not value:
        return None
    return f"{value // 1000}.{(value % 1000) // 10}"

