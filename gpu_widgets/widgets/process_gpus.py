"""Which GPUs "this process uses": the answer behind ``gpus="auto"`` in every widget.

1. The GPUs PyTorch has memory on, when this process has initialised CUDA through torch.
2. Else the GPUs ``CUDA_VISIBLE_DEVICES`` lets CUDA see (as NVML indices).
3. Else all of them.
A choice of ``"all"`` or of explicit NVML indices overrides this.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .torch_probe import TorchState

AUTO, ALL = "auto", "all"
Choice = Any  # "auto" | "all" | frozenset[int]


def check_choice(gpus: Any, name: str = "gpus") -> Choice:
    if gpus in (AUTO, ALL):
        return gpus
    message = f"{name} must be 'auto', 'all' or a list of GPU indices such as [0, 1], got {gpus!r}"
    if isinstance(gpus, (str, bytes)) or not isinstance(gpus, Iterable):
        raise ValueError(message)
    out = set()
    for g in gpus:
        if isinstance(g, bool) or not isinstance(g, int) or g < 0:
            raise ValueError(message)
        out.add(g)
    return frozenset(out)


def watched(choice: Choice, snap: Mapping[str, Any] | None, torch: TorchState | None) -> frozenset[int] | None:
    """NVML indices to show, or None for all."""
    if choice == ALL:
        return None
    if isinstance(choice, frozenset):
        return choice
    if torch is not None and torch.cuda_initialized and torch.nvml_indices:
        return frozenset(torch.nvml_indices)
    visible = None if snap is None else snap.get("cuda_visible_devices")
    return None if visible is None else frozenset(visible)
