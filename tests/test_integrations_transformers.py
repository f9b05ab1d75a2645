"""The Hugging Face Trainer callback, through a real Trainer on a tiny BERT built from a config (no
download) on the CPU: what the monitor recorded, how runs end (in a notebook cell, in a script,
and at the next train()), rank 0 only, and the one line a plain script prints."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from gpu_widgets import TrainingMonitor  # noqa: E402
from gpu_widgets.integrations.transformers import GpuWidgetsCallback  # noqa: E402

from .script_output import our_lines  # noqa: E402
from .widget_helpers import fixed_sampler, run_dir, simulated_sampler  # noqa: E402,F401

ROOT = Path(__file__).resolve().parents[1]

TINY = textwrap.dedent("""
    import torch, transformers

    class Data(torch.utils.data.Dataset):
        def __init__(self, n):
            g = torch.Generator().manual_seed(n)
            self.x = torch.randint(0, 64, (n, 8), generator=g)
        def __len__(self):
            return len(self.x)
        def __getitem__(self, i):
            return {"input_ids": self.x[i], "labels": int(self.x[i, 0] % 2)}

    def model():
        torch.manual_seed(0)
        config = transformers.BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                         intermediate_size=32, max_position_embeddings=16, num_labels=2)
        return transformers.BertForSequenceClassification(config)

    def trainer(callbacks, out, epochs=2, n=20, **kw):
        args = transformers.TrainingArguments(
            output_dir=str(out), use_cpu=True, report_to=[], save_strategy="no", num_train_epochs=epochs,
            per_device_train_batch_size=4, logging_steps=2, disable_tqdm=True, **kw)
        return transformers.Trainer(model=model(), args=args, train_dataset=Data(n), eval_dataset=Data(8),
                                    callbacks=callbacks)
