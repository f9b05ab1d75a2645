"""What finding a container's GPU processes by their device files costs (backends/device_files.py).

``--processes`` idle processes stand for a crowded node; ``--holders`` python processes hold the
stand-in device files (a GPU's file and nvidia-uvm), as CUDA contexts do. Timed: the first scan
(every process's /proc/<pid>/fd read), a scan with nothing changed (what most slow reads do), a
refresh (every process read again: NVML's lists changed), and the amortised cost per slow read
when the lists change once every K reads.

    python -m benchmarks.device_files [--processes 1000] [--holders 4] [--rounds 50]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpu_widgets.backends.device_files import DeviceFileScan

TARGET_MS = 2.0  # issue 36: per slow read, amortised, with 1,000 processes


def measure(processes: int, holders: int, rounds: int) -> dict[str, float]:
    dev = Path(tempfile.mkdtemp(prefix="gw-bench-dev-"))
    for name in ("nvidia0", "nvidia1", "nvidia-uvm", "nvidiactl"):
        (dev / name).write_text("")
    code = (f"import time; _h = [open(p) for p in {[str(dev / 'nvidia-uvm'), str(dev / 'nvidia0')]!r}]; "
            "print('ready', flush=True); time.sleep(600)")
    crowd = [subprocess.Popen(["sleep", "600"]) for _ in range(processes)]
    held = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(holders)]
    try:
        for p in held:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        scan = DeviceFileScan(str(dev))
        t = time.perf_counter()
        first = scan.holders()
        cold_ms = (time.perf_counter() - t) * 1e3
        found = first.of(0)
        if found != {p.pid for p in held}:
            raise AssertionError(f"found {sorted(found)}, expected {sorted(p.pid for p in held)}")
        t = time.perf_counter()
        for _ in range(rounds):
            scan.holders()
        steady_ms = (time.perf_counter() - t) / rounds * 1e3
        t = time.perf_counter()
        for _ in range(max(1, rounds // 10)):
            scan.holders(refresh=True)
        refresh_ms = (time.perf_counter() - t) / max(1, rounds // 10) * 1e3
        out = {"processes_scanned": float(first.scanned), "cold_ms": cold_ms, "steady_ms": steady_ms,
               "refresh_ms": refresh_ms}
        for k in (1, 10, 150):
            out[f"amortised_ms_k{k}"] = (refresh_ms + (k - 1) * steady_ms) / k
        return out
    finally:
        for p in crowd + held:
            p.kill()
        for p in crowd + held:
            p.wait()
        for f in dev.iterdir():
            f.unlink()
        os.rmdir(dev)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--processes", type=int, default=1000)
    ap.add_argument("--holders", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=50)
    args = ap.parse_args(argv)
    r = measure(args.processes, args.holders, args.rounds)
    print(f"processes on the machine (scanned): {r['processes_scanned']:.0f}, holders: {args.holders}")
    print(f"first scan (every process read):       {r['cold_ms']:8.2f} ms")
    print(f"scan, nothing changed (most reads):    {r['steady_ms']:8.2f} ms   ({r['steady_ms'] / TARGET_MS:.2f}x the 2 ms target)")
    print(f"refresh (NVML's lists changed):        {r['refresh_ms']:8.2f} ms")
    for k in (1, 10, 150):
        print(f"amortised per slow read, a change every {k:>3} reads: {r[f'amortised_ms_k{k}']:8.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
