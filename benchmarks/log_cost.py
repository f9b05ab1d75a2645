"""Cost of TrainingMonitor.log() on the calling thread: median and p99 ns per call.

    python benchmarks/log_cost.py            # 3 scalar keys, 200 000 calls
    python benchmarks/log_cost.py --keys 1

Runs headless with no run log and no sampler (the timer thread still runs, as in a notebook),
so the figure is what a training loop pays per log() call.
"""
from __future__ import annotations

import argparse
import statistics
import time

from gpu_widgets.backends import NoGpuBackend
from gpu_widgets.monitor.monitor import TrainingMonitor
from gpu_widgets.sampler import Sampler


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=3)
    parser.add_argument("--batch", type=int, default=1000, help="calls timed together (timer resolution)")
    args = parser.parse_args()
    mon = TrainingMonitor("bench", run_log=False, display=False, sampler=Sampler(NoGpuBackend("benchmark")))
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
    per_call.sort()
    print(f"log() with {args.keys} float key(s), {args.calls} calls: median {statistics.median(per_call):.0f} ns, "
          f"p99 {per_call[int(0.99 * (len(per_call) - 1))]:.0f} ns per call")


if __name__ == "__main__":
    main()
