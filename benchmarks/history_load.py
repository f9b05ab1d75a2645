"""History load (issue 10, item 7): heavy ``samples`` requests must not hurt everyone else.

A real ``jupyter server`` with gpu-widgets on the simulated backend: 64 GPUs sampled at 10 Hz,
its hour of history filled (36 000 samples per GPU). Two stages, each measured from outside:

- ``recent``: four clients each asking twice a second for the last 30 s (``samples?since=now-30``);
- ``recent+heavy``: the same, plus heavy clients asking again and again for everything at the most
  points (``samples?since=1&max_points=5000``).

Beside them a client asks for ``/api/status`` ten times a second (its latency is what every other
user of the server feels). Reported: that latency, each kind of request's latency and answer size,
the server's event-loop lag (``benchmarks.lag_probe``), and its resident memory before, at peak
and after the clients stop.

    python -m benchmarks.history_load                     # this checkout
    python -m benchmarks.history_load --code /tmp/before  # the server imports gpu_widgets from there
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

from .common import REPO, percentile, server_code
from .server_load import API, Connection, JupyterServer, _reference_lag

GPUS = 64
INTERVAL_S = 0.1
RECENT_CLIENTS = 4
RECENT_EVERY_S = 0.5
RECENT_SPAN_S = 30.0
HEAVY_PATH = f"{API}/samples?since=1&max_points=5000"
STATUS_EVERY_S = 0.1
SETTLE_S = 10.0  # how long after the clients stop the memory is read again (1 s in --smoke)


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _pcts(values: list[float]) -> dict[str, Any]:
    return {"n": len(values), "p50": percentile(values, 50), "p95": percentile(values, 95),
            "p99": percentile(values, 99), "max": max(values) if values else None}


async def _client(server: JupyterServer, stop: asyncio.Event, every_s: float, path: Callable[[], str],
                  out: dict[str, list], name: str, delay: float = 0.0) -> None:
    """Ask for ``path()`` every ``every_s`` seconds (the next one at once when an answer is late)."""
    conn = Connection(server.port, server.token)
    await asyncio.sleep(delay)
    try:
        while not stop.is_set():
            t0 = time.perf_counter()
            status, body = await asyncio.wait_for(conn.get(path()), timeout=300)
            out[f"{name}_ms"].append((time.perf_counter() - t0) * 1e3)
            out[f"{name}_bytes"].append(len(body))
            if status != 200:
                out["errors"].append(f"{name}: {status} {body[:200]!r}")
            await asyncio.sleep(max(0.0, every_s - (time.perf_counter() - t0)))
    finally:
        await conn.close()


def _stage(server: JupyterServer, heavy: int, seconds: float, settle_s: float) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        out: dict[str, list] = {k: [] for k in ("status_ms", "status_bytes", "recent_ms", "recent_bytes",
                                                "heavy_ms", "heavy_bytes", "errors")}
        probe = Connection(server.port, server.token)
        await probe.get("/bench-probe/reset")
        rss_before = _rss(server.proc.pid)
        stop = asyncio.Event()
        tasks = [asyncio.ensure_future(_client(server, stop, STATUS_EVERY_S, lambda: f"{API}/status", out, "status"))]
        for i in range(RECENT_CLIENTS):
            tasks.append(asyncio.ensure_future(_client(
                server, stop, RECENT_EVERY_S, lambda: f"{API}/samples?since={time.time() - RECENT_SPAN_S!r}", out,
                "recent", delay=i * RECENT_EVERY_S / RECENT_CLIENTS)))
        for i in range(heavy):
            tasks.append(asyncio.ensure_future(_client(server, stop, 0.5, lambda: HEAVY_PATH, out, "heavy",
                                                       delay=i * 0.1)))
        peak = rss_before
        reference = _reference_lag(seconds)  # an idle asyncio process beside: the machine's own noise
        t_end = time.monotonic() + seconds
        while time.monotonic() < t_end:
            await asyncio.sleep(0.1)
            peak = max(peak, _rss(server.proc.pid))
        stop.set()
        await asyncio.gather(*tasks)
        ref_out, _ = await asyncio.get_running_loop().run_in_executor(None, reference.communicate)
        _, body = await probe.get("/bench-probe/stats")
        stats = json.loads(body)
        await probe.close()
        t_stop = time.monotonic()
        await asyncio.sleep(1.0)
        after = {"1s": _rss(server.proc.pid)}
        await asyncio.sleep(max(0.0, t_stop + settle_s - time.monotonic()))
        after["settled"] = _rss(server.proc.pid)
        return {"out": out, "rss": {"before": rss_before, "peak": peak, "after": after}, "lag_ms": stats["lag_ms"],
                "reference_lag_ms": json.loads(ref_out or "[]")}

    res = asyncio.run(run())
    out = res["out"]
    stage: dict[str, Any] = {"heavy_clients": heavy, "recent_clients": RECENT_CLIENTS, "seconds": seconds,
                             "settle_s": settle_s,
                             "rss_bytes": res["rss"], "loop_lag_ms": _pcts(res["lag_ms"]),
                             "idle_process_lag_ms": _pcts(res["reference_lag_ms"]),
                             "errors": len(out["errors"]), "error_text": out["errors"][:3]}
    for kind in ("status", "recent", "heavy"):
        stage[f"{kind}_ms"] = _pcts(out[f"{kind}_ms"])
        stage[f"{kind}_bytes_max"] = max(out[f"{kind}_bytes"]) if out[f"{kind}_bytes"] else None
    return stage


def measure(smoke: bool = False, log: Callable[[str], None] = print, code: str | None = None,
            heavy: int = 6, seconds: float | None = None, prefill: int | None = None) -> dict[str, Any]:
    seconds = seconds or (2.0 if smoke else 20.0)
    prefill = prefill or (300 if smoke else int(3600 / INTERVAL_S))
    env = {**os.environ, "GPU_WIDGETS_BACKEND": "simulated", "GPU_WIDGETS_SIMULATED_GPUS": str(GPUS)}
    env.pop("FAKE_NVML_CONFIG", None)
    env = server_code(env, code)  # gpu_widgets from another checkout (a before/after), the probe from here
    server = JupyterServer(sys.executable, env, {"gpu_widgets": True, "benchmarks.lag_probe": True},
                           [f"c.GpuWidgets.interval_s = {INTERVAL_S}", "c.GpuWidgets.window_s = 3600.0"],
                           "history-load")
    result: dict[str, Any] = {"gpus": GPUS, "interval_s": INTERVAL_S, "code": code or str(REPO), "stages": []}
    with server:
        deadline = time.monotonic() + 60
        while server.get_json(f"{API}/status")["device_count"] != GPUS and time.monotonic() < deadline:
            time.sleep(0.2)
        log(f"  history: filling {prefill} samples x {GPUS} GPUs")
        result["prefill"] = server.get_json(f"/bench-probe/prefill?seconds={prefill}", timeout=600)
        time.sleep(2.0)
        result["rss_baseline_bytes"] = _rss(server.proc.pid)
        for n_heavy in (0, 1 if smoke else heavy):
            log(f"  history: {RECENT_CLIENTS} clients x last {RECENT_SPAN_S:g} s every {RECENT_EVERY_S:g} s, "
                f"{n_heavy} heavy clients, {seconds:g} s")
            result["stages"].append(_stage(server, n_heavy, seconds, 1.0 if smoke else SETTLE_S))
    result["targets"] = _targets(result)
    return result


def _targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    base = result["rss_baseline_bytes"]
    for s in result["stages"]:
        who = f"{s['recent_clients']} x last 30 s + {s['heavy_clients']} heavy"
        p99 = s["status_ms"]["p99"]
        out.append({"target": f"/api/status p99 < 50 ms ({who})", "status": "met" if p99 is not None and p99 < 50
                    else "MISSED", "value": p99, "limit": 50})
        biggest = max(v for v in (s["recent_bytes_max"], s["heavy_bytes_max"], 0) if v is not None)
        out.append({"target": f"answers <= 8 MB ({who})", "status": "met" if biggest <= 8e6 else "MISSED",
                    "value": biggest / 1e6, "limit": 8})
        grew = (s["rss_bytes"]["after"]["settled"] - base) / 1e6
        out.append({"target": f"RSS within 50 MB of baseline {s['settle_s']:g} s after ({who})",
                    "status": "met" if grew < 50 else "MISSED", "value": grew, "limit": 50})
    return out


def table(result: dict[str, Any]) -> list[str]:
    def f(v: Any, d: int = 1) -> str:
        return "-" if v is None else f"{v:,.{d}f}"

    mb = 1e6
    lines = [f"Simulated backend, {result['gpus']} GPUs at {1 / result['interval_s']:g} Hz, an hour of history held; "
             f"server code from {result['code']}; RSS baseline {f(result['rss_baseline_bytes'] / mb, 0)} MB", "",
             "| heavy clients | /api/status p50 / p99 / max ms | last-30-s p50 / p99 ms, size MB | "
             "heavy p50 / max ms, size MB | loop lag p99 / max ms | idle process lag p99 / max ms | "
             "RSS before / peak / +1 s / settled MB | errors |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for s in result["stages"]:
        st, rc, hv, lag, rss = s["status_ms"], s["recent_ms"], s["heavy_ms"], s["loop_lag_ms"], s["rss_bytes"]
        ref = s["idle_process_lag_ms"]
        after = rss["after"]
        lines.append(
            f"| {s['heavy_clients']} | {f(st['p50'])} / {f(st['p99'])} / {f(st['max'])} | "
            f"{f(rc['p50'])} / {f(rc['p99'])}, {f((s['recent_bytes_max'] or 0) / mb, 2)} | "
            f"{f(hv['p50'], 0)} / {f(hv['max'], 0)}, {f((s['heavy_bytes_max'] or 0) / mb, 2)} | "
            f"{f(lag['p99'])} / {f(lag['max'])} | {f(ref['p99'])} / {f(ref['max'])} | {f(rss['before'] / mb, 0)} / {f(rss['peak'] / mb, 0)} / "
            f"{f(after['1s'] / mb, 0)} / {f(after['settled'] / mb, 0)} | {s['errors']} |")
    return lines


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m benchmarks.history_load", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--code", help="a checkout whose gpu_widgets the server runs (default: this one)")
    parser.add_argument("--heavy", type=int, default=6, help="heavy clients in the second stage (default 6)")
    parser.add_argument("--seconds", type=float, help="per stage (default 20)")
    parser.add_argument("--prefill", type=int, help="samples of history to fill (default 36000: an hour)")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    res = measure(smoke=args.smoke, code=args.code, heavy=args.heavy, seconds=args.seconds, prefill=args.prefill,
                  log=lambda m: print(m, file=sys.stderr, flush=True))
    print("\n".join(table(res)))
    for t in res["targets"]:
        print(f"{t['status']:7} {t['target']}: {t['value']:.3g} (limit {t['limit']})")
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))
