"""MIG instances of a GPU in MIG mode, each as its own entry: identity, memory, GPM, its pids.

Read on the slow cadence from the parent GPU's handle. A GPU not in MIG mode has none (and costs
no call). Processes are mapped to an instance by the GPU/compute instance ids NVML gives with each
process of the parent's list.
"""
from __future__ import annotations

from typing import Any

from ...metrics.fields import GPM_FIELDS
from ..base import GPM_OFF
from ..inflight import calling
from .errors import NOT_FOUND, classify
from .gpm import DeviceGpm, fatal, null
from .readers import text

NOT_MIG = 0xFFFFFFFF  # the instance ids of a process outside any MIG instance


def read_instances(nv: Any, handle: Any, gpm: DeviceGpm | None, owners: dict[int, tuple[int, int]]) -> list[dict]:
    """One entry per MIG instance (empty slots skipped); ``gpm`` None: GPM off.

    ``owners``: pid -> (gpu instance id, compute instance id) from the parent's process list.
    Raises when the parent GPU is lost."""
    calling("nvmlDeviceGetMaxMigDeviceCount")
    slots = nv.nvmlDeviceGetMaxMigDeviceCount(handle)
    out = []
    for slot in range(slots):
        calling("nvmlDeviceGetMigDeviceHandleByIndex")
        try:
            mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except Exception as exc:
            if classify(exc).code == NOT_FOUND:
                continue  # an empty slot
            raise
        out.append(_instance(nv, handle, mig, slot, gpm, owners))
    return out


def _instance(nv: Any, parent: Any, mig: Any, slot: int, gpm: DeviceGpm | None,
              owners: dict[int, tuple[int, int]]) -> dict:
    entry: dict[str, Any] = {"index": slot}
    unavailable: dict[str, str] = {}
    for field, call, read in (("uuid", "nvmlDeviceGetUUID", lambda: text(nv.nvmlDeviceGetUUID, mig)),
                              ("gpu_instance_id", "nvmlDeviceGetGpuInstanceId", lambda: nv.nvmlDeviceGetGpuInstanceId(mig)),
                              ("compute_instance_id", "nvmlDeviceGetComputeInstanceId",
                               lambda: nv.nvmlDeviceGetComputeInstanceId(mig))):
        calling(call)
        entry[field] = _guarded(read, field, unavailable)
    calling("nvmlDeviceGetMemoryInfo")
    memory = _guarded(lambda: nv.nvmlDeviceGetMemoryInfo(mig), "memory_used_bytes", unavailable)
    entry["memory_used_bytes"] = None if memory is None else memory.used
    entry["memory_total_bytes"] = None if memory is None else memory.total
    if memory is None:
        unavailable["memory_total_bytes"] = unavailable["memory_used_bytes"]
    gi, ci = entry["gpu_instance_id"], entry["compute_instance_id"]
    if gpm is None:
        null(entry, unavailable, GPM_OFF)
    elif gi is None:
        null(entry, unavailable, "needs the GPU instance id")
    else:
        gpm.read_mig(nv, parent, gi, entry, unavailable)
    entry["pids"] = sorted(pid for pid, ids in owners.items() if ids == (gi, ci) and gi is not None)
    entry["unavailable"] = unavailable
    return {k: entry[k] for k in (*_ORDER, "unavailable")}


_ORDER = ("index", "uuid", "gpu_instance_id", "compute_instance_id", "memory_used_bytes", "memory_total_bytes",
          *GPM_FIELDS, "pids")


def _guarded(read: Any, field: str, unavailable: dict[str, str]) -> Any:
    try:
        return read()
    except Exception as exc:
        if fatal(exc):
            raise
        unavailable[field] = classify(exc).reason
        return None


def minor_number(nv: Any, handle: Any) -> int | None:
    """The N of the GPU's /dev/nvidiaN (how a container finds its processes: device_files.py); None
    where NVML cannot tell."""
    try:
        calling("nvmlDeviceGetMinorNumber")
        return int(nv.nvmlDeviceGetMinorNumber(handle))
    except Exception:
        return None
