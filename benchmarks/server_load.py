"""2. Server: a real ``jupyter server`` with gpu-widgets on the fake NVML whose PCIe call blocks
20 ms (as the real driver does), polled by 1, 10 and 100 clients on loopback like the sidebar
(once a second: ``samples/latest`` and ``samples?since=``); and jupyterlab-nvdashboard's server
under the same slow NVML with 1, 10 and 100 open "GPU Resources" panels (its websockets).

Measured from outside: request latency per endpoint (keep-alive connections, one per poller, as
a browser tab has), and the latency of a trivial Jupyter request (``/api``) made beside them.
Measured inside the server by ``benchmarks.lag_probe``: event-loop lag, NVML calls (the fake
library's counters), server CPU time, resident memory, server-side request durations.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable

from .common import (PCIE_DELAY_MS, REPO, FakeDriver, peer_available, peers_python, percentile, summary,
                     with_bench_package)

API = "/gpu-widgets/api/v1"


# -- the server process ------------------------------------------------------------------------------
class JupyterServer:
    def __init__(self, python: str | Path, env: dict[str, str], extensions: dict[str, bool],
                 config_lines: list[str], name: str) -> None:
        self.python, self.name = str(python), name
        self.tmp = Path(tempfile.mkdtemp(prefix=f"gw-bench-{name}-"))
        self.token = secrets.token_hex(16)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        config = self.tmp / "bench_server_config.py"
        config.write_text("\n".join([
            f"c.ServerApp.jpserver_extensions = {extensions!r}",
            *config_lines,
        ]) + "\n")
        self.env = {**env, "JUPYTER_CONFIG_DIR": str(self.tmp / "config"), "JUPYTER_DATA_DIR": str(self.tmp / "data"),
                    "JUPYTER_RUNTIME_DIR": str(self.tmp / "runtime"), "IPYTHONDIR": str(self.tmp / "ipython")}
        if any(name.startswith("benchmarks.") for name in extensions):
            self.env = with_bench_package(self.env, self.tmp)  # the probe, also from a regular install
        self.args = [
            self.python, "-m", "jupyter_server", f"--config={config}", f"--ServerApp.port={self.port}",
            "--ServerApp.ip=127.0.0.1", "--ServerApp.port_retries=0", "--ServerApp.open_browser=False",
            f"--ServerApp.token={self.token}", f"--ServerApp.root_dir={self.tmp}",
        ]
        if os.geteuid() == 0:
            self.args.append("--allow-root")
        self.proc: subprocess.Popen | None = None
        self.log_path = self.tmp / "server.log"

    def __enter__(self) -> "JupyterServer":
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.args, env=self.env, cwd=str(self.tmp), stdout=self._log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} server exited ({self.proc.returncode}): {self.log_tail()}")
            with contextlib.suppress(OSError):
                self.get_json("/api")
                return self
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} server did not answer within 90 s: {self.log_tail()}")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()

    def log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text()[-3000:]
        return ""

    def get_json(self, path: str, timeout: float = 120) -> Any:
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}",
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())


# -- a small keep-alive HTTP/1.1 client (one connection per poller, as one browser tab) ------------------
class Connection:
    def __init__(self, port: int, token: str) -> None:
        self.port, self.token = port, token
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def get(self, path: str) -> tuple[int, bytes]:
        status, _, body = await self.request(path)
        return status, body

    async def request(self, path: str, send: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        """GET ``path`` with the token and the headers ``send``: the status, the answer's headers (lower-case
        names) and its body as sent (still gzipped where the server gzipped it)."""
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        assert self.reader is not None
        extra = "".join(f"{k}: {v}\r\n" for k, v in (send or {}).items())
        self.writer.write(
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nAuthorization: token {self.token}\r\n"
            f"Accept: application/json\r\n{extra}Connection: keep-alive\r\n\r\n".encode()
        )
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).strip(), 16)
                chunk = await self.reader.readexactly(size + 2)
                if size == 0:
                    break
                body += chunk[:-2]
        else:
            body = await self.reader.readexactly(int(headers.get("content-length", "0")))
        if headers.get("connection", "").lower() == "close":
            await self.close()
        return status, headers, body

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()
        self.reader = self.writer = None


async def _loop_lag(stop: asyncio.Event, out: list[float]) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        t0 = loop.time()
        await asyncio.sleep(0.01)
        out.append(max(0.0, (loop.time() - t0 - 0.01) * 1e3))


class Clock:
    """When the measured window began; records made before it belong to the warm-up."""

    def __init__(self) -> None:
        self.measure_from = float("inf")


async def _bystander(port: int, token: str, stop: asyncio.Event, clock: Clock, out: list[tuple[float, float]]) -> None:
    """A trivial Jupyter request (``/api``, the server version) four times a second."""
    conn = Connection(port, token)
    try:
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                await asyncio.wait_for(conn.get("/api"), timeout=60)
                out.append((t0, (time.perf_counter() - t0) * 1e3))
            except (asyncio.TimeoutError, OSError, asyncio.IncompleteReadError):
                out.append((t0, 60_000.0))
                await conn.close()
            await asyncio.sleep(0.25)
    finally:
        await conn.close()


async def _poller(port: int, token: str, delay: float, stop: asyncio.Event, rec: dict[str, list],
                  started: list[int], control: bool = False) -> None:
    """One sidebar: every second, the latest sample and the history since the last one it has
    (the first request, without ``since``, is the whole window: a tab that opens)."""
    conn = Connection(port, token)
    await asyncio.sleep(delay)
    since: float | None = None
    try:
        while not stop.is_set():
            t0 = time.perf_counter()
            status, _ = await conn.get("/api" if control else f"{API}/samples/latest")
            t1 = time.perf_counter()
            rec["latest"].append((t0, (t1 - t0) * 1e3))
            path = f"{API}/samples" + ("" if since is None else f"?since={since!r}")
            if control:  # the same request rate on Jupyter's most trivial route: the platform's floor
                status2, body = await conn.get("/api")
                rec["since"].append((t1, (time.perf_counter() - t1) * 1e3))
                if since is None:
                    since = 0.0
                    started.append(1)
                await asyncio.sleep(1.0)
                continue
            status2, body = await conn.get(path)
            t2 = time.perf_counter()
            rec["since" if since is not None else "first_history"].append((t1, (t2 - t1) * 1e3))
            if status != 200 or status2 != 200:
                rec["errors"].append((t0, float(status if status != 200 else status2)))
            else:
                doc = json.loads(body)
                if since is None:
                    rec["first_history_bytes"].append((t1, float(len(body))))
                    started.append(1)
                stamps = doc["timestamps"]
                if stamps:
                    since = stamps[-1]
            # Like the sidebar's Lumino Poll: the next poll one interval after this one ended
            # (a late answer delays the next poll; it never causes a burst of catch-up polls).
            await asyncio.sleep(1.0)
    except (OSError, asyncio.IncompleteReadError) as exc:
        rec["errors"].append((time.perf_counter(), -1.0))
        rec["error_text"].append((0.0, repr(exc)))
    finally:
        await conn.close()


async def _ws_client(port: int, token: str, path: str, delay: float, stop: asyncio.Event, clock: Clock,
                     rec: dict[str, list], started: list[int]) -> None:
    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    await asyncio.sleep(delay)
    t0 = time.perf_counter()
    req = HTTPRequest(f"ws://127.0.0.1:{port}{path}", headers={"Authorization": f"token {token}"},
                      connect_timeout=120, request_timeout=120)
    try:
        ws = await websocket_connect(req)
    except Exception as exc:
        rec["errors"].append((t0, -1.0))
        rec["error_text"].append((0.0, repr(exc)))
        started.append(1)
        return
    rec["connect"].append((t0, (time.perf_counter() - t0) * 1e3))
    started.append(1)
    try:
        while not stop.is_set():
            read = asyncio.ensure_future(ws.read_message())
            waiter = asyncio.ensure_future(stop.wait())
            done, _ = await asyncio.wait({read, waiter}, return_when=asyncio.FIRST_COMPLETED)
            if read not in done:
                read.cancel()
                break
            waiter.cancel()
            msg = read.result()
            if msg is None:
                break
            if '"status"' not in msg[:20]:
                rec["updates"].append((time.perf_counter(), 1.0))
    finally:
        ws.close()


_REFERENCE = """
import asyncio, json, sys, time
async def main(seconds):
    loop = asyncio.get_running_loop()
    lag = []
    end = loop.time() + seconds
    while loop.time() < end:
        t0 = loop.time()
        await asyncio.sleep(0.01)
        lag.append(max(0.0, (loop.time() - t0 - 0.01) * 1e3))
    print(json.dumps(lag))
