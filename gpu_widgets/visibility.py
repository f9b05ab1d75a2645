"""Which GPUs a CUDA process sees, from ``CUDA_VISIBLE_DEVICES``.

CUDA accepts indices (``0,2``), UUIDs (``GPU-8f6e...``, any unique prefix) and MIG UUIDs, and it
stops at the first entry it cannot resolve. We follow the same rules to map CUDA's device
ordinals to NVML indices. NVML numbers GPUs in PCI bus order; CUDA does too when
``CUDA_DEVICE_ORDER=PCI_BUS_ID`` and, by default, when all GPUs are the same model.
"""
from __future__ import annotations

from collections.abc import Sequence


def cuda_visible_indices(value: str | None, uuids: Sequence[str | None]) -> list[int] | None:
    """NVML indices in CUDA ordinal order; None when the variable is unset (all GPUs visible).

    ``uuids[i]`` is the UUID of the GPU with NVML index i.
    """
    if value is None:
        return None
    visible: list[int] = []
    for raw in value.split(","):
        token = raw.strip()
        if not token:
            break
        index = _resolve(token, uuids)
        if index is None or index in visible:
            break  # CUDA ignores this entry and every one after it
        visible.append(index)
    return visible


def _resolve(token: str, uuids: Sequence[str | None]) -> int | None:
    if token.lstrip("-").isdigit():
        i = int(token)
        return i if 0 <= i < len(uuids) else None
    if token.upper().startswith("GPU-"):
        want = token.lower()
        matches = [i for i, u in enumerate(uuids) if u and u.lower().startswith(want)]
        return matches[0] if len(matches) == 1 else None
    return None  # MIG-... instances are not whole GPUs; we do not map them yet
