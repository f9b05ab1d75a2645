"""What a sidebar tab costs to open, and a hundred of them at once (issue 38).

A real ``jupyter server`` with gpu-widgets on the simulated backend: 8 GPUs sampled at 1 Hz (the
default), an hour of history held (``bench-probe/prefill``: the simulated GPUs' own values replayed,
so that it compresses as a real history does, not as copies of one sample). Each tab does what the sidebar does
when it opens: ``status``, ``metrics``, then ``samples`` (its visible window, the default 600 s at
the chart's ``max_points``), ``devices`` and ``processes`` together; then, polling at 1 Hz,
``samples?since=`` and ``samples/latest`` each second and ``processes`` every 2 s. Requests carry
the ``Accept-Encoding`` Chromium sends, so a server that gzips is measured as a browser meets it.
Bytes are the answers' bodies as sent (headers not counted).

Stages, each from outside the server:
- one tab: the first frame's bytes, per request;
- a storm: ``--tabs`` tabs (each its own keep-alive connection) open at the same moment, while a
  bystander asks ``/api/status`` every 20 ms; how long until every tab had its first frame, and
  the bystander's latency (what everyone else on the server feels);
- steady state: one tab polling for ``--seconds``: bytes per second.

    python -m benchmarks.tab_storm                               # this checkout
    python -m benchmarks.tab_storm --before /tmp/gw-before        # A/B: that checkout first, then this one
"""
from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

from .common import REPO, percentile, server_code
from .server_load import API, Connection, JupyterServer

GPUS = 8
WINDOW_S = 600.0  # the sidebar's default history window
CHART_PX = 300  # the sidebar's default chart width
BROWSER = {"Accept-Encoding": "gzip, deflate, br, zstd"}
STATUS_EVERY_S = 0.02


def _json(headers: dict[str, str], body: bytes) -> Any:
    if headers.get("content-encoding") == "gzip":
        body = gzip.decompress(body)
    return json.loads(body)


async def _first_frame(conn: Connection, max_points: int, parse: bool = True) -> dict[str, Any]:
    """The requests of a tab that opens, as the sidebar makes them; bytes per route. Without
    ``parse`` the history is not decoded (a hundred tabs' worth would be the client's CPU, on the
    cores the server needs, not the server's time)."""
    sizes: dict[str, int] = {}
    status_code, headers, body = await conn.request(f"{API}/status", BROWSER)
    status = _json(headers, body)
    sizes["status"] = len(body)
    _, headers, body = await conn.request(f"{API}/metrics", BROWSER)
    sizes["metrics"] = len(body)
    since = status["server_time"] - WINDOW_S
    # The sidebar sends these three at once; on one connection (HTTP/1.1) they queue, as a
    # browser's would beyond its six connections per host.
    _, h1, b1 = await conn.request(f"{API}/samples?since={since!r}&max_points={max_points}", BROWSER)
    _, _, b2 = await conn.request(f"{API}/devices", BROWSER)
    _, _, b3 = await conn.request(f"{API}/processes", BROWSER)
    sizes.update(samples=len(b1), devices=len(b2), processes=len(b3))
    frame = {"bytes": sizes, "total": sum(sizes.values()), "gzip": h1.get("content-encoding") == "gzip",
             "status": status_code}
    if parse:
        samples = _json(h1, b1)
        frame.update(points=len(samples["timestamps"]), last=samples["timestamps"][-1])
    return frame


async def _bystander(port: int, token: str, stop: asyncio.Event, out: list[float]) -> None:
    conn = Connection(port, token)
    try:
        while not stop.is_set():
            t0 = time.perf_counter()
            await conn.get("/api/status")
            out.append((time.perf_counter() - t0) * 1e3)
            await asyncio.sleep(STATUS_EVERY_S)
    finally:
        await conn.close()


