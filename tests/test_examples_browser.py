"""The example notebooks run in a real JupyterLab (Debian chromium through Playwright) and draw
their bqplot charts: Run All, no error output, and chart lines with data in the page.

Screenshots of each notebook's widgets go to build/screenshots/ (ignored by git); the ones in
docs/screenshots/ are taken the same way by scripts/screenshots.py (light and dark, 2 and 8 GPUs).
"""
from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .browser_fixtures import DRAWN_LINES_JS, PICTURES_JS, open_notebook, run_all_cells
from .browser_fixtures import browser, jp_asyncio_loop, jp_server_cleanup  # noqa: F401 (fixtures)
from .lab_server import LabServer

pytestmark = [pytest.mark.browser, pytest.mark.slow]

sync_api = pytest.importorskip("playwright.sync_api")

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
SCREENSHOTS = ROOT / "build" / "screenshots"

@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    workdir = tmp_path_factory.mktemp("examples-lab")
    env = {"GPU_WIDGETS_BACKEND": "simulated", "GPU_WIDGETS_RUN_DIR": str(workdir / "runs")}
    with LabServer(workdir, env=env) as server:
        for notebook in [*EXAMPLES.glob("*.ipynb"), *EXAMPLES.glob("*.py")]:  # and the scripts they launch
            shutil.copy(notebook, server.root / notebook.name)
        yield server


def run_all(page: Any, lab: LabServer, name: str, timeout_s: float = 120) -> dict[str, int]:
    open_notebook(page, lab.base_url, lab.token, name)
    return run_all_cells(page, name, timeout_s)


def check(page: Any, name: str, min_lines: int, pictures: int, texts: list[str]) -> None:
    errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.error']")
    assert errors.count() == 0, errors.first.inner_text()
    deadline = time.monotonic() + 20
    while page.evaluate(DRAWN_LINES_JS) < min_lines and time.monotonic() < deadline:
        time.sleep(0.5)
    assert page.evaluate(DRAWN_LINES_JS) >= min_lines
    # A finished monitor or a stopped dashboard is its picture now (a saved notebook reopens so).
    while page.evaluate(PICTURES_JS) < pictures and time.monotonic() < deadline:
        time.sleep(0.5)
    assert page.evaluate(PICTURES_JS) >= pictures
    body = page.locator(".jp-Notebook").inner_text()
    for text in texts:
        assert text in body, f"{name}: {text!r} not shown"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    widget = page.locator(".jp-OutputArea-output .widget-vbox, .jp-OutputArea-output .gpuw-static").first
    widget.scroll_into_view_if_needed()
    widget.screenshot(path=str(SCREENSHOTS / f"example-{Path(name).stem}.png"))


@pytest.mark.parametrize(
    ("name", "min_lines", "pictures", "texts"),
    [
        # Pictures of the finished monitor, the loaded run and the stopped dashboard (live lines:
        # tests/test_reopen_browser.py)
        ("quickstart.ipynb", 0, 3, ["SIMULATED GPUs", "finished", "saved to"]),
        ("train_torch.ipynb", 0, 1, ["SIMULATED GPUs", "epoch 40/40", "validation accuracy after the last epoch"]),
        # the %%gpuwatch cell's charts and the stopped %gpuwatch dashboard
        ("gpuwatch_magic.ipynb", 0, 2, ["SIMULATED GPUs", "%%gpuwatch: cell ran", "live dashboard stopped"]),
        # the launch's status line over the followed launch's live charts (2 CPU ranks)
        ("distributed.ipynb", 1, 0, ["torchrun: finished", "world size 2", "Show output"]),
    ],
)
def test_example_runs_in_jupyterlab_and_draws_its_charts(browser: Any, lab: LabServer, name: str,
                                                        min_lines: int, pictures: int, texts: list[str]) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    page = context.new_page()
    console: list[str] = []
    page.on("console", lambda msg: console.append(f"[{msg.type}] {msg.text}"))
    try:
        run_all(page, lab, name)
        check(page, name, min_lines, pictures, texts)
        widget_errors = [c for c in console if c.startswith("[error]") and ("widget" in c.lower() or "bqplot" in c)]
        assert not widget_errors, widget_errors
    finally:
        context.close()
