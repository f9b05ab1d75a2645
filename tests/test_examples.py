"""The example notebooks run headless (nbclient) on simulated GPUs, without errors, in under 60 s,
and leave real bqplot charts in the saved widget state."""
from __future__ import annotations

import base64
import re
import time
from pathlib import Path

import pytest

from gpu_widgets import TrainingMonitor

from .widget_helpers import run_dir  # noqa: F401

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def execute(name: str, run_dir: Path, monkeypatch, backend: str | None = "simulated") -> tuple[object, float]:
    # The kernel inherits this process's environment.
    if backend is None:
        monkeypatch.delenv("GPU_WIDGETS_BACKEND", raising=False)
    else:
        monkeypatch.setenv("GPU_WIDGETS_BACKEND", backend)
    monkeypatch.setenv("GPU_WIDGETS_RUN_DIR", str(run_dir))
    book = nbformat.read(EXAMPLES / name, as_version=4)
    shorten_live_waits(book)
    client = nbclient.NotebookClient(
        book, timeout=120, kernel_name="python3", store_widget_state=True,
        resources={"metadata": {"path": str(run_dir.parent)}},
    )
    began = time.monotonic()
    client.execute()  # raises CellExecutionError on any error
    return book, time.monotonic() - began


# What Run All waits, in the examples, with a live dashboard before stopping it: long enough to see
# it draw. These tests wait 1 s instead (the charts' data is checked all the same).
LIVE_WAIT = "time.sleep(20)"


def shorten_live_waits(book) -> int:
    cells = [c for c in book.cells if c.cell_type == "code" and LIVE_WAIT in c.source]
    for cell in cells:
        cell.source = cell.source.replace(LIVE_WAIT, "time.sleep(1)")
    return len(cells)


@pytest.mark.parametrize("name,stop", [("quickstart.ipynb", "dash.stop()"), ("gpuwatch_magic.ipynb", "%gpuwatch stop")])
def test_run_all_leaves_each_dashboard_live_for_20_s_before_stopping_it(name, stop):
    # A dashboard stopped 2 s after it started shows a frozen chart of a few samples on a first Run All.
    book = nbformat.read(EXAMPLES / name, as_version=4)
    stops = [i for i, c in enumerate(book.cells) if c.cell_type == "code" and stop in c.source]
    assert len(stops) == 1, stops
    cell = book.cells[stops[0]].source
    assert cell.index(LIVE_WAIT) < cell.index(stop), cell  # the wait comes first, in the same cell
    assert "except KeyboardInterrupt" in cell  # interrupting the wait still stops the dashboard
    assert shorten_live_waits(book) == 1 and LIVE_WAIT not in book.cells[stops[0]].source


def models(book) -> list[dict]:
    return list(book.metadata["widgets"][WIDGET_STATE]["state"].values())


def text_of(book) -> str:
    out = []
    for cell in book.cells:
        for o in cell.get("outputs", ()):
            out.append(o.get("text", "") + str(o.get("data", {}).get("text/plain", "")))
    return "\n".join(out)


@pytest.mark.parametrize("name", ["quickstart.ipynb", "train_torch.ipynb", "gpuwatch_magic.ipynb",
                                  "lightning.ipynb", "huggingface.ipynb", "keras.ipynb", "distributed.ipynb",
                                  "profile.ipynb", "memory.ipynb", "cell_costs.ipynb"])
def test_committed_examples_have_no_outputs(name):
    book = nbformat.read(EXAMPLES / name, as_version=4)
    nbformat.validate(book)
    assert all(not c.get("outputs") and not c.get("execution_count") for c in book.cells if c.cell_type == "code")
    assert "widgets" not in book.metadata


def monitor_outputs(book) -> list[dict]:
    """The display outputs of TrainingMonitors (after their final update)."""
    return [o["data"] for c in book.cells for o in c.get("outputs", ())
            if "<TrainingMonitor" in str(o.get("data", {}).get("text/plain", ""))]


