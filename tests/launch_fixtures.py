"""Launch directories made by hand, as the spec lays them out (runs/launch_dir.py): the launch's
run.json, and per rank a rank-<r>/ with run.json, steps.jsonl, gpu.jsonl, data_wait.jsonl and
heartbeat.json, so readers can be tested on exactly the shape (and the damage) they must read."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from gpu_widgets.runs.run_log import write_json

T0 = 1_767_000_000.0


def write_lines(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


def data_wait_bins(steps: int, wait_s: float, step_s: float = 0.1, per_bin: int = 5, t0: float = T0,
                   forward_s: float | None = None) -> list[dict[str, Any]]:
    out = []
    for first in range(0, steps, per_bin):
        k = min(per_bin, steps - first)
        row = {"time": t0 + first * step_s, "wait_s": wait_s * k, "step_s": step_s * k, "steps": k}
        if forward_s is not None:
            row["forward_s"] = forward_s * k
        out.append(row)
    return out


def heartbeat(step: int, phase: str = "after_forward", *, at: float | None = None, since: float | None = None,
              pid: int | None = None) -> dict[str, Any]:
    at = time.time() if at is None else at
    since = at if since is None else since
    return {"time": at, "pid": pid or os.getpid(), "step": step, "phase": phase, "phase_since": since,
            "step_started": since}


def make_launch(root: Path, *, name: str = "20260101-120000-ddp-toy-a1b2c3", title: str = "ddp toy",
                hosts: tuple[str, ...] = ("node-a", "node-b"), statuses: tuple[str, ...] = ("finished", "finished"),
                steps: tuple[int, ...] = (20, 20), waits: tuple[float, ...] = (0.001, 0.001), step_s: float = 0.1,
                world_size: int | None = None, launch_status: str | None = None, started: float = T0,
                heartbeats: tuple[dict[str, Any] | None, ...] | None = None, gpu: bool = True,
                bin_steps: int | None = None, per_bin: int = 5, gpu_index: tuple[int, ...] | None = None) -> Path:
    """A launch of ``len(hosts)`` ranks under ``root``: rank r on ``hosts[r]`` with ``statuses[r]``,
    ``steps[r]`` steps logged (``loss``), a data wait of ``waits[r]`` seconds per step of ``step_s``
    (bins of ``per_bin`` steps, for ``bin_steps`` steps when given: a long launch's bins without its
    steps), and 3 GPU samples of GPU ``gpu_index[r]`` (default: GPU r)."""
    launch = root / name
    launch.mkdir(parents=True)
    n = len(hosts)
    write_json(launch / "run.json", {
        "format": 1, "kind": "launch", "title": title, "world_size": n if world_size is None else world_size,
        "status": launch_status or statuses[0], "hosts": sorted(set(hosts)), "started": started,
        "ended": None if "running" in statuses else started + 10, "gpu_widgets_version": "0.test",
        "launch_key": "test-launch"})
    for r in range(n):
        d = launch / f"rank-{r}"
        d.mkdir()
        write_json(d / "run.json", {
            "format": 1, "title": title, "status": statuses[r], "started": started, "pid": os.getpid(),
            "host": hosts[r], "rank": r, "world_size": n, "local_rank": 0, "launch": name,
            **({} if statuses[r] == "running" else {"ended": started + 10})})
        write_lines(d / "steps.jsonl", [{"step": i, "time": started + i * step_s, "loss": 1.0 / (i + 1)}
                                        for i in range(steps[r])])
        write_lines(d / "gpu.jsonl", [{"time": started + i, "gpu": r if gpu_index is None else gpu_index[r],
                                       "name": "Simulated GPU",
                                       "utilization_gpu_percent": 50 + r} for i in range(3)] if gpu else [])
        write_lines(d / "data_wait.jsonl", data_wait_bins(steps[r] if bin_steps is None else bin_steps, waits[r],
                                                          step_s, per_bin, t0=started))
        if heartbeats is not None and heartbeats[r] is not None:
            write_json(d / "heartbeat.json", heartbeats[r])
    return launch
