"""A real Prometheus for tests and benchmarks, the Jupyter servers it scrapes, and a synthetic target.

    from tests.prometheus_fixture import Prometheus, gpu_host, jupyter_scrape_config, require_prometheus

    require_prometheus()                          # skip here, fail in CI (CI=true), when the binary is missing
    prom = Prometheus()                           # port chosen now, so its URL is known before it starts
    a = gpu_host("node-a", gpus=2, seed=1, prometheus_url=prom.url)  # a LabServer, not started yet
    prom.add(jupyter_scrape_config("node-a", a))  # scraped with a's token, every second
    with a, prom:                                 # start both; stop both at the end
        prom.wait_for_series('DCGM_FI_DEV_GPU_UTIL{Hostname="node-a"}', count=2)
        a.api("cluster")                          # a's Cluster view, read back from prom

``Prometheus`` runs Debian's ``/usr/bin/prometheus`` (``PROMETHEUS=`` to use another) with a
throw-away config and TSDB directory; ``stop()`` / ``start()`` again keep the same port and data,
as a Prometheus that was restarted. ``SyntheticTarget`` serves dcgm-exporter's metric names for
many made-up hosts (the scale benchmark's 500 x 8 GPUs) from one HTTP endpoint.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from .lab_server import LabServer, free_port

PROMETHEUS = os.environ.get("PROMETHEUS", "/usr/bin/prometheus")
INSTALL_HINT = "run `bash scripts/ensure-prometheus.sh` (apt package `prometheus`), or set PROMETHEUS=/path/to/prometheus"
SCRAPE_INTERVAL_S = 1.0
METRICS_PATH = "/gpu-widgets/metrics"


def prometheus_available() -> bool:
    return Path(PROMETHEUS).is_file() and os.access(PROMETHEUS, os.X_OK)


def require_prometheus() -> None:
    """Skip the calling test without the binary; in CI (CI=true) fail instead: there it must exist."""
    import pytest

    if prometheus_available():
        return
    message = f"the prometheus binary is missing ({PROMETHEUS}): {INSTALL_HINT}"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(message)
    pytest.skip(message)


def jupyter_scrape_config(job: str, server: LabServer, interval_s: float = SCRAPE_INTERVAL_S) -> dict[str, Any]:
    """How Prometheus scrapes one Jupyter server's export: with its token, as docs/scale.md says."""
    return {
        "job_name": job,
        "scrape_interval": f"{interval_s:g}s",
        "scrape_timeout": f"{interval_s:g}s",
        "metrics_path": METRICS_PATH,
        "authorization": {"type": "token", "credentials": server.token},
        "static_configs": [{"targets": [f"127.0.0.1:{server.port}"]}],
    }


