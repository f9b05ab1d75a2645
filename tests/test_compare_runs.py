"""TrainingMonitor.compare(): real runs (simulated GPUs, a clock the test moves) saved to run logs and
files, then overlaid: one line per run in each chart (the marks' data checked against the saved
files), by step and by time, the summary's numbers against the saved data, errors, a run without
GPU samples, long runs kept bounded, and the static picture."""
from __future__ import annotations

import base64
import html
import json
import re
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from gpu_widgets import RunFileError, TrainingMonitor
from gpu_widgets.backends import SimulatedBackend
from gpu_widgets.sampling.sampler import Sampler
from gpu_widgets.monitor import run_state
from gpu_widgets.monitor.compare import RunComparison

from gpu_widgets.runs.run_log import write_json

from .launch_fixtures import T0 as LAUNCH_T0, make_launch
from .widget_helpers import GIB, FixedBackend, marks, run_dir  # noqa: F401

T0 = 1_700_000_000.0
PER_S = 10  # steps per second of the test's clock; the sampler ticks once a second
GPU_CHARTS = ("gpu_util", "gpu_memory", "gpu_temperature", "gpu_power")


class FakeClock:
    """The sampler's wall clock and the monitor's (run_state.now), moved by the test."""

    def __init__(self) -> None:
        self.t = T0

    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return self.t

    def wait(self, event, timeout):
        return event.wait(timeout)


@pytest.fixture
def clock(monkeypatch):
    c = FakeClock()
    monkeypatch.setattr(run_state, "now", lambda: c.t)
    return c


def record(clock: FakeClock, title: str, steps: int, *, backend=None, run_log=False, batch_size=32,
           rate=1.0, finish=True) -> TrainingMonitor:
    """A run of ``steps`` steps at PER_S steps a second from now on the clock, a GPU sample every
    second (at steps 0, 10, 20, ...); step i logs loss = rate / (i + 1) at start + i / PER_S."""
    if backend is None:
        backend = SimulatedBackend(n_gpus=2, seed=1)
    backend.open()
    sampler = Sampler(backend, interval_s=1.0, clock=clock)
    # gpus="all": the run's GPUs whatever this process did with PyTorch before ("auto" in a
    # process without CUDA would make them other people's: "no GPU used", see test_run_keeps.py)
    mon = TrainingMonitor(title, display=False, sampler=sampler, run_log=run_log, batch_size=batch_size, gpus="all")
    start = clock.t
    for i in range(steps):
        clock.t = start + i / PER_S
        if i % PER_S == 0:
            sampler.tick()
            mon.parts.tick()  # the monitor's thread: folds the sample in, writes the run log
        mon.log(loss=rate / (i + 1), acc=i / steps)
    clock.t = start + steps / PER_S
    if finish:
        mon.finish()
    clock.t += 100.0  # the next run starts later
    return mon


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def gpu_means(gpu_rows: list[dict], field: str, scale: float = 1.0) -> tuple[list[float], list[float]]:
    """Per sample time, the mean of the GPUs' ``field``: what a run's GPU line draws."""
    by_time: dict[float, list[float]] = defaultdict(list)
    for r in gpu_rows:
        if r.get(field) is not None:
            by_time[r["time"]].append(r[field] / scale)
    times = sorted(by_time)
    return times, [sum(by_time[t]) / len(by_time[t]) for t in times]


def head_text(chart) -> str:
    return re.sub(r"<[^>]+>", " ", chart.head.value)


@pytest.fixture
def two_runs(clock, tmp_path):
    """Run A in a run log (a directory), run B saved as JSON Lines with its GPU samples beside it."""
    a = record(clock, "baseline", 200, run_log=tmp_path / "log")
    b = record(clock, "bigger lr", 300, rate=2.0)
    return a.run_dir, b.save(tmp_path / "b.jsonl"), tmp_path / "b.gpu.jsonl"


