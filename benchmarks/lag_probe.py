"""A Jupyter server extension used only by the server benchmark: it measures the server from inside.

Enabled by the benchmark's own config file (``c.ServerApp.jpserver_extensions``), this package
put on the server's PYTHONPATH (``common.with_bench_package``: an editable install or not); never
installed, never enabled by ``make lab``. It adds, under
``{base_url}bench-probe/`` (token required like every Jupyter route):

- ``stats``: event-loop lag (a 10 ms sleep on the loop, how late it wakes), NVML calls made in
  this process so far (the fake library's own counters), resident memory, process CPU time, and
  the server-side duration of each request by route, since the last ``reset``;
- ``reset``: start a new measurement window;
- ``prefill?seconds=N``: give gpu-widgets' sampler a history of N seconds (as a server that has
  been up that long) so that history requests downsample a full window;
- ``fastforward?seconds=N``: append N synthetic 1 Hz samples to that history (24 h at 1 Hz in a
  few seconds) and report resident memory along the way.
"""
from __future__ import annotations

import asyncio
import copy
import ctypes
import json
import os
import threading
import time
from collections import defaultdict
from typing import Any

from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.utils import url_path_join
from tornado import web
from tornado.ioloop import IOLoop

PERIOD_S = 0.01


class _Probe:
    def __init__(self) -> None:
        self.lag_ms: list[float] = []
        self.requests: dict[str, list[float]] = defaultdict(list)
        self.lib: Any = None
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            lib.fakeNvmlCallCount.restype = ctypes.c_ulonglong
            lib.fakeNvmlCallCount.argtypes = [ctypes.c_char_p]
            self.lib = lib
        except (OSError, AttributeError):
            self.lib = None  # not the fake driver: no call counts

    def calls(self) -> dict[str, int] | None:
        if self.lib is None:
            return None
        return {
            "total": int(self.lib.fakeNvmlCallCount(b"*")),
            "nvmlDeviceGetPcieThroughput": int(self.lib.fakeNvmlCallCount(b"nvmlDeviceGetPcieThroughput")),
            "nvmlDeviceGetUtilizationRates": int(self.lib.fakeNvmlCallCount(b"nvmlDeviceGetUtilizationRates")),
        }

    async def measure_lag(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            t0 = loop.time()
            await asyncio.sleep(PERIOD_S)
            self.lag_ms.append(max(0.0, (loop.time() - t0 - PERIOD_S) * 1e3))
            if len(self.lag_ms) > 200_000:
                del self.lag_ms[:100_000]


PROBE = _Probe()


def _rss() -> int:
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class _Base(JupyterHandler):
    def send(self, payload: Any) -> None:
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(payload))


class StatsHandler(_Base):
    @web.authenticated
    def get(self) -> None:
        self.send({
            "lag_ms": PROBE.lag_ms,
            "requests_ms": PROBE.requests,
            "nvml_calls": PROBE.calls(),
            "rss_bytes": _rss(),
            "cpu_s": time.process_time(),
            "monotonic": time.monotonic(),
            "threads": threading.active_count(),
            "sampler_ticks": _ticks(self.settings),
        })


class ResetHandler(_Base):
    @web.authenticated
    def get(self) -> None:
        PROBE.lag_ms = []
        PROBE.requests = defaultdict(list)
        self.send({"ok": True})


def _ticks(settings: dict) -> int | None:
    service = settings.get("gpu_widgets_service")
    sampler = getattr(service, "sampler", None)
    return None if sampler is None else sampler.ticks


def _sampler(settings: dict) -> Any:
    service = settings.get("gpu_widgets_service")
    if service is None or not service.wait_ready(30) or service.sampler is None:
        raise web.HTTPError(409, "gpu-widgets is not running in this server")
    return service.sampler


def _synthetic(latest: dict, t: float) -> dict:
    snap = copy.copy(latest)
    snap["timestamp"] = t
    return snap