asyncio.run(main(float(sys.argv[1])))
"""


def _reference_lag(seconds: float) -> subprocess.Popen:
    """An idle asyncio process measuring its own loop lag beside the server: the machine's noise
    (other processes, the clients) as any event loop on this machine sees it."""
    return subprocess.Popen([sys.executable, "-c", _REFERENCE, str(seconds)], stdout=subprocess.PIPE, text=True)


def _stage(server: JupyterServer, pollers: int, seconds: float, kind: str) -> dict[str, Any]:
    """Start the clients, wait until each has done its first request (a tab opening), then
    measure ``seconds`` of steady state."""

    async def stats(conn: Connection, path: str = "/bench-probe/stats") -> dict[str, Any]:
        status, body = await asyncio.wait_for(conn.get(path), timeout=300)
        return json.loads(body)

    async def run() -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        probe = Connection(server.port, server.token)
        stop = asyncio.Event()
        clock = Clock()
        client_lag: list[float] = []
        started: list[int] = []
        rec: dict[str, list] = {k: [] for k in ("latest", "since", "first_history", "first_history_bytes", "errors",
                                                "error_text", "api", "connect", "updates")}
        await stats(probe, "/bench-probe/reset")
        t_start = time.perf_counter()
        lag_task = asyncio.ensure_future(_loop_lag(stop, client_lag))
        tasks = [asyncio.ensure_future(_bystander(server.port, server.token, stop, clock, rec["api"]))]
        for i in range(pollers):
            delay = i / max(1, pollers)  # spread over one second, as tabs would be
            if kind in ("gpu-widgets", "jupyter-floor"):
                tasks.append(asyncio.ensure_future(_poller(server.port, server.token, delay, stop, rec, started,
                                                           control=kind == "jupyter-floor")))
            else:
                tasks.append(asyncio.ensure_future(_ws_client(server.port, server.token, "/nvdashboard/gpu_resource",
                                                              delay, stop, clock, rec, started)))
        deadline = loop.time() + 240
        while len(started) < pollers and loop.time() < deadline:
            await asyncio.sleep(0.05)
        warmup_s = time.perf_counter() - t_start
        await asyncio.sleep(1.0)
        warm = await stats(probe)
        await stats(probe, "/bench-probe/reset")
        before = await stats(probe)
        clock.measure_from = time.perf_counter()
        reference = _reference_lag(seconds)
        await asyncio.sleep(seconds)
        after = await stats(probe)
        ref_out, _ = await loop.run_in_executor(None, reference.communicate)
        measured_until = time.perf_counter()
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), timeout=300)
        await lag_task
        await probe.close()
        steady = {k: [v for t, v in vals if clock.measure_from <= t < measured_until] for k, vals in rec.items()}
        warmup = {k: [v for t, v in vals if t < clock.measure_from] for k, vals in rec.items()}
        return {"warm": warm, "before": before, "after": after, "steady": steady, "warmup": warmup,
                "reference_lag": json.loads(ref_out or "[]"),
                "warmup_s": warmup_s, "client_lag": client_lag, "all_started": len(started) >= pollers}

    out = asyncio.run(run())
    before, after, warm = out["before"], out["after"], out["warm"]
    wall = after["monotonic"] - before["monotonic"]
    lag = after["lag_ms"]
    steady, warmup = out["steady"], out["warmup"]
    result: dict[str, Any] = {
        "pollers": pollers,
        "measured_s": round(wall, 2),
        "loop_lag_ms": _pcts(lag),
        "idle_process_loop_lag_ms": _pcts(out["reference_lag"]),
        "server_cpu_percent": 100.0 * (after["cpu_s"] - before["cpu_s"]) / wall if wall > 0 else None,
        "rss_bytes": after["rss_bytes"],
        "api_ms": _pcts(steady["api"]),
        "client_loop_lag_ms": _pcts(out["client_lag"]),
        "server_side_ms": {route: _pcts(v) for route, v in after["requests_ms"].items()},
        "warmup": {
            "seconds": round(out["warmup_s"], 2),
            "all_clients_started": out["all_started"],
            "loop_lag_ms": _pcts(warm["lag_ms"]),
            "api_ms": _pcts(warmup["api"]),
        },
        "errors": len(steady["errors"]) + len(warmup["errors"]),
        "error_text": [v for _, v in (out["steady"]["error_text"] + out["warmup"]["error_text"])][:3],
    }
    if after["nvml_calls"] and before["nvml_calls"]:
        result["nvml_calls_per_s"] = {k: (after["nvml_calls"][k] - before["nvml_calls"][k]) / wall
                                      for k in after["nvml_calls"]}
        if after.get("sampler_ticks") is not None:
            ticks = after["sampler_ticks"] - before["sampler_ticks"]
            result["sampler_ticks"] = ticks
            result["nvml_calls_per_tick"] = ((after["nvml_calls"]["total"] - before["nvml_calls"]["total"]) / ticks
                                             if ticks else None)
    if kind in ("gpu-widgets", "jupyter-floor"):
        result["latency_ms"] = {k: _pcts(steady[k]) for k in ("latest", "since")}
        result["warmup"]["first_history_ms"] = _pcts(warmup["first_history"] + steady["first_history"])
        sizes = warmup["first_history_bytes"] + steady["first_history_bytes"]
        result["warmup"]["first_history_bytes"] = max(sizes) if sizes else None
        result["requests"] = len(steady["latest"]) + len(steady["since"])
    else:
        result["updates_per_client_per_s"] = len(steady["updates"]) / max(1, pollers) / wall if wall > 0 else None
        result["connect_ms"] = _pcts(warmup["connect"] + steady["connect"])
    return result


def _pcts(values: list[float]) -> dict[str, Any]:
    return {"n": len(values), "p50": percentile(values, 50), "p95": percentile(values, 95),
            "p99": percentile(values, 99), "max": max(values) if values else None}


def _recover(server: JupyterServer, limit_s: float = 120) -> float | None:
    """Seconds until the server answers quickly again after a stage (None: not within the limit)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit_s:
        t = time.monotonic()
        with contextlib.suppress(OSError):
            server.get_json("/api", timeout=limit_s)
            if time.monotonic() - t < 0.05:
                return time.monotonic() - t0
        time.sleep(0.2)
    return None


