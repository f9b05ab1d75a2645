"""The Keras callback, through a real Keras 3 fit on the torch backend on the CPU: what the monitor
recorded, failures and Ctrl-C in the step, rank 0 only, and the one line a plain script prints."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")
np = pytest.importorskip("numpy")
keras = pytest.importorskip("keras")
if keras.backend.backend() != "torch":
    pytest.skip("these tests run Keras on its torch backend", allow_module_level=True)

from gpu_widgets import TrainingMonitor  # noqa: E402
from gpu_widgets.integrations.keras import GpuWidgetsCallback  # noqa: E402

from .script_output import our_lines  # noqa: E402
from .widget_helpers import fixed_sampler, run_dir, simulated_sampler  # noqa: E402,F401

ROOT = Path(__file__).resolve().parents[1]
MODEL = textwrap.dedent("""
    import numpy as np, keras

    def model(fail_at=None, error=None):
        class Net(keras.Model):
            def __init__(self):
                super().__init__()
                self.dense = keras.layers.Dense(1)
                self.calls = 0

            def train_step(self, data):
                self.calls += 1
                if self.calls == fail_at:
                    raise error
                return super().train_step(data)

            def call(self, x):
                return self.dense(x)

        net = Net()
        net.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", metrics=["mae"])
        return net

    def data(n=20):
        x = np.random.default_rng(0).normal(size=(n, 3)).astype("float32")
        return x, x.sum(1, keepdims=True)
""")
exec(MODEL)  # the same model and data for the tests here and the script below


def callback(**kw) -> GpuWidgetsCallback:
    return GpuWidgetsCallback(display=False, sampler=simulated_sampler(), **kw)


def test_a_fit_is_recorded_batch_by_batch_with_validation_epochs_total_and_samples():
    cb = callback(title="keras")
    x, y = data()  # noqa: F821 (from MODEL)
    model().fit(x, y, batch_size=4, epochs=2, validation_data=data(8), callbacks=[cb], verbose=0)  # noqa: F821
    mon = cb.monitor
    assert mon.status == "finished" and mon.title == "keras"
    assert {"loss", "mae", "val_loss", "val_mae"} <= set(mon.keys)
    assert mon.series("loss")[0] == list(range(1, 11))
    assert mon.series("val_loss")[0] == [5, 10]
    assert mon.total_steps == 10 and mon.parts.progress.epoch == 2 and mon.parts.progress.epochs == 2
    assert mon.parts.samples.total == 40 and mon.parts.samples.first_batch == 4
    meta = json.loads((mon.run_dir / "run.json").read_text())
    assert meta["status"] == "finished" and meta["total_steps"] == 10


def test_samples_are_the_real_batches_even_the_last_small_one():
    cb = callback()
    model().fit(*data(10), batch_size=4, epochs=1, callbacks=[cb], verbose=0)  # noqa: F821
    assert cb.monitor.parts.samples.total == 10 and cb.monitor.step == 3


@pytest.mark.parametrize("error, status", [(ValueError("bad batch"), "failed"), (KeyboardInterrupt(), "interrupted")])
def test_a_step_that_raises_ends_the_run_and_the_exception_goes_on_unchanged(error, status):
    cb = callback()
    net = model(fail_at=3, error=error)  # noqa: F821
    with pytest.raises(type(error)) as caught:
        net.fit(*data(), batch_size=4, epochs=2, callbacks=[cb], verbose=0)  # noqa: F821
    assert caught.value is error
    mon = cb.monitor
    assert mon.status == status and mon.step == 2
    assert json.loads((mon.run_dir / "run.json").read_text())["status"] == status
    net.fit(*data(), batch_size=4, epochs=1, callbacks=[cb], verbose=0)  # noqa: F821  # the model's next fit: a new run
    assert cb.monitor is not mon and cb.monitor.status == "finished" and cb.monitor.step == 5


def test_an_existing_monitor_is_fed():
    mon = TrainingMonitor("mine", display=False, sampler=simulated_sampler())
    cb = GpuWidgetsCallback(monitor=mon)
    assert cb.monitor is mon
    model().fit(*data(), batch_size=4, epochs=1, callbacks=[cb], verbose=0)  # noqa: F821
    assert mon.status == "finished" and mon.step == 5


def test_only_process_zero_records(monkeypatch):
    monkeypatch.setenv("KERAS_DISTRIBUTION_PROCESS_ID", "1")
    cb = callback()
    model().fit(*data(), batch_size=4, epochs=1, callbacks=[cb], verbose=0)  # noqa: F821
    assert cb._feed._monitor is None


@pytest.mark.integration
def test_a_plain_script_records_the_run_log_and_prints_one_line(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(MODEL + textwrap.dedent("""
        from gpu_widgets.integrations.keras import GpuWidgetsCallback
        model().fit(*data(), batch_size=4, epochs=1, callbacks=[GpuWidgetsCallback()], verbose=0)
    """))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GPU_WIDGETS_RUN_DIR": str(tmp_path / "runs"),
           "GPU_WIDGETS_BACKEND": "simulated", "KERAS_BACKEND": "torch"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    ours = our_lines(done.stdout + done.stderr)
    assert len(ours) == 1 and ours[0].startswith("gpu-widgets: recording this run in "), ours
    run = Path(ours[0].rsplit(" in ", 1)[1])
    assert json.loads((run / "run.json").read_text())["status"] == "finished"
    assert len((run / "steps.jsonl").read_text().splitlines()) == 5


def test_training_on_the_cpu_while_the_gpu_idles_is_said_as_for_a_pytorch_loop(monkeypatch):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_initialized():
        pytest.skip("this process uses CUDA")
    monkeypatch.setattr(torch.version, "cuda", "12.4")  # a CUDA build: the plain tip, not "+cpu"'s
    sampler = fixed_sampler({"utilization_gpu_percent": 1})
    tick = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: sampler.tick())
    cb = GpuWidgetsCallback(display=False, sampler=sampler)
    model().fit(*data(), batch_size=4, epochs=1, callbacks=[cb, tick], verbose=0)  # noqa: F821
    mon = cb.monitor
    mon.refresh()
    text = re.sub(r"<[^>]+>", "", mon.widget.children[0].value)
    assert "Training runs on the CPU: the tensors this monitor sees are on the CPU while GPU 0 stays idle" in text
    assert mon.parts.records.tensor_devices == {"cpu"}  # from the weights: Keras logs floats
