"""GPM (GPU performance monitoring, Hopper and newer): SM activity, occupancy, tensor and DRAM use.

A GPM metric compares two samples. Each slow read takes one sample into one of two buffers
allocated once per device (per MIG instance) and compares it with the previous read's, so the
figures are the mean since the previous read (one slow interval; the sampler takes a new lease's
first two reads GPM_FIRST_GAP_S apart) and no read ever sleeps. The buffers are freed on
close and when the GPU is lost. Nothing here runs while nobody looks (``Backend.gpm``).

Every failure becomes a null with a reason: a GPU without GPM, bindings or a driver without it,
counters held by another tool, one metric failing while the others work. A lost GPU raises, so
the backend marks it lost as for any other call.
"""
from __future__ import annotations

from typing import Any, Callable

from ...metrics.fields import GPM_FIELDS
from ..base import GPM_PENDING
from ..inflight import calling
from .errors import LOST, NO_GPU, UNSUPPORTED, classify

# NVML_GPM_METRIC_* ids (nvml.h; stable across releases), in GPM_FIELDS order.
METRIC_IDS: tuple[int, ...] = (2, 3, 5, 10)  # SM_UTIL, SM_OCCUPANCY, ANY_TENSOR_UTIL, DRAM_BW_UTIL
METRICS: tuple[tuple[str, int], ...] = tuple(zip(GPM_FIELDS, METRIC_IDS))

IN_USE = 19  # NVML_ERROR_IN_USE: another client holds what the call needs
NEEDS_HOPPER = "needs a Hopper or newer GPU (NVML GPM)"
OLD_BINDINGS = "this nvidia-ml-py has no GPM (pip install -U nvidia-ml-py)"
OLD_DRIVER = "not supported by this driver (GPM needs driver 520 or newer)"
HELD = ("the GPU's performance counters are held by another tool (DCGM profiling or Nsight); "
        "asked again at the next read")
MIG_UNSUPPORTED = "GPM is not supported for MIG instances on this GPU or driver"
_NEEDED = ("nvmlGpmQueryDeviceSupport", "nvmlGpmSampleAlloc", "nvmlGpmSampleGet", "nvmlGpmSampleFree",
           "nvmlGpmMetricsGet", "c_nvmlGpmMetricsGet_t")