def _replayed(latest: dict, seconds: int, interval_s: float, window_s: float) -> Any:
    """A history as the simulated GPUs would have made it over the last ``seconds`` (values that
    move as real ones do: what compresses as a real history would), ending just before ``latest``."""
    from gpu_widgets.backends import SimulatedBackend
    from gpu_widgets.sampling.sampler import Sampler

    start = latest["timestamp"] - (seconds + 1) * interval_s

    class Clock:
        t = 0.0

        def monotonic(self) -> float:
            return self.t

        def wall(self) -> float:
            return start + self.t

        def wait(self, event: Any, timeout: float) -> bool:
            return event.is_set()

    clock = Clock()
    backend = SimulatedBackend(n_gpus=len(latest["devices"]), seed=int(os.environ.get("GPU_WIDGETS_SIMULATED_SEED", "0")),
                               t0=start, clock=clock.wall)
    replay = Sampler(backend, interval_s=interval_s, window_s=window_s, clock=clock)
    backend.open()
    for k in range(seconds):
        clock.t += interval_s
        if k % 5 == 0:
            replay._read_slow()
        replay.tick()
    return replay.history


class PrefillHandler(_Base):
    """``?seconds=N`` copies of the latest sample; ``&replay=1`` the simulated GPUs' own values."""

    @web.authenticated
    async def get(self) -> None:
        seconds = int(self.get_argument("seconds", "3600"))
        replayed = self.get_argument("replay", "0") == "1"
        sampler = _sampler(self.settings)

        def fill() -> int:
            from gpu_widgets.store.history import History

            while sampler.latest is None:
                time.sleep(0.05)
            latest = sampler.latest
            old = sampler.history
            t_end = latest["timestamp"]
            if replayed:
                new = _replayed(latest, seconds, sampler.interval_s, old.window_s)
            else:
                new = History(window_s=old.window_s, interval_s=sampler.interval_s)
                for k in range(seconds, 0, -1):
                    new.append(_synthetic(latest, t_end - k * sampler.interval_s))
            new.append(latest)
            sampler.history = new  # a tick that lands between these lines is lost: harmless here
            del old
            # glibc keeps the old history's pages: give them back, so that a memory baseline taken
            # now is the server's, whichever gpu_widgets runs it
            trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
            if trim is not None:
                trim(0)
            return len(new)

        n = await IOLoop.current().run_in_executor(None, fill)
        self.send({"samples": n, "rss_bytes": _rss()})


class FastForwardHandler(_Base):
    @web.authenticated
    async def get(self) -> None:
        seconds = int(self.get_argument("seconds", "86400"))
        sampler = _sampler(self.settings)

        def run() -> list[dict]:
            sampler.stop()  # the real clock must not interleave with the synthetic one
            latest = sampler.latest
            t = latest["timestamp"]
            marks = []
            checkpoints = {int(seconds * f) for f in (1 / 24, 1 / 12, 1 / 4, 1 / 2, 3 / 4, 1)}
            for k in range(1, seconds + 1):
                sampler.history.append(_synthetic(latest, t + k * sampler.interval_s))
                if k in checkpoints:
                    marks.append({"seconds": k, "rss_bytes": _rss(), "history_samples": len(sampler.history),
                                  "history_bytes_held": sampler.history.bytes_held})
            return marks

        marks = await IOLoop.current().run_in_executor(None, run)
        self.send({"marks": marks})


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "benchmarks.lag_probe"}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    web_app = serverapp.web_app
    base = web_app.settings["base_url"]
    web_app.add_handlers(".*$", [
        (url_path_join(base, "bench-probe", "stats"), StatsHandler),
        (url_path_join(base, "bench-probe", "reset"), ResetHandler),
        (url_path_join(base, "bench-probe", "prefill"), PrefillHandler),
        (url_path_join(base, "bench-probe", "fastforward"), FastForwardHandler),
    ])
    original = web_app.settings.get("log_function")

    def log_function(handler: Any) -> None:
        path = handler.request.path
        if "/bench-probe/" not in path:
            PROBE.requests[_route(path)].append(handler.request.request_time() * 1e3)
        if original is not None:
            original(handler)

    web_app.settings["log_function"] = log_function
    IOLoop.current().add_callback(lambda: asyncio.ensure_future(PROBE.measure_lag()))
    serverapp.log.info("bench-probe: measuring event-loop lag every %s s", PERIOD_S)


def _route(path: str) -> str:
    for key in ("samples/latest", "gpu-widgets/api/v1/samples", "nvdashboard", "/api/status"):
        if key in path:
            return key
    return path