# -- the charts ---------------------------------------------------------------------------------
def test_by_step_each_chart_has_one_line_per_run_in_the_runs_colours(two_runs):
    a_dir, b_path, b_gpu = two_runs
    cmp = TrainingMonitor.compare(a_dir, b_path, display=False)
    assert isinstance(cmp, RunComparison)
    charts = cmp._view.charts
    assert set(charts) == {"loss", "acc", *GPU_CHARTS}
    a, b = cmp.runs
    assert a.startswith("baseline · ") and b.startswith("b · ")  # a saved file: named by the file
    for name, chart in charts.items():
        assert list(chart.lines) == [a, b], name
        assert chart.lines[a].colors != chart.lines[b].colors
        assert a in head_text(chart) and b in head_text(chart)  # the legend row names each run
    colours = {run: {tuple(c.lines[run].colors) for c in charts.values()} for run in (a, b)}
    assert all(len(c) == 1 for c in colours.values()), colours  # a run has one colour everywhere

    a_rows, b_rows = jsonl(a_dir / "steps.jsonl"), jsonl(b_path)
    for run, rows in ((a, a_rows), (b, b_rows)):
        mark = marks(charts, "loss")[run]
        assert list(mark.x) == [r["step"] for r in rows]
        assert list(mark.y) == [r["loss"] for r in rows]
    assert charts["loss"].x_axis.label == "step"

    # GPU busy by step: the mean of the run's GPUs at the step it was at (a sample every 10 steps).
    for run, gpu_rows, rows in ((a, jsonl(a_dir / "gpu.jsonl"), a_rows), (b, jsonl(b_gpu), b_rows)):
        times, means = gpu_means(gpu_rows, "utilization_gpu_percent")
        start = rows[0]["time"]
        mark = marks(charts, "gpu_util")[run]
        assert list(mark.x) == [round((t - start) * PER_S) for t in times]
        assert np.allclose(mark.y, means, atol=1e-3)
        assert len(times) == len(rows) // PER_S and len({r["gpu"] for r in gpu_rows}) == 2


def test_by_time_lines_start_at_each_runs_start_and_gpu_axes_are_the_catalogues(two_runs):
    a_dir, b_path, b_gpu = two_runs
    cmp = TrainingMonitor.compare([a_dir, b_path], x_axis="time", display=False)  # one list works too
    charts = cmp._view.charts
    a, b = cmp.runs
    b_rows = jsonl(b_path)
    start = b_rows[0]["time"]
    loss = marks(charts, "loss")[b]
    assert np.allclose(loss.x, [r["time"] - start for r in b_rows], atol=1e-4)
    assert loss.x[0] == 0.0 and charts["loss"].x_axis.label == "seconds since start"
    times, means = gpu_means(jsonl(b_gpu), "memory_used_bytes", GIB)
    memory = marks(charts, "gpu_memory")[b]
    assert np.allclose(memory.x, [t - start for t in times], atol=1e-4)
    assert np.allclose(memory.y, means, rtol=1e-6)
    a_start = json.loads((a_dir / "run.json").read_text())["started"]
    times, means = gpu_means(jsonl(a_dir / "gpu.jsonl"), "power_w")
    power = marks(charts, "gpu_power")[a]
    assert np.allclose(power.x, [t - a_start for t in times], atol=1e-4) and np.allclose(power.y, means, atol=0.05)
    # Fixed axes from the metric catalogue: busy 0-100 %, memory up to the GPUs' total, power to the limit.
    assert (charts["gpu_util"].y_scale.min, charts["gpu_util"].y_scale.max) == (0.0, 100.0)
    total = jsonl(b_gpu)[0]["memory_total_bytes"] / GIB
    assert charts["gpu_memory"].y_scale.max == pytest.approx(total)
    assert charts["gpu_power"].y_scale.max == pytest.approx(jsonl(b_gpu)[0]["power_limit_w"])
    assert cmp.chart_titles == ("loss", "acc", "GPU busy (%)", "GPU memory (GiB)", "GPU temperature (°C)", "GPU power (W)")
    assert "by time since each run's start" in cmp.widget.children[0].value