""")
exec(TINY)  # the same model and data for the tests here and the script below


class Boom(transformers.TrainerCallback):
    def __init__(self, error: BaseException, at: int = 3) -> None:
        self.error, self.at = error, at

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == self.at:
            raise self.error


def callback(**kw) -> GpuWidgetsCallback:
    return GpuWidgetsCallback(display=False, sampler=simulated_sampler(), **kw)


def test_a_run_is_recorded_as_the_trainer_logs_it(tmp_path):
    cb = callback(title="hf")
    trainer([cb], tmp_path, eval_strategy="epoch").train()  # noqa: F821 (from TINY)
    mon = cb.monitor
    assert mon.status == "finished" and mon.title == "hf"
    assert {"loss", "learning_rate", "grad_norm", "eval_loss"} <= set(mon.keys)
    assert not {"epoch", "eval_runtime", "train_runtime", "train_loss", "eval_samples_per_second"} & set(mon.keys)
    assert mon.series("loss")[0] == [2, 4, 6, 8, 10]  # logging_steps=2 of 10 steps
    assert mon.series("eval_loss")[0] == [5, 10]
    assert mon.total_steps == 10 and mon.parts.progress.epoch == 2 and mon.parts.progress.epochs == 2
    assert mon.parts.samples.total == 40 and mon.parts.samples.first_batch == 4
    meta = json.loads((mon.run_dir / "run.json").read_text())
    assert meta["status"] == "finished" and meta["total_steps"] == 10


def test_samples_are_the_real_batches_even_the_last_small_one(tmp_path):
    cb = callback()
    trainer([cb], tmp_path, epochs=1, n=10).train()  # noqa: F821  # 4, 4, 2
    assert cb.monitor.parts.samples.total == 10


def test_an_exception_goes_on_unchanged_and_the_next_train_marks_the_run_failed(tmp_path):
    error = ValueError("bad batch")
    cb = callback()
    with pytest.raises(ValueError) as caught:
        trainer([cb, Boom(error)], tmp_path).train()  # noqa: F821
    assert caught.value is error
    first = cb.monitor
    assert first.series("loss")[0] == [2]
    trainer([cb], tmp_path, epochs=1).train()  # noqa: F821
    assert first.status == "failed" and "stopped without reaching its end" in str(first.error)
    assert cb.monitor is not first and cb.monitor.status == "finished"


@pytest.mark.parametrize("error, status", [(ValueError("bad batch"), "failed"), (KeyboardInterrupt(), "interrupted")])
def test_in_a_notebook_cell_the_run_ends_failed_or_interrupted(tmp_path, error, status):
    from IPython.testing.globalipapp import get_ipython

    ip = get_ipython()
    cb = callback()
    ip.user_ns.update(run=lambda: trainer([cb, Boom(error)], tmp_path).train())  # noqa: F821
    result = ip.run_cell("run()", store_history=False)
    assert result.error_in_exec is error
    assert cb.monitor.status == status
    assert json.loads((cb.monitor.run_dir / "run.json").read_text())["status"] == status


def test_an_existing_monitor_is_fed(tmp_path):
    mon = TrainingMonitor("mine", display=False, sampler=simulated_sampler())
    cb = GpuWidgetsCallback(monitor=mon)
    assert cb.monitor is mon
    trainer([cb], tmp_path, epochs=1).train()  # noqa: F821
    assert mon.status == "finished" and mon.step == 5


def test_only_global_rank_zero_records(tmp_path, monkeypatch):
    monkeypatch.setattr(transformers.TrainingArguments, "process_index", property(lambda self: 1))
    cb = callback()
    trainer([cb], tmp_path, epochs=1).train()  # noqa: F821
    assert cb._feed._monitor is None


@pytest.mark.integration
def test_a_plain_script_records_the_run_log_and_prints_one_line(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TINY + textwrap.dedent("""
        from gpu_widgets.integrations.transformers import GpuWidgetsCallback

        class Boom(transformers.TrainerCallback):
            def on_step_begin(self, args, state, control, **kwargs):
                if state.global_step == 2:
                    raise ValueError("bad batch")

        trainer([GpuWidgetsCallback()], "out", epochs=1).train()
        trainer([GpuWidgetsCallback(), Boom()], "out", epochs=1).train()  # uncaught: the script ends on it
    """))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GPU_WIDGETS_RUN_DIR": str(tmp_path / "runs"),
           "GPU_WIDGETS_BACKEND": "simulated", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert done.returncode == 1 and "ValueError: bad batch" in done.stderr, done.stderr
    ours = our_lines(done.stdout + done.stderr)
    assert len(ours) == 2 and all(line.startswith("gpu-widgets: recording this run in ") for line in ours), ours
    runs = [Path(line.rsplit(" in ", 1)[1]) for line in ours]
    assert [json.loads((r / "run.json").read_text())["status"] for r in runs] == ["finished", "failed"]
    assert "bad batch" in json.loads((runs[1] / "run.json").read_text())["error"]


class Tick(transformers.TrainerCallback):
    """The GPU sampler ticks once per step (a given sampler does not run by itself)."""

    def __init__(self, sampler) -> None:
        self.sampler = sampler

    def on_step_end(self, args, state, control, **kwargs):
        self.sampler.tick()


def test_training_on_the_cpu_while_the_gpu_idles_is_said_as_for_a_pytorch_loop(tmp_path, monkeypatch):
    if torch.cuda.is_initialized():
        pytest.skip("this process uses CUDA")
    monkeypatch.setattr(torch.version, "cuda", "12.4")  # a CUDA build: the plain tip, not "+cpu"'s
    sampler = fixed_sampler({"utilization_gpu_percent": 1})
    cb = GpuWidgetsCallback(display=False, sampler=sampler)
    trainer([cb, Tick(sampler)], tmp_path, epochs=1).train()  # noqa: F821
    mon = cb.monitor
    mon.refresh()
    text = re.sub(r"<[^>]+>", "", mon.widget.children[0].value)
    assert "Training runs on the CPU: the tensors this monitor sees are on the CPU while GPU 0 stays idle" in text
    assert mon.parts.records.tensor_devices == {"cpu"}  # from the model's weights: the Trainer logs floats
