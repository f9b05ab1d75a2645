"""One small reader per NVML query, each returning the fields it fills (units converted).

A reader takes the pynvml module and a device handle, and raises whatever pynvml raises;
the backend turns failures into nulls with reasons. Keeping them tiny and flat makes the
cost of a tick visible: one line here is one NVML call.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

from ..throttle import names_from_mask
from .errors import UNSUPPORTED, classify

Reader = Callable[[Any, Any], dict[str, Any]]


class Query(NamedTuple):
    key: str  # remembered per device when unsupported
    fields: tuple[str, ...]
    read: Reader


def _mhz(clock_type: int, field: str, getter: str = "nvmlDeviceGetClockInfo") -> Reader:
    return lambda nv, h: {field: getattr(nv, getter)(h, clock_type)}


def _utilization(nv: Any, h: Any) -> dict[str, Any]:
    u = nv.nvmlDeviceGetUtilizationRates(h)
    return {"utilization_gpu_percent": u.gpu, "utilization_memory_percent": u.memory}


def _memory(nv: Any, h: Any) -> dict[str, Any]:
    # v2 counts memory reserved by the driver as not used, so an idle GPU reads as nvidia-smi
    # shows it; older drivers lack it (FunctionNotFound) or reject the struct version.
    v2 = getattr(nv, "nvmlMemory_v2", None)
    if v2 is not None:
        try:
            m = nv.nvmlDeviceGetMemoryInfo(h, version=v2)
        except Exception as exc:
            if classify(exc).kind != UNSUPPORTED:
                raise
        else:
            return {"memory_used_bytes": m.used, "memory_free_bytes": m.free, "memory_total_bytes": m.total}
    m = nv.nvmlDeviceGetMemoryInfo(h)
    return {"memory_used_bytes": m.used, "memory_free_bytes": m.free, "memory_total_bytes": m.total}


def _throttle(nv: Any, h: Any) -> dict[str, Any]:
    # The call was renamed in driver 535; the bits are the same.
    fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
    if fn is not None:
        try:
            return {"throttle_reasons": names_from_mask(fn(h))}
        except Exception as exc:
            if classify(exc).kind != UNSUPPORTED:
                raise
    return {"throttle_reasons": names_from_mask(nv.nvmlDeviceGetCurrentClocksThrottleReasons(h))}


def _kb_per_s(counter: int, field: str) -> Reader:
    # NVML reports KB/s (1 KB = 1024 bytes in NVML's PCIe counters).
    return lambda nv, h: {field: nv.nvmlDeviceGetPcieThroughput(h, counter) * 1024}


FAST_QUERIES: tuple[Query, ...] = (
    Query("utilization", ("utilization_gpu_percent", "utilization_memory_percent"), _utilization),
    Query("memory", ("memory_used_bytes", "memory_free_bytes", "memory_total_bytes"), _memory),
    Query("temperature", ("temperature_c",), lambda nv, h: {"temperature_c": nv.nvmlDeviceGetTemperature(h, 0)}),
    Query("fan", ("fan_percent",), lambda nv, h: {"fan_percent": nv.nvmlDeviceGetFanSpeed(h)}),
    Query("power", ("power_w",), lambda nv, h: {"power_w": nv.nvmlDeviceGetPowerUsage(h) / 1000.0}),
    Query(
        "power_limit", ("power_limit_w",), lambda nv, h: {"power_limit_w": nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0}
    ),
    Query("energy", ("energy_j",), lambda nv, h: {"energy_j": nv.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0}),
    Query("sm_clock", ("sm_clock_mhz",), _mhz(1, "sm_clock_mhz")),
    Query("memory_clock", ("memory_clock_mhz",), _mhz(2, "memory_clock_mhz")),
    Query("graphics_clock", ("graphics_clock_mhz",), _mhz(0, "graphics_clock_mhz")),
    Query("pstate", ("performance_state",), lambda nv, h: {"performance_state": nv.nvmlDeviceGetPerformanceState(h)}),
    Query("throttle", ("throttle_reasons",), _throttle),
)

PCIE_QUERIES: tuple[Query, ...] = (
    Query("pcie_tx", ("pcie_tx_bytes_per_s",), _kb_per_s(0, "pcie_tx_bytes_per_s")),
    Query("pcie_rx", ("pcie_rx_bytes_per_s",), _kb_per_s(1, "pcie_rx_bytes_per_s")),
)


def _compute_capability(nv: Any, h: Any) -> dict[str, Any]:
    major, minor = nv.nvmlDeviceGetCudaComputeCapability(h)
    return {"compute_capability": f"{major}.{minor}"}


def _mig(nv: Any, h: Any) -> dict[str, Any]:
    current, _pending = nv.nvmlDeviceGetMigMode(h)
    return {"mig_mode": "enabled" if current else "disabled"}


def _w(getter: str, field: str) -> Reader:
    return lambda nv, h: {field: getattr(nv, getter)(h) / 1000.0}


def _plain(getter: str, field: str) -> Reader:
    return lambda nv, h: {field: getattr(nv, getter)(h)}


STATIC_QUERIES: tuple[Query, ...] = (
    Query("memory", ("memory_total_bytes",), lambda nv, h: {"memory_total_bytes": _memory(nv, h)["memory_total_bytes"]}),
    Query("power_limit", ("power_limit_w",), _w("nvmlDeviceGetEnforcedPowerLimit", "power_limit_w")),
    Query(
        "power_default_limit",
        ("power_default_limit_w",),
        _w("nvmlDeviceGetPowerManagementDefaultLimit", "power_default_limit_w"),
    ),
    Query("max_sm_clock", ("max_sm_clock_mhz",), _mhz(1, "max_sm_clock_mhz", "nvmlDeviceGetMaxClockInfo")),
    Query("max_memory_clock", ("max_memory_clock_mhz",), _mhz(2, "max_memory_clock_mhz", "nvmlDeviceGetMaxClockInfo")),
    Query("cores", ("cores",), _plain("nvmlDeviceGetNumGpuCores", "cores")),
    Query("bus_width", ("memory_bus_width_bits",), _plain("nvmlDeviceGetMemoryBusWidth", "memory_bus_width_bits")),
    Query("pcie_gen", ("pcie_max_generation",), _plain("nvmlDeviceGetMaxPcieLinkGeneration", "pcie_max_generation")),
    Query("pcie_width", ("pcie_max_width",), _plain("nvmlDeviceGetMaxPcieLinkWidth", "pcie_max_width")),
    Query("compute_capability", ("compute_capability",), _compute_capability),
    Query("mig", ("mig_mode",), _mig),
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