def test_keys_chooses_the_metric_charts(two_runs):
    a_dir, b_path, _ = two_runs
    cmp = TrainingMonitor.compare(a_dir, b_path, keys="loss", display=False)
    assert "acc" not in cmp._view.charts and "loss" in cmp._view.charts
    assert all(set(row["final"]) == {"loss"} for row in cmp.summary)


# -- the summary --------------------------------------------------------------------------------
def test_summary_numbers_are_those_of_the_saved_runs(clock, tmp_path):
    a_mon = record(clock, "baseline", 200, run_log=tmp_path / "log", batch_size=64)
    failed = record(clock, "diverged", 120, run_log=tmp_path / "log", finish=False)
    failed.fail(RuntimeError("loss is NaN"))
    cmp = TrainingMonitor.compare(a_mon.run_dir, failed.run_dir, display=False)
    for row, run_dir_, status in zip(cmp.summary, (a_mon.run_dir, failed.run_dir), ("finished", "failed")):
        meta = json.loads((run_dir_ / "run.json").read_text())
        rows, gpu_rows = jsonl(run_dir_ / "steps.jsonl"), jsonl(run_dir_ / "gpu.jsonl")
        assert row["status"] == status and row["source"] == str(run_dir_.resolve())
        assert row["steps"] == rows[-1]["step"] + 1 == len(rows)
        assert row["started"] == meta["started"] and row["duration_s"] == pytest.approx(meta["ended"] - meta["started"])
        rate = (rows[-1]["step"] - rows[0]["step"]) / (rows[-1]["time"] - rows[0]["time"])
        assert row["steps_per_s"] == pytest.approx(rate) == pytest.approx(PER_S)
        assert row["samples_per_s"] == pytest.approx(rate * meta["batch_size"])
        per_gpu = defaultdict(list)
        for r in gpu_rows:
            per_gpu[r["gpu"]].append(r["energy_j"])
        assert row["energy_j"] == pytest.approx(sum(e[-1] - e[0] for e in per_gpu.values()))
        assert row["energy_from"] == "energy counter" and row["gpus"] == [0, 1]
        assert row["peak_memory_bytes"] == max(r["memory_used_bytes"] for r in gpu_rows)
        assert row["final"] == {"loss": rows[-1]["loss"], "acc": rows[-1]["acc"]}
    assert cmp.summary[0]["samples_per_s"] == pytest.approx(PER_S * 64)
    table = html.unescape(re.sub(r"<[^>]+>", "|", cmp.widget.children[0].value))
    assert "finished" in table and "failed" in table and "|640|" in table  # samples/s of A
    assert "energy: from the GPUs' energy counters" in table


def test_a_launch_compares_as_rank_zero_over_the_launchs_wall_time(clock, tmp_path):
    # Given a 2-rank launch whose rank 1 failed 4 s after rank 0 finished, and a single-process run
    launch = make_launch(tmp_path / "runs", statuses=("finished", "failed"), steps=(20, 12), started=LAUNCH_T0)
    rank1 = json.loads((launch / "rank-1" / "run.json").read_text())
    write_json(launch / "rank-1" / "run.json", {**rank1, "ended": LAUNCH_T0 + 14})
    single = record(clock, "one GPU", 50, run_log=tmp_path / "log")
    # When they are compared, as a directory and as the monitor load() gives
    for launch_run in (launch, TrainingMonitor.load(launch, display=False)):
        cmp = TrainingMonitor.compare(launch_run, single.run_dir, display=False)
        row, other = cmp.summary
        # Then the launch is one run: its title, failed (a rank failed), its 2 ranks, from the first
        # rank's start to the last one's end; its steps and values are rank 0's
        assert (row["title"], row["status"], row["world_size"]) == ("ddp toy", "failed", 2)
        assert row["started"] == LAUNCH_T0 and row["duration_s"] == pytest.approx(14.0)
        assert row["steps"] == 20 and row["final"]["loss"] == pytest.approx(1 / 20)
        assert row["gpus"] == [0]  # rank 0's GPU
        assert other["world_size"] == 1 and other["steps"] == 50
        # and the table gains a ranks column
        cells = [c.strip() for c in html.unescape(re.sub(r"<[^>]+>", "|", cmp.widget.children[0].value)).split("|")
                 if c.strip()]
        assert cells[cells.index("status") + 1] == "ranks" and "2" in cells
    # Two single-process runs have no ranks column
    plain = TrainingMonitor.compare(single.run_dir, record(clock, "again", 30, run_log=tmp_path / "log").run_dir,
                                    display=False)
    assert "ranks" not in plain.widget.children[0].value and [r["world_size"] for r in plain.summary] == [1, 1]


