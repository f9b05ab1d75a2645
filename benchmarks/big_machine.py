"""A very large machine: 64 GPUs x 1000 processes each, behind a real Jupyter server.

The simulated backend (64 GPUs) with each GPU's process list filled up to ``--processes`` by
this module (``crowd``, run in the server's process by its config file): the fake driver holds
at most 32 GPUs and 128 processes each. The extra processes are built once per GPU and handed
out again at every slow read, as the NVML backend hands out a cached list while the processes
stay the same.

Measured from outside, on loopback with the token: the size of ``samples/latest``,
``processes`` and ``/metrics``; the time of a scrape; and ``/api/status`` latency (a request
every 50 ms) while one Prometheus scraper (every second) and five sidebars (each second
``samples/latest`` and ``samples?since=``, ``processes`` every 5 s) run.

    python -m benchmarks.big_machine [--seconds 30] [--gpus 64] [--processes 1000] [--no-gc-freeze]
    python -m benchmarks.big_machine --code /tmp/gw-before     # the server runs that checkout's gpu_widgets

Clients send the ``Accept-Encoding`` their real counterparts send (the sidebars Chromium's,
the scraper Prometheus's ``gzip``); ``--no-gzip`` leaves it out. Sizes are the bodies as sent.

``--no-gc-freeze`` sets ``GpuWidgets.freeze_gc_on_big_machines = False``: Python's full garbage
collections then walk the whole heap (~280 000 objects) every few seconds, as before issue 22.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from .common import REPO, percentile, server_code
from .server_load import API, Connection, JupyterServer

MIB = 1 << 20
PID_BASE = 5_000_000  # above Linux's pid_max (2**22): never a real process


def crowd(per_gpu: int) -> None:
    """Give every simulated GPU ``per_gpu`` processes (called in the server's process)."""
    from gpu_widgets.backends import simulated
    from gpu_widgets.backends.base import GPM_OFF

    own = simulated.SimulatedBackend._processes
    extra: dict[int, list[Any]] = {}

    def crowded(self: Any, gpu: int, values: dict[str, Any]) -> list[Any]:
        procs = own(self, gpu, values)
        if gpu not in extra:
            extra[gpu] = [{
                "pid": PID_BASE + gpu * per_gpu + k, "used_memory_bytes": (k % 97 + 1) * 16 * MIB,
                "name": "python", "uid": os.getuid(), "user": "bench",
                "command": f"python worker.py --rank {k} --gpu {gpu}  (simulated process)",
                "sm_percent": None, "memory_bandwidth_percent": None,
                "unavailable": {"sm_percent": GPM_OFF, "memory_bandwidth_percent": GPM_OFF},
            } for k in range(per_gpu)]
        return procs + extra[gpu][:max(0, per_gpu - len(procs))]

    simulated.SimulatedBackend._processes = crowded  # type: ignore[method-assign]


SIDEBAR_HEADERS = {"Accept-Encoding": "gzip, deflate, br, zstd"}  # Chromium's
SCRAPER_HEADERS = {"Accept-Encoding": "gzip"}  # Prometheus's


async def _timed(conn: Connection, path: str, send: dict[str, str]) -> tuple[float, int, bytes]:
    t0 = time.perf_counter()
    status, _, body = await conn.request(path, send)
    return (time.perf_counter() - t0) * 1e3, status, body


async def _measure(server: JupyterServer, seconds: float, pollers: int, scrape_every_s: float,
                   gzip: bool = True) -> dict[str, Any]:
    port, token = server.port, server.token
    stop = asyncio.Event()
    rec: dict[str, list[float]] = {"status": [], "scrape": [], "latest": [], "since": [], "processes": []}
    sizes: dict[str, int] = {}
    errors: list[str] = []

    async def loop(name: str, paths: Any, period: float) -> None:
        conn = Connection(port, token)
        try:
            while not stop.is_set():
                t0 = time.perf_counter()
                for key, path in paths():
                    send = {} if not gzip else SCRAPER_HEADERS if key == "scrape" else SIDEBAR_HEADERS
                    ms, status, body = await _timed(conn, path, send)
                    if status != 200:
                        errors.append(f"{path}: {status}")
                    rec[key].append(ms)
                    sizes[key] = len(body)
                with contextlib.suppress(asyncio.TimeoutError):  # the next round, or the end
                    await asyncio.wait_for(stop.wait(), max(0.0, period - (time.perf_counter() - t0)))
        finally:
            await conn.close()

    state: dict[str, Any] = {"since": time.time() - 5, "polls": 0}

    def sidebar() -> list[tuple[str, str]]:
        state["polls"] += 1
        out = [("latest", f"{API}/samples/latest"), ("since", f"{API}/samples?since={state['since']!r}")]
        state["since"] = time.time() - 1.0
        if state["polls"] % 5 == 1:
            out.append(("processes", f"{API}/processes"))
        return out

    tasks = [asyncio.ensure_future(loop("status", lambda: [("status", f"{API}/status")], 0.05)),
             asyncio.ensure_future(loop("scrape", lambda: [("scrape", "/gpu-widgets/metrics")], scrape_every_s))]
    tasks += [asyncio.ensure_future(loop(f"sidebar{i}", sidebar, 1.0)) for i in range(pollers)]
    await asyncio.sleep(3.0)  # warm-up: every client has made its first requests
    for values in rec.values():
        values.clear()
    await asyncio.sleep(seconds)
    stop.set()
    await asyncio.gather(*tasks)

    def pcts(v: list[float]) -> dict[str, Any]:
        return {"n": len(v), "p50": percentile(v, 50), "p99": percentile(v, 99), "max": max(v) if v else None}

    return {"bytes": {"samples/latest": sizes.get("latest"), "processes": sizes.get("processes"),
                      "metrics": sizes.get("scrape")},
            "ms": {k: pcts(v) for k, v in rec.items()}, "errors": errors[:5], "error_count": len(errors)}


def measure(seconds: float = 30.0, gpus: int = 64, processes: int = 1000, pollers: int = 5,
            scrape_every_s: float = 1.0, gc_freeze: bool = True, gzip: bool = True,
            code: str | None = None) -> dict[str, Any]:
    # gpu_widgets from another checkout (a before/after) when asked, crowd() from here
    env = server_code({**os.environ, "GPU_WIDGETS_BACKEND": "simulated", "GPU_WIDGETS_SIMULATED_GPUS": str(gpus)}, code)
    server = JupyterServer(sys.executable, env, {"gpu_widgets": True}, [
        f"import benchmarks.big_machine; benchmarks.big_machine.crowd({processes})",
        "c.GpuWidgets.interval_s = 1.0", "c.GpuWidgets.slow_interval_s = 2.0",
        "c.GpuWidgets.show_other_users_processes = False",
        f"c.GpuWidgets.freeze_gc_on_big_machines = {gc_freeze!r}",
    ], "big-machine")
    with server:
        deadline = time.monotonic() + 120
        while True:
            latest = server.get_json(f"{API}/samples/latest")
            devs = latest.get("devices") or []
            if len(devs) == gpus and all(d.get("processes") is not None for d in devs):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server did not sample {gpus} GPUs with processes: {server.log_tail()}")
            time.sleep(0.5)
        total = sum(len(d["processes"]) + (d.get("processes_omitted") or 0) for d in devs)
        result = asyncio.run(_measure(server, seconds, pollers, scrape_every_s, gzip))
    result.update(gpus=gpus, processes_per_gpu=processes, processes_in_all=total, seconds=seconds, pollers=pollers,
                  scrape_every_s=scrape_every_s, gc_freeze=gc_freeze, gzip=gzip, code=code or str(REPO))
    return result


def _mb(n: int | None) -> str:
    return "?" if n is None else f"{n / 1e6:.2f} MB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--processes", type=int, default=1000)
    parser.add_argument("--pollers", type=int, default=5, help="sidebars polling (default 5)")
    parser.add_argument("--scrape-every-s", type=float, default=1.0, help="seconds between scrapes (default 1)")
    parser.add_argument("--gc-freeze", action=argparse.BooleanOptionalAction, default=True,
                        help="GpuWidgets.freeze_gc_on_big_machines (default on)")
    parser.add_argument("--gzip", action=argparse.BooleanOptionalAction, default=True,
                        help="send Accept-Encoding as a browser and Prometheus do (default on)")
    parser.add_argument("--code", help="a checkout whose gpu_widgets the server runs (default: this one)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    if args.code and not (Path(args.code) / "gpu_widgets").is_dir():
        parser.error(f"--code {args.code!r} has no gpu_widgets/ folder (a checkout of this repository)")
    r = measure(args.seconds, args.gpus, args.processes, args.pollers, args.scrape_every_s, args.gc_freeze,
                args.gzip, args.code)
    if args.json:
        print(json.dumps(r, indent=2))
        return
    ms = r["ms"]
    print(f"{r['gpus']} GPUs x {r['processes_per_gpu']} processes ({r['processes_in_all']} in all), "
          f"{r['pollers']} sidebars, a scrape every {r['scrape_every_s']:g} s, {r['seconds']:g} s measured, "
          f"heap freeze {'on' if r['gc_freeze'] else 'off'}, gzip asked {'yes' if r['gzip'] else 'no'}, "
          f"server code {r['code']}, "
          f"{r['error_count']} errors {r['errors']}")
    for name, key in (("samples/latest", "samples/latest"), ("processes (first page)", "processes"),
                      ("/metrics", "metrics")):
        print(f"  {name:<24} {_mb(r['bytes'][key])}")
    for name, key in (("/metrics scrape", "scrape"), ("/api/status", "status"), ("samples/latest", "latest"),
                      ("samples?since=", "since"), ("processes", "processes")):
        m = ms[key]
        print(f"  {name:<24} p50 {m['p50']:.1f} ms  p99 {m['p99']:.1f} ms  max {m['max']:.1f} ms  (n={m['n']})"
              if m["n"] else f"  {name:<24} no requests")


if __name__ == "__main__":
    main()