def measure(smoke: bool = False, with_peers: bool = True, log: Callable[[str], None] = print) -> dict[str, Any]:
    counts = [2] if smoke else [0, 1, 10, 100]
    seconds = 1.0 if smoke else 15.0
    prefill = 300 if smoke else 3600
    result: dict[str, Any] = {"pcie_delay_ms": PCIE_DELAY_MS, "stage_seconds": seconds, "skipped": {},
                              "gpu-widgets": {}, "jupyterlab-nvdashboard": {}}
    with FakeDriver(pcie_delay_ms=PCIE_DELAY_MS) as driver:
        env = driver.env()
        ours = JupyterServer(
            sys.executable, env, {"gpu_widgets": True, "benchmarks.lag_probe": True},
            ["c.GpuWidgets.backend = 'nvml'", "c.GpuWidgets.interval_s = 1.0", "c.GpuWidgets.slow_interval_s = 2.0",
             "c.GpuWidgets.window_s = 3600.0", "c.GpuWidgets.show_other_users_processes = True"],
            "gpu-widgets",
        )
        with ours:
            status = ours.get_json(f"{API}/status")
            deadline = time.monotonic() + 30
            while status["status"] != "ok" and time.monotonic() < deadline:
                time.sleep(0.2)
                status = ours.get_json(f"{API}/status")
            if status["status"] != "ok" or status["device_count"] != driver.n_gpus:
                raise RuntimeError(f"gpu-widgets server did not see the fake GPUs: {status}")
            result["gpu-widgets"]["prefill"] = ours.get_json(f"/bench-probe/prefill?seconds={prefill}")
            latest = ours.get_json(f"{API}/samples/latest")
            result["gpu-widgets"]["latest_bytes"] = len(json.dumps(latest))
            result["gpu-widgets"]["processes_in_latest"] = sum(len(d["processes"] or []) for d in latest["devices"])
            stages = []
            for n in counts:
                log(f"  server: gpu-widgets, {n} pollers, {seconds:g} s")
                stages.append(_stage(ours, n, seconds, "gpu-widgets"))
            result["gpu-widgets"]["stages"] = stages
            top = max(counts)
            log(f"  server: the same server, {top} pollers on Jupyter's trivial /api route (the platform's floor)")
            result["jupyter-floor"] = {"stages": [_stage(ours, top, seconds, "jupyter-floor")]}
            log("  server: gpu-widgets, fast-forward 24 h at 1 Hz")
            ff = 1200 if smoke else 24 * 3600
            result["gpu-widgets"]["fastforward"] = {
                "seconds": ff, **ours.get_json(f"/bench-probe/fastforward?seconds={ff}", timeout=600)}
        peers_py, _ = peers_python()
        ok, why = (False, "peers disabled (--no-peers)") if not with_peers else peer_available(peers_py,
                                                                                                 "jupyterlab_nvdashboard")
        if ok and smoke:
            ok, why = False, "not in --smoke (its stages take minutes under a 20 ms PCIe call)"
        if not ok:
            result["skipped"]["jupyterlab-nvdashboard"] = why
        else:
            peer = JupyterServer(
                peers_py, env,
                {"jupyterlab_nvdashboard": True, "benchmarks.lag_probe": True, "gpu_widgets": False},
                [_NVLINK_PATCH], "nvdashboard",
            )
            with peer:
                stages = []
                for n in counts:
                    if n == 0:
                        continue  # it samples only while a panel is open
                    log(f"  server: jupyterlab-nvdashboard, {n} open GPU Resources panels, {seconds:g} s")
                    stage = _stage(peer, n, seconds, "nvdashboard")
                    stage["recovery_s"] = _recover(peer)
                    stages.append(stage)
                result["jupyterlab-nvdashboard"]["stages"] = stages
    result["targets"] = _targets(result)
    return result


