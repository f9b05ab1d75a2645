"""The data wait in the run log: ``data_wait.jsonl`` written beside the steps, read back by load(),
follow() (a run another process writes) and drawn in the static picture; old run logs without it
still load.

Timing runs sleep 40 ms per batch before 10 ms of compute, as in test_data_wait.py; the saved run is
compared with the live monitor it came from, not with a constant."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from gpu_widgets import TrainingMonitor
from gpu_widgets.runs.run_log import DATA_WAIT
from gpu_widgets.monitor import data_wait
from gpu_widgets.monitor.static_image import draw_figure

from .widget_helpers import marks, no_gpu_sampler, run_dir, wait_until  # noqa: F401  (run_dir: runs under tmp)

ROOT = Path(__file__).resolve().parents[1]


def header(mon: TrainingMonitor) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", mon.widget.children[0].value).split())


def wait_line(mon: TrainingMonitor):
    if data_wait.CHART not in mon.parts.view.charts:  # a chart appears with its first line
        return None
    return marks(mon.parts.view.charts, data_wait.CHART).get(data_wait.LINE)


def chart_titles(mon: TrainingMonitor) -> list[str]:
    """The static picture's chart titles (each chart's title heads its legend), drawn as render_png draws."""
    r = mon.parts
    r.records.resolve_deferred()
    origin = (r.run.t0 or 0.0) if r.on_time else None
    fig = draw_figure(mon.title, r.records, r.charts.plan, r.trace, r.gpus.shown(), origin,
                      summary=r.gpus.summarised(), data_wait=r.charts.waits.points(r.run.t0))
    return [ax.get_legend().get_title().get_text() for ax in fig.axes if ax.get_visible() and ax.get_legend()]


def slow_loader(n: int, sleep_s: float = 0.04):
    for i in range(n):
        time.sleep(sleep_s)
        yield [i] * 4


def slow_run(runs: Path, steps: int = 40) -> TrainingMonitor:
    mon = TrainingMonitor("slow data", display=False, run_log=runs, sampler=no_gpu_sampler())
    for _ in mon.track(slow_loader(steps)):
        time.sleep(0.01)
    mon.finish()
    return mon


def test_a_saved_run_shows_the_data_wait_chart_share_and_diagnosis_as_the_live_one(run_dir):
    live = slow_run(run_dir)
    path = live.run_dir
    rows = [json.loads(line) for line in (path / DATA_WAIT).read_text().splitlines()]
    # One line per half second of steps, and every timed step in one (the first batch is the loader starting).
    assert 3 <= len(rows) <= 8 and sum(r["steps"] for r in rows) == 39
    assert set(rows[0]) == {"time", "wait_s", "step_s", "steps"}

    loaded = TrainingMonitor.load(path)
    share, again = live.data_wait_share, loaded.data_wait_share
    assert share is not None and share > 0.5 and again == pytest.approx(share, abs=0.02)
    a, b = wait_line(live), wait_line(loaded)
    assert len(a.x) >= 3 and len(b.x) == len(a.x)
    assert np.allclose(b.x, a.x, atol=0.01) and np.allclose(b.y, a.y, atol=0.1)
    text = header(loaded)
    assert f"data wait {100 * again:.0f} % last 50 steps" in text and "Input-bound: the loop spent" in text
    # The picture has the chart, next to the GPU-busy one where there is one, live and loaded alike.
    assert data_wait.CHART_TITLE.upper() in chart_titles(live) and data_wait.CHART_TITLE.upper() in chart_titles(loaded)
    assert loaded.to_png()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_live_runs_final_picture_has_the_data_wait_chart_without_a_run_log():
    mon = TrainingMonitor("no log", display=False, run_log=False, sampler=no_gpu_sampler())
    for _ in mon.track(slow_loader(12, 0.02)):
        pass
    mon.finish()
    assert chart_titles(mon)[-1] == data_wait.CHART_TITLE.upper()  # after the metric chart
    plain = TrainingMonitor("no wait", display=False, run_log=False, sampler=no_gpu_sampler())
    plain.log(loss=1.0)
    plain.finish()
    assert data_wait.CHART_TITLE.upper() not in chart_titles(plain)


def test_the_file_stays_bounded_by_the_half_second_bins_however_many_steps(run_dir):
    mon = TrainingMonitor("many steps", display=False, run_log=run_dir, sampler=no_gpu_sampler())
    mon.log(loss=1.0)
    clock = time.perf_counter
    began = time.monotonic()
    for _ in range(20_000):  # steps of ~60 µs: a line per step would be 20,000 lines
        end = clock() + 6e-5
        while clock() < end:
            pass
        mon.note_data_wait(0.00001, 0.00004)
    elapsed = time.monotonic() - began
    mon.finish()
    rows = [json.loads(line) for line in (mon.run_dir / DATA_WAIT).read_text().splitlines()]
    assert len(rows) <= elapsed / data_wait.BIN_S + 3  # the bins, not the steps
    assert sum(r["steps"] for r in rows) == 20_000  # every step counted in one
    loaded = TrainingMonitor.load(mon.run_dir)
    assert loaded.data_wait_share == pytest.approx(0.25, abs=0.01)
    assert len(wait_line(loaded).x) == len(rows)


def test_an_old_run_log_without_data_wait_still_loads(tmp_path):
    run = tmp_path / "20250101-120000-old-abcdef"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"format": 1, "title": "old", "status": "finished",
                                              "started": 1_700_000_000.0, "ended": 1_700_000_010.0}))
    (run / "steps.jsonl").write_text("".join(json.dumps({"step": i, "time": 1_700_000_000.0 + i, "loss": 1 / (i + 1)}) + "\n"
                                             for i in range(10)))
    mon = TrainingMonitor.load(run)
    assert mon.step == 9 and mon.status == "finished" and mon.data_wait_share is None
    assert wait_line(mon) is None and "data wait" not in header(mon)
    assert data_wait.CHART_TITLE.upper() not in chart_titles(mon)


def test_a_damaged_data_wait_line_is_named_by_file_and_line(run_dir):
    mon = TrainingMonitor("t", display=False, run_log=run_dir, sampler=no_gpu_sampler())
    for _ in range(10):
        mon.note_data_wait(0.01, 0.02)
        mon.log(loss=1.0)
    mon.finish()
    path = mon.run_dir / DATA_WAIT
    good = path.read_text()
    path.write_text(good + json.dumps({"time": 1.0, "wait_s": 2.0, "step_s": 1.0, "steps": 3}) + "\n")
    n = len(good.splitlines()) + 1
    with pytest.warns(RuntimeWarning, match=rf"{re.escape(str(path))}: line {n}: 'wait_s' \(2.0\) is longer than 'step_s'"):
        back = TrainingMonitor.load(mon.run_dir)  # the bad bin is left out, the rest loads
    assert back.data_wait_share == pytest.approx(0.5) and back.step == 9
    path.write_text(good + '{"time": 1.0, "wait_s": 0.1, "step_s"')  # a torn last line: skipped with a warning
    with pytest.warns(RuntimeWarning, match="data_wait.jsonl: the last line was cut off"):
        assert TrainingMonitor.load(mon.run_dir).data_wait_share == pytest.approx(0.5)


SCRIPT = textwrap.dedent("""
    import pathlib, sys, time
    from gpu_widgets import TrainingMonitor
    go = pathlib.Path(sys.argv[1])

    def loader(n):
        for i in range(n):
            time.sleep(0.04)
            yield [i] * 4

    mon = TrainingMonitor("slow data", display=False)
    for _ in mon.track(loader(25)):
        time.sleep(0.01)
    while not go.exists():  # the test looks at the follower before the run goes on
        time.sleep(0.02)
    for _ in mon.track(loader(15)):
        time.sleep(0.01)
    mon.finish()
