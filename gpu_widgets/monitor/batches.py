"""What ``TrainingMonitor.track()`` can tell from a batch: how many samples it holds, and where.

Batches come as a tensor or array, a tuple or list of them (``(x, y)``), a dict of them
(``{"input_ids": ..., "labels": ...}``), or a list of samples. The first array-like found
decides: its first dimension is the batch size, its device where the batch lives.
"""
from __future__ import annotations

from collections import deque
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
    kind = type(batch)
    if (kind is tuple or kind is list) and batch:  # (x, y), the common case, read without the walk
        shape = getattr(batch[0], "shape", None)
        if shape is not None:
            return int(shape[0]) if len(shape) else None
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


class SampleCounter:
    """Samples seen per step (from ``track()``'s batches or ``note_batch()``), for samples/s and
    the batch-size advice. The loop adds; the monitor's thread reads a copy."""

    def __init__(self) -> None:
        self.total = 0
        self.marks: deque[tuple[float, int]] = deque(maxlen=4096)  # (wall time, samples so far)
        self.first_batch: int | None = None  # the batch size seen first

    def add(self, samples: int, t: float) -> None:
        self.total += samples
        self.marks.append((t, self.total))
        if self.first_batch is None and samples:
            self.first_batch = samples

    def rate(self, window_s: float | None) -> float | None:
        """Samples per second over the last ``window_s`` (None: the whole run); None with fewer
        than two steps counted."""
        marks = list(self.marks)  # a copy: the loop appends meanwhile
        if len(marks) < 2:
            return None
        t_end, n_end = marks[-1]
        first = marks[0]
        if window_s is not None:
            first = next((m for m in marks if m[0] >= t_end - window_s), marks[0])
        dt = t_end - first[0]
        return (n_end - first[1]) / dt if dt > 0 else None


def checked_samples(samples: Any) -> int:
    """``note_batch(samples)``: a whole number of samples, 0 or more."""
    if isinstance(samples, bool) or not hasattr(samples, "__index__"):
        raise TypeError(f"note_batch(samples) takes a whole number of samples, got {type(samples).__name__} {samples!r}")
    samples = samples.__index__()  # NumPy and tensor integers
    if samples < 0:
        raise ValueError(f"note_batch(samples={samples}): a step cannot have fewer than 0 samples")
    return samples
