"""The labextension loads in a real JupyterLab page.

Starts `jupyter lab` from the test venv on a free port with a token, opens it in the
Debian chromium through Playwright (never a browser downloaded by `playwright install`)
and waits for the plugin's activation message and for its settings (schema default) to
load. The server is always killed, with its process group.
"""
from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
# Headless in a container, no network beyond localhost (see shared RECIPES).
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
BIN = Path(sys.executable).parent
ACTIVATED = "gpu-widgets extension activated"
SETTINGS_LOADED = "gpu-widgets: refresh interval 1000 ms"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _log_tail(path: Path, n: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return "(no server log)"


def _report(what: str, console: list[str], log_path: Path) -> str:
    return (
        f"{what}; browser console was:\n"
        + "\n".join(console[-60:])
        + f"\n--- server log ---\n{_log_tail(log_path)}"
    )


@pytest.fixture
def chromium() -> str:
    if not Path(CHROMIUM).is_file():
        pytest.skip(
            f"chromium not found at {CHROMIUM}: install it with "
            "`apt-get update && apt-get install -y chromium` (make test does this as root)"
        )
    return CHROMIUM


@pytest.fixture
def lab_server(tmp_path):
    """Yield (base_url, token, log_path) of a running JupyterLab; kill it afterwards."""
    port = _free_port()
    token = secrets.token_hex(16)
    root = tmp_path / "root"
    root.mkdir()
    log_path = tmp_path / "jupyter-lab.log"
    cmd = [
        str(BIN / "jupyter"),
        "lab",
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        "--ServerApp.port_retries=0",  # fail rather than silently move to another port
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        f"--LabApp.workspaces_dir={tmp_path / 'workspaces'}",
    ]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    env = dict(
        os.environ,
        # No NVIDIA driver needed for a front-end check.
        GPU_WIDGETS_BACKEND="simulated",
        # Keep the user's own config, settings and runtime files out of the test.
        JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
        JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "settings"),
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
    )
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"jupyter lab exited {proc.returncode}:\n{_log_tail(log_path)}")
            try:
                req = urllib.request.Request(
                    f"{base_url}/api/status", headers={"Authorization": f"token {token}"}
                )
                with urllib.request.urlopen(req, timeout=5) as resp:
                    if resp.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"jupyter lab did not answer in 60 s:\n{_log_tail(log_path)}")
            time.sleep(0.5)
        yield base_url, token, log_path
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=15)


def test_labextension_activates_in_jupyterlab(chromium, lab_server):
    sync_api = pytest.importorskip("playwright.sync_api")
    base_url, token, log_path = lab_server
    seen: list[str] = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page()
            page.on("console", lambda msg: seen.append(f"[{msg.type}] {msg.text}"))
            try:
                with page.expect_console_message(
                    lambda msg: msg.text == ACTIVATED, timeout=60_000
                ):
                    page.goto(f"{base_url}/lab?reset&token={token}", timeout=60_000)
            except sync_api.TimeoutError:
                pytest.fail(_report(f"no {ACTIVATED!r} in 60 s", seen, log_path))
            # The settings schema shipped with the labextension is found and its default
            # applied (the plugin logs it at debug level once the settings load).
            deadline = time.monotonic() + 30
            while not any(SETTINGS_LOADED in s for s in seen):
                if time.monotonic() > deadline:
                    pytest.fail(_report(f"no {SETTINGS_LOADED!r} in 30 s", seen, log_path))
                page.wait_for_timeout(250)  # lets Playwright deliver console events
        finally:
            browser.close()
    errors = [s for s in seen if s.startswith("[error]") and "gpu-widgets" in s]
    assert not errors, errors
