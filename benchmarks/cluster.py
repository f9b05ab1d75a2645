"""Cluster view at scale (issue 14): 500 hosts x 8 GPUs in a real Prometheus, read by one Jupyter server.

One synthetic target (tests/prometheus_fixture.py, its own process) exposes dcgm-exporter's names
for 500 made-up hosts x 8 GPUs; Debian's prometheus scrapes it every 5 s; a Jupyter server with
gpu-widgets (cluster_refresh_s = 5) and the lag probe (benchmarks/lag_probe.py) points its Cluster
view at that Prometheus. Sidebars then poll as the Cluster view does: each asks for the overview
every second and for the detail of the host its panel has open. Reported: latency of each kind of
request (p50/p95/max, from outside), bytes per sidebar refresh (overview + one detail), the
server's event-loop lag meanwhile, and, when benchmarks/cluster_render.py exists, the sidebar's
render time in Chromium (its ``measure_render(base_url, token)``).

    python -m benchmarks.cluster                 # ~1 min on 2 cores
    python -m benchmarks.cluster --smoke         # 50 hosts, a few seconds of load: checks it still runs
    python -m benchmarks.cluster --json out.json --hosts 500 --seconds 30 --sidebars 10
"""
from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import subprocess
import sys
import time
from typing import Any, Callable

from .common import REPO, fmt, machine_info, percentile
from .server_load import API, Connection, JupyterServer, _reference_lag

SCRAPE_S = 5.0
REFRESH_S = 5.0
POLL_S = 1.0
TARGETS = {"p95_ms": 250.0, "refresh_bytes": 64 * 1024, "lag_p99_ms": 10.0}
_TARGET_MAIN = """
import sys, time
from tests.prometheus_fixture import SyntheticTarget
t = SyntheticTarget(int(sys.argv[1]), 8)
t.port = int(sys.argv[2])
t.start()
print("ready", flush=True)
sys.stdin.read()  # until the benchmark closes our stdin
t.stop()
"""


def _pcts(values: list[float]) -> dict[str, Any]:
    return {"n": len(values), "p50": percentile(values, 50), "p95": percentile(values, 95),
            "p99": percentile(values, 99), "max": max(values) if values else None}


def _fixture() -> Any:
    sys.path.insert(0, str(REPO))
    try:
        from tests import prometheus_fixture
    finally:
        sys.path.pop(0)
    return prometheus_fixture


