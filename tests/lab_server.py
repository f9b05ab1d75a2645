"""Start a real JupyterLab for browser tests and screenshots, and drive the Debian chromium.

``LabServer`` runs ``jupyter lab`` from this venv as a subprocess on a free port with a
token, in its own process group, with throw-away config, settings, workspaces and runtime
directories (so neither the developer's settings nor an old workspace leak in), and kills
the whole group when done. ``launch_chromium`` starts the system chromium through
Playwright (never a browser downloaded by ``playwright install``).

Used by tests/test_labextension_activates.py, tests/test_sidebar_browser.py and
scripts/screenshots.py.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
# Headless in a container, no network beyond localhost (see the shared RECIPES).
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

# Variables that choose what the server extension reads: a test sets them itself.
_BACKEND_VARS = (
    "GPU_WIDGETS_BACKEND",
    "GPU_WIDGETS_SIMULATED_GPUS",
    "GPU_WIDGETS_SIMULATED_FAULTS",
    "GPU_WIDGETS_SIMULATED_SEED",
    "FAKE_NVML_CONFIG",
    "CUDA_VISIBLE_DEVICES",
)

# No news pop-up and no update check: nothing covers the page in screenshots.
QUIET_SETTINGS: dict[str, dict[str, Any]] = {
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def chromium_available() -> bool:
    return Path(CHROMIUM).is_file()


def write_user_settings(settings_dir: Path, settings: Mapping[str, Mapping[str, Any]]) -> None:
    """Write JupyterLab user settings: ``{"pkg:plugin": {...}}`` -> ``pkg/plugin.jupyterlab-settings``."""
    for plugin_id, values in settings.items():
        package, _, plugin = plugin_id.partition(":")
        path = settings_dir / package / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values, indent=2))


# Where each app keeps its workspaces (a plain jupyter server has none).
WORKSPACE_OPTION = {"lab": "LabApp", "notebook": "JupyterNotebookApp", "server": None}


class LabServer:
    """A running ``jupyter lab`` (or ``jupyter notebook``: Notebook 7); use as a context manager
    (or call start/stop)."""

    def __init__(
        self,
        workdir: Path | None = None,
        env: Mapping[str, str] | None = None,
        args: Sequence[str] = (),
        settings: Mapping[str, Mapping[str, Any]] | None = None,
        startup_timeout_s: float = 90,
        app: str = "lab",
        command_prefix: Sequence[str] = (),
    ) -> None:
        if app not in WORKSPACE_OPTION:
            raise ValueError(f"app must be 'lab' (JupyterLab), 'notebook' (Notebook 7) or 'server' (a plain "
                             f"jupyter server), got {app!r}")
        self.app = app
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="gw-lab-"))
        self.root = self.workdir / "root"
        self.settings_dir = self.workdir / "settings"
        self.log_path = self.workdir / "jupyter-lab.log"
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.extra_env = dict(env or {})
        self.extra_args = list(args)
        self.settings = {**QUIET_SETTINGS, **(settings or {})}
        self.startup_timeout_s = startup_timeout_s
        # Run under another command, e.g. ``unshare --user --map-user=4242``; one that execs the rest
        # keeps proc.pid the server's own pid.
        self.command_prefix = list(command_prefix)
        self.proc: subprocess.Popen[bytes] | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> LabServer:
        self.root.mkdir(parents=True, exist_ok=True)
        write_user_settings(self.settings_dir, self.settings)
        cmd = [
            *self.command_prefix,
            str(BIN / "jupyter"),
            self.app,
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={self.port}",
            "--ServerApp.port_retries=0",  # fail rather than silently move to another port
            f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={self.root}",
            *([f"--{WORKSPACE_OPTION[self.app]}.workspaces_dir={self.workdir / 'workspaces'}"]
              if WORKSPACE_OPTION[self.app] else []),
            *self.extra_args,
        ]
        if os.geteuid() == 0:
            cmd.append("--allow-root")
        env = {k: v for k, v in os.environ.items() if k not in _BACKEND_VARS}
        env.update(
            # Keep the user's own config, settings and runtime files out.
            JUPYTER_CONFIG_DIR=str(self.workdir / "config"),
            JUPYTERLAB_SETTINGS_DIR=str(self.settings_dir),
            JUPYTER_RUNTIME_DIR=str(self.workdir / "runtime"),
        )
        env.update(self.extra_env)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                cmd, cwd=self.root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter {self.app} exited {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if self.get_json("api/status") is not None:
                    return
            except (urllib.error.URLError, OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"jupyter {self.app} did not answer in {self.startup_timeout_s} s:\n{self.log_tail()}")
            time.sleep(0.3)

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=15)
            except ProcessLookupError:
                pass
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> LabServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- helpers -----------------------------------------------------------------------------
    @property
    def headers(self) -> dict[str, str]:
        """What an authenticated client sends."""
        return {"Authorization": f"token {self.token}"}

    def lab_url(self) -> str:
        """The JupyterLab page, with a fresh workspace and the token."""
        return f"{self.base_url}/lab?reset&token={self.token}"

    def get_json(self, path: str, **query: Any) -> Any:
        """GET ``{base_url}/{path}`` with the token; the parsed JSON (raises HTTPError on errors)."""
        url = f"{self.base_url}/{path.lstrip('/')}"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        req = urllib.request.Request(url, headers=self.headers)
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read().decode())

    def request_json(self, method: str, path: str, body: Any = None) -> Any:
        """POST/DELETE/... ``{base_url}/{path}`` with the token and a JSON body; the parsed answer."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            f"{self.base_url}/{path.lstrip('/')}",
            data=data,
            method=method,
            headers={**self.headers, "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=60) as resp:
            text = resp.read().decode()
            return json.loads(text) if text else None

    def api(self, endpoint: str, **query: Any) -> Any:
        """GET the gpu-widgets API: ``api("samples", since=...)``."""
        return self.get_json(f"gpu-widgets/api/v1/{endpoint}", **query)

    def start_notebook_kernel(self, name: str, timeout_s: float = 60) -> tuple[dict[str, Any], int]:
        """Create an empty notebook ``name`` and a session (a python3 kernel) on it, as JupyterLab
        would; the session (its ``id``, its ``kernel``'s ``id``) and, once it is up, the kernel's pid."""
        import psutil  # only the tests that start kernels need it

        (self.root / name).write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
        session = self.request_json("POST", "api/sessions", {
            "path": name, "type": "notebook", "name": name, "kernel": {"name": "python3"}})
        kernel_id = session["kernel"]["id"]
        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for child in psutil.Process(self.proc.pid).children(recursive=True):
                try:
                    if any(kernel_id in part for part in child.cmdline()):
                        return session, child.pid
                except psutil.Error:
                    continue  # a child that ended or hides its command line
            time.sleep(0.3)
        raise AssertionError(f"no process for kernel {kernel_id} after {timeout_s} s")

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return "(no server log)"


def simulated_lab(workdir: Path, gpus: int, faults: str, interval_s: float = 0.5) -> LabServer:
    """A LabServer (not started) with ``gpus`` simulated GPUs sampled every ``interval_s``, going
    through the scripted ``faults`` (GPU_WIDGETS_SIMULATED_FAULTS)."""
    env = {"GPU_WIDGETS_BACKEND": "simulated", "GPU_WIDGETS_SIMULATED_GPUS": str(gpus),
           "GPU_WIDGETS_SIMULATED_FAULTS": faults}
    return LabServer(workdir, env=env, args=[f"--GpuWidgets.interval_s={interval_s}"])


def fake_nvml_lab(workdir: Path, driver: Any, interval_s: float = 0.2) -> LabServer:
    """A LabServer (not started) on the fake NVML of ``driver`` (conftest's fake_driver), fast
    and slow fields both read every ``interval_s`` (process rows come quickly)."""
    from .fake_nvml import fake_nvml_env

    env = {**fake_nvml_env(driver.lib_dir, driver.config_path), "GPU_WIDGETS_BACKEND": "nvml"}
    return LabServer(workdir, env=env, args=[f"--GpuWidgets.interval_s={interval_s}",
                                             f"--GpuWidgets.slow_interval_s={interval_s}"])


def launch_chromium(playwright: Any) -> Any:
    """The Debian chromium, headless, through Playwright's sync API."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
