"""A Lightning callback that feeds a TrainingMonitor: ``pl.Trainer(callbacks=[GpuWidgetsCallback()])``.

Works with Lightning 2.x (``lightning.pytorch``; ``pytorch_lightning`` when only that is installed).
What it records, on every rank under torch.distributed (each into its launch's ``rank-<r>/``; rank 0
alone displays), else on the global-zero process (``trainer.is_global_zero``):

* every ``trainer.log_every_n_steps`` optimizer steps (Lightning's own logging rhythm): the loss
  the ``training_step`` returned (as ``loss``, unless a metric you log on the step already has
  "loss" in its name), the learning rate of each optimizer (``lr``, ``lr/1``...), and each metric
  you ``self.log()``-ed that has a new value since the last row;
* after each validation and each training epoch: the metrics that changed (``val_loss``,
  ``train_loss_epoch``...), at the current step;
* the time each step spends in ``training_step`` up to its backward (the forward, which Lightning
  calls directly, so no module hook sees it), into the data-wait bins' ``forward_s``;
* the step (``trainer.global_step``), the epoch (``current_epoch + 1`` of ``max_epochs``), the
  total (``trainer.estimated_stepping_batches``, once training starts) and the samples of every batch;
* the end: finished (``on_fit_end``), interrupted (Ctrl-C) or failed (``on_exception``; Lightning
  raises the exception on).

Under DDP every rank runs these hooks and records, and nothing a rank does alone may
wait for the others: the total is read once the loaders are set up (reading it earlier loads the
data, a step that synchronises the ranks), and the metrics at the end of an epoch or of validation
are read on every rank (Lightning reduces the ``sync_dist=True`` ones across the ranks right then).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

try:
    import lightning.pytorch as pl
except ImportError:  # the older package name, same API in 2.x
    try:
        import pytorch_lightning as pl  # type: ignore[no-redef]
    except ImportError:
        raise ImportError("gpu_widgets.integrations.lightning needs Lightning 2.x: "
                          "pip install 'gpu-widgets[lightning]'") from None

from ..monitor.monitor import TrainingMonitor
from ._callback_core import MonitorFeed, number, numbers, records_here

_OWNER = "GpuWidgetsCallback (Lightning)"


def _loss_of(outputs: Any) -> Any | None:
    """The loss ``training_step`` returned: a tensor, or a dict's ``"loss"``."""
    if isinstance(outputs, Mapping):
        outputs = outputs.get("loss")
    return number(outputs)


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # not comparable (tensors of other shapes...): new
        return False


def _metrics(trainer: Any) -> Mapping[str, Any]:
    """``trainer.callback_metrics``. Outside a training batch, reading them computes the epoch
    values, reducing those logged with ``sync_dist=True`` across the ranks: call it on every rank
    there. Inside a batch it returns step values reduced when they were logged: no rank waits."""
    return getattr(trainer, "callback_metrics", None) or {}


def _total(trainer: Any) -> int | None:
    """The optimizer steps of this fit, once the loaders exist (before, Lightning would load them
    on this rank alone to count them, which waits for the other ranks)."""
    if getattr(trainer, "train_dataloader", None) is None:
        return None
    total = trainer.estimated_stepping_batches
    return int(total) if isinstance(total, (int, float)) and math.isfinite(total) and total > 0 else None


def _learning_rates(trainer: Any) -> dict[str, float]:
    rates: dict[str, float] = {}
    for i, optimizer in enumerate(getattr(trainer, "optimizers", None) or []):
        for j, group in enumerate(getattr(optimizer, "param_groups", [])):
            name = "lr" + (f"/{i}" if i else "") + (f"/pg{j}" if j else "")
            if (lr := number(group.get("lr"))) is not None:
                rates[name] = lr
    return rates


class GpuWidgetsCallback(pl.Callback):
    """Shows Lightning training in a TrainingMonitor (see the module's docstring for what).

    ``GpuWidgetsCallback(monitor=mon)`` feeds an existing monitor; otherwise keyword arguments
    go to :class:`gpu_widgets.TrainingMonitor` (``title=``, ``plot=``, ``gpus=``...), created when
    training starts. ``callback.monitor`` is the monitor.
    """

    def __init__(self, monitor: TrainingMonitor | None = None, **options: Any) -> None:
        super().__init__()
        self._feed = MonitorFeed(monitor, options, _OWNER)
        self._seen: dict[str, Any] = {}  # metric name -> the value object recorded last
        self._logged_step = -1

    @property
    def monitor(self) -> TrainingMonitor:
        return self._feed.monitor

    def _fresh(self, metrics: Mapping[str, Any], by_value: bool = False) -> dict[str, Any]:
        """Metrics with a value we have not recorded. Lightning keeps the last value of each
        metric in ``callback_metrics`` and puts a new object there when a step logs it; at an
        epoch's end it rebuilds them all, so there (``by_value``) the values are compared: once
        per epoch, so reading them costs nothing that matters."""
        seen = self._seen
        fresh = {k: v for k, v in metrics.items() if seen.get(k) is not v}
        if by_value:
            fresh = {k: v for k, v in fresh.items() if k not in seen or not _same(v, seen[k])}
        seen.update(fresh)
        return numbers(fresh)

    # -- hooks ----------------------------------------------------------------------------------
    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        left = dict(_metrics(trainer))  # from an earlier fit; read on every rank (see _metrics)
        if not records_here(trainer.is_global_zero):
            return
        self._feed.begin(model=pl_module)  # the total comes in on_train_start
        self._seen = left
        self._logged_step = -1

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if self._feed.active:
            self._feed.set_total(_total(trainer))

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        if self._feed.active:
            epochs = trainer.max_epochs
            self._feed.epoch(trainer.current_epoch + 1, epochs if epochs and epochs > 0 else None)

    # Only a recording process begins a run (on_fit_start), so ``active`` alone says whether this
    # process records: the per-batch hooks read no trainer property for it, and the metrics they
    # read there are step values (see _metrics).
    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if self._feed.active:
            self._feed.batch_started()
            self._feed.forward_began(pl_module)  # training_step: Lightning's forward, called directly

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: Any) -> None:
        if self._feed.active:
            self._feed.forward_ended(pl_module)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if not self._feed.active:
            return
        self._feed.forward_ended(pl_module)  # a step that returned no loss never went backward
        self._feed.batch_ended(batch)
        step, every = trainer.global_step, trainer.log_every_n_steps
        # Only batches that stepped the optimizer, every n steps (and the last one), as Lightning logs.
        if step == self._logged_step or not every or not (step % every == 0 or trainer.should_stop):
            return
        self._logged_step = step
        values = self._fresh(_metrics(trainer))
        loss = _loss_of(outputs)
        if loss is not None and not any("loss" in key for key in values):
            values["loss"] = loss
        values.update(_learning_rates(trainer))
        self._feed.log(step, values)

    def _log_changed(self, trainer: Any) -> None:
        if trainer.sanity_checking:
            return
        metrics = _metrics(trainer)  # on every rank, recording or not (see _metrics)
        if self._feed.active:
            self._feed.log(trainer.global_step, self._fresh(metrics, by_value=True))

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        self._log_changed(trainer)
        if self._feed.active:
            self._feed.restart_wait()  # validation is not time spent waiting for training data

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self._log_changed(trainer)

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        self._log_changed(trainer)
        self._feed.end(step=trainer.global_step)  # nothing unless this process records

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._feed.end(exception, step=trainer.global_step)
