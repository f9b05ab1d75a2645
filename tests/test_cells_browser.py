"""What each cell cost the GPU, in a real JupyterLab and Chromium, with examples/cell_costs.ipynb on
simulated GPUs (the kernel and its child claim simulated memory: gpu_widgets.simulated_use).

Run All: the GPU cells get their line (GPU, duration, peak, change), the CPU-only cell none, the
long cell's line says "running" while it runs; the sidebar's "This notebook" lists the GPU cells
in order, sorts, and jumps to a cell; ``%gpu_cells`` prints the same bill through the server. With
the metadata setting on, the saved .ipynb keeps the figures and a lab with no gpu_widgets server
extension shows the lines again; with it off, the saved file has no gpu_widgets key. Screenshots,
light and dark: build/screenshots/cells-{light,dark}.png and cells-bill-{light,dark}.png.
"""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from .browser_fixtures import SCREENSHOTS, open_notebook, panel, run_all_cells, switch_theme
from .browser_fixtures import browser, jp_asyncio_loop, jp_server_cleanup  # noqa: F401 (fixtures)
from .lab_server import LabServer

pytestmark = [pytest.mark.browser, pytest.mark.slow]

sync_api = pytest.importorskip("playwright.sync_api")

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "cell_costs.ipynb"
NAME = "cell_costs.ipynb"
SIDEBAR_TAB = "[data-id='gpu-widgets-sidebar']"

# Per code cell (in order): its first source line and its GPU line's text ('' for none).
LINES_JS = """() => [...document.querySelectorAll('.jp-Notebook .jp-CodeCell')].map(cell => ({
  source: (cell.querySelector('.jp-InputArea-editor')?.textContent || '').trim().slice(0, 60),
  line: (cell.querySelector('.jp-GpuWidgets-cellLine')?.textContent || ''),
  title: (cell.querySelector('.jp-GpuWidgets-cellLine')?.getAttribute('title') || ''),
}))"""
# Per bill row: the cell ("[n] first line"), then its figures: running, time, GPUs, peak, energy.
BILL_JS = """() => [...document.querySelectorAll('.jp-GpuWidgets-billRow')].map(r =>
  [r.querySelector('[role=rowheader]').textContent.trim(),
   ...[...r.querySelectorAll('[role=gridcell]')].slice(1).map(c => c.textContent.trim())])"""


def settings(store: bool) -> dict[str, Any]:
    return {"@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"},
            "gpu-widgets:plugin": {"storeInMetadata": store}}


def lab(workdir: Path, store: bool, gpus: int = 2, args: tuple[str, ...] = ()) -> LabServer:
    env = {"GPU_WIDGETS_BACKEND": "simulated", "GPU_WIDGETS_SIMULATED_GPUS": str(gpus),
           "GPU_WIDGETS_RUN_DIR": str(workdir / "runs"), "GPU_WIDGETS_SIMULATED_USE_DIR": str(workdir / "claims")}
    return LabServer(workdir, env=env, settings=settings(store),
                     args=["--GpuWidgets.interval_s=0.5", "--GpuWidgets.slow_interval_s=0.5", *args])


