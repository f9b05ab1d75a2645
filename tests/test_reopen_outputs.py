"""A saved notebook keeps the pictures of finished widgets, not widget views (issue 23).

JupyterLab does not save widget state by default, so an output that still holds the widget mime
type reopens as "Error displaying widget: model not found". A real kernel (nbclient) runs a
notebook with a TrainingMonitor in every way a run ends, a GpuDashboard stopped in a later cell
and a ``%%gpuwatch`` cell; the .ipynb written to disk is read back and every finished output must
hold its PNG, its header as HTML with the picture, and no widget view.
"""
from __future__ import annotations

import base64
import re
import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("matplotlib")

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"

CELLS = [
    "import math\nfrom gpu_widgets import GpuDashboard, TrainingMonitor",
    # 1: a with-block that ends cleanly
    """mon = TrainingMonitor("clean run", gpus="all")
with mon:
    for step in range(40):
        mon.log(loss=math.exp(-step / 10))""",
    # 2: the user's exception goes on; the output still becomes the picture (failed)
    """bad = TrainingMonitor("failing run")
with bad:
    for step in range(10):
        bad.log(loss=1.0 / (step + 1))
    raise ValueError("the user's own error")""",
    # 3: no with-block: idle when the cell ends, finished in a later cell (outside the cell)
    """later = TrainingMonitor("finished later")
for step in range(10):
    later.log(loss=float(step))""",
    "later.finish()\nprint('finished', later.status)",
    # 5: never displayed: prints nothing new
    """quiet = TrainingMonitor("not shown", display=False)
with quiet:
    quiet.log(loss=1.0)""",
    "dash = GpuDashboard(window_s=30, gpus='all')",
    "import time\ntime.sleep(2.5)\ndash.stop()",
    "%load_ext gpu_widgets",
    "%%gpuwatch --interval 0.5\nimport time\ntime.sleep(2)",
]


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> list[list[dict]]:
    """The outputs of each cell, read back from the .ipynb written after the run."""
    work = tmp_path_factory.mktemp("reopen")
    book = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    book.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    mp = pytest.MonkeyPatch()
    try:  # the kernel inherits this environment
        mp.setenv("GPU_WIDGETS_BACKEND", "simulated")
        mp.setenv("GPU_WIDGETS_RUN_DIR", str(work / "runs"))
        client = nbclient.NotebookClient(book, timeout=120, kernel_name="python3", allow_errors=True,
                                         resources={"metadata": {"path": str(work)}})
        client.execute()
    finally:
        mp.undo()
    path = work / "saved.ipynb"
    nbformat.write(book, path)
    back = nbformat.read(path, as_version=4)
    return [list(c.get("outputs", ())) for c in back.cells]


def displays(outputs: list[dict]) -> list[dict]:
    return [o["data"] for o in outputs if o["output_type"] in ("display_data", "execute_result")]


def check_picture(data: dict, header_text: str) -> None:
    """Only plain types: the PNG, the header's HTML over the same picture, the repr."""
    assert WIDGET_VIEW not in data, f"a widget view was saved: {sorted(data)}"
    assert sorted(data) == ["image/png", "text/html", "text/plain"]
    png = base64.b64decode(data["image/png"])
    assert png.startswith(b"\x89PNG")
    html = data["text/html"]
    assert f'src="data:image/png;base64,{data["image/png"]}"' in html
    assert header_text in html
    assert re.search(r"<style>.*\.gpuw-badge", html, re.S)  # the header keeps its look


@pytest.mark.integration
def test_a_finished_monitor_is_saved_as_its_picture(saved):
    (data,) = displays(saved[1])
    check_picture(data, "clean run")
    assert "finished" in data["text/html"] and ": finished, step 39" in data["text/plain"]
    # The header's words as the widget showed them (title and status, checked above); not the SIMULATED
    # badge, which needs a GPU sample, and a 39-step run can end before the first on a busy machine.


@pytest.mark.integration
def test_a_failing_loop_still_raises_and_its_output_is_the_picture(saved):
    outputs = saved[2]
    errors = [o for o in outputs if o["output_type"] == "error"]
    assert [e["ename"] for e in errors] == ["ValueError"] and "the user's own error" in errors[0]["evalue"]
    (data,) = displays(outputs)
    check_picture(data, "failing run")
    assert ": failed," in data["text/plain"]


@pytest.mark.integration
def test_a_run_finished_in_a_later_cell_updates_its_first_output(saved):
    (data,) = displays(saved[3])
    check_picture(data, "finished later")
    assert ": finished, step 9" in data["text/plain"]
    assert [o.get("text") for o in saved[4]] == ["finished finished\n"]


@pytest.mark.integration
def test_a_monitor_never_displayed_prints_nothing(saved):
    assert saved[5] == []


@pytest.mark.integration
def test_a_stopped_dashboard_is_saved_as_its_picture(saved):
    (data,) = displays(saved[6])
    check_picture(data, "GPU")
    assert "stopped" in data["text/plain"]
    assert saved[7] == []  # stop() changed the earlier output, printed nothing here


@pytest.mark.integration
def test_a_gpuwatch_cell_is_saved_as_pictures_and_its_summary(saved):
    outputs = displays(saved[9])
    assert len(outputs) == 2, [sorted(d) for d in outputs]
    charts, summary = outputs
    check_picture(charts, "GPU")
    assert WIDGET_VIEW not in summary and "text/html" in summary and "GPU" in summary["text/plain"]


@pytest.mark.integration
def test_no_output_anywhere_holds_a_widget_view(saved):
    assert not [i for i, outputs in enumerate(saved) for d in displays(outputs) if WIDGET_VIEW in d]


@pytest.mark.integration
def test_the_saved_notebook_is_small(saved):
    # Two copies of each picture (PNG and HTML): still a bounded size per output.
    sizes = [len(str(d)) for outputs in saved for d in displays(outputs)]
    assert max(sizes) < 600_000, sizes


def test_the_picture_shows_the_live_header():
    """Unit level: the HTML is the header the widget last drew, then the picture."""
    from gpu_widgets import TrainingMonitor

    mon = TrainingMonitor("unit", run_log=False, display=False)
    mon.log(loss=1.0)
    live = mon._repr_mimebundle_()
    assert WIDGET_VIEW in live and "image/png" not in live  # running: the interactive widget
    mon.finish()
    data = mon._repr_mimebundle_()
    check_picture(data, "unit")
    assert mon.parts.view.header.value in data["text/html"]
