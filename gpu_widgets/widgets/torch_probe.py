"""What PyTorch is doing with the GPUs in this process, asked without side effects.

Only a ``torch`` the user already imported is looked at (``sys.modules``): importing it here
would cost seconds and memory. CUDA is only queried once torch has initialised it
(``torch.cuda.is_initialized()``); ``torch.cuda.is_available()`` is never called, because it
initialises the driver and can break CUDA in processes forked afterwards.
"""
from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class TorchDevice:
    ordinal: int  # CUDA device number as torch sees it (cuda:N)
    nvml_index: int | None  # the same GPU in NVML numbering, when it can be matched
    name: str | None
    allocated_bytes: int
    reserved_bytes: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    total_bytes: int | None


@dataclass
class TorchState:
    version: str
    cuda_initialized: bool
    devices: list[TorchDevice] = field(default_factory=list)
    error: str | None = None

    @property
    def nvml_indices(self) -> list[int]:
        return [d.nvml_index for d in self.devices if d.nvml_index is not None]


def probe(nvml_uuids: Sequence[str | None] = (), visible: Sequence[int] | None = None) -> TorchState | None:
    """None when torch is not imported. ``nvml_uuids[i]`` is the UUID of NVML GPU i; ``visible``
    maps CUDA ordinals to NVML indices (from CUDA_VISIBLE_DEVICES) when UUIDs do not match."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    state = TorchState(version=str(getattr(torch, "__version__", "?")), cuda_initialized=False)
    cuda = getattr(torch, "cuda", None)
    try:
        if cuda is None or not cuda.is_initialized():
            return state
        state.cuda_initialized = True
        used = []
        for i in range(cuda.device_count()):
            reserved = int(cuda.memory_reserved(i))
            if reserved > 0:
                used.append(i)
        if not used:
            used = [int(cuda.current_device())]
        for i in used:
            props = cuda.get_device_properties(i)
            state.devices.append(
                TorchDevice(
                    ordinal=i,
                    nvml_index=_nvml_index(i, props, nvml_uuids, visible),
                    name=getattr(props, "name", None),
                    allocated_bytes=int(cuda.memory_allocated(i)),
                    reserved_bytes=int(cuda.memory_reserved(i)),
                    peak_allocated_bytes=int(cuda.max_memory_allocated(i)),
                    peak_reserved_bytes=int(cuda.max_memory_reserved(i)),
                    total_bytes=getattr(props, "total_memory", None),
                )
            )
    except Exception as exc:  # an odd torch build must not break the monitor
        state.error = f"{type(exc).__name__}: {exc}"
    return state


def _nvml_index(ordinal: int, props: Any, nvml_uuids: Sequence[str | None], visible: Sequence[int] | None) -> int | None:
    # The UUID is exact whatever CUDA_DEVICE_ORDER says; CUDA_VISIBLE_DEVICES order is the fallback.
    uuid = str(getattr(props, "uuid", "") or "").lower()
    if uuid:
        for index, nvml_uuid in enumerate(nvml_uuids):
            if nvml_uuid and nvml_uuid.lower().removeprefix("gpu-") == uuid.removeprefix("gpu-"):
                return index
    if visible is not None:
        return visible[ordinal] if ordinal < len(visible) else None
    if nvml_uuids:
        return ordinal if ordinal < len(nvml_uuids) else None
    return None


def torch_fields(state: TorchState | None) -> dict[int, dict[str, int]]:
    """PyTorch's memory per NVML index, as GPU sample fields."""
    if state is None or not state.cuda_initialized:
        return {}
    return {
        d.nvml_index: {
            "torch_allocated_bytes": d.allocated_bytes,
            "torch_reserved_bytes": d.reserved_bytes,
            "torch_peak_allocated_bytes": d.peak_allocated_bytes,
        }
        for d in state.devices
        if d.nvml_index is not None
    }
