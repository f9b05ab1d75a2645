"""The Lightning callback under real DDP: two CPU ranks started by torchrun, gloo on loopback.

Every rank runs every hook and records, into the launch's one directory; what one rank does alone
must never wait for the others (reading ``estimated_stepping_batches`` too early loads the data, a
step that synchronises the ranks; reading epoch metrics logged with ``sync_dist=True`` reduces
them across the ranks). A hang is killed at the deadline and fails the test.
"""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("lightning.pytorch")
pytest.importorskip("torch")

from .script_output import our_lines  # noqa: E402
from .torchrun import torchrun  # noqa: E402

pytestmark = pytest.mark.integration  # every test here starts a process

# 16 samples, batch 4: each rank gets 8 (Lightning's DistributedSampler), 2 optimizer steps per
# epoch, 2 epochs: 4 steps. The epoch metrics are reduced across the ranks (sync_dist=True).
SCRIPT = textwrap.dedent("""
    import os
    import torch
    import lightning.pytorch as pl
    from gpu_widgets.integrations.lightning import GpuWidgetsCallback

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(3, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.layer(x), y)
            self.log("train_loss", loss, on_step=True, on_epoch=True, sync_dist=True)
            return loss

        def validation_step(self, batch, batch_idx):
            x, y = batch
            self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y), sync_dist=True)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    def data(n):
        x = torch.randn(n, 3, generator=torch.Generator().manual_seed(n))
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4)

    torch.manual_seed(0)
    # The checkpoint, saved at each training epoch's end after our hook, talks to the other rank too.
    saves = pl.callbacks.ModelCheckpoint(dirpath="checkpoints", save_on_train_epoch_end=True)
    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=2, log_every_n_steps=1,
                         logger=False, enable_progress_bar=False, enable_model_summary=False,
                         num_sanity_val_steps=0, callbacks=[GpuWidgetsCallback(), saves])
    trainer.fit(Tiny(), data(16), data(8))
    print(f"rank {trainer.global_rank} of {trainer.world_size} done", flush=True)
""")


def test_two_ddp_ranks_finish_and_both_record_into_one_launch(tmp_path: Path) -> None:
    # Given a DDP fit on two gloo ranks with the callback on both
    script = tmp_path / "train_ddp.py"
    script.write_text(SCRIPT)
    runs = tmp_path / "runs"
    # When torchrun runs it
    done = torchrun(script, runs, nproc=2, timeout_s=180)
    # Then both ranks finished well before the deadline
    assert not done.timed_out, f"the ranks hung (killed after 180 s):\n{done.output[-4000:]}"
    assert done.returncode == 0, done.output[-4000:]
    assert "rank 0 of 2 done" in done.output and "rank 1 of 2 done" in done.output, done.output[-4000:]
    # and each rank recorded the run in the one launch directory, with the total its own share of
    # the data gives; rank 0 announced the run, rank 1 said where it records
    [launch] = [p for p in runs.iterdir() if p.is_dir()]
    top = json.loads((launch / "run.json").read_text())
    assert top["kind"] == "launch" and top["world_size"] == 2 and top["status"] == "finished"
    for rank in (0, 1):
        meta = json.loads((launch / f"rank-{rank}" / "run.json").read_text())
        assert meta["status"] == "finished" and meta["total_steps"] == 4 and meta["rank"] == rank
        rows = [json.loads(line) for line in (launch / f"rank-{rank}" / "steps.jsonl").read_text().splitlines()]
        assert [row["step"] for row in rows if "train_loss_step" in row] == [1, 2, 3, 4]
        assert any("val_loss" in row for row in rows) and any("train_loss_epoch" in row for row in rows)
        # each step's training_step timed as its forward (DDP calls it, not the module: no hook sees it)
        bins = [json.loads(line) for line in (launch / f"rank-{rank}" / "data_wait.jsonl").read_text().splitlines()]
        assert bins and all(0 < b["forward_s"] <= b["step_s"] for b in bins), bins
    assert sorted(our_lines(done.output)) == [f"gpu-widgets: rank 1/2 records to {launch / 'rank-1'}",
                                              f"gpu-widgets: recording this run in {launch / 'rank-0'}"]