""")


@pytest.mark.integration
def test_follow_shows_the_data_wait_of_a_run_another_process_writes(tmp_path, run_dir):
    script, go = tmp_path / "train.py", tmp_path / "go"
    script.write_text(SCRIPT)
    env = {**os.environ, "GPU_WIDGETS_RUN_DIR": str(run_dir), "GPU_WIDGETS_BACKEND": "simulated"}
    proc = subprocess.Popen([sys.executable, str(script), str(go)], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        run = wait_until(lambda: next((p for p in run_dir.glob("*") if (p / "run.json").is_file()), None), 30)
        mon = TrainingMonitor.follow(run, display=False, poll_s=0.05)
        # While the script is still running (it waits for us), its first timed steps show: those of
        # the closed half-second bins (the last bin is written when a later step closes it, or at
        # the end), so 14-24 of its 24 steps, depending on where the bins fall.
        wait_until(lambda: mon.parts.charts.waits.counted >= data_wait.MIN_STEPS and "Input-bound" in header(mon), 30)
        assert mon.status == "running" and len(wait_line(mon).x) >= 2
        assert f"data wait {100 * mon.data_wait_share:.0f} % last 50 steps" in header(mon)
        go.touch()
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert mon.parts.follower.done.wait(10)
    finally:
        go.touch()
        proc.kill()
    loaded = TrainingMonitor.load(run)
    assert mon.status == "finished"
    assert mon.data_wait_share == pytest.approx(loaded.data_wait_share) and mon.data_wait_share > 0.5
    a, b = wait_line(mon), wait_line(loaded)
    assert np.array_equal(a.x, b.x) and np.array_equal(a.y, b.y)
    assert data_wait.CHART_TITLE.upper() in chart_titles(mon)
