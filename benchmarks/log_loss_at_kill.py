"""Rows lost from the run log when a tight logging loop is killed with SIGKILL.

    python -m benchmarks.log_loss_at_kill                 # killed 1, 2, 4 and 8 s into the run
    python -m benchmarks.log_loss_at_kill --at 2 --flush-s 0.5

A child process logs two keys as fast as it can (no work between calls: the hardest case for
the writer) to a run log in a temporary folder, with simulated GPUs. The parent kills it after
``--at`` seconds and reads ``steps.jsonl`` back: "lost" is the kill time minus the time of the
last row on disk. The promise is one flush interval (``flush_s``) plus the writer's 0.25 s tick.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = """
import sys, time
from gpu_widgets import TrainingMonitor
mon = TrainingMonitor("kill", display=False, run_log=sys.argv[1], flush_s=float(sys.argv[2]))
mon.log(loss=1.0, i=0)
print(time.time(), flush=True)
i = 1
while True:
    mon.log(loss=1.0 / (i + 1), i=i)
    i += 1
"""


def last_row(steps: Path) -> tuple[int, dict | None]:
    """Complete lines on disk, and the last of them (a torn last line is skipped)."""
    lines = steps.read_text(encoding="utf-8").split("\n")[:-1] if steps.exists() else []
    return len(lines), json.loads(lines[-1]) if lines else None


def kill_after(at_s: float, flush_s: float, root: Path) -> dict:
    env = {**os.environ, "GPU_WIDGETS_BACKEND": "simulated"}
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(root), str(flush_s)], env=env,
                            stdout=subprocess.PIPE, text=True)
    started = float(proc.stdout.readline())
    time.sleep(max(0.0, started + at_s - time.time()))
    killed_at = time.time()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    (run,) = [p for p in root.iterdir() if p.is_dir()]
    n, last = last_row(run / "steps.jsonl")
    return {"at_s": killed_at - started, "rows": n, "lost_s": killed_at - (last["time"] if last else started),
            "rows_per_s": n / (last["time"] - started) if last and last["time"] > started else None}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--at", type=float, nargs="+", default=[1.0, 2.0, 4.0, 8.0], help="seconds before the kill")
    parser.add_argument("--flush-s", type=float, default=1.0)
    args = parser.parse_args()
    print(f"flush_s {args.flush_s}: promise: lose at most {args.flush_s + 0.25:.2f} s")
    for at in args.at:
        with tempfile.TemporaryDirectory() as tmp:
            r = kill_after(at, args.flush_s, Path(tmp))
        rate = f"{r['rows_per_s'] / 1000:.0f}k rows/s logged" if r["rows_per_s"] else "no rows"
        print(f"killed at {r['at_s']:.2f} s: {r['rows']} rows on disk ({rate}), lost the last {r['lost_s']:.2f} s")


if __name__ == "__main__":
    main()
