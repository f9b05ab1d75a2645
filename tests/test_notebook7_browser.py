"""The widgets in Notebook 7 (`jupyter notebook`), not only in JupyterLab: the quick-start example
runs there in a real browser and shows its charts (finished widgets as their pictures), and the
sidebar's plugin does not break the page (Notebook 7 loads the same prebuilt labextensions)."""
from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .browser_fixtures import PICTURES_JS, PROMPTS_JS
from .browser_fixtures import browser, jp_asyncio_loop, jp_server_cleanup  # noqa: F401 (fixtures)
from .lab_server import LabServer

pytestmark = [pytest.mark.browser, pytest.mark.slow]

pytest.importorskip("playwright.sync_api")
pytest.importorskip("notebook", reason="Notebook 7 is part of the test extra: pip install -e '.[test]'")

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
SCREENSHOTS = ROOT / "build" / "screenshots"


@pytest.fixture(scope="module")
def notebook7(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    workdir = tmp_path_factory.mktemp("notebook7")
    env = {"GPU_WIDGETS_BACKEND": "simulated", "GPU_WIDGETS_RUN_DIR": str(workdir / "runs")}
    with LabServer(workdir, env=env, app="notebook") as server:
        shutil.copy(EXAMPLES / "quickstart.ipynb", server.root / "quickstart.ipynb")
        yield server


def test_quickstart_runs_in_notebook_7_and_draws_its_charts(browser: Any, notebook7: LabServer) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    page = context.new_page()
    console: list[str] = []
    page.on("console", lambda msg: console.append(f"[{msg.type}] {msg.text}"))
    try:
        page.goto(f"{notebook7.base_url}/notebooks/quickstart.ipynb?token={notebook7.token}", timeout=60_000)
        page.locator(".jp-Notebook .jp-CodeCell").first.wait_for(timeout=60_000)
        assert page.locator(".jp-NotebookKernelStatus, .jp-Notebook").first.is_visible()
        page.locator(".jp-Notebook .jp-CodeCell").first.click()
        page.locator(".lm-MenuBar-itemLabel").get_by_text("Run", exact=True).click()
        page.locator(".lm-Menu-itemLabel").get_by_text("Run All Cells", exact=True).click()

        deadline = time.monotonic() + 180
        state = page.evaluate(PROMPTS_JS)
        while time.monotonic() < deadline:
            state = page.evaluate(PROMPTS_JS)
            if state["cells"] and state["done"] == state["cells"] and not state["running"]:
                break
            time.sleep(0.5)
        assert state["cells"] and state["done"] == state["cells"], f"not every cell ran: {state}"

        errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.error']")
        assert errors.count() == 0, errors.first.inner_text()
        deadline = time.monotonic() + 30
        while page.evaluate(PICTURES_JS) < 3 and time.monotonic() < deadline:
            time.sleep(0.5)
        # The finished monitor, the loaded run and the stopped dashboard: each its picture
        assert page.evaluate(PICTURES_JS) >= 3
        body = page.locator(".jp-Notebook").inner_text()
        for text in ("SIMULATED GPUs", "finished", "saved to"):
            assert text in body, f"{text!r} not shown in Notebook 7"
        widget_errors = [c for c in console if c.startswith("[error]") and ("widget" in c.lower() or "bqplot" in c)]
        assert not widget_errors, widget_errors
        plugin_errors = [c for c in console if c.startswith("[error]") and "gpu-widgets" in c]
        assert not plugin_errors, plugin_errors
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        widget = page.locator(".jp-OutputArea-output .gpuw-static").first
        widget.scroll_into_view_if_needed()
        widget.screenshot(path=str(SCREENSHOTS / "notebook7-quickstart.png"))
    finally:
        context.close()
