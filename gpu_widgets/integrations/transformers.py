"""A Hugging Face Trainer callback that feeds a TrainingMonitor:
``Trainer(..., callbacks=[GpuWidgetsCallback()])`` (transformers 5.x).

What it records, on every rank under torch.distributed (each into its launch's ``rank-<r>/``; rank 0
alone displays), else on the main process only (global rank 0: ``args.process_index == 0``):

* what the Trainer logs, when it logs (``logging_steps`` / ``logging_strategy``, and each
  evaluation): ``loss``, ``learning_rate``, ``grad_norm``, ``eval_loss``, your
  ``compute_metrics`` results... at ``state.global_step``. Left out: ``epoch`` (shown in the
  header instead), evaluation timings (``eval_runtime``, ``eval_samples_per_second``...) and the
  closing summary (``train_runtime``...), none of them a curve worth a chart;
* the device of the model's weights (``model.parameters()``, else ``args.device``): the
  Trainer logs floats, and this is what says "Training runs on the CPU" when the GPUs idle;
* the epoch (of ``num_train_epochs``), the total (``state.max_steps``) and the samples of each
  optimizer step, counted from the inputs that reach the model's ``forward`` while it trains (so
  a last, smaller batch counts as it is).

How the run ends: ``on_train_end`` finishes it. The Trainer has no hook for an exception, so a
failure or a Ctrl-C is seen where it surfaces: in a notebook, at the end of the cell (failed or
interrupted, as for any monitor); in a script, when the process exits on it; and at the next
``train()`` with this callback. The exception itself goes on untouched.
"""
from __future__ import annotations

from typing import Any

try:
    from transformers import TrainerCallback
except ImportError:
    raise ImportError("gpu_widgets.integrations.transformers needs Hugging Face transformers: "
                      "pip install 'gpu-widgets[transformers]'") from None

from ..monitor.batches import batch_size_of
from ..monitor.monitor import TrainingMonitor
from ._callback_core import MonitorFeed, numbers, records_here
from ._device import note_device, torch_model_device

_OWNER = "GpuWidgetsCallback (transformers)"
_NOT_CURVES = ("_runtime", "_samples_per_second", "_steps_per_second")
_SUMMARY = "train_runtime"  # only the Trainer's closing summary has it


def _main(args: Any, state: Any) -> bool:
    """Global rank 0. ``state.is_world_process_zero`` alone is not enough: train() makes a new
    state that leaves it at its default, True, on every process."""
    return bool(state.is_world_process_zero) and getattr(args, "process_index", 0) == 0


class GpuWidgetsCallback(TrainerCallback):
    """Shows a Hugging Face ``Trainer`` run in a TrainingMonitor (see the module's docstring).

    ``GpuWidgetsCallback(monitor=mon)`` feeds an existing monitor; otherwise keyword arguments
    go to :class:`gpu_widgets.TrainingMonitor`, created when training starts. ``callback.monitor``
    is the monitor.
    """

    def __init__(self, monitor: TrainingMonitor | None = None, **options: Any) -> None:
        self._feed = MonitorFeed(monitor, options, _OWNER)
        self._hook: Any = None  # the forward pre-hook that counts samples
        self._samples = 0  # counted since the last optimizer step

    @property
    def monitor(self) -> TrainingMonitor:
        return self._feed.monitor

    def _count(self, module: Any, args: Any, kwargs: Any) -> None:
        if module.training and self._feed.active:
            self._samples += batch_size_of(kwargs) or batch_size_of(args) or 0

    def _unhook(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    # -- hooks ----------------------------------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        self._unhook()  # left by a train() that raised
        if not records_here(_main(args, state)):
            return
        self._feed.begin(state.max_steps if state.max_steps and state.max_steps > 0 else None, model)
        self._samples = 0
        # The Trainer logs floats, not tensors: where the model is tells "training runs on the CPU".
        device = torch_model_device(model) if model is not None else None
        note_device(self.monitor, device or getattr(getattr(args, "device", None), "type", None))
        if model is not None and hasattr(model, "register_forward_pre_hook"):
            self._hook = model.register_forward_pre_hook(self._count, with_kwargs=True)

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._feed.active:
            self._feed.epoch(int(state.epoch or 0) + 1, state.num_train_epochs or None)

    # Only a recording process begins a run (on_train_begin): ``active`` alone says whether this
    # process records, so the other hooks read nothing else.
    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._feed.active:
            self._feed.batch_started()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._feed.active:
            samples, self._samples = self._samples, 0
            self._feed.batch_ended(samples=samples if self._hook is not None else None)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any) -> None:
        if not (self._feed.active and logs) or _SUMMARY in logs:
            return
        values = numbers(logs, skip=("epoch", "total_flos"))
        self._feed.log(state.global_step, {k: v for k, v in values.items() if not k.endswith(_NOT_CURVES)})
        self._feed.restart_wait()  # the Trainer's logging (it reads the loss) is not waiting for data

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._feed.active:
            self._feed.restart_wait()  # nor is an evaluation

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._feed.active:
            self._feed.restart_wait()  # nor a checkpoint

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._unhook()
        self._feed.end(step=state.global_step)  # nothing unless this process records
