"""The run log and saved files: nothing logged is lost, on disk as promised, bounded, readable back."""
from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from gpu_widgets import TrainingMonitor
from gpu_widgets.runs import run_log
from gpu_widgets.runs.run_files import RunFileError

from .widget_helpers import run_dir, same_rows, simulated_sampler  # noqa: F401


def make(**kw) -> TrainingMonitor:
    kw.setdefault("display", False)
    kw.setdefault("sampler", simulated_sampler())
    return TrainingMonitor(kw.pop("title", "my model"), **kw)


def awkward_run(mon: TrainingMonitor) -> None:
    """NaN, infinities, ints (some beyond 2**53), bools, 40 keys, keys that start mid-run."""
    for i in range(300):
        values = {"loss": 1.0 / (i + 1), "epoch": i // 100, "tokens": 2**60 + i}
        if i == 7:
            values["loss"] = float("nan")
        if i == 8:
            values["loss"] = float("inf")
        if i == 9:
            values["loss"] = -float("inf")
        if i >= 150:
            values.update({f"metric_{k}": k * 0.5 + i for k in range(40)})
        if i % 50 == 0:
            values["is_eval"] = True
        mon.log(**values)
        if i % 100 == 0:
            mon._sampler_arg.tick()
    mon.log(step=299, val_loss=0.25)  # a second row at the same step


def faulty_sampler():
    """Simulated GPUs where GPU 0 throttles and GPU 1 is lost from the start."""
    from gpu_widgets.backends import SimulatedBackend, parse_faults
    from gpu_widgets.sampling.sampler import Sampler

    backend = SimulatedBackend(n_gpus=2, seed=3, faults=parse_faults("throttle:0@0:sw_power_cap; lost:1@0"))
    backend.open()
    return Sampler(backend)


def test_save_and_load_round_trip_loses_nothing(tmp_path):
    mon = make(run_log=False, sampler=faulty_sampler())
    awkward_run(mon)
    mon.finish()
    rows = mon.rows()
    assert rows[0]["tokens"] == 2**60 and type(rows[0]["tokens"]) is int and rows[0]["is_eval"] == 1
    for name in ("run.jsonl", "run.csv"):
        path = mon.save(tmp_path / name)
        back = TrainingMonitor.load(path)
        assert same_rows(back.rows(), rows), name
        assert back.keys == mon.keys
        assert len(mon.gpu_rows()) == 6
        assert same_rows(back.gpu_rows(), mon.gpu_rows()), name
        assert back.status == "finished"
        assert "SIMULATED GPUs" in back.widget.children[0].value  # a saved simulated run stays labelled
        with pytest.raises(RuntimeError, match="read-only"):
            back.log(loss=1.0)
    gpu = mon.gpu_rows()
    assert gpu[0]["gpu"] == 0 and "sw_power_cap" in gpu[0]["throttle_reasons"] and "lost" not in gpu[0]
    assert gpu[1]["gpu"] == 1 and gpu[1]["lost"] is True and gpu[1]["utilization_gpu_percent"] is None
    assert type(gpu[0]["memory_used_bytes"]) is int
    lines = [json.loads(x) for x in (tmp_path / "run.gpu.jsonl").read_text().splitlines()]
    assert [("name" in x, "backend" in x) for x in lines] == [(True, True)] * 2 + [(False, False)] * 4
    first = json.loads((tmp_path / "run.jsonl").read_text().splitlines()[7])
    assert first["step"] == 7 and math.isnan(first["loss"])  # NaN stays NaN, not null


def test_run_log_lines_are_exactly_what_json_writes_for_each_row():
    mon = make(run_log=False)
    awkward_run(mon)
    rec = mon.parts.records  # the columns the run log is written from
    for start, stop in [(0, rec.size), (0, 1), (5, 160), (150, 301), (rec.size - 1, rec.size), (10, 10)]:
        expected = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rec.rows(start, stop))
        assert rec.jsonl(start, stop) == expected, (start, stop)
    assert "NaN" in rec.jsonl() and "-Infinity" in rec.jsonl()
    mon.finish()


