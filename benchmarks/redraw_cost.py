"""CPU time of one TrainingMonitor redraw in steady state: median and p90 ms.

    python benchmarks/redraw_cost.py            # 1 and 8 simulated GPUs
    python benchmarks/redraw_cost.py --gpus 2

A run of 20,000 steps (two keys) and one GPU sample per 50 steps is built first; then each of
200 rounds logs 100 steps, takes one GPU sample and redraws (``refresh()``), timed with the
thread's CPU clock. Headless: the widget messages are built and dropped as in a closed output.
Redraws are paced by this cost (``DRAW_CPU_SHARE``), so a cheaper redraw means livelier charts,
not a cheaper loop.
"""
from __future__ import annotations

import argparse
import statistics
import time

from gpu_widgets.backends import SimulatedBackend
from gpu_widgets.monitor.monitor import TrainingMonitor
from gpu_widgets.sampling.sampler import Sampler


def redraw_ms(gpus: int, rounds: int = 200) -> list[float]:
    backend = SimulatedBackend(n_gpus=gpus, seed=1)
    backend.open()
    sampler = Sampler(backend, interval_s=1.0)  # ticked by hand: no thread
    mon = TrainingMonitor("bench", display=False, run_log=False, sampler=sampler)
    for i in range(20_000):
        mon.log(loss=1.0 / (i + 1), acc=i / 20_000)
        if i % 50 == 0:
            sampler.tick()
    mon.refresh()
    out = []
    for _ in range(rounds):
        for i in range(100):
            mon.log(loss=0.5 + 0.1 * ((i * 7) % 5), acc=0.3)
        sampler.tick()
        t = time.thread_time()
        mon.refresh()
        out.append((time.thread_time() - t) * 1e3)
    mon.finish()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpus", type=int, action="append", help="simulated GPUs (repeatable; default 1 and 8)")
    args = parser.parse_args()
    for gpus in args.gpus or [1, 8]:
        ms = sorted(redraw_ms(gpus))
        print(f"{gpus} GPU(s): redraw median {statistics.median(ms):.2f} ms, p90 {ms[int(len(ms) * 0.9)]:.2f} ms of CPU")


if __name__ == "__main__":
    main()
