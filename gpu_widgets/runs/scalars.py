"""What ``TrainingMonitor.log()`` accepts as a value, and the error for everything else.

``log()`` handles plain ``int`` and ``float`` inline; every other type comes here once per value.
"""
from __future__ import annotations

import numbers
import sys
from typing import Any

ACCEPTED = "int, float, bool, a NumPy scalar or a one-element tensor"


class Deferred:
    """A one-element tensor on an accelerator: read later on the monitor's thread.

    Reading it now (``.item()``) would make the training loop wait for the GPU at every step.
    It is detached so the monitor never keeps an autograd graph alive.
    """

    __slots__ = ("tensor",)

    def __init__(self, tensor: Any) -> None:
        self.tensor = tensor

    def read(self) -> float:
        return float(self.tensor.item())


def coerce(key: str, value: Any, devices: set[str] | None = None) -> int | float | Deferred:
    """An ``int``, a ``float`` or a :class:`Deferred` for ``value``; TypeError naming the key otherwise.

    ``devices`` collects the device type of each tensor seen ("cpu", "cuda", ...)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (str, bytes)):
        raise TypeError(f"log({key}={value!r}): values must be numbers ({ACCEPTED}), got {type(value).__name__}")
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        if devices is not None:
            devices.add(value.device.type)
        return _from_tensor(key, value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    shape = getattr(value, "shape", None)
    if shape is not None and hasattr(value, "item"):  # a NumPy/JAX/CuPy array
        size = getattr(value, "size", None)
        if size == 1:
            return coerce(key, value.item())
        raise TypeError(f"log({key}=...): got an array of shape {tuple(shape)}; log one number, e.g. {key}=x.mean().item()")
    if value is None:
        raise TypeError(f"log({key}=None): None is not a number; leave the key out of this call instead")
    raise TypeError(f"log({key}=...): values must be numbers ({ACCEPTED}), got {type(value).__name__}")


def _from_tensor(key: str, tensor: Any) -> int | float | Deferred:
    if tensor.numel() != 1:
        raise TypeError(
            f"log({key}=...): got a tensor of shape {tuple(tensor.shape)}; log one number, e.g. {key}=t.mean()"
        )
    if tensor.is_complex():
        raise TypeError(f"log({key}=...): complex values cannot be plotted")
    if tensor.device.type == "cpu":
        return coerce(key, tensor.item())  # no device to wait for: read it now
    return Deferred(tensor.detach())