# The fake library does not export nvmlDeviceGetNvLinkVersion; jupyterlab-nvdashboard calls it at
# import and catches only NotSupported, which is what a real driver answers for a PCIe GPU.
_NVLINK_PATCH = """
import pynvml as _p
def _no_nvlink(handle, link):
    raise _p.NVMLError(_p.NVML_ERROR_NOT_SUPPORTED)
try:
    _p.nvmlInit(); _p._nvmlGetFunctionPointer('nvmlDeviceGetNvLinkVersion')
except _p.NVMLError_FunctionNotFound:
    _p.nvmlDeviceGetNvLinkVersion = _no_nvlink
except _p.NVMLError:
    pass
"""


def _targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    stages = result["gpu-widgets"].get("stages", [])
    if not stages:
        return out
    top = max(stages, key=lambda s: s["pollers"])
    for endpoint in ("latest", "since"):
        p95 = top["latency_ms"][endpoint]["p95"]
        out.append({"target": f"p95 < 10 ms at {top['pollers']} pollers ({endpoint})",
                    "status": "met" if p95 is not None and p95 < 10 else "MISSED", "value": p95, "limit": 10})
    worst_lag = max((s["loop_lag_ms"]["p99"] or 0) for s in stages)
    worst_max = max((s["loop_lag_ms"]["max"] or 0) for s in stages)
    out.append({"target": "event-loop lag < 5 ms (p99 over every stage)", "status": "met" if worst_lag < 5 else "MISSED",
                "value": worst_lag, "limit": 5, "max_ms": worst_max})
    rated = [s for s in stages if "nvml_calls_per_s" in s]
    if rated:
        rates = [s["nvml_calls_per_s"]["total"] for s in rated]
        # A window of T s holds a whole number of ticks and slow reads: +-1 of each is counting, not load.
        per_tick = max((s.get("nvml_calls_per_tick") or 0) for s in rated)
        quantum = 2 * per_tick / min(s["measured_s"] for s in rated)
        spread = max(rates) - min(rates)
        out.append({"target": "NVML calls/s independent of pollers", "status": "met" if spread <= quantum else "MISSED",
                    "value": [round(r, 1) for r in rates], "pollers": [s["pollers"] for s in rated],
                    "calls_per_tick": [s.get("nvml_calls_per_tick") for s in rated],
                    "spread": spread, "limit": quantum,
                    "limit_meaning": "one fast tick + one slow read of calls over the window (counting granularity)"})
    return out


