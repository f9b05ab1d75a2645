"""What the server's answer to ``cells/summary`` costs (issue 37: at most 5 ms for a 1 h cell on 8 GPUs).

A full hour of history at 1 Hz for ``--gpus`` simulated GPUs (the History the server keeps, filled
with the simulated backend's readings), and a kernel ledger whose kernel held memory on every GPU,
its holdings changing every 10 s (360 entries). Timed: the work the handler hands its worker thread
(the ledger's entries for the cell, the summary from the history) and the JSON it writes, for cells
of 10 s, 1 min and 1 h; median and p95 of ``--rounds``. The HTTP round trip itself is every route's
and is measured in docs/benchmarks.md §2. Also: the ledger's booking of one sample for 16 kernels
(what each slow read adds to the server).

    python -m benchmarks.cell_cost [--gpus 8] [--rounds 200] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import logging
import time
from typing import Any

from gpu_widgets.backends import SimulatedBackend
from gpu_widgets.sampling.snapshot import take
from gpu_widgets.server.cell_ledger import KernelLedger
from gpu_widgets.service.cell_cost import summarize
from gpu_widgets.store.history import History

from .common import percentile

TARGET_MS = 5.0
HOUR_S = 3600
GIB = 1 << 30


class _Idle:
    ready = False


def filled(gpus: int) -> tuple[History, KernelLedger, float]:
    backend = SimulatedBackend(n_gpus=gpus)
    backend.open()
    history = History(window_s=HOUR_S, interval_s=1.0)
    t0 = time.time() - HOUR_S
    ledger = KernelLedger(_Idle(), {}, logging.getLogger("bench"), 2.0, HOUR_S)
    for i in range(HOUR_S):
        t = t0 + i
        history.append(take(backend, t, prime=False))
        if i % 2 == 0:  # the ledger books each slow read (2 s)
            held = {g: (4 + (i // 10) % 8) * GIB for g in range(gpus)}
            ledger.add(t, {"k": held}, {"k": {g: 1 for g in range(gpus)}}, {"k": 1000})
    return history, ledger, t0


def answer(ledger: KernelLedger, history: History, start: float, end: float) -> bytes:
    entries, restarts, after = ledger.between("k", start, end)
    body = summarize(entries, restarts, history, start, end, False, 1.0, after)
    return json.dumps({"kernel_id": "k", **body, "final": True, "server_time": end}).encode()


def timed(fn: Any, rounds: int) -> dict[str, float]:
    times = []
    for _ in range(rounds):
        began = time.perf_counter()
        fn()
        times.append((time.perf_counter() - began) * 1e3)
    return {"median_ms": round(percentile(times, 50), 3), "p95_ms": round(percentile(times, 95), 3)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    history, ledger, t0 = filled(args.gpus)
    fill_s = time.perf_counter() - began
    end = t0 + HOUR_S - 1
    results: dict[str, Any] = {"gpus": args.gpus, "history_samples": len(history),
                               "ledger_entries": len(ledger.books["k"].entries), "fill_s": round(fill_s, 1)}
    for name, span in (("10 s", 10), ("1 min", 60), ("1 h", HOUR_S - 2)):
        size = len(answer(ledger, history, end - span, end))
        results[f"cell {name}"] = {**timed(lambda: answer(ledger, history, end - span, end), args.rounds),
                                   "bytes": size}
    kernels = {f"k{i}": 2000 + i for i in range(16)}
    held = {k: {g: GIB for g in range(args.gpus)} for k in kernels}
    others = {k: {g: 3 for g in range(args.gpus)} for k in kernels}
    book = KernelLedger(_Idle(), {}, logging.getLogger("bench"), 2.0, HOUR_S)
    tick = iter(range(10**9))
    results["booking one sample, 16 kernels"] = timed(lambda: book.add(t0 + next(tick), held, others, kernels),
                                                     args.rounds)
    hour = results["cell 1 h"]["median_ms"]
    results["target_ms"] = TARGET_MS
    results["1 h cell / target"] = round(hour / TARGET_MS, 2)
    print(f"cells/summary on {args.gpus} GPUs, a full hour of history ({results['history_samples']} samples), "
          f"{results['ledger_entries']} ledger entries")
    for key, value in results.items():
        if isinstance(value, dict):
            extra = f", {value['bytes']} bytes" if "bytes" in value else ""
            print(f"  {key:32s} median {value['median_ms']:.3f} ms, p95 {value['p95_ms']:.3f} ms{extra}")
    print(f"  1 h cell: {hour:.3f} ms = {results['1 h cell / target']}x the {TARGET_MS} ms target")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return results


if __name__ == "__main__":
    main()
