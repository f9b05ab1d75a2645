"""What ``TrainingMonitor.track()`` can tell from a batch: how many samples it holds, and where.

Batches come as a tensor or array, a tuple or list of them (``(x, y)``), a dict of them
(``{"input_ids": ..., "labels": ...}``), or a list of samples. The first array-like found
decides: its first dimension is the batch size, its device where the batch lives.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _first_array(batch: Any, depth: int = 0) -> Any | None:
    if getattr(batch, "shape", None) is not None:
        return batch
    if depth > 3:
        return None
    if isinstance(batch, Mapping):
        for v in batch.values():
            found = _first_array(v, depth + 1)
            if found is not None:
                return found
        return None
    if isinstance(batch, (list, tuple)):
        for v in batch[:4]:
            found = _first_array(v, depth + 1)
            if found is not None:
                return found
    return None


def batch_size_of(batch: Any) -> int | None:
    """Samples in ``batch``, or None when it cannot be told."""
    array = _first_array(batch)
    if array is not None:
        shape = tuple(array.shape)
        return int(shape[0]) if shape else None
    if isinstance(batch, list):  # a plain list of samples
        return len(batch)
    return None


def device_of(batch: Any) -> str | None:
    """"cpu", "cuda", ... for a batch of tensors; None for NumPy arrays or anything else."""
    array = _first_array(batch)
    device = getattr(array, "device", None)
    kind = getattr(device, "type", None)
    return kind if isinstance(kind, str) else None
