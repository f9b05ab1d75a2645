"""A snapshot: the public JSON of one sample of every GPU (served by the API and `--json`)."""
from __future__ import annotations

import os
from typing import Any

from ..backends.base import Backend
from ..metrics.fields import SLOW_FIELDS
from .visibility import cuda_visible_indices

PENDING = "not read yet (read on the slow cadence)"


def compose(
    backend: Backend,
    timestamp: float,
    fast: list[dict[str, Any]],
    slow: dict[int, dict[str, Any]],
    uuids: list[str | None] | None = None,
    mig_uuids: list[list[str] | None] | None = None,
    pending: str = PENDING,
) -> dict[str, Any]:
    """Merge a fast read with the latest slow read of each device into one snapshot.

    A device without a slow part has its slow fields null with ``pending`` as the reason.

    The fast read's dicts become the snapshot's devices (they are fresh from ``read_fast``;
    copying them again cost a tenth of a tick). The slow parts are shared, so only read.
    """
    for dev in fast:
        unavailable = dev.pop("unavailable", None)
        if unavailable is None:
            unavailable = {}
        if dev.get("status") != "lost":
            part = slow.get(dev["index"])
            if part is None:
                for f in SLOW_FIELDS:
                    dev[f] = None
                    unavailable[f] = pending
            else:
                for f in SLOW_FIELDS:
                    dev[f] = part.get(f)
                more = part.get("unavailable")
                if more:
                    unavailable.update(more)
        dev["unavailable"] = unavailable  # last, after the slow fields, as people read it
    devices = fast
    if uuids is None:
        uuids = [d.get("uuid") for d in fast]
    return {
        "backend": backend.name,
        "status": backend.status,
        "reason": backend.reason,
        "timestamp": timestamp,
        "driver_version": backend.system.get("driver_version"),
        "cuda_driver_version": backend.system.get("cuda_driver_version"),
        "nvml_version": backend.system.get("nvml_version"),
        "cuda_visible_devices": cuda_visible_indices(os.environ.get("CUDA_VISIBLE_DEVICES"), uuids, mig_uuids),
        "devices": devices,
    }


def take(backend: Backend, timestamp: float) -> dict[str, Any]:
    """One complete snapshot, slow fields included, read right now (for the CLI)."""
    fast = backend.read_fast(timestamp)
    slow = {d["index"]: d for d in backend.read_slow(timestamp)}
    info = backend.device_info()
    return compose(backend, timestamp, fast, slow, [d.get("uuid") for d in info], [d.get("mig_device_uuids") for d in info])