async def _storm(server: JupyterServer, tabs: int, max_points: int) -> dict[str, Any]:
    stop = asyncio.Event()
    status_ms: list[float] = []
    bystander = asyncio.ensure_future(_bystander(server.port, server.token, stop, status_ms))
    await asyncio.sleep(0.5)
    before = len(status_ms)
    conns = [Connection(server.port, server.token) for _ in range(tabs)]

    async def tab(conn: Connection) -> tuple[float, int]:
        frame = await _first_frame(conn, max_points, parse=False)
        return time.perf_counter(), frame["total"]

    t0 = time.perf_counter()
    done = await asyncio.gather(*(tab(c) for c in conns))
    took = max(t for t, _ in done) - t0
    await asyncio.sleep(0.2)
    stop.set()
    await bystander
    for c in conns:
        await c.close()
    during = status_ms[before:]
    return {"tabs": tabs, "all_answered_s": took, "median_tab_s": percentile([t - t0 for t, _ in done], 50),
            "bytes_per_tab": sum(b for _, b in done) / tabs,
            "status_ms": {"n": len(during), "p50": percentile(during, 50), "p99": percentile(during, 99),
                          "max": max(during) if during else None}}


async def _steady(server: JupyterServer, max_points: int, seconds: float) -> dict[str, Any]:
    conn = Connection(server.port, server.token)
    frame = await _first_frame(conn, max_points)
    since, sent, polls = frame["last"], 0, 0
    t_end = time.perf_counter() + seconds
    processes_at = time.perf_counter()
    while time.perf_counter() < t_end:
        t0 = time.perf_counter()
        _, h, body = await conn.request(f"{API}/samples?since={since!r}&max_points={max_points}", BROWSER)
        doc = _json(h, body)
        if doc["timestamps"]:
            since = doc["timestamps"][-1]
        _, _, latest = await conn.request(f"{API}/samples/latest", BROWSER)
        sent += len(body) + len(latest)
        if t0 - processes_at >= 2.0:
            _, _, page = await conn.request(f"{API}/processes", BROWSER)
            sent += len(page)
            processes_at = t0
        polls += 1
        await asyncio.sleep(max(0.0, 1.0 - (time.perf_counter() - t0)))
    await conn.close()
    return {"seconds": seconds, "polls": polls, "bytes_per_s": sent / seconds}


def measure_one(code: str | None, max_points: int, tabs: int, seconds: float, rounds: int,
                log: Callable[[str], None] = print) -> dict[str, Any]:
    env = {**os.environ, "GPU_WIDGETS_BACKEND": "simulated", "GPU_WIDGETS_SIMULATED_GPUS": str(GPUS)}
    env.pop("FAKE_NVML_CONFIG", None)
    env = server_code(env, code)  # gpu_widgets from another checkout (a before/after), the probe from here
    server = JupyterServer(sys.executable, env, {"gpu_widgets": True, "benchmarks.lag_probe": True},
                           ["c.GpuWidgets.interval_s = 1.0", "c.GpuWidgets.window_s = 3600.0"], "tab-storm")
    out: dict[str, Any] = {"code": code or str(REPO), "max_points": max_points}
    with server:
        deadline = time.monotonic() + 60
        while server.get_json(f"{API}/status")["device_count"] != GPUS and time.monotonic() < deadline:
            time.sleep(0.2)
        server.get_json("/bench-probe/prefill?seconds=3600&replay=1", timeout=600)
        time.sleep(2.0)

        async def run() -> None:
            conn = Connection(server.port, server.token)
            out["first_frame"] = await _first_frame(conn, max_points)
            await conn.close()
            out["storms"] = []
            for _ in range(rounds):
                out["storms"].append(await _storm(server, tabs, max_points))
                await asyncio.sleep(1.5)  # past the shared answers' reuse
            out["steady"] = await _steady(server, max_points, seconds)

        log(f"  tab storm: {out['code']} (max_points={max_points}): first frame, {rounds} storms of {tabs} tabs, "
            f"{seconds:g} s steady")
        asyncio.run(run())
    return out


