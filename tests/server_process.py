"""A real Jupyter server in a subprocess, for tests that need one outside pytest's event loop
(fuzzing with a blocking HTTP client, fault injection through a fake driver's environment)."""
from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class JupyterServerProcess:
    """``jupyter server`` with gpu-widgets, a token and its own directories; a context manager."""

    def __init__(self, tmp: Path, env: dict[str, str] | None = None, args: tuple[str, ...] = ()) -> None:
        self.tmp = tmp
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}/"
        self.env = {**os.environ, **(env or {}), "JUPYTER_RUNTIME_DIR": str(tmp / "runtime")}
        self.args = args
        self.proc: subprocess.Popen | None = None
        self.log_path = tmp / "server.log"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"token {self.token}"}

    def __enter__(self) -> "JupyterServerProcess":
        root = self.tmp / "root"
        root.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable, "-m", "jupyter_server", "--no-browser", f"--port={self.port}", "--ip=127.0.0.1",
            "--ServerApp.port_retries=0", f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={root}",
            "--ServerApp.jpserver_extensions={'gpu_widgets': True}", *self.args,
        ]
        if os.geteuid() == 0:
            cmd.append("--allow-root")
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, env=self.env, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter server exited: {self.log_path.read_text()[-3000:]}")
            try:
                self.get("gpu-widgets/api/v1/status")
                return self
            except OSError:
                if time.monotonic() > deadline:
                    self.__exit__()
                    raise RuntimeError(f"jupyter server did not start: {self.log_path.read_text()[-3000:]}")
                time.sleep(0.2)

    def get(self, path: str, timeout: float = 10) -> bytes:
        request = urllib.request.Request(self.url + path, headers=self.headers)
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.read()

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._log.close()
