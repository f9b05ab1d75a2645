"""5. Memory after a long run, fast-forwarded with a fake clock on the fake driver (8 GPUs x 8
processes): resident memory against simulated time.

- sampler: the server's sampler (Sampler + NvmlBackend + History, window 1 h at 1 Hz) ticked
  86 400 times (24 h at 1 Hz), the slow read every 10th tick;
- monitor-gpu: a TrainingMonitor on such a sampler that logged once and then only watches the
  GPUs: one GPU sample per second, its run log on (as by default), so that samples older than
  ``gpu_window_s`` (the same 1 h) leave memory for the run log;
- monitor: the same, with 12 log() calls per simulated second (~10^6 steps in 24 h). The logged
  steps stay in memory: that is the user's data, and its cost per step is reported.
The monitor's timer work is done every 10 simulated minutes.

(The Jupyter server itself is fast-forwarded through 24 h by the server benchmark.)

    python -m benchmarks.memory --worker sampler|monitor-gpu|monitor
"""
from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from typing import Any, Callable

from .common import FakeDriver, Worker, WorkerError, rss_bytes, serve
from .payload import FakeClock

STEPS_PER_SECOND = 12
MB = 1024 * 1024
KINDS = ("sampler", "monitor-gpu", "monitor")


def worker(kind: str) -> None:
    from gpu_widgets.backends.nvml import NvmlBackend
    from gpu_widgets.sampling.sampler import Sampler

    state: dict[str, Any] = {}

    def setup(window_s: float) -> dict[str, Any]:
        backend = NvmlBackend()
        backend.open()
        clock = FakeClock(time.time())
        sampler = Sampler(backend, interval_s=1.0, window_s=window_s, clock=clock)
        sampler._read_slow()
        state.update(sampler=sampler, clock=clock, t=0)
        if kind.startswith("monitor"):
            from gpu_widgets.monitor import run_state
            from gpu_widgets.monitor.monitor import TrainingMonitor

            run_state.now = lambda: clock.t
            runs = state["runs"] = tempfile.TemporaryDirectory(prefix="gw-bench-runs-")
            mon = state["mon"] = TrainingMonitor("memory", run_log=runs.name, display=False, sampler=sampler,
                                                 gpu_window_s=window_s)
            mon.log(0, loss=1.0, accuracy=0.5, lr=3e-4)  # the run starts (and watches the GPUs)
            state["step"] = 1
            state["log"] = kind == "monitor"
        gc.collect()
        return {"rss_bytes": rss_bytes(), "history_capacity": sampler.history.capacity}

    def advance(seconds: int) -> dict[str, Any]:
        sampler, clock, mon = state["sampler"], state["clock"], state.get("mon")
        t = state["t"]
        for _ in range(seconds):
            t += 1
            clock.t += 1.0
            if mon is not None:
                if state["log"]:
                    step = state["step"]
                    for i in range(step, step + STEPS_PER_SECOND):
                        mon.log(i, loss=1.0 / (1 + i), accuracy=0.5, lr=3e-4)
                    state["step"] = step + STEPS_PER_SECOND
                if t % 600 == 0:
                    mon.parts.tick()
            elif t % 10 == 0:
                sampler._read_slow()
            sampler.tick()
        state["t"] = t
        gc.collect()
        out = {"simulated_s": t, "rss_bytes": rss_bytes(), "history_samples": len(sampler.history),
               "history_bytes_held": sampler.history.bytes_held}
        if mon is not None:
            mon.refresh()
            out.update(steps=state["step"], gpu_samples=len(mon.parts.trace), gpu_samples_kept=mon.parts.trace.kept,
                       points_in_marks=sum(len(m.x) for c in mon.parts.view.charts.values() for m in c.lines.values()))
        return out

    serve({"setup": setup, "advance": advance})


