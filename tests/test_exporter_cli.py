"""`gpu-widgets exporter` as a real process: scraped over HTTP, stopped by signals, refusing bad arguments."""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import psutil
import pytest
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

from .conftest import run_cli

pytestmark = pytest.mark.integration  # every test here starts a process

STOP_DEADLINE_S = 20  # wide: a loaded CI machine; a clean stop takes well under a second
BANNER = re.compile(r"serving http://127\.0\.0\.1:(\d+)/metrics")


def simulated_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "GPU_WIDGETS_BACKEND": "simulated", **extra}


class Exporter:
    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gpu_widgets.cli", "exporter", "--host", "127.0.0.1", "--port", "0", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=simulated_env())
        line = self.proc.stdout.readline()  # the banner comes once it listens
        match = BANNER.search(line)
        assert match, f"no banner: {line!r} {self.proc.stderr.read() if self.proc.poll() is not None else ''}"
        self.banner = line
        self.url = f"http://127.0.0.1:{match.group(1)}"

    def get(self, path: str) -> tuple[int, str, str]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=30) as r:
                return r.status, r.headers["Content-Type"], r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers["Content-Type"], exc.read().decode()

    def families(self) -> dict:
        status, kind, text = self.get("/metrics")
        assert (status, kind) == (200, CONTENT_TYPE_LATEST)
        return {f.name: f for f in text_string_to_metric_families(text)}

    def stop(self, sig: int = signal.SIGTERM) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(timeout=STOP_DEADLINE_S)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def exporter():
    started = []

    def start(*args: str) -> Exporter:
        started.append(Exporter(*args))
        return started[-1]

    yield start
    for e in started:
        e.kill()


def _another_users_process(fam: dict) -> bool:
    procs = fam.get("gpu_widgets_process_gpu_memory_bytes")
    return procs is not None and any(s.labels["user"] == "" for s in procs.samples)


def test_it_serves_the_simulated_gpus_in_dcgm_names_and_stops_on_sigterm(exporter):
    e = exporter("--hostname", "node-17", "--interval-s", "0.2")
    assert "SIMULATED" in e.banner
    # The simulated colleague's job runs only while GPU 1 is busy (the cycle idles up to 23 s): wait for it.
    deadline = time.monotonic() + 40
    while not _another_users_process(fam := e.families()):
        assert time.monotonic() < deadline, "no process of another user exported"
        time.sleep(0.2)
    util = fam["DCGM_FI_DEV_GPU_UTIL"].samples
    assert [s.labels["gpu"] for s in util] == ["0", "1"]
    assert {s.labels["Hostname"] for s in util} == {"node-17"}
    assert {s.labels["device"] for s in util} == {"nvidia0", "nvidia1"}
    assert fam["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].type == "counter"
    info = fam["gpu_widgets_info"].samples[0].labels
    assert (info["backend"], info["simulated"]) == ("simulated", "true")
    assert fam["gpu_widgets_up"].samples[0].value == 1
    # Another user's process: counted, not named (the API's privacy rule).
    users = {s.labels["user"] for s in fam["gpu_widgets_process_gpu_memory_bytes"].samples}
    assert "simulated-colleague" not in users and "" in users
    status, kind, page = e.get("/")
    assert status == 200 and kind.startswith("text/html") and 'href="metrics"' in page
    assert e.get("/nothing")[0] == 404
    assert e.stop() == 0
    assert e.proc.stderr.read() == ""


def test_ctrl_c_stops_it_cleanly_too(exporter):
    e = exporter()
    e.families()
    assert e.stop(signal.SIGINT) == 0


@pytest.mark.parametrize("args,env,words", [
    (["--port", "70000"], {}, "expected a port number"),
    (["--port", "http"], {}, "expected a port number"),
    (["--backend", "cuda"], {}, "invalid choice: 'cuda'"),
    (["--interval-s", "0"], {}, "must be at least 0.1 seconds"),
    ([], {"GPU_WIDGETS_BACKEND": "gpu"}, "GPU_WIDGETS_BACKEND='gpu' is not a backend"),
    ([], {"GPU_WIDGETS_BACKEND": "simulated", "GPU_WIDGETS_SIMULATED_GPUS": "999"}, "GPU_WIDGETS_SIMULATED_GPUS=999"),
    (["--host", "no-such-host.invalid", "--backend", "simulated"], {}, "cannot listen on no-such-host.invalid"),
])
def test_bad_arguments_exit_2_with_a_message(args, env, words):
    done = run_cli("exporter", "--port", "0", *args, env={**os.environ, **env}) if "--port" not in args else \
        run_cli("exporter", *args, env={**os.environ, **env})
    assert done.returncode == 2, done
    assert words in done.stderr
    assert done.stdout == ""


def test_a_port_in_use_exits_2_naming_it():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_cli("exporter", "--host", "127.0.0.1", "--port", str(port), env=simulated_env())
    assert done.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr and "in use" in done.stderr


IDLE_CONNECTIONS = 50
IDLE_TIMEOUT_S = 1.0
CLOSE_DEADLINE_S = 20  # wide: the exporter closes them after IDLE_TIMEOUT_S


def test_idle_connections_cost_no_thread_and_are_closed_after_the_timeout(exporter):
    e = exporter("--idle-timeout-s", str(IDLE_TIMEOUT_S))
    e.families()
    port = int(e.url.rsplit(":", 1)[1])
    before = psutil.Process(e.proc.pid).num_threads()
    idle = [socket.create_connection(("127.0.0.1", port), timeout=CLOSE_DEADLINE_S) for _ in range(IDLE_CONNECTIONS)]
    # One sends half a request and stops (slow headers are idle too).
    idle[0].sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
    try:
        # While they are all open a scrape is still answered, and no thread was started for them.
        assert "gpu_widgets_up" in e.families()
        assert psutil.Process(e.proc.pid).num_threads() <= before + 2
        deadline = time.monotonic() + CLOSE_DEADLINE_S
        for sock in idle:
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            assert sock.recv(1) == b"", "an idle connection was answered instead of closed"
        assert time.monotonic() < deadline
    finally:
        for sock in idle:
            sock.close()
    assert e.stop() == 0
    assert e.proc.stderr.read() == ""


def test_a_bad_idle_timeout_exits_2():
    for value in ("0", "-1", "nan", "soon", "7200"):
        done = run_cli("exporter", "--port", "0", "--idle-timeout-s", value, env=simulated_env())
        assert done.returncode == 2 and "--idle-timeout-s" in done.stderr, (value, done.stderr)
