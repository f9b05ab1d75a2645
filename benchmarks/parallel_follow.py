"""8. Parallel training, part (c): following a large launch. A synthetic launch of 8 ranks x 10^5
steps is written as the layout says (runs/launch_dir.py), then followed in a worker process of its
own: the Python memory held (tracemalloc) and the RSS growth once it has read the whole launch, the
time of that first read, the bytes its first draws sent, and the bytes of each redraw while every
rank grows by a second of steps (comms recorded as in section 4).

    python -m benchmarks.parallel_follow --worker
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from .common import REPO, Worker, rss_bytes, serve, summary

FOLLOW_RANKS, FOLLOW_STEPS = 8, 100_000
STEPS_PER_S = 12  # the synthetic launch's pace: a small model on a GPU (as section 4)
# Read by torch.distributed or the monitor to find ranks or GPUs: none may leak from the shell.
LEAKS = ("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
          "NODE_RANK", "CUDA_VISIBLE_DEVICES", "GPU_WIDGETS_SIMULATED_GPUS", "FAKE_NVML_CONFIG")


def write_launch(root: Path, ranks: int, steps: int) -> Path:
    """A running launch as the ranks would leave it after ``steps`` steps at STEPS_PER_S: per rank
    its run.json, steps.jsonl, gpu.jsonl (a sample a second), data_wait.jsonl (half-second bins)
    and a fresh heartbeat."""
    now = time.time()
    t0 = now - steps / STEPS_PER_S
    launch = root / "20260101-120000-bench-launch-a1b2c3"
    launch.mkdir(parents=True)

    def dump(path: Path, obj: Any) -> None:
        path.write_text(json.dumps(obj))

    dump(launch / "run.json", {"format": 1, "kind": "launch", "title": "bench launch", "world_size": ranks,
                               "status": "running", "hosts": ["node-a"], "started": t0, "ended": None,
                               "gpu_widgets_version": "bench", "launch_key": "bench"})
    per_bin = STEPS_PER_S // 2
    for r in range(ranks):
        d = launch / f"rank-{r}"
        d.mkdir()
        dump(d / "run.json", {"format": 1, "title": "bench launch", "status": "running", "started": t0,
                              "pid": os.getpid(), "host": "node-a", "rank": r, "world_size": ranks, "local_rank": r,
                              "launch": launch.name})
        with (d / "steps.jsonl").open("w") as f:
            f.writelines(json.dumps({"step": i, "time": t0 + i / STEPS_PER_S, "loss": 1.0 / (1 + i) + 0.001 * r})
                         + "\n" for i in range(steps))
        with (d / "gpu.jsonl").open("w") as f:
            f.writelines(json.dumps({"time": t0 + s, "gpu": r, "name": "Simulated GPU",
                                     "utilization_gpu_percent": 80 + (s + r) % 20, "memory_used_bytes": 2**33})
                         + "\n" for s in range(int(steps / STEPS_PER_S)))
        with (d / "data_wait.jsonl").open("w") as f:
            f.writelines(json.dumps({"time": t0 + b * 0.5, "wait_s": 0.002 * per_bin, "step_s": 0.5,
                                     "steps": per_bin, "forward_s": 0.02 * per_bin}) + "\n"
                         for b in range(steps // per_bin))
        dump(d / "heartbeat.json", {"time": now, "pid": os.getpid(), "step": steps, "phase": "after_forward",
                                    "phase_since": now, "step_started": now})
    return launch


def grow_launch(launch: Path, ranks: int, first: int, steps: int) -> None:
    """``steps`` more steps on every rank (from step ``first``), as the ranks append them."""
    now = time.time()
    for r in range(ranks):
        d = launch / f"rank-{r}"
        with (d / "steps.jsonl").open("a") as f:
            f.writelines(json.dumps({"step": i, "time": now, "loss": 1.0 / (1 + i)}) + "\n"
                         for i in range(first, first + steps))
        with (d / "gpu.jsonl").open("a") as f:
            f.write(json.dumps({"time": now, "gpu": r, "name": "Simulated GPU", "utilization_gpu_percent": 90,
                                "memory_used_bytes": 2**33}) + "\n")
        with (d / "data_wait.jsonl").open("a") as f:
            f.write(json.dumps({"time": now, "wait_s": 0.01, "step_s": 1.0, "steps": steps, "forward_s": 0.2}) + "\n")


def follow_worker() -> None:
    """Measures in a process of its own, so the memory is follow()'s and nothing else's. Every
    draw of the follower's thread is recorded (its messages and bytes), as in section 4."""
    import tracemalloc

    from .payload import REC, _install_recording_comm

    _install_recording_comm()
    from gpu_widgets import TrainingMonitor
    from gpu_widgets.monitor.monitor_run import MonitorRun

    original_draw = MonitorRun.draw

    def recorded_draw(self: Any, n: int) -> None:
        with REC.lock:
            REC.current = []
        try:
            original_draw(self, n)
        finally:
            with REC.lock:
                msgs, REC.current = REC.current, None
            REC.redraws.append({"bytes": sum(m[1] + m[2] for m in msgs if m[0] != "comm_open"),
                                "created_bytes": sum(m[1] + m[2] for m in msgs if m[0] == "comm_open")})

    MonitorRun.draw = recorded_draw
    state: dict[str, Any] = {}

    def read_all(mon: Any, steps: int, passes: int) -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not (mon.ranks[0]["step"] >= steps and mon.parts.follower.passes >= passes
                                                   and len(mon.series("loss")[0]) >= steps):
            time.sleep(0.02)

    def follow(path: str, steps: int) -> dict[str, Any]:
        rss0 = rss_bytes()
        tracemalloc.start()
        began = time.perf_counter()
        mon = TrainingMonitor.follow(path, display=False, poll_s=0.5)
        read_all(mon, steps, 2)
        read_s = time.perf_counter() - began
        current, peak = tracemalloc.get_traced_memory()
        state.update(mon=mon, path=Path(path), steps=steps)
        first = REC.redraws[:]
        return {"first_read_s": read_s, "python_bytes": current, "python_peak_bytes": peak,
                "rss_growth_bytes": rss_bytes() - rss0, "steps_seen": mon.ranks[0]["step"],
                "world_size": mon.world_size, "first_draws": len(first),
                "first_draws_bytes": sum(d["bytes"] for d in first),
                "created_bytes": REC.outside + sum(d["created_bytes"] for d in first)}

    def redraws(ranks: int, seconds: int) -> dict[str, Any]:
        """``seconds`` more seconds of the launch, a second at a time: the follower's draws then."""
        mon, steps = state["mon"], state["steps"]
        before = len(REC.redraws)
        for _ in range(seconds):  # each second read, then drawn (the timer would, within its CPU share)
            grow_launch(state["path"], ranks, steps, STEPS_PER_S)
            steps += STEPS_PER_S
            read_all(mon, steps, mon.parts.follower.passes + 2)
            mon.refresh()
        mon.parts.follower.stop.set()
        drawn = [d["bytes"] for d in REC.redraws[before:] if d["bytes"]]
        return {"draws": len(drawn), "bytes": summary(drawn)}

    serve({"follow": follow, "redraws": redraws})


def follow_cost(ranks: int, steps: int, log: Callable[[str], None]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="gw-bench-follow-") as tmp:
        log(f"  parallel: writing a launch of {ranks} ranks x {steps:,} steps")
        launch = write_launch(Path(tmp), ranks, steps)
        size = sum(f.stat().st_size for f in launch.rglob("*") if f.is_file())
        env = {k: v for k, v in os.environ.items() if k not in LEAKS}
        env.update(PYTHONPATH=str(REPO), GPU_WIDGETS_BACKEND="simulated", MPLBACKEND="Agg")
        w = Worker(sys.executable, "benchmarks.parallel_follow", ["--worker"], env, timeout=900)
        try:
            got = w.call(op="follow", path=str(launch), steps=steps)
            got["redraw"] = w.call(op="redraws", ranks=ranks, seconds=5)
        finally:
            w.close()
    return {"ranks": ranks, "steps": steps, "launch_bytes": size, **got}


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        follow_worker()
    else:
        print(json.dumps(follow_cost(FOLLOW_RANKS, FOLLOW_STEPS, lambda m: print(m, file=sys.stderr)), indent=1))
