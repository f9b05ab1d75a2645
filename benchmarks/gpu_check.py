"""On a machine with an NVIDIA GPU: check our readings against nvidia-smi, measure the sampler
against the real driver, the overhead of TrainingMonitor on a small CUDA training loop, and busy
against SM activity (GPM) for two CUDA loops: large matmuls and a tiny one-block kernel
(benchmarks/gpm_check.py; expected busy >= 95 % for both, SM active >= 80 % and <= 10 %).

    python -m benchmarks.gpu_check                    # everything, ~3 minutes, JSON to gpu_check.json
    python -m benchmarks.gpu_check --json out.json --train-seconds 60

Runs unattended: every part has its own time limit, and a part that cannot run (no nvidia-smi,
no CUDA, no torch) is reported as skipped with the reason; the exit code is 1 only when a
reading disagrees with nvidia-smi beyond its tolerance (or when no GPU is found at all).
Needs torch with CUDA for the training part (`pip install torch` on that machine).

Dry run without a GPU (what can be checked here): run it under the fake driver with
``--allow-cpu``: the nvidia-smi part is skipped, the sampler part runs on the fake library, the
training part runs on the CPU.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.gpm_check import Skipped, busy_vs_sm_active, torch_device  # noqa: E402  (after the path is set)
from benchmarks.gpm_check import lines as gpm_lines  # noqa: E402

# nvidia-smi field -> (our field, how to convert nvidia-smi's value, tolerance)
#   tolerance: "exact", or ("abs", x) / ("rel", fraction): readings taken a moment apart may differ
SMI_FIELDS: list[tuple[str, str, Any, Any]] = [
    ("uuid", "uuid", str, "exact"),
    ("name", "name", str, "exact"),
    ("memory.total", "memory_total_bytes", lambda v: float(v) * 2**20, ("abs", 2**20)),
    ("memory.used", "memory_used_bytes", lambda v: float(v) * 2**20, ("abs", 256 * 2**20)),
    ("memory.free", "memory_free_bytes", lambda v: float(v) * 2**20, ("abs", 256 * 2**20)),
    ("utilization.gpu", "utilization_gpu_percent", float, ("abs", 25)),
    ("utilization.memory", "utilization_memory_percent", float, ("abs", 25)),
    ("temperature.gpu", "temperature_c", float, ("abs", 3)),
    ("power.draw", "power_w", float, ("rel", 0.25)),
    ("enforced.power.limit", "power_limit_w", float, ("rel", 0.01)),
    ("clocks.sm", "sm_clock_mhz", float, ("rel", 0.25)),
    ("clocks.mem", "memory_clock_mhz", float, ("rel", 0.05)),
    ("clocks.gr", "graphics_clock_mhz", float, ("rel", 0.25)),
    ("pstate", "performance_state", lambda v: float(v.strip().lstrip("P")), ("abs", 2)),
    ("fan.speed", "fan_percent", float, ("abs", 10)),
]


def _run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def compare_with_nvidia_smi() -> dict[str, Any]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {"skipped": "nvidia-smi not found on PATH"}
    from gpu_widgets.backends import open_backend
    from gpu_widgets.sampling.snapshot import take

    backend = open_backend("nvml")
    if backend.status != "ok":
        return {"skipped": f"NVML backend not usable: {backend.reason}"}
    query = ",".join(f for f, *_ in SMI_FIELDS)
    ours_before = take(backend, time.time())
    out = _run([smi, f"--query-gpu=index,{query}", "--format=csv,noheader,nounits"], timeout=60)
    ours_after = take(backend, time.time())
    if out.returncode != 0:
        return {"skipped": f"nvidia-smi failed: {out.stderr.strip()[:300]}"}
    rows = []
    mismatches = 0
    for line in out.stdout.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        index = int(parts[0])
        devs = [d for d in ours_before["devices"] if d["index"] == index]
        devs_after = [d for d in ours_after["devices"] if d["index"] == index]
        if not devs:
            rows.append({"index": index, "field": "*", "ok": False, "note": "GPU missing from our sample"})
            mismatches += 1
            continue
        for (smi_field, ours, conv, tol), raw in zip(SMI_FIELDS, parts[1:]):
            if raw in ("[N/A]", "N/A", "[Not Supported]", ""):
                ok = devs[0].get(ours) is None or ours == "fan_percent"
                rows.append({"index": index, "field": ours, "smi": raw, "ours": devs[0].get(ours), "ok": ok,
                             "note": "nvidia-smi: not available"})
                mismatches += 0 if ok else 1
                continue
            theirs = conv(raw)
            values = [d.get(ours) for d in (devs[0], devs_after[0] if devs_after else devs[0])]
            if tol == "exact":
                ok = any(v == theirs for v in values)
            else:
                kind, x = tol
                limit = x if kind == "abs" else x * abs(theirs)
                # a reading taken a moment before or after nvidia-smi's: either may match
                ok = any(v is not None and abs(float(v) - theirs) <= limit for v in values)
            mismatches += 0 if ok else 1
            rows.append({"index": index, "field": ours, "smi": theirs, "ours": values, "ok": ok,
                         "tolerance": tol})
    return {"rows": rows, "mismatches": mismatches, "driver_version": ours_before.get("driver_version")}


def sampler_on_real_driver(rounds: int = 7) -> dict[str, Any]:
    """The sampler-cost section against the real driver: the floor and our sampler, interleaved."""
    from benchmarks.sampler_cost import _floor, _ours

    floor, ours = _floor(), _ours()
    for fn in (*floor.values(), *ours.values()):
        fn()
    out: dict[str, Any] = {}
    cpu: dict[str, list[float]] = {f"{w} {m}": [] for w in ("floor", "ours") for m in ("fast", "slow", "full")}
    wall: dict[str, list[float]] = {k: [] for k in cpu}
    for _ in range(rounds):
        for who, modes in (("floor", floor), ("ours", ours)):
            for mode in ("fast", "slow", "full"):
                k = 5 if mode == "fast" else 2
                c0, w0 = time.process_time(), time.perf_counter()
                for _ in range(k):
                    modes[mode]()
                cpu[f"{who} {mode}"].append((time.process_time() - c0) / k * 1e6)
                wall[f"{who} {mode}"].append((time.perf_counter() - w0) / k * 1e6)
    for key in cpu:
        out[key] = {"cpu_us": statistics.median(cpu[key]), "wall_us": statistics.median(wall[key])}
    for mode in ("fast", "slow", "full"):
        out[f"ratio {mode}"] = out[f"ours {mode}"]["cpu_us"] / max(1e-9, out[f"floor {mode}"]["cpu_us"])
    import pynvml

    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    t0 = time.perf_counter()
    pynvml.nvmlDeviceGetPcieThroughput(h, 0)
    out["pcie_call_ms"] = (time.perf_counter() - t0) * 1e3
    out["gpus"] = pynvml.nvmlDeviceGetCount()
    return out


def training_overhead(seconds: float, allow_cpu: bool) -> dict[str, Any]:
    try:
        torch, device = torch_device(allow_cpu)
    except Skipped as exc:
        return {"skipped": str(exc)}
    nn = torch.nn
    if device == "cpu":
        torch.set_num_threads(1)
    from gpu_widgets import TrainingMonitor

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
                          nn.Linear(2048, 10)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    xs = torch.randn(64 * 256, 1024, device=device)
    ys = xs[:, :10].argmax(dim=1)
    batch = 256

    def step(i: int) -> Any:
        j = (i % 64) * batch
        opt.zero_grad(set_to_none=True)
        out = model(xs[j:j + batch])
        loss = loss_fn(out, ys[j:j + batch])
        loss.backward()
        opt.step()
        return loss

    def plain(n: int) -> float:
        t0 = time.perf_counter()
        for i in range(n):
            step(i).item()  # the usual per-step sync (printing or logging a float)
        return time.perf_counter() - t0

    from benchmarks.training import _threads_cpu

    mon = TrainingMonitor("gpu_check", display=False, run_log=False)  # one for the whole check: a run's steady state
    shares: list[float] = []

    def monitored(n: int) -> float:
        c0 = sum(_threads_cpu("gpu-widgets").values())
        t0 = time.perf_counter()
        for i in range(n):
            loss = step(i)
            mon.log(loss=loss.item())
        dt = time.perf_counter() - t0
        shares.append((sum(_threads_cpu("gpu-widgets").values()) - c0) / dt)
        return dt

    plain(50)
    probe = plain(50) / 50
    n = max(50, int(min(2.0, seconds / 20) / probe))
    runs: dict[str, list[float]] = {"baseline": [], "baseline A/A": [], "gpu-widgets": []}
    fns = {"baseline": plain, "baseline A/A": plain, "gpu-widgets": monitored}
    import random

    rng = random.Random(0)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        order = list(fns)
        rng.shuffle(order)
        for name in order:
            runs[name].append(fns[name](n) / n * 1e3)
    mon.finish()
    base = runs["baseline"]
    out: dict[str, Any] = {"device": device, "steps_per_run": n, "rounds": len(base),
                           "ms_per_step": {k: statistics.median(v) for k, v in runs.items()},
                           "monitor_threads_cpu_share": statistics.median(shares) if shares else None}
    for name in ("baseline A/A", "gpu-widgets"):
        ratios = sorted(t / b - 1 for t, b in zip(runs[name], base))
        out[f"slowdown {name}"] = {"median": statistics.median(ratios), "min": ratios[0], "max": ratios[-1]}
    if device == "cuda":
        out["gpu"] = torch.cuda.get_device_name(0)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, default=Path("gpu_check.json"))
    parser.add_argument("--train-seconds", type=float, default=90.0)
    parser.add_argument("--allow-cpu", action="store_true", help="train on the CPU when CUDA is absent (dry run)")
    parser.add_argument("--gpm-seconds", type=float, default=10.0, help="how long each GPM loop runs")
    args = parser.parse_args(argv)
    report: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "host": os.uname().nodename}
    smi = shutil.which("nvidia-smi")
    if smi:
        q = _run([smi, "--query-gpu=name,driver_version", "--format=csv,noheader"], timeout=60)
        report["nvidia_smi"] = q.stdout.strip()
    parts = [("compare", compare_with_nvidia_smi, ()), ("sampler", sampler_on_real_driver, ()),
             ("training", training_overhead, (args.train_seconds, args.allow_cpu)),
             ("gpm", busy_vs_sm_active, (args.gpm_seconds, args.allow_cpu))]
    for name, fn, fn_args in parts:
        print(f"== {name}", flush=True)
        t0 = time.monotonic()
        try:
            report[name] = fn(*fn_args)
        except Exception as exc:  # one part failing must not lose the others' numbers
            import traceback

            report[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-2000:]}
        report[name]["elapsed_s"] = round(time.monotonic() - t0, 1)
        print(json.dumps(report[name], indent=1, default=str)[:6000], flush=True)
    print("\n".join(gpm_lines(report["gpm"])))
    args.json.write_text(json.dumps(report, indent=1, default=str))
    print(f"written to {args.json}")
    bad = report["compare"].get("mismatches", 0)
    if bad:
        print(f"FAILED: {bad} reading(s) disagree with nvidia-smi (see 'compare' rows with ok=false)")
    no_gpu = "error" in report["sampler"] and not args.allow_cpu
    return 1 if bad or no_gpu else 0


if __name__ == "__main__":
    sys.exit(main())
