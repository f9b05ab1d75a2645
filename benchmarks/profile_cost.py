"""9. What a profile costs: ``TrainingMonitor.profile()`` on a real CPU training loop.

Two loops (one thread, CPU torch): "small ops" (a step of 1,600 element-wise ops on small tensors:
the dispatch-heavy case where a profiler costs most) and "matmul" (one 512x512 matmul chain a
step). Each round runs a monitored loop of WARMUP + STEPS + AFTER steps twice, in a fresh random
order: once plain, once with ``mon.profile(steps=STEPS)`` asked before it; every step is timed.
The profiled steps' slowdown is the ratio of their median step time to the same steps' in the
plain run of the round; "after" compares the steps once the profile is done (the monitor's usual
cost again: target ratio ~1). Also: the time from the last profiled step to the result (export +
analysis, on the monitor's side thread), and the verdict.

    python -m benchmarks.profile_cost            # a table
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any, Callable

from .common import interleaved, summary

ROUNDS = 5
WARMUP, STEPS, AFTER = 2, 20, 40
LOOPS = ("small ops", "matmul")


def _loop(kind: str) -> Callable[[], Any]:
    import torch

    torch.manual_seed(0)
    if kind == "small ops":
        xs = [torch.randn(8) for _ in range(4)]

        def step() -> Any:
            y = xs[0]
            for i in range(400):  # 1,600 ops a step: past the launch-bound threshold (1,000)
                y = (y + xs[i % 4]) * 0.5
                y = y.relu() - 0.1
            return y
    else:
        a = torch.randn(512, 512)

        def step() -> Any:
            return (a @ a).tanh() @ a
    return step


def run_once(kind: str, profile: bool, run_root: str) -> dict[str, Any]:
    from gpu_widgets import TrainingMonitor

    step = _loop(kind)
    mon = TrainingMonitor(f"bench {kind}", display=False, run_log=os.path.join(run_root, "runs"))
    prof = mon.profile(steps=STEPS, warmup=WARMUP) if profile else None
    times, total = [], WARMUP + 1 + STEPS + AFTER  # +1: torch's own warm-up step
    with mon:
        for i in range(total):
            t = time.perf_counter()
            step()
            mon.log(i=i)
            times.append(time.perf_counter() - t)
            if prof is not None and i == WARMUP + STEPS:
                t_end = time.perf_counter()
    out: dict[str, Any] = {"times": times}
    if prof is not None:
        done = prof.wait(120)
        out["ready_s"] = time.perf_counter() - t_end if done else None
        out["verdict"] = prof.verdict if done else f"not done ({prof.status}: {prof.error})"
    return out


def measure(smoke: bool = False, log: Callable[[str], None] = print) -> dict[str, Any]:
    try:
        import torch
    except ImportError:
        return {"skipped": "torch is not installed"}
    torch.set_num_threads(1)
    rounds = 1 if smoke else ROUNDS
    profiled = slice(WARMUP + 1, WARMUP + 1 + STEPS)
    after = slice(WARMUP + 1 + STEPS + 5, None)  # a few steps for the profiler's stop to settle
    results: dict[str, Any] = {"rounds": rounds, "steps": STEPS, "loops": {}}
    with tempfile.TemporaryDirectory() as root:
        runs: dict[tuple[str, bool], list[dict[str, Any]]] = {}
        for _, (kind, prof) in interleaved([(k, p) for k in LOOPS for p in (False, True)], rounds):
            log(f"  profile: {kind}, {'profiled' if prof else 'plain'}")
            runs.setdefault((kind, prof), []).append(run_once(kind, prof, root))
    for kind in LOOPS:
        plain, prof = runs[(kind, False)], runs[(kind, True)]
        slow = [statistics.median(p["times"][profiled]) / statistics.median(q["times"][profiled]) for p, q in zip(prof, plain)]
        back = [statistics.median(p["times"][after]) / statistics.median(q["times"][after]) for p, q in zip(prof, plain)]
        results["loops"][kind] = {
            "plain_step_ms": statistics.median(statistics.median(q["times"][profiled]) for q in plain) * 1e3,
            "profiled_ratio": summary(slow), "after_ratio": summary(back),
            "ready_s": statistics.median([p["ready_s"] for p in prof if p["ready_s"] is not None] or [float("nan")]),
            "verdicts": sorted({p["verdict"] for p in prof}),
        }
    worst_after = max(r["after_ratio"]["median"] for r in results["loops"].values())
    results["targets"] = [{"target": "steps after a profile cost what they did before (median ratio < 1.05)",
                           "status": "met" if worst_after < 1.05 else "MISSED", "value": worst_after, "limit": 1.05}]
    return results


def table(result: dict[str, Any]) -> list[str]:
    if "skipped" in result:
        return [f"skipped: {result['skipped']}"]
    lines = [f"{result['rounds']} interleaved rounds; {result['steps']} profiled steps a run, one thread", "",
             "| loop | plain step ms | profiled steps: time ratio, median [p25, p75] | steps after: ratio | "
             "result ready after the last step | verdict |", "| --- | ---: | ---: | ---: | ---: | --- |"]
    for kind, r in result["loops"].items():
        p, a = r["profiled_ratio"], r["after_ratio"]
        lines.append(f"| {kind} | {r['plain_step_ms']:.2f} | {p['median']:.2f}× [{p['p25']:.2f}, {p['p75']:.2f}] | "
                     f"{a['median']:.3f}× | {r['ready_s']:.2f} s | {', '.join(r['verdicts'])} |")
    return lines


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    res = measure(smoke=args.smoke, log=lambda m: print(m, file=sys.stderr))
    print(json.dumps(res, indent=1, default=str) if args.json else "\n".join(table(res)))