def measure(smoke: bool = False, log: Callable[[str], None] = print) -> dict[str, Any]:
    from .training import monitor_ready

    hours = [0.25, 0.5] if smoke else [1, 2, 6, 12, 24]
    window_s = 600.0 if smoke else 3600.0
    result: dict[str, Any] = {"window_s": window_s, "skipped": {}}
    kinds = ["sampler"]
    ready, why = monitor_ready()
    if ready:
        kinds += ["monitor-gpu", "monitor"]
    else:
        result["skipped"]["monitor"] = why
    with FakeDriver() as driver:
        for kind in kinds:
            w = Worker(sys.executable, "benchmarks.memory", ["--worker", kind], driver.env(), timeout=1800)
            try:
                start = w.call(op="setup", window_s=window_s)
                marks = []
                done = 0
                for h in hours:
                    log(f"  memory: {kind}, {h:g} h simulated")
                    marks.append(w.call(op="advance", seconds=int(h * 3600) - done))
                    done = int(h * 3600)
                result[kind] = {"start": start, "marks": marks}
            except WorkerError as exc:
                result["skipped"][kind] = f"failed: {exc}"
            finally:
                w.close()
    result["targets"] = _targets(result)
    return result


def _targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    s = result.get("sampler")
    if s:
        marks = s["marks"]
        full = [m for m in marks if m["simulated_s"] >= result["window_s"]]  # history full from here on
        growth = (full[-1]["rss_bytes"] - full[0]["rss_bytes"]) if len(full) > 1 else 0
        out.append({"target": "sampler/server memory bounded by the configured history", "status":
                    "met" if growth <= 2 * MB else "MISSED", "value": growth,
                    "measure": "RSS growth once the history is full (bytes)", "limit": 2 * MB})
    g = result.get("monitor-gpu")
    if g:
        marks = g["marks"]
        # From the first mark on, an hour of GPU samples is in memory (1 h window).
        growth = marks[-1]["rss_bytes"] - marks[0]["rss_bytes"]
        out.append({"target": "monitor memory bounded by the configured history (gpu_window_s)", "status":
                    "met" if growth <= 2 * MB else "MISSED", "value": growth,
                    "measure": "RSS growth from the first to the last mark, GPU samples only (bytes)", "limit": 2 * MB})
    m = result.get("monitor")
    if m:
        first, last = m["marks"][0], m["marks"][-1]
        growth = last["rss_bytes"] - first["rss_bytes"]
        steps = last["steps"] - first["steps"]
        extra = growth - ((g["marks"][-1]["rss_bytes"] - g["marks"][0]["rss_bytes"]) if g else 0)
        out.append({"target": "monitor memory: the logged steps are kept (the user's data)", "status": "info",
                    "value": growth, "bytes_per_step": extra / steps if steps else None,
                    "measure": "RSS growth from the first to the last mark with 12 log()/s (bytes)"})
    return out


def gpu_samples(mark: dict[str, Any]) -> str:
    if "gpu_samples" not in mark:
        return "-"
    return f"{mark['gpu_samples']:,} ({mark['gpu_samples_kept']:,})"


def table(result: dict[str, Any]) -> list[str]:
    lines = ["| what | simulated time | RSS MB | history samples (capacity) | steps logged | GPU samples (in memory) | "
             "points in marks |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for kind in KINDS:
        r = result.get(kind)
        if not r:
            continue
        cap = r["start"]["history_capacity"]
        lines.append(f"| {kind} | start | {r['start']['rss_bytes'] / MB:.1f} | 0 ({cap}) | - | - | - |")
        for m in r["marks"]:
            steps = f"{m['steps']:,}" if "steps" in m else "-"
            lines.append(f"| {kind} | {m['simulated_s'] / 3600:g} h | {m['rss_bytes'] / MB:.1f} | "
                         f"{m['history_samples']} ({cap}) | {steps} | {gpu_samples(m)} | "
                         f"{m.get('points_in_marks', '-')} |")
    for name, why in result["skipped"].items():
        lines.append(f"\nskipped {name}: {why}")
    return lines


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", choices=KINDS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
    else:
        print("\n".join(table(measure())))