def test_a_gpu_without_an_energy_counter_has_its_power_integrated_and_the_table_says_so(clock, tmp_path):
    steady = FixedBackend({"power_w": 100.0, "energy_j": None})
    a = record(clock, "no counter", 50, backend=steady, run_log=tmp_path / "log")
    b = record(clock, "counter", 50, run_log=tmp_path / "log")
    cmp = TrainingMonitor.compare(a.run_dir, b.run_dir, display=False)
    row = cmp.summary[0]
    samples = len(jsonl(a.run_dir / "gpu.jsonl"))
    assert samples == 5 and row["energy_from"] == "power integrated"
    assert row["energy_j"] == pytest.approx(100.0 * (samples - 1))  # 100 W for 4 s between 5 samples
    assert cmp.summary[1]["energy_from"] == "energy counter"
    header = cmp.widget.children[0].value
    assert "400 J *" in header and "* power integrated over time" in header


def test_a_run_without_gpu_samples_is_compared_on_its_metrics(clock, tmp_path):
    a = record(clock, "gpu run", 100, run_log=tmp_path / "log")
    cpu = record(clock, "cpu run", 80)
    cpu_path = cpu.save(tmp_path / "cpu.csv", gpu=False)
    cmp = TrainingMonitor.compare(a.run_dir, cpu_path, display=False)
    gpu_run, cpu_run = cmp.runs
    charts = cmp._view.charts
    assert list(charts["loss"].lines) == [gpu_run, cpu_run]
    for name in GPU_CHARTS:
        assert list(charts[name].lines) == [gpu_run], name  # only the run that has samples
    row = cmp.summary[1]
    assert (row["energy_j"], row["energy_from"], row["peak_memory_bytes"], row["gpus"]) == (None, None, None, [])
    assert row["steps"] == 80 and row["final"]["loss"] == pytest.approx(1 / 80)
    fig = cmp.figure()  # the picture draws it too
    assert any(t.get_text() == "n/a" for ax in fig.axes for table in ax.tables for t in
               (c.get_text() for c in table.get_celld().values()))


def test_live_and_loaded_monitors_compare_as_they_are_now(clock, tmp_path):
    done = record(clock, "done", 60, run_log=tmp_path / "log")
    live = record(clock, "live", 40, finish=False)
    loaded = TrainingMonitor.load(done.run_dir)
    cmp = TrainingMonitor.compare(loaded, live, display=False)
    assert [row["status"] for row in cmp.summary] == ["finished", "running"]
    assert [row["steps"] for row in cmp.summary] == [60, 40]
    assert cmp.summary[1]["source"] is None  # no run log
    assert len(marks(cmp._view.charts, "loss")[cmp.runs[1]].x) == 40
    live.finish()


def test_runs_with_the_same_name_and_start_are_told_apart(clock, tmp_path):
    mon = record(clock, "x", 30)
    cmp = TrainingMonitor.compare(mon.save(tmp_path / "x.jsonl"), mon.save(tmp_path / "x.csv"), display=False)
    assert cmp.runs[1] == cmp.runs[0] + " #2"


