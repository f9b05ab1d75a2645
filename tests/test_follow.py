"""TrainingMonitor.follow(run_dir): a run another process writes, shown live from its run log.

The writers are real processes (a script using TrainingMonitor, as a batch job would); the big
run log is written line by line in the run log's format and followed in a fresh process, whose
memory is measured."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpu_widgets import TrainingMonitor
from gpu_widgets.runs.follow import RunTail

from .widget_helpers import run_dir, wait_until  # noqa: F401  (run_dir: runs go under tmp)

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = textwrap.dedent("""
    import pathlib, sys, time
    from gpu_widgets import TrainingMonitor
    go, mode = pathlib.Path(sys.argv[1]), sys.argv[2]
    mon = TrainingMonitor("follow me", display=False, total_steps=20, batch_size=8)
    for i in range(10):
        mon.log(loss=1 / (i + 1), lr=0.1)
    while not go.exists():  # the test looks at the follower before the run goes on
        time.sleep(0.02)
    for i in range(10, 20):
        if mode == "fail" and i == 15:
            raise ValueError("diverged at step 15")
        mon.log(loss=1 / (i + 1), lr=0.1)
    mon.finish()
""")


def header(mon: TrainingMonitor) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", mon.widget.children[0].value).split())


def start_script(tmp_path: Path, runs: Path, mode: str) -> tuple[subprocess.Popen, Path, Path]:
    script, go = tmp_path / "train.py", tmp_path / f"go-{mode}"
    script.write_text(SCRIPT)
    env = {**os.environ, "GPU_WIDGETS_RUN_DIR": str(runs), "GPU_WIDGETS_BACKEND": "simulated"}
    proc = subprocess.Popen([sys.executable, str(script), str(go), mode], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run = wait_until(lambda: next((p for p in runs.glob("*") if (p / "run.json").is_file()), None), 30)
    return proc, run, go


@pytest.mark.integration
@pytest.mark.parametrize("mode", ["ok", "fail"])
def test_follow_shows_a_script_run_as_it_is_written_and_takes_over_how_it_ended(tmp_path, run_dir, mode):
    proc, run, go = start_script(tmp_path, run_dir, mode)
    try:
        mon = TrainingMonitor.follow(run, display=False, poll_s=0.05)
        # The first ten steps appear while the script is still running (it waits for us).
        wait_until(lambda: mon.step == 9, 20)
        assert mon.status == "running" and mon.keys == ("loss", "lr") and mon.total_steps == 20
        wait_until(lambda: "step 10 / 20" in header(mon), 10)  # at the next redraw
        with pytest.raises(RuntimeError, match="read-only"):
            mon.log(loss=0.0)  # never mixed into another process's run
        go.touch()
        _, err = proc.communicate(timeout=30)
        assert mon.parts.follower.done.wait(10)
    finally:
        go.touch()
        proc.kill()
    saved = TrainingMonitor.load(run)
    assert mon.rows() == saved.rows()
    assert set(mon.parts.view.charts) == set(saved.parts.view.charts) and "gpu_util" in mon.parts.view.charts
    assert len(mon.parts.trace) > 0  # the GPU samples the script recorded
    if mode == "ok":
        assert mon.status == "finished" and mon.step == 19 and proc.returncode == 0
    else:
        assert "ValueError: diverged at step 15" in err and proc.returncode == 1
        assert mon.status == "failed" and mon.step == 14
        assert "ended with ValueError: diverged at step 15" in header(mon)
    assert not mon.parts.follower.thread.is_alive()
    # it was followed, not loaded: the header says so after the end too, as load()'s says "loaded"
    assert f"followed from {run}" in header(mon) and "loaded from" not in header(mon)
    assert f"loaded from {run}" in header(saved)


@pytest.mark.integration
def test_a_killed_writer_leaves_the_run_unfinished(tmp_path, run_dir):
    proc, run, go = start_script(tmp_path, run_dir, "ok")
    try:
        mon = TrainingMonitor.follow(run, display=False, poll_s=0.05)
        wait_until(lambda: mon.step == 9, 20)
        assert mon.status == "running"
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert mon.parts.follower.done.wait(10)
    finally:
        proc.kill()
    assert mon.status == "unfinished" and mon.step == 9
    assert f"pid {proc.pid}) is gone" in header(mon)


def test_what_is_not_a_run_is_refused_with_a_clear_message(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such run directory: .*gpu-widgets runs"):
        TrainingMonitor.follow(tmp_path / "nope", display=False)
    with pytest.raises(FileNotFoundError, match="is not a gpu-widgets run: it has no run.json"):
        TrainingMonitor.follow(tmp_path, display=False)
    (tmp_path / "x.csv").write_text("step\n1\n")
    with pytest.raises(NotADirectoryError, match="is a file, not a run directory"):
        TrainingMonitor.follow(tmp_path / "x.csv", display=False)
    with pytest.raises(TypeError, match="takes a run directory"):
        TrainingMonitor.follow(3, display=False)
    (tmp_path / "run.json").write_text('{"status": "running"}')
    with pytest.raises(ValueError, match="poll_s"):
        TrainingMonitor.follow(tmp_path, display=False, poll_s=0)


def test_the_tail_reads_complete_lines_only_in_bounded_chunks_and_skips_damage(tmp_path):
    (tmp_path / "run.json").write_text('{"status": "running"}')
    steps = tmp_path / "steps.jsonl"
    steps.write_bytes(b'{"step":0,"time":1.0,"loss":1}\n{"step":1,"ti')
    tail = RunTail(tmp_path)
    rows, notes = tail.step_rows(1 << 20)
    assert rows == [(0, 1.0, {"loss": 1})] and notes == [] and tail.steps.caught_up
    with open(steps, "ab") as f:  # the writer finishes the line, and a damaged one follows
        f.write(b'me":2.0,"loss":0.5}\nnot json\n' + b"".join(b'{"step":%d,"time":3.0}\n' % i for i in range(2, 100)))
    rows, notes = tail.step_rows(200)  # a small chunk: only the lines that fit
    assert rows[0] == (1, 2.0, {"loss": 0.5}) and 2 <= len(rows) < 10 and not tail.steps.caught_up
    assert notes == [f"{steps}: line 3 is not JSON (Expecting value, column 1): skipped"]
    while not tail.steps.caught_up:
        more, _ = tail.step_rows(200)
        rows += more
    assert [r[0] for r in rows] == [1, *range(2, 100)]


BIG = textwrap.dedent("""
    import json, resource, sys, time
    import numpy as np
    from gpu_widgets import TrainingMonitor
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    mon = TrainingMonitor.follow(sys.argv[1], display=False, poll_s=0.05)
    returned = time.perf_counter() - t
    mon.parts.follower.done.wait(120)
    took = time.perf_counter() - t
    sent = sum(np.asarray(m.x).nbytes + np.asarray(m.y).nbytes for c in mon.parts.view.charts.values()
               for m in c.lines.values()) + len(mon.widget.children[0].value)
    print(json.dumps({"returned_s": returned, "took_s": took, "rows": mon.parts.records.size, "status": str(mon.status),
                      "passes": mon.parts.follower.passes, "sent": sent, "gpu": len(mon.parts.trace),
                      "grew_mib": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024}))
