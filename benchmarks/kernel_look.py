"""The death watcher's look at its kernels on a crowded machine (server/kernel_events.py ``look``).

``--processes`` idle processes stand for the other users of a shared node; ``--kernels`` families
(a kernel with two DataLoader-like children) stand for this server's kernels. Timed: one look,
finding every kernel's family, with psutil's ``children(recursive=True)`` per kernel (what the
look did before) and with ``service/process_family.py`` (the children files); the ratio of the two
is what a JupyterHub node saves every second, per single-user server.

    python -m benchmarks.kernel_look [--processes 1000] [--kernels 3] [--rounds 20]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time

import psutil

from gpu_widgets.service import process_family

KERNEL = "import subprocess, time; [subprocess.Popen(['sleep', '600']) for _ in range(2)]; time.sleep(600)"


def _ms_per_look(find, roots: list[int], rounds: int) -> float:
    start = time.perf_counter()
    for _ in range(rounds):
        for root in roots:
            find(root)
    return (time.perf_counter() - start) / rounds * 1e3


def measure(processes: int, kernels: int, rounds: int) -> dict[str, float]:
    crowd = [subprocess.Popen(["sleep", "600"]) for _ in range(processes)]
    roots = [subprocess.Popen([sys.executable, "-c", KERNEL]) for _ in range(kernels)]
    try:
        deadline = time.monotonic() + 60
        while any(len(psutil.Process(r.pid).children()) < 2 for r in roots) and time.monotonic() < deadline:
            time.sleep(0.05)
        pids = [r.pid for r in roots]
        walk = _ms_per_look(lambda pid: psutil.Process(pid).children(recursive=True), pids, rounds)
        files = _ms_per_look(process_family.family, pids, rounds)
        return {"processes_on_machine": len(psutil.pids()), "kernels": kernels, "psutil_walk_ms": walk,
                "children_files_ms": files, "ratio": walk / files if files else float("inf"),
                "children_files": process_family.HAS_CHILDREN_FILES}
    finally:
        for p in roots:
            for child in psutil.Process(p.pid).children(recursive=True):
                child.kill()
        for p in crowd + roots:
            p.kill()
            p.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=1000)
    parser.add_argument("--kernels", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    r = measure(args.processes, args.kernels, args.rounds)
    how = "children files" if r["children_files"] else "psutil (this kernel has no children files)"
    print(f"{r['processes_on_machine']} processes on the machine, {r['kernels']} kernels of 3 processes each")
    print(f"  one look, psutil children(recursive=True) per kernel: {r['psutil_walk_ms']:8.2f} ms")
    print(f"  one look, process_family.family ({how}): {r['children_files_ms']:8.2f} ms")
    print(f"  ratio: {r['ratio']:.0f}x less time per look (the watcher looks every second)")


if __name__ == "__main__":
    main()
