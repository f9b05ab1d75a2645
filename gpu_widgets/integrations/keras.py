"""A Keras 3 callback that feeds a TrainingMonitor: ``model.fit(..., callbacks=[GpuWidgetsCallback()])``.

Any backend. What it records, on every rank of a torch.distributed launch (each into its launch's
``rank-<r>/``), else on process 0 only (``KERAS_DISTRIBUTION_PROCESS_ID``, else the backend's own
rank: ``jax.process_index()``):

* after every batch, as Keras reports it (its progress bar does the same): the batch's logs
  (``loss``, the compiled metrics; Keras gives their running means over the epoch) at the step
  (batches since ``fit`` began, from 1);
* after each epoch, the values the batches did not have: ``val_loss``, ``val_<metric>``,
  ``learning_rate`` when a scheduler reports it;
* where the weights are, on the torch backend (Keras logs floats): what says "Training runs on
  the CPU" when the GPUs idle;
* the epoch (of ``epochs``), the total (``epochs`` x ``steps``, when Keras knows the steps) and
  the samples of each step, read from the data handed to ``model.train_function`` (torch and JAX
  backends; on TensorFlow it receives an iterator, so give ``batch_size=`` for samples/s);
* the end: finished (``on_train_end``); failed or interrupted when the training step raises.
  Keras has no hook for an exception elsewhere (in the data pipeline, another callback): that one
  is seen at the end of the notebook cell, when a script exits on it, or at the next ``fit``.
  The exception goes on untouched.
"""
from __future__ import annotations

import os
from typing import Any

try:
    import keras
except ImportError:
    raise ImportError("gpu_widgets.integrations.keras needs Keras 3: pip install 'gpu-widgets[keras]'") from None

from ..monitor.batches import batch_size_of
from ..monitor.monitor import TrainingMonitor
from ._callback_core import MonitorFeed, numbers, records_here
from ._device import keras_model_device, note_device

_OWNER = "GpuWidgetsCallback (Keras)"
_INNER = "__gpu_widgets_inner__"  # our wrapper of train_function keeps the original here


def process_index() -> int:
    """This process's index among a multi-process run's (0 when alone)."""
    given = os.environ.get("KERAS_DISTRIBUTION_PROCESS_ID")
    if given:
        return int(given)
    backend = keras.backend.backend()
    if backend == "torch":
        import torch.distributed as dist

        return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    if backend == "jax":
        import jax

        return jax.process_index()
    return 0


def _counted(inner: Any, feed: MonitorFeed, callback: "GpuWidgetsCallback") -> Any:
    """``inner`` (the model's train_function) that also counts each step's samples, and ends the
    run when the step raises: the exception itself goes on, unchanged."""
    def train_function(*args: Any, **kwargs: Any) -> Any:
        if feed.active and args:
            callback._samples = batch_size_of(args[-1])
        try:
            return inner(*args, **kwargs)
        except BaseException as exc:
            feed.end(exc, step=callback._step)
            raise

    setattr(train_function, _INNER, inner)
    return train_function


class GpuWidgetsCallback(keras.callbacks.Callback):
    """Shows a Keras ``fit`` in a TrainingMonitor (see the module's docstring for what).

    ``GpuWidgetsCallback(monitor=mon)`` feeds an existing monitor; otherwise keyword arguments
    go to :class:`gpu_widgets.TrainingMonitor`, created when training starts. ``callback.monitor``
    is the monitor.
    """

    def __init__(self, monitor: TrainingMonitor | None = None, **options: Any) -> None:
        super().__init__()
        self._feed = MonitorFeed(monitor, options, _OWNER)
        self._step = 0  # batches since fit() began
        self._epoch_start = 0  # the step before this epoch's first
        self._samples: int | None = None  # of the current step, when the data told
        self._batch_keys: set[str] = set()
        self._device_known = False  # the weights' device was told to the monitor

    @property
    def monitor(self) -> TrainingMonitor:
        return self._feed.monitor

    def _wrap(self, on: bool) -> None:
        model = getattr(self, "model", None)
        fn = getattr(model, "train_function", None)
        if fn is None:
            return
        fn = getattr(fn, _INNER, fn)  # ours, left by a fit that raised: unwrapped first
        model.train_function = _counted(fn, self._feed, self) if on else fn

    # -- hooks ----------------------------------------------------------------------------------
    def on_train_begin(self, logs: Any = None) -> None:
        if not records_here(process_index() == 0):  # every torch.distributed rank records
            return
        epochs, steps = self.params.get("epochs"), self.params.get("steps")
        self._feed.begin(epochs * steps if epochs and steps else None)
        self._step = self._epoch_start = 0
        self._batch_keys = set()
        self._device_known = False
        self._note_device()
        self._wrap(True)

    def _note_device(self) -> None:
        # Keras logs floats, not tensors: where the weights are tells "training runs on the CPU".
        device = keras_model_device(getattr(self, "model", None))
        if device is not None:
            note_device(self.monitor, device)
            self._device_known = True

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        if self._feed.active:
            self._epoch_start = self._step
            self._feed.epoch(epoch + 1, self.params.get("epochs"))

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        if self._feed.active:
            self._samples = None
            self._feed.batch_started()

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if not self._feed.active:
            return
        self._step = self._epoch_start + batch + 1  # ``batch`` is the last of the steps run
        if not self._device_known:  # a model built by its first step
            self._note_device()
        self._feed.batch_ended(samples=self._samples)
        values = numbers(logs or {})
        self._batch_keys.update(values)
        self._feed.log(self._step, values)

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if self._feed.active:
            self._feed.log(self._step, numbers(logs or {}, skip=tuple(self._batch_keys)))

    def on_train_end(self, logs: Any = None) -> None:
        self._wrap(False)
        if self._feed.active:
            self._feed.end(step=self._step)
