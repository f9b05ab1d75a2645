"""A kernel killed from outside shows in a real JupyterLab (chromium) as one notification naming the
notebook and the signal, in the light and the dark theme (screenshots in build/screenshots/)."""
from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from .browser_fixtures import SIDEBAR_TAB, shoot, switch_theme
from .browser_fixtures import browser, jp_asyncio_loop, jp_server_cleanup, wide_page  # noqa: F401 (fixtures)
from .lab_server import simulated_lab

pytestmark = [pytest.mark.browser, pytest.mark.slow]

sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect
TOAST = ".Toastify__toast"


@pytest.fixture
def page(wide_page: Any) -> Any:
    return wide_page


def test_a_killed_kernel_is_a_notification_saying_why(page: Any, tmp_path: Any) -> None:
    with simulated_lab(tmp_path / "lab", 1, "", interval_s=0.5) as lab:
        page.goto(lab.lab_url(), timeout=60_000)
        page.locator(SIDEBAR_TAB).wait_for(timeout=60_000)
        for theme, name in (("JupyterLab Light", "light"), ("JupyterLab Dark", "dark")):
            switch_theme(page, theme)
            notebook = f"train-{name}.ipynb"
            _, pid = lab.start_notebook_kernel(notebook)
            page.wait_for_timeout(2000)  # the watcher's look at the new kernel (every second)
            os.kill(pid, signal.SIGKILL)
            toast = page.locator(TOAST, has_text=re.compile(re.escape(notebook) + ".*SIGKILL"))
            expect(toast).to_have_count(1, timeout=40_000)
            shoot(toast, f"kernel-died-{name}")
