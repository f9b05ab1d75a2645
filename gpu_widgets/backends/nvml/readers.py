"""One small reader per NVML query, each writing the fields it fills (units converted).

A reader takes the pynvml module, a device handle and the dict to fill, and raises whatever
pynvml raises; the backend turns failures into nulls with reasons. Readers write into the
sample directly (no intermediate dict) because they run 12 times per GPU per tick. Keeping
them tiny and flat makes the cost of a tick visible: one reader here is one NVML call.

Each reader names the NVML function it calls (``call_of``): the backend records that name in its
thread's slot (backends/inflight.py) before running the reader, so a call that hangs is named. A
reader that may call another function instead (an older driver's) records that one itself.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple, TypeVar

from ..inflight import calling
from .errors import NOT_FOUND, UNSUPPORTED, classify

Reader = Callable[[Any, Any, dict], None]
BoundReader = Callable[[Any, dict], None]
F = TypeVar("F", bound=Callable[..., None])


class Query(NamedTuple):
    key: str  # remembered per device when unsupported
    fields: tuple[str, ...]
    read: Reader


def call_of(q: Query) -> str | None:
    """The NVML function ``q``'s reader calls (first, when it may call another); None: unnamed."""
    return getattr(q.read, "call", None)


def calls(name: str) -> Callable[[F], F]:
    """Names the NVML function a reader calls, for ``call_of``."""

    def mark(read: F) -> F:
        read.call = name  # type: ignore[attr-defined]
        return read

    return mark


def _missing(getter: str) -> AttributeError:
    return AttributeError(f"this nvidia-ml-py has no {getter} (pip install -U nvidia-ml-py)")


def _function(nv: Any, getter: str) -> Callable[..., Any]:
    fn = getattr(nv, getter, None)
    if fn is None:
        raise _missing(getter)
    return fn


def _call(getter: str, field: str, *args: Any, scale: float | None = None) -> Reader:
    """A reader for a getter that returns one number: ``field = getter(h, *args) * scale``."""

    def bind(nv: Any) -> BoundReader:
        fn = getattr(nv, getter, None)
        if fn is None:  # an old nvidia-ml-py: this field is null with the reason, the others still read
            def read_missing(h: Any, out: dict) -> None:
                raise _missing(getter)
            return read_missing
        if args:
            (arg,) = args  # the getters here take at most one argument besides the handle
            if scale is None:
                def read_bound(h: Any, out: dict) -> None:
                    out[field] = fn(h, arg)
            else:
                def read_bound(h: Any, out: dict) -> None:
                    out[field] = fn(h, arg) * scale
        elif scale is None:
            def read_bound(h: Any, out: dict) -> None:
                out[field] = fn(h)
        else:
            def read_bound(h: Any, out: dict) -> None:
                out[field] = fn(h) * scale
        return read_bound

    def read(nv: Any, h: Any, out: dict) -> None:
        bind(nv)(h, out)

    read.bind = bind  # type: ignore[attr-defined]
    return calls(getter)(read)


def bind(q: Query, nv: Any) -> BoundReader:
    """``q``'s reader with the pynvml functions looked up once (the fast loop runs every tick)."""
    binder = getattr(q.read, "bind", None)
    return binder(nv) if binder is not None else functools.partial(q.read, nv)


def text(fn: Callable[[Any], Any], h: Any) -> str:
    """A string getter's answer; bytes that are not UTF-8 become U+FFFD instead of an error."""
    try:
        value = fn(h)
    except UnicodeDecodeError as exc:
        # nvidia-ml-py decodes char buffers strictly; the raw bytes ride on the exception.
        return bytes(exc.object).decode("utf-8", "replace")
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


# pynvml's structs override __getattribute__ in Python to decode bytes; these fields are
# numbers, and reading them past that override costs a third (5 reads per GPU per tick).
_number = object.__getattribute__


@calls("nvmlDeviceGetUtilizationRates")
def _utilization(nv: Any, h: Any, out: dict) -> None:
    u = nv.nvmlDeviceGetUtilizationRates(h)
    out["utilization_gpu_percent"] = _number(u, "gpu")
    out["utilization_memory_percent"] = _number(u, "memory")