def test_save_needs_a_known_format(tmp_path):
    mon = make(run_log=False)
    mon.log(loss=1.0)
    with pytest.raises(ValueError, match=r"reads and writes \.jsonl or \.csv files"):
        mon.save(tmp_path / "run.txt")
    mon.finish()


def test_run_log_is_written_while_the_run_goes_on(run_dir):
    mon = make(flush_s=0.2)
    awkward_run(mon)
    time.sleep(1.0)  # no finish(): the monitor's thread writes and flushes on its own
    (path,) = run_dir.iterdir()
    assert path.name.endswith(tuple(f"-my-model-{x}" for x in [path.name[-6:]]))
    meta = json.loads((path / "run.json").read_text())
    assert meta["status"] == "running" and meta["title"] == "my model" and meta["pid"] == os.getpid()
    lines = (path / "steps.jsonl").read_text().splitlines()
    assert len(lines) == 301
    assert json.loads(lines[0]) == {"step": 0, "time": json.loads(lines[0])["time"], "loss": 1.0, "epoch": 0,
                                    "tokens": 2**60, "is_eval": 1}
    assert "metric_39" in json.loads(lines[200]) and "metric_39" not in json.loads(lines[100])
    assert len((path / "gpu.jsonl").read_text().splitlines()) == 6
    mon.finish()
    mon.refresh()  # reading or drawing a finished run leaves its log closed
    mon.save(path.parent / "copy.jsonl")
    assert mon.parts.res.run_log.closed
    assert json.loads((path / "run.json").read_text())["status"] == "finished"
    back = TrainingMonitor.load(path)
    assert same_rows(back.rows(), mon.rows()) and back.title == "my model"


def test_opt_out(run_dir, monkeypatch, tmp_path):
    mon = make(run_log=False)
    mon.log(loss=1.0)
    mon.finish()
    monkeypatch.setenv("GPU_WIDGETS_RUN_LOG", "0")
    mon = make()
    mon.log(loss=1.0)
    mon.finish()
    assert not run_dir.exists() and mon.run_dir is None
    # An explicit directory still works when the environment turned the default off.
    mon = make(run_log=tmp_path / "mine")
    mon.log(loss=1.0)
    mon.finish()
    assert mon.run_dir.parent == tmp_path / "mine"


def test_default_location(monkeypatch, tmp_path):
    monkeypatch.delenv("GPU_WIDGETS_RUN_DIR")
    if sys.platform.startswith("linux"):
        monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
        assert run_log.default_root() == tmp_path / "xdg" / "gpu-widgets" / "runs"
    assert run_log.default_root().parts[-2:] == ("gpu-widgets", "runs")
    monkeypatch.setenv("GPU_WIDGETS_RUN_DIR", "~/elsewhere")
    assert run_log.default_root() == Path.home() / "elsewhere"


def _fake_run(root: Path, name: str, size: int, age_s: float) -> Path:
    p = root / name
    p.mkdir(parents=True)
    (p / "run.json").write_text("{}")
    (p / "steps.jsonl").write_bytes(b"x" * size)
    t = time.time() - age_s
    for f in p.iterdir():
        os.utime(f, (t, t))
    return p


def test_pruning_removes_the_oldest_runs_and_only_runs(tmp_path):
    root = tmp_path / "runs"
    old = _fake_run(root, "20260101-000000-old-aaaaaa", 400_000, 10 * 86400)
    mid = _fake_run(root, "20260102-000000-mid-bbbbbb", 400_000, 5 * 86400)
    new = _fake_run(root, "20260103-000000-new-cccccc", 400_000, 2 * 86400)
    live = _fake_run(root, "20260104-000000-live-dddddd", 400_000, 10)  # another kernel's run
    mine = root / "notes"  # not a run: never touched
    mine.mkdir()
    (mine / "big.bin").write_bytes(b"y" * 2_000_000)
    removed = run_log.prune(root, max_bytes=1_000_000)
    assert removed == [old, mid]
    assert new.exists() and live.exists() and mine.exists()