def _start_target(hosts: int, port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", _TARGET_MAIN, str(hosts), str(port)], cwd=str(REPO),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        raise RuntimeError("the synthetic target did not start")
    return proc


async def _sidebar(server: JupyterServer, stop: asyncio.Event, host: str, out: dict[str, list], delay: float) -> None:
    """One open Cluster view: the overview every POLL_S, and the open host's detail with it."""
    conn = Connection(server.port, server.token)
    await asyncio.sleep(delay)
    try:
        while not stop.is_set():
            t0 = time.perf_counter()
            sizes = 0
            for kind, path in (("overview", f"{API}/cluster"), ("detail", f"{API}/cluster?host={host}")):
                t1 = time.perf_counter()
                status, body = await asyncio.wait_for(conn.get(path), timeout=60)
                out[f"{kind}_ms"].append((time.perf_counter() - t1) * 1e3)
                sizes += len(body)
                answer = json.loads(body) if status == 200 else {}
                if status != 200 or answer.get("status") != "ok":
                    out["errors"].append(f"{kind}: {status} {body[:200]!r}")
                elif kind == "overview":
                    out["hosts_listed"].append(len(answer["hosts"]))
            out["refresh_bytes"].append(sizes)
            await asyncio.sleep(max(0.0, POLL_S - (time.perf_counter() - t0)))
    finally:
        await conn.close()


def _load(server: JupyterServer, sidebars: int, seconds: float, hosts: int) -> dict[str, Any]:
    fixture = _fixture()

    async def run() -> dict[str, Any]:
        out: dict[str, list] = {k: [] for k in ("overview_ms", "detail_ms", "refresh_bytes", "errors", "hosts_listed")}
        probe = Connection(server.port, server.token)
        await probe.get("/bench-probe/reset")
        stop = asyncio.Event()
        tasks = [asyncio.ensure_future(_sidebar(server, stop, fixture.synthetic_hostname((7 * i) % hosts), out,
                                                i * POLL_S / sidebars)) for i in range(sidebars)]
        reference = _reference_lag(seconds)  # an idle asyncio process beside: the machine's own noise
        await asyncio.sleep(seconds)
        stop.set()
        await asyncio.gather(*tasks)
        _, body = await probe.get("/bench-probe/stats")
        await probe.close()
        ref_out, _ = await asyncio.get_running_loop().run_in_executor(None, reference.communicate)
        return {"out": out, "lag_ms": json.loads(body)["lag_ms"], "reference_lag_ms": json.loads(ref_out or "[]")}

    res = asyncio.run(run())
    out = res["out"]
    return {"sidebars": sidebars, "seconds": seconds, "overview_ms": _pcts(out["overview_ms"]),
            "detail_ms": _pcts(out["detail_ms"]), "refresh_bytes_max": max(out["refresh_bytes"], default=None),
            "hosts_listed": max(out["hosts_listed"], default=0), "loop_lag_ms": _pcts(res["lag_ms"]),
            "loop_lag_over_10ms": sum(1 for v in res["lag_ms"] if v >= 10),
            "idle_process_lag_ms": _pcts(res["reference_lag_ms"]), "errors": len(out["errors"]), "error_text": out["errors"][:3]}


def measure(smoke: bool = False, log: Callable[[str], None] = print, hosts: int | None = None,
            seconds: float | None = None, sidebars: int = 10, render: bool | None = None) -> dict[str, Any]:
    """``render``: also time the sidebar in Chromium (default: not in a smoke run)."""
    fixture = _fixture()
    hosts = hosts or (50 if smoke else 500)
    render = (not smoke) if render is None else render
    render = render and importlib.util.find_spec("benchmarks.cluster_render") is not None
    # JupyterLab's own server extension serves /lab, which the render measurement opens.
    extensions = {"gpu_widgets": True, "benchmarks.lag_probe": True, **({"jupyterlab": True} if render else {})}
    seconds = seconds or (3.0 if smoke else 30.0)
    port = fixture.free_port()
    prom = fixture.Prometheus([fixture.static_scrape_config("synthetic", port, SCRAPE_S)])
    result: dict[str, Any] = {"hosts": hosts, "gpus_per_host": 8, "scrape_interval_s": SCRAPE_S,
                              "cluster_refresh_s": REFRESH_S}
    target = _start_target(hosts, port)
    env = {**os.environ, "GPU_WIDGETS_BACKEND": "simulated", "GPU_WIDGETS_SIMULATED_GPUS": "8",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    try:
        with prom:
            log(f"prometheus at {prom.url} scraping {hosts} hosts x 8 GPUs every {SCRAPE_S:g} s ...")
            t0 = time.monotonic()
            prom.wait_for_series(f"count(DCGM_FI_DEV_GPU_UTIL) >= {hosts * 8}",
                                 count=1, timeout_s=120)
            result["first_scrape_s"] = round(time.monotonic() - t0, 1)
            server = JupyterServer(sys.executable, env, extensions, [
                f"c.GpuWidgets.prometheus_url = {prom.url!r}", f"c.GpuWidgets.cluster_refresh_s = {REFRESH_S}",
                f"c.GpuWidgets.hostname = {fixture.synthetic_hostname(1)!r}"], "cluster")
            with server:
                t1 = time.perf_counter()
                first = server.get_json(f"{API}/cluster")
                result["first_overview_ms"] = round((time.perf_counter() - t1) * 1e3, 1)
                if first["status"] != "ok":
                    raise RuntimeError(f"the cluster view is not ok: {first['status']}: {first['reason']}")
                log(f"{sidebars} sidebars polling for {seconds:g} s ...")
                result["load"] = _load(server, sidebars, seconds, hosts)
                result["round_loop_ms"] = _round_cost(prom.url)
                result["render"] = _render(server, log) if render else None
                if not render:
                    log("the sidebar's render time is not measured (smoke run, --no-render, or no "
                        "benchmarks/cluster_render.py)")
    finally:
        assert target.stdin is not None
        target.stdin.close()
        target.wait(timeout=30)
    result["targets"] = targets(result)
    return result


def _round_cost(url: str) -> dict[str, Any]:
    """The CPU one overview round costs the server: decoding Prometheus's answer, building the rows
    (both in a worker thread there) and encoding the answer. Timed here on the same answer."""
    import urllib.parse
    import urllib.request

    from gpu_widgets.cluster import overview, promql

    data = urllib.parse.urlencode({"query": promql.overview_query(SCRAPE_S)}).encode()
    with urllib.request.urlopen(f"{url}/api/v1/query", data=data, timeout=60) as r:
        raw = r.read()
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        body = overview.build(json.loads(raw)["data"]["result"], {}, "node-001")
        json.dumps(body, separators=(",", ":"))
        times.append((time.perf_counter() - t0) * 1e3)
    return {"answer_bytes": len(raw), "median_ms": percentile(times, 50), "max_ms": max(times)}


def _render(server: JupyterServer, log: Callable[[str], None]) -> dict[str, Any] | None:
    """The sidebar's render time, measured by benchmarks/cluster_render.py (helper of the sidebar's side)."""
    log("timing the sidebar's Cluster view in Chromium ...")
    from . import cluster_render  # type: ignore[attr-defined]

    return cluster_render.measure_render(f"http://127.0.0.1:{server.port}/", server.token)


def targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    load = result["load"]
    p95 = max(load["overview_ms"]["p95"] or 0, load["detail_ms"]["p95"] or 0)
    lag = load["loop_lag_ms"]["p99"]
    return [
        {"target": f"cluster endpoint p95 < {TARGETS['p95_ms']:g} ms (overview and detail)",
         "status": "met" if p95 < TARGETS["p95_ms"] else "MISSED", "value": p95, "limit": TARGETS["p95_ms"]},
        {"target": "<= 64 KB per sidebar refresh (overview + one host's detail)",
         "status": "met" if (load["refresh_bytes_max"] or 0) <= TARGETS["refresh_bytes"] else "MISSED",
         "value": load["refresh_bytes_max"], "limit": TARGETS["refresh_bytes"]},
        {"target": f"event-loop lag < {TARGETS['lag_p99_ms']:g} ms (p99)",
         "status": "met" if lag is not None and lag < TARGETS["lag_p99_ms"] else "MISSED", "value": lag,
         "limit": TARGETS["lag_p99_ms"], "max_ms": load["loop_lag_ms"]["max"]},
    ]


def table(result: dict[str, Any]) -> list[str]:
    load = result["load"]
    lines = [f"{result['hosts']} hosts x 8 GPUs, scraped every {result['scrape_interval_s']:g} s; "
             f"{load['sidebars']} sidebars for {load['seconds']:g} s; first overview {result['first_overview_ms']} ms",
             "", "| request | n | p50 ms | p95 ms | max ms |", "| --- | --- | --- | --- | --- |"]
    for kind in ("overview", "detail"):
        s = load[f"{kind}_ms"]
        lines.append(f"| {kind} | {s['n']} | {fmt(s['p50'])} | {fmt(s['p95'])} | {fmt(s['max'])} |")
    lag = load["loop_lag_ms"]
    lines += ["", f"bytes per sidebar refresh (overview + one detail): {fmt(load['refresh_bytes_max'], 0)}; "
              f"hosts listed: {load['hosts_listed']}; errors: {load['errors']}",
              f"event-loop lag: p50 {fmt(lag['p50'], 2)} ms, p99 {fmt(lag['p99'], 2)} ms, max {fmt(lag['max'], 2)} ms, "
              f"{load['loop_lag_over_10ms']} of {lag['n']} probes >= 10 ms "
              f"(an idle process beside: p99 {fmt(load['idle_process_lag_ms']['p99'], 2)} ms, "
              f"max {fmt(load['idle_process_lag_ms']['max'], 2)} ms)",
              f"CPU of one overview round (decode {fmt(result['round_loop_ms']['answer_bytes'], 0)} bytes "
              f"from Prometheus, build, encode): median {fmt(result['round_loop_ms']['median_ms'])} ms"]
    if result.get("render"):
        lines.append(f"sidebar render: {json.dumps(result['render'])}")
    lines += ["", "| target | status | measured | limit |", "| --- | --- | --- | --- |"]
    for t in result["targets"]:
        value = t["value"] if not isinstance(t["value"], float) else f"{t['value']:.3g}"
        lines.append(f"| {t['target']} | {t['status']} | {value} | {t['limit']:g} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cluster", description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="50 hosts, 3 s of load: checks that it still runs")
    parser.add_argument("--hosts", type=int, help="made-up hosts of 8 GPUs (default 500; 50 with --smoke)")
    parser.add_argument("--seconds", type=float, help="seconds of load (default 30; 3 with --smoke)")
    parser.add_argument("--sidebars", type=int, default=10, help="open Cluster views polling (default 10)")
    parser.add_argument("--no-render", action="store_true", help="do not time the sidebar in Chromium")
    parser.add_argument("--json", help="also write the results there")
    args = parser.parse_args(argv)
    if args.hosts is not None and args.hosts < 1 or args.sidebars < 1:
        parser.error("--hosts and --sidebars must be at least 1")
    fixture = _fixture()
    if not fixture.prometheus_available():
        print(f"the prometheus binary is missing: {fixture.INSTALL_HINT}", file=sys.stderr)
        return 2
    result = measure(args.smoke, hosts=args.hosts, seconds=args.seconds, sidebars=args.sidebars,
                     render=False if args.no_render else None)
    result["machine"] = machine_info()
    print("\n".join(table(result)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
