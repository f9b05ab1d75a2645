"""8. Parallel training: what the monitor costs each rank of a torch.distributed launch, and what
following a large launch costs the notebook.

(a) Overhead per rank: a 2-rank gloo launch (torchrun, CPU ranks, loopback) runs the same DDP loop
    with and without a TrainingMonitor (``model=`` and ``track()``: forward hooks, heartbeat,
    per-rank run log) in interleaved rounds, the same order on both ranks; each round's process
    CPU time (every thread: the monitor's, gloo's) is compared with the plain round next to it.
(b) torch.distributed calls the monitor makes: every function of ``torch.distributed`` (and of
    ``distributed_c10d``), every Store method and the TCPStore constructor are wrapped in the
    ranks and counted when called from gpu_widgets' code; split into the run's start (until half
    the loop), the steps after it (the target: 0 per step) and ``finish()``.
(c) follow() of a synthetic launch of 8 ranks x 10^5 steps: benchmarks/parallel_follow.py.

    python -m benchmarks.parallel            # all three, printed as tables
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from .common import REPO, WorkerError, summary
from .parallel_follow import LEAKS, FOLLOW_RANKS, FOLLOW_STEPS, STEPS_PER_S, follow_cost

ROUNDS = 6
STEPS = 500  # per round: ~5 s of ~10 ms steps
TARGET_OVERHEAD = 0.01

# with LEAKS: what torch.distributed, a launcher or the monitor would read from the developer's shell
LEAK_PREFIXES = ("TORCHELASTIC_", "SLURM_", "OMPI_", "PMI_", "PL_", "LT_", "ACCELERATE_")


# -- (a) and (b): inside each rank -----------------------------------------------------------------------
class _Calls:
    """torch.distributed calls, by name, tagged with the loop's phase when they were made."""

    def __init__(self) -> None:
        self.phase = "start"
        self.ours: dict[str, dict[str, int]] = {}  # phase -> name -> calls from gpu_widgets
        self.others: dict[str, int] = {}  # phase -> calls from anywhere else (DDP, the loop)

    def hit(self, name: str, caller: str) -> None:
        if caller.startswith("gpu_widgets"):
            per = self.ours.setdefault(self.phase, {})
            per[name] = per.get(name, 0) + 1
        else:
            self.others[self.phase] = self.others.get(self.phase, 0) + 1


def _count_distributed(calls: _Calls) -> None:
    import inspect

    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    def wrap(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            calls.hit(name, sys._getframe(1).f_globals.get("__name__", ""))
            return fn(*args, **kwargs)
        return counted

    done: dict[int, Callable[..., Any]] = {}
    for mod in (dist, distributed_c10d):
        for name, obj in list(vars(mod).items()):
            if name.startswith("__") or not (inspect.isfunction(obj) or inspect.isbuiltin(obj)):
                continue
            if id(obj) not in done:
                done[id(obj)] = wrap(name, obj)
            setattr(mod, name, done[id(obj)])
    for name in [k for k in vars(dist.Store) if not k.startswith("_")]:
        method = getattr(dist.Store, name)
        if callable(method):
            setattr(dist.Store, name, wrap(f"Store.{name}", method))

    class CountedTCPStore(dist.TCPStore):  # a new connection to torchrun's store is a call too
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            calls.hit("TCPStore()", sys._getframe(1).f_globals.get("__name__", ""))
            super().__init__(*args, **kwargs)

    dist.TCPStore = CountedTCPStore


def rank_worker(rounds: int, steps: int, out: Path) -> None:
    calls = _Calls()
    _count_distributed(calls)
    import random

    import torch
    import torch.distributed as dist

    from gpu_widgets import TrainingMonitor

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256))
    model = torch.nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    data = torch.utils.data.TensorDataset(torch.randn(steps * 64, 256), torch.randn(steps * 64, 256))

    def loop(batches: Any, mon: Any) -> None:
        for i, (x, y) in enumerate(batches):
            if mon is not None and i == steps // 2:
                calls.phase = "steps"
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            value = float(loss)  # both loops read the loss; the monitored one logs it
            if mon is not None:
                mon.log(loss=value)

    def one(kind: str, r: int) -> dict[str, float]:
        loader = torch.utils.data.DataLoader(data, batch_size=64)
        cpu, wall, own = time.process_time(), time.perf_counter(), time.thread_time()
        if kind == "plain":
            loop(loader, None)
        else:
            calls.phase = "start"
            mon = TrainingMonitor(f"bench round {r}", model=model, display=False)
            loop(mon.track(loader), mon)
            calls.phase = "finish"
            mon.finish()
            calls.phase = "after"
        return {"cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall,
                "loop_cpu_s": time.thread_time() - own}

    one("plain", -1)  # warm-up: first allocations, gloo's first buckets, the monitor's first imports
    one("monitor", -1)
    calls.ours.clear()
    calls.others.clear()
    rounds_out = []
    order = random.Random(8)  # the same seed on every rank: the same order, or the collectives would cross
    for r in range(rounds):
        pair = ["plain", "monitor"]
        order.shuffle(pair)
        rounds_out.append({k: one(k, r) for k in pair})
    dist.barrier()
    direct = _loop_cost_us(TrainingMonitor, torch)
    (out / f"rank{rank}.json").write_text(json.dumps({
        "loop_cost_us": direct,
        "rank": rank, "rounds": rounds_out, "calls_from_gpu_widgets": calls.ours, "calls_from_others": calls.others,
        "monitored_rounds": rounds, "steps": steps}))
    dist.destroy_process_group()