class _Code(Exception):
    """A per-metric return code, shaped as pynvml's errors are for ``classify``."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.value = code


def reason_for(exc: BaseException) -> str:
    """Plain words for a failed GPM call that did not lose the GPU."""
    failure = classify(exc)
    if failure.code == IN_USE:
        return HELD
    if failure.code == 13:  # FUNCTION_NOT_FOUND
        return OLD_DRIVER
    return failure.reason


def fatal(exc: BaseException) -> bool:
    """The GPU stopped answering (or NVML went away): the backend marks it lost."""
    return classify(exc).kind in (LOST, NO_GPU)


def null(out: dict, unavailable: dict, reason: str) -> None:
    for field in GPM_FIELDS:
        out[field] = None
        unavailable[field] = reason


class SamplePair:
    """Two GPM sample buffers used in turn: each take fills one and compares it with the other."""

    def __init__(self, nv: Any) -> None:
        calling("nvmlGpmSampleAlloc")
        first = nv.nvmlGpmSampleAlloc()
        try:
            second = nv.nvmlGpmSampleAlloc()
        except Exception:
            nv.nvmlGpmSampleFree(first)
            raise
        self.buffers = [first, second]
        self.last: int | None = None  # the buffer holding the previous read's sample
        # The request struct has room for every metric NVML knows (~19 kB): made once, reused.
        self.request = nv.c_nvmlGpmMetricsGet_t()

    def take(self, get: Callable[[Any], Any]) -> tuple[Any, Any] | None:
        """Fill the free buffer with ``get``; (previous, this) when there was a previous sample."""
        cur = 1 if self.last == 0 else 0
        get(self.buffers[cur])
        prev, self.last = self.last, cur
        return None if prev is None else (self.buffers[prev], self.buffers[cur])

    def free(self, nv: Any) -> None:
        buffers, self.buffers, self.last = self.buffers, [], None
        for buf in buffers:
            try:
                nv.nvmlGpmSampleFree(buf)
            except Exception:
                pass  # host memory of a GPU that is gone: nothing else to do


def metrics(nv: Any, pair: SamplePair, samples: tuple[Any, Any], out: dict, unavailable: dict) -> None:
    """The four metrics between two samples, each with its own return code."""
    req = pair.request
    req.version = nv.NVML_GPM_METRICS_GET_VERSION
    req.numMetrics = len(METRICS)
    req.sample1, req.sample2 = samples
    for i, (_field, metric_id) in enumerate(METRICS):
        req.metrics[i].metricId = metric_id
    calling("nvmlGpmMetricsGet")
    nv.nvmlGpmMetricsGet(req)
    for i, (field, _id) in enumerate(METRICS):
        m = req.metrics[i]
        if m.nvmlReturn:
            out[field] = None
            unavailable[field] = reason_for(_Code(m.nvmlReturn))
        else:
            out[field] = round(min(100.0, max(0.0, m.value)), 1)


class DeviceGpm:
    """GPM state of one GPU: whether it has GPM, its buffers, and its MIG instances' buffers."""

    def __init__(self) -> None:
        self.unsupported: str | None = None  # permanent: never asked again
        self.checked = False
        self.pair: SamplePair | None = None
        self.mig: dict[int, SamplePair] = {}  # GPU instance id -> buffers
        self.mig_unsupported: str | None = None

    def read(self, nv: Any, handle: Any, out: dict, unavailable: dict) -> None:
        """The GPU's GPM fields into ``out``; raises only when the GPU is lost."""
        reason = self._support(nv, handle)
        if reason is not None:
            null(out, unavailable, reason)
            return
        self._read_pair(nv, "nvmlGpmSampleGet", lambda buf: nv.nvmlGpmSampleGet(handle, buf), "pair", out, unavailable)

    def read_mig(self, nv: Any, handle: Any, gpu_instance: int, out: dict, unavailable: dict) -> None:
        """One MIG instance's GPM fields, through nvmlGpmMigSampleGet on the parent GPU."""
        reason = self._support(nv, handle) or self.mig_unsupported
        if reason is None and getattr(nv, "nvmlGpmMigSampleGet", None) is None:
            reason = self.mig_unsupported = OLD_BINDINGS
        if reason is not None:
            null(out, unavailable, reason)
            return
        self._read_pair(nv, "nvmlGpmMigSampleGet", lambda buf: nv.nvmlGpmMigSampleGet(handle, gpu_instance, buf),
                        gpu_instance, out, unavailable)

    def _support(self, nv: Any, handle: Any) -> str | None:
        if self.checked:
            return self.unsupported
        if any(getattr(nv, name, None) is None for name in _NEEDED):
            self.unsupported, self.checked = OLD_BINDINGS, True
            return self.unsupported
        calling("nvmlGpmQueryDeviceSupport")
        try:
            supported = nv.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice
        except Exception as exc:
            if fatal(exc):
                raise
            failure = classify(exc)
            if failure.kind != UNSUPPORTED:
                return reason_for(exc)  # transient: ask again next read
            supported, self.unsupported = 0, OLD_DRIVER if failure.code == 13 else NEEDS_HOPPER
        if not supported and self.unsupported is None:
            self.unsupported = NEEDS_HOPPER
        self.checked = True
        return self.unsupported

    def _read_pair(self, nv: Any, call: str, get: Callable[[Any], Any], key: Any, out: dict,
                   unavailable: dict) -> None:
        """One sample by ``get`` (which calls the NVML function ``call``) and the metrics since the last."""
        try:
            pair = self.pair if key == "pair" else self.mig.get(key)
            if pair is None:
                pair = SamplePair(nv)
                if key == "pair":
                    self.pair = pair
                else:
                    self.mig[key] = pair
            calling(call)
            samples = pair.take(get)
            if samples is None:
                null(out, unavailable, GPM_PENDING)
                return
            metrics(nv, pair, samples, out, unavailable)
        except Exception as exc:
            if fatal(exc):
                raise
            if key != "pair" and classify(exc).kind == UNSUPPORTED:
                self.mig_unsupported = MIG_UNSUPPORTED
            null(out, unavailable, reason_for(exc))

    def pause(self) -> None:
        """Nobody looks: forget the last samples (a later read must not span the pause); keep the buffers."""
        if self.pair is not None:
            self.pair.last = None
        for pair in self.mig.values():
            pair.last = None

    def free(self, nv: Any) -> None:
        """Release every buffer (close, GPU lost); the next read allocates afresh."""
        pairs = [p for p in (self.pair, *self.mig.values()) if p is not None]
        self.pair, self.mig = None, {}
        for pair in pairs:
            pair.free(nv)