def measure(before: str | None = None, tabs: int = 100, seconds: float = 20.0, rounds: int = 3,
            smoke: bool = False, log: Callable[[str], None] = print) -> dict[str, Any]:
    if smoke:
        tabs, seconds, rounds = 10, 3.0, 1
    runs = []
    if before:  # its sidebar asked for two points per chart pixel
        runs.append({"version": "before", **measure_one(before, 2 * CHART_PX, tabs, seconds, rounds, log)})
    runs.append({"version": "after", **measure_one(None, CHART_PX, tabs, seconds, rounds, log)})
    return {"gpus": GPUS, "window_s": WINDOW_S, "runs": runs, "targets": _targets(runs[-1])}


def _targets(run: dict[str, Any]) -> list[dict[str, Any]]:
    worst = max(s["all_answered_s"] for s in run["storms"])
    p99 = max(s["status_ms"]["p99"] or 0.0 for s in run["storms"])
    kb = run["first_frame"]["total"] / 1e3
    return [
        {"target": "first frame <= 60 KB per tab (8 GPUs, full history)", "value": kb, "limit": 60,
         "status": "met" if kb <= 60 else "MISSED"},
        {"target": f"{run['storms'][0]['tabs']} tabs all answered <= 0.5 s", "value": worst, "limit": 0.5,
         "status": "met" if worst <= 0.5 else "MISSED"},
        {"target": "/api/status p99 <= 50 ms during the storm", "value": p99, "limit": 50,
         "status": "met" if p99 <= 50 else "MISSED"},
    ]


def table(result: dict[str, Any]) -> list[str]:
    lines = [f"Simulated backend, {result['gpus']} GPUs at 1 Hz, an hour held; each tab's window "
             f"{result['window_s']:g} s", "",
             "| version | max_points | first frame KB (samples KB, gzip) | storm: all answered s (each round) "
             "| /api/status p50 / p99 / max ms | steady B/s |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in result["runs"]:
        ff = r["first_frame"]
        storms = r["storms"]
        answered = ", ".join(f"{s['all_answered_s']:.2f}" for s in storms)
        status = ", ".join(f"{s['status_ms']['p50']:.1f} / {s['status_ms']['p99']:.1f} / {s['status_ms']['max']:.1f}"
                           for s in storms)
        lines.append(
            f"| {r['version']} | {r['max_points']} | {ff['total'] / 1e3:.1f} ({ff['bytes']['samples'] / 1e3:.1f}, "
            f"{'yes' if ff['gzip'] else 'no'}) | {answered} | {status} | {r['steady']['bytes_per_s']:,.0f} |")
    lines.append("")
    for t in result["targets"]:
        lines.append(f"- {t['target']}: {t['status']} ({t['value']:.2f}, limit {t['limit']})")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", help="a checkout to measure first (A/B), e.g. `git worktree add /tmp/gw-before HEAD~1`")
    parser.add_argument("--tabs", type=int, default=100, help="tabs opening at once (default 100)")
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds of steady-state polling (default 20)")
    parser.add_argument("--rounds", type=int, default=3, help="storms per version (default 3)")
    parser.add_argument("--smoke", action="store_true", help="10 tabs, one round, 3 s: a quick check")
    parser.add_argument("--json", help="also write the result here")
    args = parser.parse_args()
    if args.tabs < 1 or args.rounds < 1 or args.seconds <= 0:
        parser.error("--tabs and --rounds must be at least 1 and --seconds positive")
    if args.before and not (Path(args.before) / "gpu_widgets").is_dir():
        parser.error(f"--before {args.before!r} has no gpu_widgets/ folder (a checkout of this repository)")
    res = measure(args.before, args.tabs, args.seconds, args.rounds, args.smoke)
    print("\n".join(table(res)))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
