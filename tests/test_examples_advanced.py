"""The example notebooks that train through a framework, launch ranks, profile, draw a memory
snapshot or bill their cells, run headless (nbclient) on simulated GPUs: the quick start and the
plain PyTorch ones are in tests/test_examples.py (a module each, so two workers run them side by side)."""
from __future__ import annotations

import importlib.util
import re
import shutil

import pytest

from gpu_widgets import TrainingMonitor

from .test_examples import EXAMPLES, check_charts, check_static_image, execute, models, monitor_outputs, text_of
from .widget_helpers import run_dir  # noqa: F401


# The framework examples: each trains a tiny model for real through its framework's own loop, with
# the one-line callback. Given the notebook, when it runs headless on two simulated GPUs, then the
# monitor finished every step of every epoch, charted the framework's metrics beside the GPUs, the
# model learned, and the run log on disk says the same.
FRAMEWORKS = {
    # notebook: (modules it needs, charted lines, (steps, epochs), the accuracy key, its floor)
    "lightning.ipynb": (("lightning.pytorch",), ("train_loss", "val_loss", "val_acc", "lr"), (1200, 16),
                        "val_acc", 0.9),
    "huggingface.ipynb": (("transformers", "accelerate"), ("loss", "eval_loss", "eval_accuracy", "learning_rate"),
                          (300, 6), "eval_accuracy", 0.9),
    "keras.ipynb": (("keras",), ("loss", "val_loss", "accuracy", "val_accuracy"), (800, 16), "val_accuracy", 0.85),
}


@pytest.mark.integration
@pytest.mark.parametrize("name", sorted(FRAMEWORKS))
def test_framework_example_trains_through_its_callback(name, run_dir, monkeypatch):
    needs, lines, (steps, epochs), acc_key, floor = FRAMEWORKS[name]
    for module in ("torch", *needs):  # looked for, not imported: only the kernel needs them
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{name} needs {module}")
    monkeypatch.setenv("KERAS_BACKEND", "torch")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # One torch thread: with two, another process on these two cores made training 5-10x slower.
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    book, seconds = execute(name, run_dir, monkeypatch)
    assert seconds < 60  # 11-23 s here (the notebooks say what their training cell took)
    check_charts(book, *lines, "GPU 0", "GPU 0 used")
    check_static_image(book)
    headers = " ".join(re.sub(r"<[^>]+>", "", m["state"]["value"]) for m in models(book)
                       if m["model_name"] == "HTMLModel")
    assert f"epoch {epochs}/{epochs}" in headers
    assert f"finished: {steps} steps" in text_of(book)
    (run,) = run_dir.iterdir()
    back = TrainingMonitor.load(run)
    assert back.status == "finished" and back.step == steps and back.total_steps == steps
    accuracy = back.series(acc_key)[1]
    assert len(accuracy) == epochs and accuracy[-1] > floor and accuracy[-1] > accuracy[0]


@pytest.mark.integration
def test_distributed_example_launches_two_ranks_and_follows_them(run_dir, monkeypatch):
    # Given the notebook beside its script (the kernel runs in the test's folder)
    pytest.importorskip("torch")
    shutil.copy(EXAMPLES / "distributed_train.py", run_dir.parent / "distributed_train.py")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    # When it runs headless: gpu_widgets.launch starts torchrun with 2 CPU ranks (gloo)
    book, seconds = execute("distributed.ipynb", run_dir, monkeypatch)
    assert seconds < 60  # 9-20 s here
    # Then the launch was followed in the notebook: its charts, its ranks, torchrun's exit
    check_charts(book, "loss")
    labels = {label for m in models(book) if m["model_name"] == "LinesModel"
              for label in m["state"].get("labels") or ()}
    assert any("GPU 0" in label for label in labels), labels  # rank 0's GPUs at least (simulated)
    text = text_of(book)
    assert "torchrun: finished" in text and "world size 2; rank 0 finished after 1520 steps" in text
    assert "rank 1 on " in text and "straggler: None" in text
    assert "rank 0: finished, 1520 steps" in text  # the output's tail, from torchrun.log
    # and on disk: one launch directory, both ranks finished
    (launch,) = run_dir.iterdir()
    back = TrainingMonitor.load(launch)
    assert back.world_size == 2 and [r["status"] for r in back.ranks] == ["finished", "finished"]