def _memory_info(nv: Any, h: Any) -> Any:
    # v2 counts memory reserved by the driver as not used, so an idle GPU reads as nvidia-smi
    # shows it; older drivers lack it (FunctionNotFound) or reject the struct version.
    v2 = getattr(nv, "nvmlMemory_v2", None)
    if v2 is not None:
        try:
            return nv.nvmlDeviceGetMemoryInfo(h, version=v2)
        except Exception as exc:
            if classify(exc).kind != UNSUPPORTED:
                raise
    calling("nvmlDeviceGetMemoryInfo")
    return nv.nvmlDeviceGetMemoryInfo(h)


# pynvml's nvmlDeviceGetMemoryInfo with a version enters NVML's nvmlDeviceGetMemoryInfo_v2.
@calls("nvmlDeviceGetMemoryInfo_v2")
def _memory(nv: Any, h: Any, out: dict) -> None:
    m = _memory_info(nv, h)
    out["memory_used_bytes"] = _number(m, "used")
    out["memory_free_bytes"] = _number(m, "free")
    out["memory_total_bytes"] = _number(m, "total")


@calls("nvmlDeviceGetMemoryInfo_v2")
def _memory_total(nv: Any, h: Any, out: dict) -> None:
    out["memory_total_bytes"] = _memory_info(nv, h).total


@calls("nvmlDeviceGetCurrentClocksEventReasons")
def _throttle(nv: Any, h: Any, out: dict) -> None:
    # Kept as NVML's bitmask (see metrics/throttle.py): names are made where JSON is written.
    # The call was renamed in driver 535; the bits are the same.
    fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
    if fn is not None:
        try:
            out["throttle_reasons"] = fn(h)
            return
        except Exception as exc:
            if classify(exc).kind != UNSUPPORTED:
                raise
    calling("nvmlDeviceGetCurrentClocksThrottleReasons")
    out["throttle_reasons"] = nv.nvmlDeviceGetCurrentClocksThrottleReasons(h)


MILLI = 1e-3
FAST_QUERIES: tuple[Query, ...] = (
    Query("utilization", ("utilization_gpu_percent", "utilization_memory_percent"), _utilization),
    Query("memory", ("memory_used_bytes", "memory_free_bytes", "memory_total_bytes"), _memory),
    Query("temperature", ("temperature_c",), _call("nvmlDeviceGetTemperature", "temperature_c", 0)),
    Query("fan", ("fan_percent",), _call("nvmlDeviceGetFanSpeed", "fan_percent")),
    Query("power", ("power_w",), _call("nvmlDeviceGetPowerUsage", "power_w", scale=MILLI)),  # mW
    Query("power_limit", ("power_limit_w",), _call("nvmlDeviceGetEnforcedPowerLimit", "power_limit_w", scale=MILLI)),
    Query("energy", ("energy_j",), _call("nvmlDeviceGetTotalEnergyConsumption", "energy_j", scale=MILLI)),  # mJ
    Query("sm_clock", ("sm_clock_mhz",), _call("nvmlDeviceGetClockInfo", "sm_clock_mhz", 1)),
    Query("memory_clock", ("memory_clock_mhz",), _call("nvmlDeviceGetClockInfo", "memory_clock_mhz", 2)),
    Query("graphics_clock", ("graphics_clock_mhz",), _call("nvmlDeviceGetClockInfo", "graphics_clock_mhz", 0)),
    Query("pstate", ("performance_state",), _call("nvmlDeviceGetPerformanceState", "performance_state")),
    Query("throttle", ("throttle_reasons",), _throttle),
)

# Read on the slow cadence. NVML reports PCIe in KB/s (1 KB = 1024 bytes in its PCIe counters).
# The slowdown threshold (NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1) is a limit that rarely changes:
# it tops the temperature charts, so the slow cadence is fresh enough.
SLOW_QUERIES: tuple[Query, ...] = (
    Query("pcie_tx", ("pcie_tx_bytes_per_s",), _call("nvmlDeviceGetPcieThroughput", "pcie_tx_bytes_per_s", 0, scale=1024)),
    Query("pcie_rx", ("pcie_rx_bytes_per_s",), _call("nvmlDeviceGetPcieThroughput", "pcie_rx_bytes_per_s", 1, scale=1024)),
    Query("temperature_slowdown", ("temperature_slowdown_c",),
          _call("nvmlDeviceGetTemperatureThreshold", "temperature_slowdown_c", 1)),
)


@calls("nvmlDeviceGetCudaComputeCapability")
def _compute_capability(nv: Any, h: Any, out: dict) -> None:
    major, minor = nv.nvmlDeviceGetCudaComputeCapability(h)
    out["compute_capability"] = f"{major}.{minor}"