def _loop_cost_us(monitor: Any, torch: Any, n: int = 5_000) -> dict[str, float]:
    """What the monitor adds to the loop's thread per step, timed directly (best of 5, so the
    machine's noise does not count): the forward hooks of ``model=``, ``track()``, one ``log()``."""
    net, x = torch.nn.Linear(2, 2), torch.randn(1, 2)

    def best(body: Callable[[], None]) -> float:
        times = []
        for _ in range(5):
            t = time.perf_counter()
            body()
            times.append((time.perf_counter() - t) / n * 1e6)
        return min(times)

    def forwards() -> None:
        for _ in range(n):
            net(x)

    items = list(range(n))

    def plain_iter() -> None:
        for _ in items:
            pass

    bare, bare_iter = best(forwards), best(plain_iter)
    mon = monitor("loop cost", model=net, display=False, run_log=False)
    mon.log(loss=1.0)  # the run started: the hooks are on
    hooks = best(forwards) - bare
    track = best(lambda: [None for _ in mon.track(items)]) - bare_iter
    log = best(lambda: [mon.log(loss=0.5) for _ in items])
    mon.finish()
    return {"forward_hooks": hooks, "track": track, "log": log, "total": hooks + track + log}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def overhead(rounds: int, steps: int, log: Callable[[str], None]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="gw-bench-parallel-") as tmp:
        out = Path(tmp)
        env = {k: v for k, v in os.environ.items() if k not in LEAKS and not k.startswith(LEAK_PREFIXES)}
        env.update(PYTHONPATH=str(REPO), GPU_WIDGETS_BACKEND="simulated", GPU_WIDGETS_RUN_DIR=str(out / "runs"),
                   CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", PYTHONWARNINGS="ignore")
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--nnodes=1",
                   "--master_addr=127.0.0.1", f"--master_port={_free_port()}", "-m", "benchmarks.parallel",
                   "--rank-worker", str(rounds), str(steps), str(out)]
        log(f"  parallel: 2 gloo ranks, {rounds} rounds of {steps} steps with and without the monitor")
        done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise RuntimeError(f"the ranks failed ({done.returncode}): {(done.stdout + done.stderr)[-2000:]}")
        ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    result: dict[str, Any] = {"rounds": rounds, "steps_per_round": steps, "ranks": {}}
    for got in ranks:
        rs = got["rounds"]
        ratios = [x["monitor"]["cpu_s"] / x["plain"]["cpu_s"] - 1.0 for x in rs]
        ours = got["calls_from_gpu_widgets"]
        per_step = sum(ours.get("steps", {}).values()) / (rounds * (steps - steps // 2))
        result["ranks"][str(got["rank"])] = {
            "cpu_overhead": {**summary(ratios), "per_round": ratios},
            "plain_cpu_ms_per_step": summary([x["plain"]["cpu_s"] / steps * 1e3 for x in rs]),
            "plain_wall_ms_per_step": summary([x["plain"]["wall_s"] / steps * 1e3 for x in rs]),
            "loop_thread_cpu_overhead": summary([x["monitor"]["loop_cpu_s"] / x["plain"]["loop_cpu_s"] - 1.0 for x in rs]),
            "wall_overhead": summary([x["monitor"]["wall_s"] / x["plain"]["wall_s"] - 1.0 for x in rs]),
            "distributed_calls_per_step": per_step,
            "loop_cost_us": got["loop_cost_us"],
            "loop_cost_share": got["loop_cost_us"]["total"] / 1e3 / summary(
                [x["plain"]["wall_s"] / steps * 1e3 for x in rs])["median"],
            "distributed_calls_per_run": {phase: {k: v / rounds for k, v in sorted(names.items())}
                                          for phase, names in ours.items()},
            "other_distributed_calls_per_round": {k: v / (2 * rounds) for k, v in got["calls_from_others"].items()},
        }
    return result


# -- the section ------------------------------------------------------------------------------------------
def measure(smoke: bool = False, log: Callable[[str], None] = print) -> dict[str, Any]:
    try:
        import torch  # noqa: F401
    except ImportError:
        return {"skipped": "torch is not installed: `pip install torch==2.13.0` (the CPU wheel)"}
    try:
        result: dict[str, Any] = {"overhead": overhead(2 if smoke else ROUNDS, 40 if smoke else STEPS, log)}
        ranks, steps = (2, 2_000) if smoke else (FOLLOW_RANKS, FOLLOW_STEPS)
        result["follow"] = follow_cost(ranks, steps, log)
    except (WorkerError, RuntimeError, subprocess.TimeoutExpired) as exc:
        return {"skipped": f"the parallel benchmark failed: {exc}"}
    ranks_out = result["overhead"]["ranks"].values()
    worst = max(r["cpu_overhead"]["median"] for r in ranks_out)
    calls = max(r["distributed_calls_per_step"] for r in ranks_out)
    result["targets"] = [
        {"target": "CPU overhead per rank < 1 % (median of rounds, worst rank)",
         "status": "met" if worst < TARGET_OVERHEAD else "MISSED", "value": worst, "limit": TARGET_OVERHEAD},
        {"target": "torch.distributed calls per step from the monitor = 0",
         "status": "met" if calls == 0 else "MISSED", "value": calls, "limit": 0},
        {"target": f"follow() of {ranks} ranks x {steps:,} steps: Python memory held (MB; for information)",
         "status": "info", "value": result["follow"]["python_bytes"] / 1e6},
    ]
    return result


def table(result: dict[str, Any]) -> list[str]:
    if "skipped" in result:
        return [f"skipped: {result['skipped']}"]
    o = result["overhead"]
    lines = [f"(a, b) 2 gloo ranks, {o['rounds']} interleaved rounds of {o['steps_per_round']} steps, "
             "with and without TrainingMonitor(model=...) + track()", "",
             "| rank | plain step ms (wall) | CPU ms per step | CPU overhead median [p25, p75] | loop thread's CPU | "
             "wall overhead median | loop thread µs per step, timed directly (hooks + track + log) | "
             "distributed calls per step | one-off calls per run (start; finish) |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for rank, r in o["ranks"].items():
        c, calls, lc = r["cpu_overhead"], r["distributed_calls_per_run"], r["loop_cost_us"]

        def names(phase: str) -> str:
            return ", ".join(f"{k} x{v:g}" for k, v in calls.get(phase, {}).items()) or "none"

        lines.append(f"| {rank} | {r['plain_wall_ms_per_step']['median']:.2f} | "
                     f"{r['plain_cpu_ms_per_step']['median']:.2f} | {c['median']:+.2%} [{c['p25']:+.2%}, {c['p75']:+.2%}] | "
                     f"{r['loop_thread_cpu_overhead']['median']:+.2%} | "
                     f"{r['wall_overhead']['median']:+.2%} | "
                     f"{lc['forward_hooks']:.1f} + {lc['track']:.1f} + {lc['log']:.1f} = {lc['total']:.1f} "
                     f"({r['loop_cost_share']:.2%} of a step) | {r['distributed_calls_per_step']:g} | "
                     f"{names('start')}; {names('finish')} |")
    f = result["follow"]
    rd = f["redraw"]["bytes"]
    lines += ["", f"(c) follow() of a launch of {f['ranks']} ranks x {f['steps']:,} steps "
              f"({f['launch_bytes'] / 1e6:.0f} MB on disk), then {STEPS_PER_S} steps a second more", "",
              "| first full read s | Python memory held MB | peak MB | RSS growth MB | first draws KB | "
              "widgets created KB (once) | redraw as it grows: median KB | max KB |",
              "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
              f"| {f['first_read_s']:.1f} | {f['python_bytes'] / 1e6:.1f} | {f['python_peak_bytes'] / 1e6:.1f} | "
              f"{f['rss_growth_bytes'] / 1e6:.1f} | {f['first_draws_bytes'] / 1024:.1f} | "
              f"{f['created_bytes'] / 1024:.1f} | {(rd['median'] or 0) / 1024:.1f} | {(rd['max'] or 0) / 1024:.1f} |"]
    return lines


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rank-worker", nargs=3, metavar=("ROUNDS", "STEPS", "OUT"))
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.rank_worker:
        rank_worker(int(args.rank_worker[0]), int(args.rank_worker[1]), Path(args.rank_worker[2]))
    else:
        print("\n".join(table(measure(smoke=args.smoke, log=lambda m: print(m, file=sys.stderr)))))
