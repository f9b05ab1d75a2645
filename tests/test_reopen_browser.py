"""A saved notebook reopens as its pictures, not "model not found" (issue 23), in a real JupyterLab
and in Notebook 7 (Debian chromium through Playwright).

A notebook with a TrainingMonitor, a GpuDashboard stopped in a later cell and a ``%%gpuwatch``
cell runs in JupyterLab: the live widget draws while the loop runs, and each output becomes its
picture when it stops. The notebook is saved, the server stopped, a new one started on the same
files, and the notebook reopened: every output shows its picture (a loaded ``img``) under its
header, and no "Error displaying widget" / "model not found" anywhere. Screenshots of the reopened
notebook, light and dark, go to build/screenshots/reopen-*.png (ignored by git).
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import nbformat
import pytest

from .browser_fixtures import DRAWN_LINES_JS, PROMPTS_JS, SCREENSHOTS, open_notebook, switch_theme
from .browser_fixtures import browser, jp_asyncio_loop, jp_server_cleanup  # noqa: F401 (fixtures)
from .lab_server import LabServer

pytestmark = [pytest.mark.browser, pytest.mark.slow]

sync_api = pytest.importorskip("playwright.sync_api")
pytest.importorskip("matplotlib")
pytest.importorskip("notebook", reason="Notebook 7 is part of the test extra: pip install -e '.[test]'")

NAME = "reopen.ipynb"
CELLS = [
    "import math, time\nfrom gpu_widgets import GpuDashboard, TrainingMonitor",
    """mon = TrainingMonitor("reopen check", gpus="all")
with mon:
    for step in range(120):
        mon.log(loss=2.0 * math.exp(-step / 30) + 0.05)
        time.sleep(0.04)""",
    "dash = GpuDashboard(window_s=60, gpus='all')",
    "time.sleep(3)\ndash.stop()",
    "%load_ext gpu_widgets",
    "%%gpuwatch --interval 0.5\ntime.sleep(3)",
]
PICTURES = 3  # the monitor, the dashboard, the %%gpuwatch cell's charts
SETTINGS = {"@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"}}  # every cell laid out

# The pictures in outputs that have loaded, with the output's text (header) beside them.
PICTURE_HEADERS_JS = """() => [...document.querySelectorAll('.jp-OutputArea-output img.gpuw-png')]
  .filter(img => img.complete && img.naturalWidth > 100 && img.getBoundingClientRect().width > 100)
  .map(img => img.closest('.jp-OutputArea-output').innerText.slice(0, 200))"""
BROKEN = ("Error displaying widget", "model not found")


def server(workdir: Path, app: str = "lab") -> LabServer:
    env = {"GPU_WIDGETS_BACKEND": "simulated", "GPU_WIDGETS_RUN_DIR": str(workdir / "runs")}
    return LabServer(workdir, env=env, settings=SETTINGS, app=app)


def wait_for(page: Any, js: str, ok: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    value = page.evaluate(js)
    while not ok(value) and time.monotonic() < deadline:
        time.sleep(0.3)
        value = page.evaluate(js)
    assert ok(value), f"{what}: {value}"
    return value


def saved_outputs(path: Path) -> list[dict]:
    book = json.loads(path.read_text())
    return [o.get("data", {}) for c in book["cells"] for o in c.get("outputs", ())]


def check_reopened(page: Any) -> None:
    headers = wait_for(page, PICTURE_HEADERS_JS, lambda v: len(v) >= PICTURES, 60, "pictures shown after reopening")
    assert any("reopen check" in h and "finished" in h for h in headers), headers
    body = page.locator(".jp-Notebook").inner_text()
    for text in BROKEN:
        assert text not in body, f"{text!r} shown after reopening"
    assert page.locator(".jp-Notebook .bqplot").count() == 0  # pictures, no widget views


def test_a_saved_notebook_reopens_as_its_pictures(browser: Any, tmp_path: Path) -> None:  # noqa: F811
    book = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    book.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    # Run and save in one server.
    with server(tmp_path) as lab:
        nbformat.write(book, lab.root / NAME)
        context = browser.new_context(viewport={"width": 1280, "height": 1000})
        page = context.new_page()
        try:
            open_notebook(page, lab.base_url, lab.token, NAME)
            page.locator(".jp-Notebook .jp-CodeCell").first.click()
            page.locator(".lm-MenuBar-itemLabel").get_by_text("Run", exact=True).click()
            page.locator(".lm-Menu-itemLabel").get_by_text("Run All Cells", exact=True).click()
            # While the loop runs, the output is the live widget: its bqplot lines are drawn.
            wait_for(page, DRAWN_LINES_JS, lambda n: n >= 2, 60, "live chart lines while the loop runs")
            wait_for(page, PROMPTS_JS, lambda s: s["cells"] and s["done"] == s["cells"] and not s["running"],
                     120, "every cell ran")
            errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.error']")
            assert errors.count() == 0, errors.first.inner_text()
            # Stopped: the same outputs are pictures now, in the live session too.
            wait_for(page, PICTURE_HEADERS_JS, lambda v: len(v) >= PICTURES, 30, "pictures in the live session")
            page.locator(".jp-Notebook .jp-CodeCell").first.click()
            page.keyboard.press("Control+s")
            deadline = time.monotonic() + 30
            while sum("image/png" in d for d in saved_outputs(lab.root / NAME)) < PICTURES:
                assert time.monotonic() < deadline, f"not saved with its pictures: {saved_outputs(lab.root / NAME)}"
                time.sleep(0.3)
        finally:
            context.close()
    data = saved_outputs(tmp_path / "root" / NAME)
    assert not [d for d in data if "application/vnd.jupyter.widget-view+json" in d]

    # A new server on the same files: JupyterLab, light and dark.
    with server(tmp_path) as lab:
        context = browser.new_context(viewport={"width": 1280, "height": 1000})
        page = context.new_page()
        try:
            open_notebook(page, lab.base_url, lab.token, NAME)
            for theme in ("light", "dark"):
                switch_theme(page, f"JupyterLab {theme.title()}")
                check_reopened(page)
                SCREENSHOTS.mkdir(parents=True, exist_ok=True)
                page.locator(".jp-Notebook").screenshot(path=str(SCREENSHOTS / f"reopen-{theme}.png"))
        finally:
            context.close()

    # And in Notebook 7.
    with server(tmp_path, app="notebook") as nb7:
        context = browser.new_context(viewport={"width": 1280, "height": 1000})
        page = context.new_page()
        try:
            page.goto(f"{nb7.base_url}/notebooks/{NAME}?token={nb7.token}", timeout=60_000)
            page.locator(".jp-Notebook .jp-CodeCell").first.wait_for(timeout=60_000)
            check_reopened(page)
            page.locator(".jp-Notebook").screenshot(path=str(SCREENSHOTS / "reopen-notebook7.png"))
        finally:
            context.close()