def table(result: dict[str, Any]) -> list[str]:
    lines = [
        f"NVML: fake driver, 8 GPUs x 8 processes, nvmlDeviceGetPcieThroughput blocks {result['pcie_delay_ms']} ms; "
        f"{result['stage_seconds']:g} s per stage",
        "",
        "| server | clients | endpoint | p50 ms | p95 ms | p99 ms | loop lag p99 / max ms | idle process lag p99 / max ms | "
        "/api p95 ms | NVML calls/s | server CPU % |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]

    def f(v: Any, d: int = 2) -> str:
        return "-" if v is None else f"{v:,.{d}f}"

    for s in result["gpu-widgets"].get("stages", []):
        lag, ref = s["loop_lag_ms"], s["idle_process_loop_lag_ms"]
        common = (f"{f(lag['p99'])} / {f(lag['max'])} | {f(ref['p99'])} / {f(ref['max'])} | {f(s['api_ms']['p95'])} | "
                  f"{f(s.get('nvml_calls_per_s', {}).get('total'), 1)} | {f(s['server_cpu_percent'], 1)}")
        if s["pollers"] == 0 or "latency_ms" not in s:
            lines.append(f"| gpu-widgets | 0 | (sampler alone) | - | - | - | {common} |")
            continue
        for ep in ("latest", "since"):
            L = s["latency_ms"][ep]
            lines.append(f"| gpu-widgets | {s['pollers']} | samples{'/latest' if ep == 'latest' else '?since='} | "
                         f"{f(L['p50'])} | {f(L['p95'])} | {f(L['p99'])} | {common} |")
    for s in result.get("jupyter-floor", {}).get("stages", []):
        lag, ref = s["loop_lag_ms"], s["idle_process_loop_lag_ms"]
        L = s["latency_ms"]["latest"]
        lines.append(f"| same server, Jupyter's /api only (floor) | {s['pollers']} | /api, 2 per poller per s | "
                     f"{f(L['p50'])} | {f(L['p95'])} | {f(L['p99'])} | {f(lag['p99'])} / {f(lag['max'])} | "
                     f"{f(ref['p99'])} / {f(ref['max'])} | {f(s['api_ms']['p95'])} | "
                     f"{f(s.get('nvml_calls_per_s', {}).get('total'), 1)} | {f(s['server_cpu_percent'], 1)} |")
    for s in result["jupyterlab-nvdashboard"].get("stages", []):
        lag, ref = s["loop_lag_ms"], s["idle_process_loop_lag_ms"]
        lines.append(
            f"| jupyterlab-nvdashboard | {s['pollers']} | ws gpu_resource: {f(s['updates_per_client_per_s'])} "
            "updates/s per client (asked 1) | "
            f"- | - | - | {f(lag['p99'])} / {f(lag['max'])} | {f(ref['p99'])} / {f(ref['max'])} | {f(s['api_ms']['p95'])} | "
            f"{f(s.get('nvml_calls_per_s', {}).get('total'), 1)} | {f(s['server_cpu_percent'], 1)} |"
        )
    lines += ["", "Clients starting together (each sidebar's first request asks for the whole window, "
              "downsampled; spread over one second):", "",
              "| server | clients | all started after s | first history request p50 / max ms | its size KB | "
              "loop lag p99 / max ms meanwhile | /api p95 ms meanwhile |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for who in ("gpu-widgets", "jupyterlab-nvdashboard"):
        for s in result[who].get("stages", []):
            w = s["warmup"]
            if not s["pollers"]:
                continue
            first = w.get("first_history_ms") or s.get("connect_ms") or {}
            size = w.get("first_history_bytes")
            lines.append(f"| {who} | {s['pollers']} | {f(w['seconds'])} | {f(first.get('p50'))} / {f(first.get('max'))} | "
                         f"{f(size / 1024 if size else None, 0)} | {f(w['loop_lag_ms']['p99'])} / {f(w['loop_lag_ms']['max'])} | "
                         f"{f(w['api_ms']['p95'])} |")
    for name, why in result["skipped"].items():
        lines.append(f"\nskipped {name}: {why}")
    return lines


if __name__ == "__main__":
    print("\n".join(table(measure())))