def check_static_image(book) -> None:
    outputs = [d for d in monitor_outputs(book) if ": running," not in d["text/plain"]]
    assert outputs, "no finished TrainingMonitor output"
    for data in outputs:
        # the picture and the header, no widget view: the saved notebook reopens showing them
        assert "application/vnd.jupyter.widget-view+json" not in data
        assert base64.b64decode(data["image/png"]).startswith(b"\x89PNG")
        assert "<img" in data["text/html"]


def check_charts(book, *labels: str) -> None:
    state = models(book)
    names = [m["model_name"] for m in state]
    assert "FigureModel" in names and "LinesModel" in names
    lines = {tuple(m["state"].get("labels") or ()): m for m in state if m["model_name"] == "LinesModel"}
    for label in labels:
        assert (label,) in lines, f"no chart line {label!r}; have {sorted(lines)}"
        assert lines[(label,)]["buffers"], f"line {label!r} holds no data"
    headers = [m["state"]["value"] for m in state if m["model_name"] == "HTMLModel"]
    if any(label.startswith("GPU") for label in labels):
        assert any("SIMULATED GPUs" in h for h in headers)


@pytest.mark.integration
@pytest.mark.parametrize("backend", ["simulated", None])
def test_quickstart(run_dir, monkeypatch, backend):
    book, seconds = execute("quickstart.ipynb", run_dir, monkeypatch, backend=backend)  # None: "auto"
    assert seconds < 60
    text = text_of(book)
    if backend == "simulated":
        assert "GPU readings from simulated: Simulated NVIDIA H100 80GB HBM3" in text
        check_charts(book, "loss", "val_loss", "lr", "GPU 0", "GPU 0 used")
    elif "No usable NVIDIA GPU here" in text:  # no driver: it says so, then chooses simulated GPUs explicitly
        assert "Choosing SIMULATED GPUs explicitly" in text
        check_charts(book, "loss", "val_loss", "lr", "GPU 0", "GPU 0 used")
    else:  # a machine with a driver: its real GPUs
        assert "GPU readings from nvml" in text
    check_static_image(book)
    assert "saved to" in text
    (run,) = run_dir.iterdir()
    back = TrainingMonitor.load(run)
    assert back.status == "finished" and back.step == 299 and back.keys == ("loss", "lr", "val_loss")


@pytest.mark.integration
@pytest.mark.slow
def test_train_torch_really_trains(run_dir, monkeypatch):
    pytest.importorskip("torch")
    book, seconds = execute("train_torch.ipynb", run_dir, monkeypatch)
    # It trains for real: 33-63 s on two CPU cores (the notebook says so); the limit only catches a runaway.
    assert seconds < 120
    check_charts(book, "loss", "val_loss", "val_acc", "GPU 0", "GPU 0 used")
    check_static_image(book)
    headers = " ".join(m["state"]["value"] for m in models(book) if m["model_name"] == "HTMLModel")
    assert "epoch 40/40" in re.sub(r"<[^>]+>", "", headers)  # the words; label and value are separate elements
    (run,) = run_dir.iterdir()
    back = TrainingMonitor.load(run)
    assert back.status == "finished"
    losses = back.series("loss")[1]
    assert sum(losses[-20:]) / 20 < 0.5 * sum(losses[:20]) / 20  # the loss falls
    assert back.series("val_acc")[1][-1] > 0.9


@pytest.mark.integration
def test_gpuwatch_magic(run_dir, monkeypatch):
    book, seconds = execute("gpuwatch_magic.ipynb", run_dir, monkeypatch)
    assert seconds < 60
    check_charts(book, "GPU 0", "GPU 1")
    text = text_of(book)
    # the cell sleeps 2 s; a loaded machine may take a little longer
    assert re.search(r"%%gpuwatch: cell ran \d+\.\d s · SIMULATED GPUs \(not real devices\)", text), text
    assert "'done'" in text and "usage: %gpuwatch" in text and "live dashboard stopped" in text
    assert not list(run_dir.glob("*")), "the magic writes no run log"