def test_a_new_run_prunes_with_the_configured_limit(run_dir, monkeypatch):
    old = _fake_run(run_dir, "20260101-000000-old-aaaaaa", 3_000_000, 86400)
    monkeypatch.setenv("GPU_WIDGETS_RUN_DIR_MAX_MB", "1")
    mon = make()
    mon.log(loss=1.0)
    mon.finish()
    assert not old.exists() and mon.run_dir.exists()
    assert any("removed old run 20260101-000000-old-aaaaaa" in n for n in mon.parts.run.notes)
    monkeypatch.setenv("GPU_WIDGETS_RUN_DIR_MAX_MB", "lots")
    with pytest.raises(ValueError, match="GPU_WIDGETS_RUN_DIR_MAX_MB='lots' is not a number"):
        make()


def test_load_survives_a_torn_last_line_and_names_bad_lines(tmp_path):
    good = '{"step":0,"time":1.5,"loss":0.5}\n{"step":1,"time":2.5,"loss":0.25}\n'
    (tmp_path / "torn.jsonl").write_text(good + '{"step":2,"ti')
    with pytest.warns(RuntimeWarning, match="last line was cut off"):
        back = TrainingMonitor.load(tmp_path / "torn.jsonl")
    assert [r["loss"] for r in back.rows()] == [0.5, 0.25]
    assert any("last line was cut off" in n for n in back.parts.run.notes)
    (tmp_path / "bad.jsonl").write_text(good + "not json\n" + good)
    with pytest.raises(RunFileError, match="line 3 is not JSON"):
        TrainingMonitor.load(tmp_path / "bad.jsonl")
    (tmp_path / "text.jsonl").write_text('{"step":0,"time":1.0,"loss":"low"}\n')
    with pytest.raises(RunFileError, match="'loss' must be a number"):
        TrainingMonitor.load(tmp_path / "text.jsonl")
    with pytest.raises(FileNotFoundError, match="no such run or file"):
        TrainingMonitor.load(tmp_path / "missing.jsonl")
    (tmp_path / "empty-dir").mkdir()
    with pytest.raises(FileNotFoundError, match="has no steps.jsonl"):
        TrainingMonitor.load(tmp_path / "empty-dir")


KILL_CODE = """
import time
from gpu_widgets import TrainingMonitor
mon = TrainingMonitor("killed", flush_s={flush_s}, total_steps=10**9)
i = 0
while True:  # until the kernel is killed
    mon.log(loss=1.0 / (i + 1), i=i)
    i += 1
    time.sleep(0.0005)
"""


@pytest.mark.integration
def test_run_log_survives_a_killed_kernel(run_dir, tmp_path):
    """SIGKILL: no atexit, no finally. Everything older than one flush interval must be on disk."""
    jupyter_client = pytest.importorskip("jupyter_client")
    flush_s = 0.5
    env = {**os.environ, "GPU_WIDGETS_RUN_DIR": str(run_dir), "GPU_WIDGETS_BACKEND": "simulated"}
    km = jupyter_client.KernelManager(kernel_name="python3")
    km.start_kernel(env=env, cwd=str(tmp_path))
    try:
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=60)
        kc.execute(KILL_CODE.format(flush_s=flush_s))
        deadline = time.monotonic() + 60
        steps = None
        while time.monotonic() < deadline:
            found = list(run_dir.glob("*/steps.jsonl"))
            if found and found[0].stat().st_size > 0:
                steps = found[0]
                break
            time.sleep(0.1)
        assert steps is not None, "the kernel never wrote its run log"
        time.sleep(2.0)
        killed_at = time.time()
        os.kill(km.provisioner.pid, signal.SIGKILL)
        km.provisioner.process.wait(timeout=10)
        kc.stop_channels()
    finally:
        if km.is_alive():
            km.shutdown_kernel(now=True)
        km.cleanup_resources()
    back = TrainingMonitor.load(steps.parent)
    rows = back.rows()
    assert len(rows) > 100
    assert [r["step"] for r in rows] == list(range(len(rows)))  # no gaps
    assert all(r["i"] == r["step"] and r["loss"] == 1.0 / (r["step"] + 1) for r in rows)
    # The writer writes and flushes every 0.25 s (or flush_s): at most flush_s + 0.25 s may be lost.
    assert killed_at - rows[-1]["time"] < flush_s + 0.25 + 0.5
    assert back.status == "unfinished"  # run.json still says running: the process died
    assert "the process stopped without finishing" in back.widget.children[0].value
