"""The labextension loads in a real JupyterLab page.

Starts `jupyter lab` from the test venv on a free port with a token (tests/lab_server.py),
opens it in the Debian chromium through Playwright (never a browser downloaded by
`playwright install`) and waits for the plugin's activation message and for its settings
(schema default) to load. The server is always killed, with its process group.
"""
from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from .lab_server import CHROMIUM, LabServer, chromium_available, launch_chromium

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ACTIVATED = "gpu-widgets extension activated"
SETTINGS_LOADED = "gpu-widgets: refresh interval 1000 ms"


def _report(what: str, console: list[str], lab: LabServer) -> str:
    return (
        f"{what}; browser console was:\n"
        + "\n".join(console[-60:])
        + f"\n--- server log ---\n{lab.log_tail()}"
    )


@pytest.fixture
def chromium() -> str:
    if not chromium_available():
        pytest.skip(
            f"chromium not found at {CHROMIUM}: install it with "
            "`apt-get update && apt-get install -y chromium` (make test does this as root)"
        )
    return CHROMIUM


@pytest.fixture
def lab_server(tmp_path) -> Iterator[LabServer]:
    # No NVIDIA driver needed for a front-end check.
    with LabServer(tmp_path, env={"GPU_WIDGETS_BACKEND": "simulated"}) as lab:
        yield lab


def test_labextension_activates_in_jupyterlab(chromium, lab_server):
    sync_api = pytest.importorskip("playwright.sync_api")
    lab = lab_server
    seen: list[str] = []
    with sync_api.sync_playwright() as pw:
        browser = launch_chromium(pw)
        try:
            page = browser.new_page()
            page.on("console", lambda msg: seen.append(f"[{msg.type}] {msg.text}"))
            try:
                with page.expect_console_message(
                    lambda msg: msg.text == ACTIVATED, timeout=60_000
                ):
                    page.goto(lab.lab_url(), timeout=60_000)
            except sync_api.TimeoutError:
                pytest.fail(_report(f"no {ACTIVATED!r} in 60 s", seen, lab))
            # The settings schema shipped with the labextension is found and its default
            # applied (the plugin logs it at debug level once the settings load).
            deadline = time.monotonic() + 30
            while not any(SETTINGS_LOADED in s for s in seen):
                if time.monotonic() > deadline:
                    pytest.fail(_report(f"no {SETTINGS_LOADED!r} in 30 s", seen, lab))
                page.wait_for_timeout(250)  # lets Playwright deliver console events
        finally:
            browser.close()
    errors = [s for s in seen if s.startswith("[error]") and "gpu-widgets" in s]
    assert not errors, errors