# -- errors -------------------------------------------------------------------------------------
def test_bad_input_says_what_is_wrong(two_runs, tmp_path):
    a_dir, b_path, _ = two_runs
    cases = [
        (lambda: TrainingMonitor.compare(a_dir), ValueError, "compare() needs at least 2 runs"),
        (lambda: TrainingMonitor.compare(), ValueError, "got 0"),
        (lambda: TrainingMonitor.compare(a_dir, b_path, x_axis="epoch"), ValueError,
         "x_axis must be 'step' or 'time', got 'epoch'"),
        (lambda: TrainingMonitor.compare(a_dir, a_dir), ValueError, "run 2 (" ),
        (lambda: TrainingMonitor.compare(a_dir, a_dir / "steps.jsonl"), ValueError, "is the same run as run 1"),
        (lambda: TrainingMonitor.compare(a_dir, 3), TypeError, "run 2 must be a run directory"),
        (lambda: TrainingMonitor.compare(a_dir, b_path, keys=["loss", "val_loss"]), ValueError,
         "'val_loss' was logged in none of the runs"),
        (lambda: TrainingMonitor.compare(a_dir, b_path, keys=[1]), TypeError, "keys must be names"),
        (lambda: TrainingMonitor.compare(a_dir, b_path, max_points=2), ValueError, "max_points must be"),
    ]
    for call, error, words in cases:
        with pytest.raises(error) as info:
            call()
        assert words in str(info.value), (words, str(info.value))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"run 2 \('.*empty'\): .*is not a gpu-widgets run: it has no steps.jsonl"):
        TrainingMonitor.compare(a_dir, tmp_path / "empty")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"step": 0, "time": 1.0, "loss": 0.5}\n{"step": "one", "time": 2.0}\n')
    with pytest.raises(RunFileError, match=r"run 2 .*bad.jsonl: line 2: 'step' must be a whole number"):
        TrainingMonitor.compare(a_dir, bad)


def test_a_monitor_and_its_own_run_directory_are_the_same_run(clock, tmp_path):
    mon = record(clock, "one", 20, run_log=tmp_path / "log")
    with pytest.raises(ValueError, match="run 2 .* is the same run as run 1"):
        TrainingMonitor.compare(mon, mon.run_dir)


# -- bounded, and the picture -------------------------------------------------------------------
def test_long_runs_are_drawn_within_max_points(clock, tmp_path):
    paths = [record(clock, f"long {k}", 6000, rate=k + 1).save(tmp_path / f"long{k}.jsonl") for k in range(3)]
    cmp = TrainingMonitor.compare(*paths, max_points=600, display=False)
    lines = [m for c in cmp._view.charts.values() for m in c.lines.values()]
    assert len(lines) == 3 * (2 + 4)
    assert sum(len(m.x) for m in lines) <= 600 * 1.05
    loss = marks(cmp._view.charts, "loss")
    for k, run in enumerate(cmp.runs):  # min/max buckets: the first (highest) loss survives
        assert max(loss[run].y) == pytest.approx(k + 1.0) and loss[run].x[-1] == 5999


def test_the_static_picture_has_every_chart_and_the_table(two_runs, tmp_path):
    a_dir, b_path, _ = two_runs
    cmp = TrainingMonitor.compare(a_dir, b_path, display=False)
    fig = cmp.figure()
    titles = [ax.get_legend().get_title().get_text() for ax in fig.axes if ax.get_legend() is not None]
    assert titles == [t.upper() for t in cmp.chart_titles]
    plotted = [ax for ax in fig.axes if ax.get_legend() is not None]
    assert all(len(ax.lines) == 2 for ax in plotted)
    assert [t.get_text().split(" ")[0] for t in plotted[0].get_legend().get_texts()] == ["baseline", "b"]
    assert plotted[0].get_xlabel() == "step"
    cells = [c.get_text().get_text() for ax in fig.axes for t in ax.tables for c in t.get_celld().values()]
    assert {"run", "energy", "peak memory", "final loss", *cmp.runs} <= set(cells)
    png = cmp.to_png(tmp_path / "cmp.png")
    assert png.startswith(b"\x89PNG") and (tmp_path / "cmp.png").read_bytes() == png
    bundle = cmp._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert base64.b64decode(bundle["image/png"]).startswith(b"\x89PNG")
    assert bundle["text/plain"].startswith("<RunComparison of 2 runs by step")
