"""The per-device sample fields: names (units in the name), how often each is read, what it means.

This table is the reference for the JSON contract (docs/fields.md repeats these words; a test keeps them in step)
and tells the history store which fields are numeric series.
"""
from __future__ import annotations

from typing import NamedTuple

FAST = "every tick"  # read on the sampler's own thread at each interval
SLOW = "slow cadence"  # read on the slow worker (default every 2 s) so it never delays a tick


class Field(NamedTuple):
    name: str
    cadence: str
    description: str


SAMPLE_FIELDS: tuple[Field, ...] = (
    Field("utilization_gpu_percent", FAST, "percent of the last sample period in which a kernel ran (NVML `gpu`)"),
    Field(
        "utilization_memory_percent",
        FAST,
        "percent of the last sample period in which device memory was read or written "
        "(the memory controller's busy time, NVML `memory`); not used/total",
    ),
    Field("memory_used_bytes", FAST, "device memory in use (NVML v2 memory info when the driver has it, as nvidia-smi)"),
    Field("memory_free_bytes", FAST, "device memory free"),
    Field("memory_total_bytes", FAST, "device memory in total"),
    Field("temperature_c", FAST, "GPU core temperature, degrees Celsius"),
    Field("fan_percent", FAST, "fan speed as percent of maximum; null on passively cooled GPUs"),
    Field("power_w", FAST, "power draw in watts (NVML reports milliwatts)"),
    Field("power_limit_w", FAST, "enforced power limit in watts"),
    Field("energy_j", FAST, "energy used since the driver was loaded, joules (NVML reports millijoules)"),
    Field("sm_clock_mhz", FAST, "current SM clock"),
    Field("memory_clock_mhz", FAST, "current memory clock"),
    Field("graphics_clock_mhz", FAST, "current graphics clock"),
    Field("performance_state", FAST, "performance state: 0 (P0, fastest) to 15 (P15, slowest)"),
    Field("throttle_reasons", FAST, "why clocks are held down now, as names (see gpu_widgets.metrics.throttle)"),
    Field("pcie_tx_bytes_per_s", SLOW, "PCIe transmit throughput, bytes/s (NVML reports KB/s over a 20 ms window)"),
    Field("pcie_rx_bytes_per_s", SLOW, "PCIe receive throughput, bytes/s"),
    Field(
        "temperature_slowdown_c",
        SLOW,
        "temperature at which the GPU slows its clocks to cool down (NVML slowdown threshold), degrees Celsius",
    ),
    Field(
        "processes",
        SLOW,
        "processes using the GPU: pid, used_memory_bytes, name, uid, user, command, sm_percent, "
        "memory_bandwidth_percent",
    ),
    # GPM (Hopper or newer): the mean over the slow interval between two GPM samples, read only while
    # a view asks for it (Sampler.want_gpm), so they cost nothing when nobody looks.
    Field(
        "sm_active_percent",
        SLOW,
        "percent of the time the SMs had work, averaged over all SMs (NVML GPM SM_UTIL, DCGM SM_ACTIVE); "
        "unlike utilization_gpu_percent, one tiny kernel does not make it 100",
    ),
    Field(
        "sm_occupancy_percent",
        SLOW,
        "resident warps as percent of the most the SMs can hold (NVML GPM SM_OCCUPANCY, DCGM SM_OCCUPANCY)",
    ),
    Field(
        "tensor_active_percent",
        SLOW,
        "percent of the time the tensor cores were busy, any precision (NVML GPM ANY_TENSOR_UTIL, "
        "DCGM PIPE_TENSOR_ACTIVE)",
    ),
    Field(
        "dram_active_percent",
        SLOW,
        "device memory bandwidth used, as percent of its peak (NVML GPM DRAM_BW_UTIL, DCGM DRAM_ACTIVE)",
    ),
    Field(
        "mig_instances",
        SLOW,
        "the MIG instances of a GPU in MIG mode, one entry each: uuid, gpu/compute instance ids, memory, "
        "the GPM fields and the pids running in it; empty when MIG is off",
    ),
)

# Read only while someone looks (see Sampler.want_gpm); the rest of the slow read always runs.
GPM_FIELDS: tuple[str, ...] = ("sm_active_percent", "sm_occupancy_percent", "tensor_active_percent",
                               "dram_active_percent")

# Fields kept as numeric time series in the history (the rest are lists or labels). The GPM
# fields are series too, so charts can draw them; NaN while nobody looks.
SERIES_FIELDS: tuple[str, ...] = tuple(
    f.name
    for f in SAMPLE_FIELDS
    if f.name not in ("throttle_reasons", "processes", "temperature_slowdown_c", "mig_instances")
)

FAST_FIELDS: tuple[str, ...] = tuple(f.name for f in SAMPLE_FIELDS if f.cadence == FAST)
SLOW_FIELDS: tuple[str, ...] = tuple(f.name for f in SAMPLE_FIELDS if f.cadence == SLOW)