@pytest.mark.integration
def test_profile_example_names_each_loops_bottleneck(run_dir, monkeypatch):
    book, seconds = execute("profile.ipynb", run_dir, monkeypatch)
    text = text_of(book)
    # the slow loader's steps: input-bound, with the sentence and the breakdown
    assert "input-bound · The loop waits for its data" in text, text[-3000:]
    assert "'data_wait': '" in text and "aten::" in text  # the breakdown, the top ops
    # the cell of tiny ops, after its GPU summary; the trace from elsewhere
    assert "%%gpuwatch --profile: launch-bound: Each step runs" in text
    assert "<Profile compute-bound over 3 steps" in text
    assert "USDT" not in text and "profiler_start" not in text  # Kineto's stage markers kept off the cells
    # the monitor's final output carries the profile under its header
    finished = [d for d in monitor_outputs(book) if ": running," not in d["text/plain"]]
    assert any("Profile: input-bound" in d.get("text/html", "") for d in finished)


@pytest.mark.integration
def test_memory_example_draws_the_snapshot_tells_the_oom_and_frees_it(run_dir, monkeypatch):
    shutil.copy(EXAMPLES / "memory_snapshot_example.pickle", run_dir.parent / "memory_snapshot_example.pickle")
    book, seconds = execute("memory.ipynb", run_dir, monkeypatch)  # its OOM cell is tagged raises-exception
    text = text_of(book)
    # no CUDA here: the recording says so and the cell ran
    assert "no CUDA allocator to record" in "".join(o.get("text", "") for c in book.cells for o in c.get("outputs", ()))
    # the example snapshot: the widget, and the sites alive at the peak
    assert "<MemorySnapshot" in text and "'site': 'model.py:57'" in text
    # the OOM cell failed with PyTorch's error, and its post-mortem came after the traceback
    oom_cell = next(c for c in book.cells if "raises-exception" in c.metadata.get("tags", ()))
    kinds = [o["output_type"] for o in oom_cell.outputs]
    assert kinds.index("error") < kinds.index("display_data"), kinds
    shown = next(o for o in oom_cell.outputs if o["output_type"] == "display_data")["data"]
    assert "GPU 0: asked for 32.00 TiB, 61.50 GiB was free of 79.19 GiB." in shown["text/plain"]
    assert "application/vnd.jupyter.widget-view+json" in shown and "Out of GPU memory" in shown["text/html"]
    # %gpu_free: the failed step's 256 MiB given back, nothing of the user's deleted
    assert "tensors freed: 256.0 MiB" in text and "not touched: `model` still holds" in text


@pytest.mark.integration
@pytest.mark.slow
def test_the_cell_costs_example_runs_headless_and_its_bill_says_where_figures_come_from(run_dir, monkeypatch,  # noqa: F811
                                                                                        tmp_path):
    # No Jupyter server behind nbclient's kernel: %gpu_cells says so and starts the kernel's own
    # watch (the lines and the server's bill are tested in a real JupyterLab: test_cells_browser.py)
    monkeypatch.setenv("GPU_WIDGETS_SIMULATED_USE_DIR", str(tmp_path / "claims"))
    book, seconds = execute("cell_costs.ipynb", run_dir, monkeypatch)
    assert seconds < 60
    last = [c for c in book.cells if c.cell_type == "code"][-1]
    text = "".join(o.get("text", "") for o in last.outputs)
    html = "".join(o.get("data", {}).get("text/html", "") for o in last.outputs)
    assert "no Jupyter server for this kernel" in text and "No cell used a GPU" in html, (text, html)
    first = [c for c in book.cells if c.cell_type == "code"][0]
    assert "simulated GPUs: take() claims simulated memory" in "".join(o.get("text", "") for o in first.outputs)