def wait_for(page: Any, js: str, ok: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    value = page.evaluate(js)
    while not ok(value) and time.monotonic() < deadline:
        time.sleep(0.2)
        value = page.evaluate(js)
    assert ok(value), f"{what}: {value}"
    return value


def by_source(cells: list[dict[str, str]], start: str) -> dict[str, str]:
    return next(c for c in cells if c["source"].startswith(start))


def part(line: str, gpu: int) -> str:
    """The figures of one GPU in a cell's line ('' when the line has none of it)."""
    if line.split(" · ")[0] == f"GPU {gpu}" or line.split(" · ")[1:2] == [f"GPU {gpu}"]:
        return line
    return next((p for p in line.split("  |  ") if f"GPU {gpu}: " in p), "")


def gpu_cells_of(path: Path) -> list[int]:
    book = json.loads(path.read_text())
    code = [c for c in book["cells"] if c["cell_type"] == "code"]
    return [i for i, c in enumerate(code) if "gpu_widgets" in c.get("metadata", {})]


def test_each_gpu_cell_gets_its_line_the_bill_lists_them_and_the_metadata_keeps_them(browser, tmp_path):  # noqa: F811
    with lab(tmp_path, store=True) as server:
        shutil.copy(EXAMPLE, server.root / NAME)
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        try:
            open_notebook(page, server.base_url, server.token, NAME)
            page.locator(SIDEBAR_TAB).click()
            page.locator(".jp-Notebook .jp-CodeCell").first.click()
            page.locator(".lm-MenuBar-itemLabel").get_by_text("Run", exact=True).click()
            page.locator(".lm-Menu-itemLabel").get_by_text("Run All Cells", exact=True).click()
            # While the two-GPU cell runs, its line counts up and names GPU 0 once its memory grew
            # there (the kernel already held 12 GiB on it: step 0 changes nothing, and process lists
            # are read every 2 s, so the first running line may name GPU 1 alone)
            running = wait_for(page, LINES_JS, lambda cs: "running" in by_source(cs, '# "Train" on two GPUs')["line"]
                               and "GPU 0" in by_source(cs, '# "Train" on two GPUs')["line"],
                               90, "a running line under the training cell naming GPU 0")
            first = by_source(running, '# "Train"')["line"]
            assert first.startswith("running "), running
            # and it updates (every 2 s): the clock moves on
            wait_for(page, LINES_JS, lambda cs: by_source(cs, '# "Train"')["line"].startswith("running")
                     and by_source(cs, '# "Train"')["line"].split(" · ")[0] != first.split(" · ")[0], 30,
                     "the running line updated")
            run_all_cells_done(page)
            cells = wait_for(page, LINES_JS, lambda cs: all(
                by_source(cs, s)["line"] and "running" not in by_source(cs, s)["line"]
                for s in ('# Load a "model"', '# "Train"', "# A child process", "# Free GPU 0")), 60, "every GPU cell's line")
            # Then: the CPU-only cells and the setup have no line
            assert by_source(cells, "# Preparing data on the CPU")["line"] == ""
            assert by_source(cells, "%load_ext gpu_widgets")["line"] == ""
            # the model's load: GPU 0, ~3 s, its peak and +12 GiB
            load = by_source(cells, '# Load a "model"')["line"]
            assert load.startswith("GPU 0 · 3") and "peak 12 GiB (+12 GiB)" in load, load
            # the training: one part per GPU, GPU 0 grew to 19 GiB, the second GPU to 7.5 GiB
            train = by_source(cells, '# "Train"')["line"]
            assert "GPU 0: " in train and "  |  GPU 1: " in train and "peak 19 GiB (+7 GiB)" in train, train
            assert "peak 7.5 GiB (+7.5 GiB)" in train, train
            # the child's 9 GiB on GPU 1 is the kernel's (the kernel itself held 7.5 GiB there)
            child = by_source(cells, "# A child process")["line"]
            # (GPU 0 is on the line only where the simulated GPU 0 was busy meanwhile: the kernel kept its memory)
            assert "peak 9 GiB (-7.5 GiB)" in part(child, 1), child
            # freeing: the change is "-"
            free = by_source(cells, "# Free GPU 0")["line"]
            assert free.startswith("GPU 0 · 2") and "(-17 GiB)" in free, free
            assert "Simulated NVIDIA H100" in by_source(cells, "# Free GPU 0")["title"]

            # The bill: the GPU cells in notebook order, a total, sorted by a click, a row jumps
            # (the %gpu_cells cell too, where the simulated GPU 0 was busy while the kernel held its
            # 2 GiB there: a busy GPU is a used one, "shared" said, as a training step on a loaded model)
            bill = wait_for(page, BILL_JS, lambda rows: len(rows) >= 4, 30, "the bill's rows")
            assert [r[0].split("]")[1].strip()[:12] for r in bill][:4] == [
                '# Load a "mo', '# "Train" on', "# A child pr", "# Free GPU 0"], bill
            assert len(bill) == 4 or bill[4][0].startswith("[7] # The notebook's GPU bill"), bill
            total = panel(page).locator(".jp-GpuWidgets-billTotal").inner_text()
            assert f"Total: {len(bill)} cells · " in total, total
            panel(page).locator(".jp-GpuWidgets-billHead").get_by_role("button", name="Peak").click()
            peaks = page.evaluate(BILL_JS)
            gib = [float(r[3].split()[0]) * (1 if r[3].endswith("GiB") else 1 / 1024) for r in peaks]
            # largest first: the child's cell (19 + 9 GiB, or 9 where GPU 0 idled) or the training (19 + 7.5)
            assert gib == sorted(gib, reverse=True) and gib[0] in (28, 26.5), peaks
            panel(page).locator(".jp-GpuWidgets-billRow").last.click()
            active = page.locator(".jp-Notebook .jp-Cell.jp-mod-active .jp-InputArea-editor").inner_text()
            assert active.strip().startswith(peaks[-1][0].split("]")[1].strip()[:10]), (active, peaks[-1])

            # %gpu_cells in the kernel: the same cells, from the server
            last = page.locator(".jp-Notebook .jp-CodeCell").last
            table = last.locator(".jp-OutputArea-output").inner_text()
            assert "figures from the Jupyter server at" in table and "4 cells" in table, table  # (itself not yet)

            # The whole notebook in the picture: the CPU cell, the three GPU cells, the child's, the bill
            page.set_viewport_size({"width": 1400, "height": 2300})
            page.evaluate("() => document.querySelector('.jp-NotebookPanel .jp-WindowedPanel-outer')?.scrollTo(0, 0)")
            for theme in ("light", "dark"):
                switch_theme(page, f"JupyterLab {theme.title()}")
                SCREENSHOTS.mkdir(parents=True, exist_ok=True)
                page.locator(".jp-Notebook").screenshot(path=str(SCREENSHOTS / f"cells-{theme}.png"))
                panel(page).locator(".jp-GpuWidgets-bill").screenshot(path=str(SCREENSHOTS / f"cells-bill-{theme}.png"))
            switch_theme(page, "JupyterLab Light")
            page.set_viewport_size({"width": 1400, "height": 1000})

            # Saved with the setting on: the GPU cells' metadata, not the others'
            page.locator(".jp-Notebook .jp-CodeCell").first.click()
            page.keyboard.press("Control+s")
            cells = page.evaluate(LINES_JS)
            with_lines = [i for i, c in enumerate(cells) if c["line"]]
            assert with_lines[:4] == [2, 3, 4, 5]
            deadline = time.monotonic() + 30
            while gpu_cells_of(server.root / NAME) != with_lines:
                assert time.monotonic() < deadline, (gpu_cells_of(server.root / NAME), with_lines)
                page.keyboard.press("Control+s")
                time.sleep(1)
        finally:
            context.close()

    # Reopened in a lab without the gpu_widgets server extension: the lines come from the metadata
    with lab(tmp_path, store=True, args=("--ServerApp.jpserver_extensions={'gpu_widgets': False}",)) as bare:
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        try:
            open_notebook(page, bare.base_url, bare.token, NAME)
            reopened = wait_for(page, LINES_JS, lambda cs: sum(bool(c["line"]) for c in cs) == len(with_lines), 60,
                                "lines from the metadata")
            assert [c["line"] for c in reopened if c["line"]] == [c["line"] for c in cells if c["line"]]
        finally:
            context.close()


def run_all_cells_done(page: Any) -> None:
    from .browser_fixtures import PROMPTS_JS

    wait_for(page, PROMPTS_JS, lambda s: s["cells"] and s["done"] == s["cells"] and not s["running"], 120, "every cell ran")
    errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.error']")
    assert errors.count() == 0, errors.first.inner_text()


def test_with_the_setting_off_the_saved_notebook_has_no_gpu_widgets_key_and_8_gpus_read_as_one_sum(browser, tmp_path):  # noqa: F811
    with lab(tmp_path, store=False, gpus=8) as server:
        cells = ["from gpu_widgets.simulated_use import hold\nimport time",
                 "for gpu in range(8):\n    hold(gpu, 3 << 30)\ntime.sleep(2)",
                 "x = 1"]
        book = {"cells": [{"cell_type": "code", "metadata": {}, "source": c, "outputs": [], "execution_count": None}
                          for c in cells],
                "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}},
                "nbformat": 4, "nbformat_minor": 5}
        (server.root / "eight.ipynb").write_text(json.dumps(book))
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        page = context.new_page()
        try:
            open_notebook(page, server.base_url, server.token, "eight.ipynb")
            run_all_cells(page, "eight.ipynb")
            lines = wait_for(page, LINES_JS, lambda cs: cs[1]["line"] and "running" not in cs[1]["line"], 60, "the line")
            assert lines[1]["line"].startswith("8 GPUs · 2") and "peak 24 GiB (+24 GiB)" in lines[1]["line"], lines[1]
            assert lines[1]["title"].count("\nGPU ") == 7, lines[1]["title"]
            shot = page.locator(".jp-Notebook .jp-CodeCell").nth(1)
            shot.screenshot(path=str(SCREENSHOTS / "cells-8-gpus.png"))
            page.keyboard.press("Control+s")
            time.sleep(2)
            saved = (server.root / "eight.ipynb").read_text()
            assert json.loads(saved)["cells"][1]["execution_count"] == 2  # it was saved after the run
            saved_book = json.loads(saved)
            assert not [c["metadata"] for c in saved_book["cells"] if "gpu_widgets" in c["metadata"]]
            assert "gpu_widgets" not in saved_book["metadata"]
        finally:
            context.close()
