"""The Lightning callback, through a real Lightning Trainer on a tiny model on the CPU: what the
monitor recorded (keys, steps, epochs, total, status, run log), exceptions going on unchanged,
rank 0 only, and a plain script that prints only the run directory."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pl = pytest.importorskip("lightning.pytorch")
torch = pytest.importorskip("torch")

from gpu_widgets import TrainingMonitor  # noqa: E402
from gpu_widgets.integrations.lightning import GpuWidgetsCallback  # noqa: E402

from .script_output import our_lines  # noqa: E402
from .widget_helpers import run_dir, simulated_sampler  # noqa: E402,F401

ROOT = Path(__file__).resolve().parents[1]
N, BATCH = 20, 4  # 5 batches per epoch, the last full; see test_samples for a ragged one


class Tiny(pl.LightningModule):
    def __init__(self, fail_at: int | None = None, interrupt_at: int | None = None) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)
        self.fail_at, self.interrupt_at = fail_at, interrupt_at

    def training_step(self, batch, batch_idx):
        if self.global_step == self.fail_at:
            raise ValueError("bad batch")
        if self.global_step == self.interrupt_at:
            raise KeyboardInterrupt
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def loader(n: int = N, batch: int = BATCH):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 3, generator=g)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)), batch_size=batch)


def trainer(callback, **kw) -> "pl.Trainer":
    kw.setdefault("max_epochs", 2)
    kw.setdefault("log_every_n_steps", 1)
    return pl.Trainer(accelerator="cpu", devices=1, callbacks=[callback], logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0, **kw)


def callback(**kw) -> GpuWidgetsCallback:
    return GpuWidgetsCallback(display=False, sampler=simulated_sampler(), **kw)


def test_a_fit_is_recorded_step_by_step_with_validation_epochs_total_and_samples():
    cb = callback(title="lightning")
    trainer(cb).fit(Tiny(), loader(), loader(8))
    mon = cb.monitor
    assert mon.status == "finished" and mon.title == "lightning"
    assert {"train_loss_step", "lr", "val_loss", "train_loss_epoch"} <= set(mon.keys)
    assert "loss" not in mon.keys  # train_loss (logged on the step) is the loss already
    steps, _ = mon.series("train_loss_step")
    assert steps == list(range(1, 11))  # optimizer steps 1..10: 5 batches x 2 epochs
    assert mon.series("val_loss")[0] == [5, 10]  # after each epoch, at its last step
    assert mon.series("lr")[1][0] == pytest.approx(0.05)
    assert mon.total_steps == 10 and mon.parts.progress.epoch == 2 and mon.parts.progress.epochs == 2
    assert mon.parts.samples.total == 2 * N
    meta = json.loads((mon.run_dir / "run.json").read_text())
    assert meta["status"] == "finished" and meta["total_steps"] == 10
    logged = [json.loads(line) for line in (mon.run_dir / "steps.jsonl").read_text().splitlines()]
    assert any("val_loss" in row for row in logged)


def test_logging_follows_log_every_n_steps_and_the_loss_is_the_step_output():
    class Quiet(Tiny):  # logs nothing itself: the loss comes from training_step's return
        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x), y)

    cb = callback()
    trainer(cb, max_epochs=2, log_every_n_steps=3).fit(Quiet(), loader())
    assert cb.monitor.series("loss")[0] == [3, 6, 9]
    assert cb.monitor.parts.samples.total == 2 * N  # every batch counted, logged or not


def test_a_failing_step_fails_the_run_and_the_exception_goes_on_unchanged():
    cb = callback()
    with pytest.raises(ValueError, match="bad batch") as caught:
        trainer(cb).fit(Tiny(fail_at=3), loader())
    mon = cb.monitor
    assert mon.status == "failed" and mon.error is caught.value
    assert json.loads((mon.run_dir / "run.json").read_text())["status"] == "failed"
    assert mon.series("train_loss_step")[0] == [1, 2, 3]


def test_ctrl_c_ends_the_run_as_interrupted():
    cb = callback()
    with pytest.raises(SystemExit):  # Lightning turns KeyboardInterrupt into exit(1) after its hooks
        trainer(cb).fit(Tiny(interrupt_at=2), loader())
    assert cb.monitor.status == "interrupted"


def test_an_existing_monitor_is_fed_and_a_second_fit_gets_a_new_run():
    mon = TrainingMonitor("mine", display=False, sampler=simulated_sampler())
    cb = GpuWidgetsCallback(monitor=mon)
    assert cb.monitor is mon
    trainer(cb, max_epochs=1).fit(Tiny(), loader())
    assert mon.status == "finished" and mon.step == 5
    with pytest.raises(RuntimeError, match="has finished"):
        trainer(cb, max_epochs=1).fit(Tiny(), loader())

    own = callback()
    trainer(own, max_epochs=1).fit(Tiny(), loader())
    first = own.monitor
    trainer(own, max_epochs=1).fit(Tiny(), loader())
    assert own.monitor is not first and own.monitor.status == "finished" and own.monitor.run_dir != first.run_dir


def test_samples_come_from_the_real_batches():
    cb = callback()
    trainer(cb, max_epochs=1).fit(Tiny(), loader(n=10, batch=4))  # 4, 4, 2
    assert cb.monitor.parts.samples.total == 10 and cb.monitor.parts.samples.first_batch == 4


class SlowForward(Tiny):
    """A training_step of a known length: 30 ms of its own, then ``self(x)`` (10 ms more)."""

    def forward(self, x):
        time.sleep(0.01)
        return self.layer(x)

    def training_step(self, batch, batch_idx):
        time.sleep(0.03)
        x, y = batch
        return torch.nn.functional.mse_loss(self(x), y)


def test_the_forward_is_training_step_up_to_its_backward_timed_once(run_dir):  # noqa: F811
    # Given a training_step that Lightning calls directly (no module hook sees it) and that calls
    # the module itself inside (a forward within the timed one)
    cb = callback()
    began = time.perf_counter()
    trainer(cb, max_epochs=1).fit(SlowForward(), loader(n=40))  # 10 steps
    took = time.perf_counter() - began
    # Then each step's forward is the whole training_step, counted once (not 10 ms, not 50 ms)
    rows = [json.loads(line) for line in (cb.monitor.run_dir / "data_wait.jsonl").read_text().splitlines()]
    steps = sum(r["steps"] for r in rows)
    assert steps == 9 and all("forward_s" in r for r in rows), rows  # the epoch's first batch: not a wait
    per_step = sum(r["forward_s"] for r in rows) / steps
    assert 0.04 * 0.9 < per_step < 0.04 * 2.5, rows
    assert all(r["forward_s"] <= r["step_s"] for r in rows) and sum(r["step_s"] for r in rows) < took, rows
    assert cb.monitor.errors == []


def test_only_global_rank_zero_records(monkeypatch):
    monkeypatch.setattr(pl.Trainer, "is_global_zero", property(lambda self: False))
    cb = callback()
    trainer(cb, max_epochs=1).fit(Tiny(), loader())
    assert cb._feed._monitor is None  # never created on another rank, so never shown


def test_bad_arguments_are_refused_when_the_callback_is_made():
    with pytest.raises(TypeError, match="TrainingMonitor, which refuses them: .*colour"):
        GpuWidgetsCallback(colour="red")
    with pytest.raises(TypeError, match="either monitor= or"):
        GpuWidgetsCallback(monitor=TrainingMonitor(display=False, run_log=False), title="x")
    with pytest.raises(TypeError, match="takes a gpu_widgets.TrainingMonitor"):
        GpuWidgetsCallback(monitor="mon")


@pytest.mark.integration
def test_a_plain_script_records_the_run_log_and_prints_one_line(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import torch
        import lightning.pytorch as pl
        from gpu_widgets.integrations.lightning import GpuWidgetsCallback

        class Tiny(pl.LightningModule):
            def __init__(self):
                super().__init__()
                self.layer = torch.nn.Linear(3, 1)

            def training_step(self, batch, batch_idx):
                x, y = batch
                return torch.nn.functional.mse_loss(self.layer(x), y)

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.05)

        x = torch.randn(20, 3)
        data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4)
        pl.Trainer(max_epochs=1, log_every_n_steps=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                   enable_progress_bar=False, enable_model_summary=False,
                   callbacks=[GpuWidgetsCallback()]).fit(Tiny(), data)
    """))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GPU_WIDGETS_RUN_DIR": str(tmp_path / "runs"), "GPU_WIDGETS_BACKEND": "simulated",
           "PYTHONWARNINGS": "ignore"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    ours = our_lines(done.stdout + done.stderr)
    assert len(ours) == 1 and ours[0].startswith("gpu-widgets: recording this run in "), ours
    run = Path(ours[0].rsplit(" in ", 1)[1])
    assert run.parent == tmp_path / "runs"
    assert json.loads((run / "run.json").read_text())["status"] == "finished"
    assert len((run / "steps.jsonl").read_text().splitlines()) >= 5