""")
N = 1_000_000


@pytest.mark.integration
def test_a_million_step_run_log_is_followed_with_bounded_memory_and_redraws(tmp_path):
    t0 = 1.79e9
    run = tmp_path / "20261203-120000-big-abcdef"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"format": 1, "title": "big", "status": "finished", "started": t0,
                                              "ended": t0 + N * 1e-3, "total_steps": N}))
    with open(run / "steps.jsonl", "w") as f:  # what a loop logging loss and lr writes, a row per ms
        f.writelines(f'{{"step":{i},"time":{t0 + i * 1e-3!r},"loss":{1.0 / (i + 1)!r},"lr":0.001}}\n' for i in range(N))
    with open(run / "gpu.jsonl", "w") as f:
        f.writelines(json.dumps({"time": t0 + s, "gpu": g, "utilization_gpu_percent": 90, "memory_used_bytes": 1e9,
                                 "memory_total_bytes": 8e9}) + "\n" for s in range(1000) for g in range(2))
    out = subprocess.run([sys.executable, "-c", BIG, str(run)], capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["rows"] == N and r["status"] == "finished" and r["gpu"] == 2000
    assert r["returned_s"] < 1.0  # the caller never waits for the reading
    assert r["passes"] > 5  # read in chunks, drawn in between: the view fills in while it catches up
    assert r["sent"] < 32_000  # a redraw stays as small as a live run's
    # The file is ~90 MB; held as dicts it would take ~500 MB. Kept as the live run keeps it:
    # columns of 8-byte numbers (6 per row here: ~48 MB) plus one chunk being read (~87 MiB measured).
    assert r["grew_mib"] < 120, r