@calls("nvmlDeviceGetPciInfo_v3")
def _pci_bus_id(nv: Any, h: Any, out: dict) -> None:
    # nvidia-smi's spelling ("00000000:18:00.0"): what dcgm-exporter's pci_bus_id label carries.
    getter = getattr(nv, "nvmlDeviceGetPciInfo_v3", None)
    if getter is None:
        calling("nvmlDeviceGetPciInfo")
        getter = _function(nv, "nvmlDeviceGetPciInfo")
    bus_id = getter(h).busId
    out["pci_bus_id"] = bus_id.decode("utf-8", "replace") if isinstance(bus_id, bytes) else str(bus_id)


@calls("nvmlDeviceGetMigMode")
def _mig(nv: Any, h: Any, out: dict) -> None:
    current, _pending = nv.nvmlDeviceGetMigMode(h)
    out["mig_mode"] = "enabled" if current else "disabled"


@calls("nvmlDeviceGetMaxMigDeviceCount")
def _mig_devices(nv: Any, h: Any, out: dict) -> None:
    # CUDA_VISIBLE_DEVICES may name a MIG instance (MIG-<uuid>) rather than a GPU; these UUIDs
    # tell which GPU it is part of. Runs after _mig, whose answer it reads.
    if out.get("mig_mode") != "enabled":
        out["mig_device_uuids"] = []
        return
    slots = _function(nv, "nvmlDeviceGetMaxMigDeviceCount")(h)
    instance_at = _function(nv, "nvmlDeviceGetMigDeviceHandleByIndex")
    uuids = []
    for slot in range(slots):
        calling("nvmlDeviceGetMigDeviceHandleByIndex")
        try:
            instance = instance_at(h, slot)
        except Exception as exc:
            if classify(exc).code == NOT_FOUND:
                continue  # an empty slot
            raise
        calling("nvmlDeviceGetUUID")
        uuids.append(text(nv.nvmlDeviceGetUUID, instance))
    out["mig_device_uuids"] = uuids


STATIC_QUERIES: tuple[Query, ...] = (
    Query("memory", ("memory_total_bytes",), _memory_total),
    Query("power_limit", ("power_limit_w",), _call("nvmlDeviceGetEnforcedPowerLimit", "power_limit_w", scale=MILLI)),
    Query(
        "power_default_limit",
        ("power_default_limit_w",),
        _call("nvmlDeviceGetPowerManagementDefaultLimit", "power_default_limit_w", scale=MILLI),
    ),
    Query("max_sm_clock", ("max_sm_clock_mhz",), _call("nvmlDeviceGetMaxClockInfo", "max_sm_clock_mhz", 1)),
    Query("max_memory_clock", ("max_memory_clock_mhz",), _call("nvmlDeviceGetMaxClockInfo", "max_memory_clock_mhz", 2)),
    Query("cores", ("cores",), _call("nvmlDeviceGetNumGpuCores", "cores")),
    Query("bus_width", ("memory_bus_width_bits",), _call("nvmlDeviceGetMemoryBusWidth", "memory_bus_width_bits")),
    Query("pcie_gen", ("pcie_max_generation",), _call("nvmlDeviceGetMaxPcieLinkGeneration", "pcie_max_generation")),
    Query("pcie_width", ("pcie_max_width",), _call("nvmlDeviceGetMaxPcieLinkWidth", "pcie_max_width")),
    Query("compute_capability", ("compute_capability",), _compute_capability),
    Query("pci_bus_id", ("pci_bus_id",), _pci_bus_id),
    Query("mig", ("mig_mode",), _mig),
    Query("mig_devices", ("mig_device_uuids",), _mig_devices),
)


def peak_memory_bandwidth(max_memory_clock_mhz: float | None, bus_width_bits: int | None) -> float | None:
    """Peak memory bandwidth in bytes/s.

    bandwidth = 2 x max memory clock (Hz) x bus width (bits) / 8. The factor 2 is the double
    data rate: NVML reports the memory clock such that this matches the datasheets
    (H100 SXM: 2 x 2619 MHz x 5120 bit / 8 = 3.35 TB/s; RTX 4090: 2 x 10501 MHz x 384 bit / 8 = 1.01 TB/s).
    """
    if not max_memory_clock_mhz or not bus_width_bits:
        return None
    return 2.0 * max_memory_clock_mhz * 1e6 * bus_width_bits / 8.0
