"""Cost of TrainingMonitor.log() on the calling thread: median and p99 ns per call.

    python benchmarks/log_cost.py            # 3 scalar keys, 200 000 calls
    python benchmarks/log_cost.py --keys 1
    python benchmarks/log_cost.py --run-log --calls 3000000   # the run log written as well
    python benchmarks/log_cost.py --lock-cost                 # what the lock in log() adds

Runs headless with no run log and no sampler (the timer thread still runs, as in a notebook),
so the figure is what a training loop pays per log() call. With ``--run-log`` the run log is
written to a temporary folder: a loop that does nothing but log() outruns the writer and waits
for it (back-pressure), so the mean, which includes those waits, is printed too. ``--lock-cost``
times log() against the same body without its lock and re-entry flag, interleaved, paired.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from gpu_widgets.backends import NoGpuBackend
from gpu_widgets.monitor import run_state
from gpu_widgets.monitor.monitor import RUNNING, TrainingMonitor
from gpu_widgets.sampling.sampler import Sampler


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=3)
    parser.add_argument("--batch", type=int, default=1000, help="calls timed together (timer resolution)")
    parser.add_argument("--run-log", action="store_true", help="write the run log (to a temporary folder)")
    parser.add_argument("--lock-cost", action="store_true", help="log() against its body without the lock")
    args = parser.parse_args()
    if args.lock_cost:
        return lock_cost(args)
    with tempfile.TemporaryDirectory() as tmp:
        run(args, tmp if args.run_log else False)


def run(args: argparse.Namespace, run_log: str | bool) -> None:
    mon = TrainingMonitor("bench", run_log=run_log, display=False, sampler=Sampler(NoGpuBackend("benchmark")))
    values = {f"k{i}": 0.5 + i for i in range(args.keys)}
    mon.log(**values)  # start the run outside the timing
    per_call = []
    clock = time.perf_counter_ns
    for _ in range(args.calls // args.batch):
        t = clock()
        for _ in range(args.batch):
            mon.log(**values)
        per_call.append((clock() - t) / args.batch)
    mon.finish()
    mean = statistics.fmean(per_call)
    per_call.sort()
    where = "run log written" if run_log else "no run log"
    print(f"log() with {args.keys} float key(s), {args.calls} calls, {where}: "
          f"median {statistics.median(per_call):.0f} ns, p99 {per_call[int(0.99 * (len(per_call) - 1))]:.0f} ns, "
          f"mean {mean:.0f} ns per call")


def unlocked_log(self: TrainingMonitor, step: int | None = None, **values: float) -> None:
    """log() without its lock: one thread only, no signal handler that logs (never use this)."""
    if self._run.state is not RUNNING:
        self._r.start()
    if step is None:
        step = self._records.next_step
    t = run_state.now()
    if t >= self._writer.due:
        t = self._writer.wait()
    self._records.append(step, t, values)


def lock_cost(args: argparse.Namespace) -> None:
    mon = TrainingMonitor("bench", run_log=False, display=False, sampler=Sampler(NoGpuBackend("benchmark")))
    values = {f"k{i}": 0.5 + i for i in range(args.keys)}
    mon.log(**values)
    times: dict[str, list[float]] = {"log()": [], "unlocked": []}
    clock = time.perf_counter_ns
    for i in range(args.calls // args.batch // 2):
        for name in ("log()", "unlocked") if i % 2 else ("unlocked", "log()"):
            log = mon.log if name == "log()" else unlocked_log.__get__(mon)
            t = clock()
            for _ in range(args.batch):
                log(**values)
            times[name].append((clock() - t) / args.batch)
    mon.finish()
    diff = statistics.median(a - b for a, b in zip(times["log()"], times["unlocked"]))
    print(f"{args.keys} float key(s), {len(times['log()'])} pairs of {args.batch} calls: log() median "
          f"{statistics.median(times['log()']):.0f} ns, unlocked {statistics.median(times['unlocked']):.0f} ns, "
          f"the lock adds {diff:.0f} ns (median of the paired differences)")


if __name__ == "__main__":
    main()
