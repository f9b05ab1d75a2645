"""The shapes of a sample in Python: what a backend reads, what the sampler hands out.

TypedDicts, so they cost nothing at run time (a sample stays a plain dict, which the sampler
fills, copies and serialises fastest). The sample fields and their units are fields.py's;
a test checks that these keys and ``SAMPLE_FIELDS`` agree, field by field.

Inside Python ``throttle_reasons`` is NVML's bitmask (see throttle.py); the JSON the server
and the CLI write has the names instead (``sampling.snapshot.public``).
"""
from __future__ import annotations

from typing import TypedDict

Unavailable = dict[str, str]  # field -> why it is null


class ProcessEntry(TypedDict):
    """One process using a GPU."""

    pid: int | None  # None: an NVML entry no local process was matched to (a container; pid_match.py)
    used_memory_bytes: int | None
    name: str | None
    uid: int | None
    user: str | None
    command: str | None
    sm_percent: float | None  # this process's share of SM time over the slow interval
    memory_bandwidth_percent: float | None  # its share of the memory controller's time
    matched_by: str | None  # "pid", "device_files" or None (see gpu_widgets/backends/pid_match.py)
    nvml_pid: int | None  # the pid the driver reported, where known (a host pid in a container)
    unavailable: Unavailable


class MigInstance(TypedDict):
    """One MIG instance of a GPU in MIG mode (docs/fields.md, "MIG")."""

    index: int  # NVML's MIG device index on its GPU
    uuid: str | None
    gpu_instance_id: int | None
    compute_instance_id: int | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    sm_active_percent: float | None
    sm_occupancy_percent: float | None
    tensor_active_percent: float | None
    dram_active_percent: float | None
    pids: list[int]  # processes of the GPU's list that run in this instance
    unavailable: Unavailable


class DeviceIdentity(TypedDict):
    index: int
    uuid: str | None
    name: str | None
    status: str  # "ok" or "lost"


class FastRead(DeviceIdentity):
    """One GPU from ``Backend.read_fast``: identity, status, the fields read every tick."""

    utilization_gpu_percent: int | None
    utilization_memory_percent: int | None
    memory_used_bytes: int | None
    memory_free_bytes: int | None
    memory_total_bytes: int | None
    temperature_c: int | None
    fan_percent: int | None
    power_w: float | None
    power_limit_w: float | None
    energy_j: float | None
    sm_clock_mhz: int | None
    memory_clock_mhz: int | None
    graphics_clock_mhz: int | None
    performance_state: int | None
    throttle_reasons: int | None  # NVML's bitmask; names only in JSON
    unavailable: Unavailable


class SlowFields(TypedDict):
    """The fields read on the slow cadence, once for the slow read and the snapshot both."""

    pcie_tx_bytes_per_s: float | None
    pcie_rx_bytes_per_s: float | None
    temperature_slowdown_c: float | None
    processes: list[ProcessEntry] | None
    sm_active_percent: float | None
    sm_occupancy_percent: float | None
    tensor_active_percent: float | None
    dram_active_percent: float | None
    mig_instances: list[MigInstance] | None


class SlowRead(SlowFields):
    """One GPU from ``Backend.read_slow``: which GPU, the slow fields, why some are null."""

    index: int
    unavailable: Unavailable


class DeviceSample(FastRead, SlowFields):
    """One GPU of a snapshot: the fast read with the latest slow fields merged in."""


class Snapshot(TypedDict):
    """One sample of every GPU, as ``sampling.snapshot`` shapes it (the only place that does)."""

    backend: str | None
    status: str
    reason: str | None
    timestamp: float
    driver_version: str | None
    cuda_driver_version: str | None
    nvml_version: str | None
    cuda_visible_devices: list[int] | None
    devices: list[DeviceSample]


# Keys of a device that are not sample fields: who it is, whether it answers, why fields are null.
DEVICE_KEYS: tuple[str, ...] = ("index", "uuid", "name", "status", "unavailable")