def static_scrape_config(job: str, port: int, interval_s: float = SCRAPE_INTERVAL_S,
                         path: str = "/metrics") -> dict[str, Any]:
    timeout = min(interval_s, 10.0)
    return {"job_name": job, "scrape_interval": f"{interval_s:g}s", "scrape_timeout": f"{timeout:g}s",
            "metrics_path": path, "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}


def gpu_host(hostname: str, gpus: int = 2, seed: int = 0, prometheus_url: str = "", app: str = "lab",
             args: Sequence[str] = (), env: Mapping[str, str] | None = None, **lab_kwargs: Any) -> LabServer:
    """A ``jupyter lab`` (or ``notebook``), not started yet (its port and token are already chosen),
    with ``gpus`` simulated GPUs labelled ``hostname`` (different seeds: different UUIDs and
    readings); ``prometheus_url`` turns its Cluster view on, refreshed every second."""
    extra = [f"--GpuWidgets.hostname={hostname}", "--GpuWidgets.interval_s=0.5"]
    if prometheus_url:
        extra += [f"--GpuWidgets.prometheus_url={prometheus_url}", "--GpuWidgets.cluster_refresh_s=1"]
    environment = {"GPU_WIDGETS_BACKEND": "simulated", "GPU_WIDGETS_SIMULATED_GPUS": str(gpus),
                   "GPU_WIDGETS_SIMULATED_SEED": str(seed), **(env or {})}
    return LabServer(env=environment, args=[*extra, *args], app=app, **lab_kwargs)


def start_gpu_host(hostname: str, **kwargs: Any) -> LabServer:
    """``gpu_host(...)``, started. Stop it with ``.stop()``."""
    return gpu_host(hostname, **kwargs).start()


class Prometheus:
    """Debian's prometheus on 127.0.0.1, scraping ``scrape_configs``; a context manager."""

    def __init__(self, scrape_configs: Iterable[Mapping[str, Any]] = (), startup_timeout_s: float = 60,
                 port: int | None = None) -> None:
        self.scrape_configs = [dict(c) for c in scrape_configs]
        self.workdir = Path(tempfile.mkdtemp(prefix="gw-prom-"))
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = self.workdir / "prometheus.log"
        self.startup_timeout_s = startup_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None

    def add(self, scrape_config: Mapping[str, Any]) -> None:
        """Add a scrape config (before start())."""
        self.scrape_configs.append(dict(scrape_config))

    def start(self) -> Prometheus:
        config = self.workdir / "prometheus.yml"
        # YAML is a superset of JSON: no YAML writer needed.
        config.write_text(json.dumps({"global": {"scrape_interval": f"{SCRAPE_INTERVAL_S:g}s"},
                                      "scrape_configs": self.scrape_configs}, indent=1))
        cmd = [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={self.workdir / 'data'}",
               f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, cwd=self.workdir, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"prometheus was not ready in {self.startup_timeout_s} s:\n{self.log_tail()}")
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop the process (the data stays: start() again resumes it on the same port)."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def __enter__(self) -> Prometheus:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def log_tail(self, n: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return "(no prometheus log)"

    def api(self, path: str, **params: Any) -> Any:
        url = f"{self.url}/api/v1/{path}" + ("?" + urllib.parse.urlencode(params) if params else "")
        with urllib.request.urlopen(url, timeout=10) as resp:
            answer = json.loads(resp.read())
        assert answer["status"] == "success", answer
        return answer["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query's vector."""
        return self.api("query", query=promql)["result"]

    def wait_for_series(self, promql: str, count: int = 1, timeout_s: float = 60) -> list[dict[str, Any]]:
        """Wait until ``promql`` returns at least ``count`` samples (Prometheus applies a new config
        a few seconds after it starts: the first scrape comes ~5 s late)."""
        deadline = time.monotonic() + timeout_s
        while True:
            result = self.query(promql)
            if len(result) >= count:
                return result
            if time.monotonic() > deadline:
                targets = self.api("targets")["activeTargets"]
                health = [(t["scrapeUrl"], t["health"], t["lastError"]) for t in targets]
                raise AssertionError(f"{promql} gave {len(result)} samples, wanted {count}; targets: {health}")
            time.sleep(0.25)


# -- a synthetic target: many made-up hosts behind one endpoint ---------------------------------------
def synthetic_value(host: int, gpu: int, t: float) -> dict[str, float]:
    """Plausible, deterministic readings of GPU ``gpu`` of host ``host`` at time ``t``: a third of the
    hosts idle (free), the others busy at loads that drift slowly."""
    if host % 3 == 0:
        util, used_mib = 0.0, 1024.0
    else:
        util = 55.0 + 40.0 * math.sin(t / 60.0 + host * 0.7 + gpu)
        used_mib = 20_000.0 + 400.0 * ((host * 8 + gpu) % 100)
    return {"DCGM_FI_DEV_GPU_UTIL": round(util), "DCGM_FI_DEV_MEM_COPY_UTIL": round(util / 2),
            "DCGM_FI_DEV_FB_USED": used_mib, "DCGM_FI_DEV_FB_FREE": 81_559.0 - used_mib,
            "DCGM_FI_DEV_GPU_TEMP": 35.0 + util * 0.4, "DCGM_FI_DEV_POWER_USAGE": 70.0 + util * 6.3,
            "DCGM_FI_DEV_SM_CLOCK": 1980.0, "DCGM_FI_DEV_MEM_CLOCK": 2619.0,
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 1e9 + t * 1000 * (70.0 + util * 6.3)}


def synthetic_hostname(host: int) -> str:
    return f"node-{host:03d}"


class _ScrapeTarget:
    """An HTTP endpoint on loopback that answers every GET with ``body()`` as Prometheus's text format."""

    content_type = "text/plain; version=0.0.4; charset=utf-8"

    def __init__(self) -> None:
        self.port = free_port()
        self._server: ThreadingHTTPServer | None = None
        self.scrapes = 0

    def body(self) -> bytes:
        raise NotImplementedError

    def start(self):  # -> the target itself
        target = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                body = target.body()
                target.scrapes += 1
                self.send_response(200)
                self.send_header("Content-Type", target.content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, name=type(self).__name__, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class SyntheticTarget(_ScrapeTarget):
    """An HTTP endpoint exposing dcgm-exporter's names for ``hosts`` x ``gpus`` made-up GPUs (written
    with prometheus-client), each GPU labelled like dcgm-exporter's (gpu, UUID, pci_bus_id, device,
    modelName, Hostname). ``hosts_down`` hides some hosts, as if their exporter had stopped."""

    def __init__(self, hosts: int, gpus: int = 8) -> None:
        super().__init__()
        self.hosts, self.gpus = hosts, gpus
        self.hosts_down: set[int] = set()

    def exposition(self, t: float | None = None) -> bytes:
        from prometheus_client import CollectorRegistry, generate_latest
        from prometheus_client.core import GaugeMetricFamily

        t = time.time() if t is None else t
        labels = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"]
        names = list(synthetic_value(0, 0, t))
        families = {n: GaugeMetricFamily(n, f"{n} (synthetic)", labels=labels) for n in names}
        for h in range(self.hosts):
            if h in self.hosts_down:
                continue
            for g in range(self.gpus):
                ids = [str(g), f"GPU-{h:08x}-0000-4000-8000-{g:012x}", f"00000000:{0x18 + g:02X}:00.0", f"nvidia{g}",
                       "NVIDIA H100 80GB HBM3", synthetic_hostname(h)]
                for name, value in synthetic_value(h, g, t).items():
                    families[name].add_metric(ids, value)

        class _Collector:
            def collect(self) -> Any:
                return families.values()

        registry = CollectorRegistry()
        registry.register(_Collector())  # type: ignore[arg-type]
        return generate_latest(registry)

    content_type = "text/plain; version=0.0.4"

    def body(self) -> bytes:
        return self.exposition()


# -- a target that serves whatever exposition text a test writes --------------------------------------
def exposition_line(metric: str, labels: Mapping[str, str], value: float) -> str:
    """One sample in Prometheus's text format: label values escaped as the format says (\\\\, \\", \\n)."""
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    inner = ",".join(f'{k}="{esc(v)}"' for k, v in labels.items())
    return f"{metric}{{{inner}}} {value!r}"


class TextTarget(_ScrapeTarget):
    """An HTTP endpoint exposing ``lines`` (replace them at any time: the next scrape sees them)."""

    def __init__(self, lines: Iterable[str] = ()) -> None:
        super().__init__()
        self.lines = list(lines)

    def body(self) -> bytes:
        return ("\n".join(self.lines) + "\n").encode()
