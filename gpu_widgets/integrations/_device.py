"""Where a framework keeps the model, told to the TrainingMonitor as the device of a tensor it saw.

The monitor's "Training runs on the CPU" tip rests on the devices of the tensors it has seen
(monitor/advice.py). A PyTorch loop and Lightning hand it tensors (batches, the loss); the Hugging
Face Trainer and Keras hand it plain floats, so their callbacks tell it where the model's weights
are instead: the same signal, read once per run from an attribute (no copy, no CUDA call).
"""
from __future__ import annotations

from typing import Any

from ..monitor.monitor import TrainingMonitor


def note_device(monitor: TrainingMonitor, kind: str | None) -> None:
    """``kind``: a torch device type ("cpu", "cuda", "mps"...); None (and "meta": weights not
    materialised yet, DeepSpeed, FSDP) tells nothing."""
    monitor.note_device(kind)


def torch_model_device(model: Any) -> str | None:
    """The device type of a torch module's first parameter, else None."""
    try:
        first = next(iter(model.parameters()), None)
    except Exception:  # not a torch module, or an odd wrapper: nothing to tell
        return None
    kind = getattr(getattr(first, "device", None), "type", None)
    return kind if isinstance(kind, str) else None


def keras_model_device(model: Any) -> str | None:
    """The device type of a Keras model's first weight on the torch backend, else None (the
    tip's advice is PyTorch's: model.to('cuda'))."""
    import keras

    if keras.backend.backend() != "torch":
        return None
    try:
        weights = model.weights
    except Exception:  # not built yet: asked again at the next batch
        return None
    if not weights:
        return None
    kind = getattr(getattr(getattr(weights[0], "value", None), "device", None), "type", None)
    return kind if isinstance(kind, str) else None
