"""A launch in one view: load() and follow() of a launch directory made by hand draw "step time by
rank" and "data wait by rank" (a line per rank, or a band and the slowest rank beyond 8), every
rank's GPUs labelled with its rank, the same charts in the PNG, and a redraw of 8 ranks × 10^5 steps
within the payload budget; a single-process run draws none of it."""
from __future__ import annotations

import json
import time

import numpy as np
import pytest

from gpu_widgets import TrainingMonitor
from gpu_widgets.monitor.rank_charts import STEP_CHART, STEP_TITLE, WAIT_CHART, WAIT_TITLE
from gpu_widgets.monitor.static_image import draw_figure
from gpu_widgets.runs.run_log import write_json

from .launch_fixtures import T0, data_wait_bins, make_launch, write_lines
from .widget_helpers import marks, wait_until

ONE_HOST = ("node-a", "node-a")


def drawn(charts, chart):
    """The lines of a chart that hold points (a line emptied, e.g. once GPUs became a summary, does not)."""
    return {name: m for name, m in marks(charts, chart).items() if len(m.x)}


def charts_in_grid(mon):
    view = mon.parts.view
    return [next(name for name, c in view.charts.items() if c.card is card) for card in view.grid.children]


def test_load_of_two_ranks_draws_step_time_and_data_wait_by_rank(tmp_path):
    mon = TrainingMonitor.load(make_launch(tmp_path, hosts=ONE_HOST, waits=(0.001, 0.05), steps=(20, 20)))
    charts = mon.parts.view.charts
    assert (charts[STEP_CHART].title, charts[WAIT_CHART].title) == ("step time by rank", "data wait by rank")
    assert charts_in_grid(mon)[:3] == ["loss", STEP_CHART, WAIT_CHART]  # right after the loss
    for chart, want in ((STEP_CHART, (100.0, 100.0)), (WAIT_CHART, (1.0, 50.0))):
        lines = marks(charts, chart)
        assert sorted(lines) == ["rank 0", "rank 1"]
        for name, ms in zip(("rank 0", "rank 1"), want):
            x, y = np.asarray(lines[name].x), np.asarray(lines[name].y)
            assert list(x) == [0.0, 0.5, 1.0, 1.5]  # a bin every 5 steps of 0.1 s, since rank 0's start
            assert y == pytest.approx([ms] * 4, rel=1e-5)
    # every rank's GPU, named by its rank (one host: no host in the names)
    assert sorted(marks(charts, "gpu_util")) == ["rank 0 · GPU 0", "rank 1 · GPU 1"]
    assert np.asarray(marks(charts, "gpu_util")["rank 1 · GPU 1"].y).tolist() == [51.0] * 3


def test_a_gpu_that_every_rank_of_a_host_recorded_is_one_line_named_by_all_of_them(tmp_path):
    """CPU ranks each record every GPU of their machine: one line per GPU, not one per rank."""
    path = make_launch(tmp_path, hosts=("node-a",) * 4, statuses=("finished",) * 4, steps=(20,) * 4,
                       waits=(0.001,) * 4, gpu_index=(0, 0, 0, 1))
    mon = TrainingMonitor.load(path)
    gpus = drawn(mon.parts.view.charts, "gpu_util")
    assert sorted(gpus) == ["rank 3 · GPU 1", "ranks 0–2 · GPU 0"]
    assert np.asarray(gpus["ranks 0–2 · GPU 0"].y).tolist() == [50.0] * 3  # rank 0's readings
    assert gpus["ranks 0–2 · GPU 0"].colors != gpus["rank 3 · GPU 1"].colors
    texts = {t.get_text() for ax in draw_figure_of(mon).axes if ax.get_legend() for t in ax.get_legend().get_texts()}
    assert any(t.startswith("ranks 0–2 · GPU 0") for t in texts) and not any(t.startswith("rank 1 · GPU") for t in texts)


def test_the_same_gpu_index_on_two_hosts_or_with_its_own_pytorch_readings_stays_apart(tmp_path):
    path = make_launch(tmp_path, hosts=("node-a", "node-a", "node-b"), statuses=("finished",) * 3,
                       steps=(20,) * 3, waits=(0.001,) * 3, gpu_index=(0, 0, 0))
    write_lines(path / "rank-1" / "gpu.jsonl", [{"time": T0 + 3, "gpu": 0, "utilization_gpu_percent": 51,
                                                 "torch_allocated_bytes": 2 ** 30}])
    gpus = drawn(TrainingMonitor.load(path).parts.view.charts, "gpu_util")
    assert sorted(gpus) == ["rank 0 · node-a · GPU 0", "rank 1 · node-a · GPU 0", "rank 2 · node-b · GPU 0"]


def test_follow_renames_a_gpu_line_once_another_rank_turns_out_to_share_it(tmp_path):
    path = make_launch(tmp_path, hosts=ONE_HOST, statuses=("running", "running"), steps=(10, 10), gpu_index=(0, 0))
    (path / "rank-1" / "gpu.jsonl").write_text("")
    mon = TrainingMonitor.follow(path, display=False, poll_s=0.05)
    charts = mon.parts.view.charts
    wait_until(lambda: "gpu_util" in charts and sorted(drawn(charts, "gpu_util")) == ["rank 0 · GPU 0"],
               what="rank 0's GPU alone")
    write_lines(path / "rank-1" / "gpu.jsonl", [{"time": T0 + i, "gpu": 0, "utilization_gpu_percent": 51}
                                               for i in range(2)])
    wait_until(lambda: sorted(drawn(charts, "gpu_util")) == ["ranks 0, 1 · GPU 0"], what="one line named by both")
    for r in (0, 1):
        meta = json.loads((path / f"rank-{r}" / "run.json").read_text())
        write_json(path / f"rank-{r}" / "run.json", {**meta, "status": "finished", "ended": T0 + 10})
    assert mon.parts.follower.done.wait(30)


def test_two_hosts_name_each_rank_and_gpu_with_its_host(tmp_path):
    mon = TrainingMonitor.load(make_launch(tmp_path, waits=(0.001, 0.05), gpu_index=(0, 0)))
    charts = mon.parts.view.charts
    assert sorted(marks(charts, WAIT_CHART)) == ["rank 0 · node-a", "rank 1 · node-b"]
    gpus = marks(charts, "gpu_util")
    assert sorted(gpus) == ["rank 0 · node-a · GPU 0", "rank 1 · node-b · GPU 0"]
    assert gpus["rank 0 · node-a · GPU 0"].colors != gpus["rank 1 · node-b · GPU 0"].colors  # both GPU 0
    # the picture draws the same two charts, with the same names
    fig = draw_figure_of(mon)
    texts = {t.get_text() for ax in fig.axes if ax.get_legend() for t in [ax.get_legend().get_title(),
                                                                            *ax.get_legend().get_texts()]}
    assert {STEP_TITLE.upper(), WAIT_TITLE.upper()} <= texts
    assert "rank 1 · node-b 50.0 ms" in texts and any(t.startswith("rank 1 · node-b · GPU 0") for t in texts)
    assert mon.to_png()[:4] == b"\x89PNG"


def draw_figure_of(mon):
    r = mon.parts
    every, summary = r.charts.with_ranks(r.gpus.shown(), r.gpus.summarised())
    return draw_figure(r.title, r.records, r.charts.plan, r.trace, every, r.run.t0, summary=summary,
                       by_rank=r.charts.ranks.panels(2000))


def test_twelve_ranks_are_a_band_and_the_slowest_rank(tmp_path):
    n = 12
    waits = tuple(0.001 + 0.002 * r for r in range(n - 1)) + (0.06,)  # rank 11 the slowest
    mon = TrainingMonitor.load(make_launch(tmp_path, hosts=("node-a",) * n, statuses=("finished",) * n,
                                           steps=(20,) * n, waits=waits))
    charts = mon.parts.view.charts
    lines = marks(charts, WAIT_CHART)
    assert sorted(lines) == ["min–max", "slowest: rank 11"]
    band = np.asarray(lines["min–max"].y)
    assert band.shape[0] == 2 and band[0] == pytest.approx(1.0, rel=1e-5) and band[1] == pytest.approx(60.0, rel=1e-5)
    assert np.asarray(lines["slowest: rank 11"].y) == pytest.approx(60.0, rel=1e-5)
    assert sorted(drawn(charts, "gpu_util")) == ["mean of 12 GPUs", "min–max"]  # 12 GPUs: the summary
    assert [title for title, _ in mon.parts.charts.ranks.panels(2000)] == [STEP_TITLE, WAIT_TITLE]


def sent_by_a_full_redraw(mon):
    """Every line's arrays and the header: what a redraw that re-sends every line sends (as test_follow counts)."""
    return sum(np.asarray(m.x).nbytes + np.asarray(m.y).nbytes for c in mon.parts.view.charts.values()
               for m in c.lines.values()) + len(mon.parts.view.header.value)


def test_a_redraw_of_8_ranks_by_10_to_5_steps_stays_in_budget_and_memory_is_bounded(tmp_path):
    n, steps = 8, 100_000
    path = make_launch(tmp_path, hosts=tuple(f"node-{r // 4}" for r in range(n)), statuses=("finished",) * n,
                       steps=(20,) * n, waits=tuple(0.001 * (r + 1) for r in range(n)), bin_steps=steps)
    mon = TrainingMonitor.load(path)
    ranks = mon.parts.charts.ranks
    for s in ranks.series.values():  # every bin read, only a bounded number of blocks kept
        assert s.bins == steps // 5
        assert all(c.n_blocks <= c.max_blocks == 2 * mon.max_points for c in s.curves)
    lines = marks(mon.parts.view.charts, WAIT_CHART)
    assert len(lines) == 8 and all(len(m.x) >= 16 for m in lines.values())
    assert 5_000 < sent_by_a_full_redraw(mon) <= 32 * 1024, sent_by_a_full_redraw(mon)

    # follow() of the same launch keeps the same bound while reading it a chunk at a time
    seen = TrainingMonitor.follow(path, display=False, poll_s=0.05)
    assert seen.parts.follower.done.wait(60)
    for s in seen.parts.charts.ranks.series.values():
        assert s.bins == steps // 5 and all(c.n_blocks <= c.max_blocks for c in s.curves)


def test_follow_draws_what_each_rank_adds_until_the_launch_ends(tmp_path):
    path = make_launch(tmp_path, hosts=ONE_HOST, statuses=("running", "running"), steps=(10, 10))
    mon = TrainingMonitor.follow(path, display=False, poll_s=0.05)
    charts = mon.parts.view.charts

    def points(name):
        line = marks(charts, WAIT_CHART).get(name) if WAIT_CHART in charts else None
        return 0 if line is None else len(line.x)

    wait_until(lambda: points("rank 1") == 2, what="rank 1's first bins")
    # rank 1 goes on, slower for its data; its GPU samples too
    write_lines(path / "rank-1" / "data_wait.jsonl", data_wait_bins(10, 0.04, t0=T0 + 1.0))
    write_lines(path / "rank-1" / "gpu.jsonl", [{"time": T0 + 3 + i, "gpu": 1, "utilization_gpu_percent": 90}
                                               for i in range(2)])
    wait_until(lambda: points("rank 1") == 4, what="rank 1's new bins")
    y = np.asarray(marks(charts, WAIT_CHART)["rank 1"].y)
    assert y[-1] == pytest.approx(40.0, rel=1e-5)
    wait_until(lambda: len(marks(charts, "gpu_util")["rank 1 · GPU 1"].x) == 5, what="rank 1's new GPU samples")
    for r in (0, 1):  # both end: following ends, every rank read to its end
        meta = json.loads((path / f"rank-{r}" / "run.json").read_text())
        write_json(path / f"rank-{r}" / "run.json", {**meta, "status": "finished", "ended": T0 + 10})
    write_lines(path / "rank-1" / "data_wait.jsonl", data_wait_bins(5, 0.02, t0=T0 + 2.0))
    assert mon.parts.follower.done.wait(15)
    assert points("rank 1") == 5 and mon.status == "finished"


def test_single_process_runs_get_no_rank_charts(tmp_path):
    mon = TrainingMonitor("solo", run_log=tmp_path, display=False)
    batches = mon.track(range(12))
    for _ in batches:
        time.sleep(0.002)
    mon.finish()
    for shown in (mon, TrainingMonitor.load(mon.run_dir)):
        charts = shown.parts.view.charts
        assert shown.parts.charts.ranks is None and STEP_CHART not in charts and WAIT_CHART not in charts
        assert all(not name.startswith("rank ") for c in charts.values() for name in c.lines)
    seen = TrainingMonitor.follow(mon.run_dir, display=False, poll_s=0.05)
    assert seen.parts.follower.done.wait(15) and seen.parts.charts.ranks is None
    assert seen.parts.follower.rank_tails is None


def test_a_rank_whose_files_break_is_a_note_and_the_others_are_drawn(tmp_path):
    path = make_launch(tmp_path, hosts=ONE_HOST, waits=(0.001, 0.05))
    with open(path / "rank-1" / "data_wait.jsonl", "a") as f:
        f.write('{"time": "soon", "wait_s": 1}\n')
    with pytest.warns(RuntimeWarning):  # rank 0's own files load as before; the launch's notes warn
        mon = TrainingMonitor.load(path)
    assert sorted(marks(mon.parts.view.charts, WAIT_CHART)) == ["rank 0", "rank 1"]
    assert any("rank 1:" in e and "data_wait.jsonl: line 5" in e for e in mon.errors), mon.errors



def test_beyond_8_ranks_the_slowest_line_follows_the_slowest_rank():
    from gpu_widgets.monitor.rank_charts import RankCharts
    from gpu_widgets.widgets.view import ChartsView

    ranks = RankCharts(ChartsView(), 2000)
    for r in range(9):
        ranks.add_bins(r, data_wait_bins(20, 0.03 if r == 2 else 0.001, t0=T0), T0)
    first = {(c, name): len(xs) for c, name, _, _, xs, _ in ranks.lines(100)}
    assert first[(WAIT_CHART, "slowest: rank 2")] == 4 and (WAIT_CHART, "min–max") in first
    for r in range(9):  # later, rank 5 is the one that waits
        ranks.add_bins(r, data_wait_bins(100, 0.05 if r == 5 else 0.001, t0=T0 + 2), T0)
    now = {(c, name): len(xs) for c, name, _, _, xs, _ in ranks.lines(100)}
    assert now[(WAIT_CHART, "slowest: rank 2")] == 0 and now[(WAIT_CHART, "slowest: rank 5")] > 4  # the old one emptied
    assert ranks.lines(100) == []  # nothing new: nothing sent
    assert [len(lines) for _, lines in ranks.panels(100)] == [2, 2]  # the picture: band and slowest, nothing emptied


RANKS_SCRIPT = '''
import os, time
from gpu_widgets import TrainingMonitor

rank = int(os.environ["RANK"])

def batches():
    for i in range(60):
        time.sleep(0.03 if rank == 1 else 0.001)  # rank 1's input pipeline is slow
        yield i

mon = TrainingMonitor("two ranks", display=False)
for i in mon.track(batches()):
    time.sleep(0.01)
    mon.log(loss=1.0 / (i + 1))
mon.finish()
'''


@pytest.mark.integration
def test_a_real_two_rank_launch_loads_with_each_rank_s_wait(tmp_path):
    from .torchrun import torchrun

    script = tmp_path / "ranks.py"
    script.write_text(RANKS_SCRIPT)
    runs = tmp_path / "runs"
    done = torchrun(script, runs, nproc=2, timeout_s=120)
    assert done.returncode == 0, done.output
    (launch,) = [p for p in runs.iterdir() if p.is_dir()]
    mon = TrainingMonitor.load(launch)
    lines = drawn(mon.parts.view.charts, WAIT_CHART)
    assert sorted(lines) == ["rank 0", "rank 1"]
    wait = {name: float(np.median(np.asarray(m.y))) for name, m in lines.items()}
    assert wait["rank 0"] < 10 and 25 < wait["rank 1"] < 80, wait  # ms per step
    assert sorted(drawn(mon.parts.view.charts, STEP_CHART)) == ["rank 0", "rank 1"]


LIVE_SCRIPT = '''
import json, os, sys, time
from gpu_widgets import TrainingMonitor

rank = int(os.environ["RANK"])
mon = TrainingMonitor("live ranks", display=False, flush_s=0.2)
if rank == 0:
    mon.widget  # displayed (as in a notebook): the monitor draws, and reads its launch's other ranks
for i in mon.track(range(80)):
    time.sleep(0.045 if rank == 1 else 0.015)  # rank 1 lasts longer: its bins are there while rank 0 runs
    mon.log(loss=1.0 / (i + 1))
if rank == 0:
    deadline = time.monotonic() + 10
    charts = mon.parts.view.charts
    while time.monotonic() < deadline and "rank 1" not in getattr(charts.get("rank_wait"), "lines", {}):
        time.sleep(0.1)
    with open(sys.argv[1], "w") as f:
        json.dump({name: sorted(c.lines) for name, c in charts.items()}, f)
mon.finish()
'''


@pytest.mark.integration
def test_rank_0_live_and_displayed_draws_its_other_ranks(tmp_path):
    from .torchrun import torchrun

    script = tmp_path / "live.py"
    script.write_text(LIVE_SCRIPT)
    out = tmp_path / "charts.json"
    done = torchrun(script, tmp_path / "runs", str(out), nproc=2, timeout_s=120)
    assert done.returncode == 0, done.output
    charts = json.loads(out.read_text())
    assert charts["rank_wait"] == ["rank 0", "rank 1"] and charts["rank_step"] == ["rank 0", "rank 1"]


def legend_tips(charts, chart) -> dict[str, str]:
    """A chart's legend keys -> their hover text (the title attribute of each key)."""
    import re
    head = charts[chart].head.value
    return dict((name, tip) for tip, name in re.findall(r'<span title="([^"]*)"><i[^>]*></i>([^<]*) <b>', head))


def test_the_host_is_on_hover_always_and_in_the_merged_line_when_the_launch_spans_hosts(tmp_path):
    # One host: the label names no host, the hover does
    mon = TrainingMonitor.load(make_launch(tmp_path / "one", hosts=ONE_HOST, waits=(0.001, 0.05), steps=(20, 20)))
    tips = legend_tips(mon.parts.view.charts, "gpu_util")
    assert tips["rank 0 · GPU 0"].startswith("rank 0 · node-a · GPU 0") and tips["rank 1 · GPU 1"].startswith(
        "rank 1 · node-a · GPU 1"), tips
    # Two hosts: ranks 0 and 1 of node-a recorded its GPU 0 once; rank 2 is node-b's GPU 0
    path = make_launch(tmp_path / "two", hosts=("node-a", "node-a", "node-b"), statuses=("finished",) * 3,
                       steps=(20,) * 3, waits=(0.001,) * 3, gpu_index=(0, 0, 0))
    charts = TrainingMonitor.load(path).parts.view.charts
    assert sorted(drawn(charts, "gpu_util")) == ["rank 2 · node-b · GPU 0", "ranks 0, 1 · node-a · GPU 0"]
    tips = legend_tips(charts, "gpu_util")
    assert tips["ranks 0, 1 · node-a · GPU 0"].startswith("ranks 0, 1 · node-a · GPU 0"), tips


def test_follow_names_the_hosts_once_a_rank_of_a_second_host_turns_up(tmp_path):
    path = make_launch(tmp_path, hosts=("node-a", "node-b"), statuses=("running", "running"), steps=(10, 10),
                       gpu_index=(0, 0))
    (path / "rank-1" / "gpu.jsonl").write_text("")
    mon = TrainingMonitor.follow(path, display=False, poll_s=0.05)
    charts = mon.parts.view.charts
    wait_until(lambda: "gpu_util" in charts and len(drawn(charts, "gpu_util")) >= 1, what="rank 0's GPU")
    write_lines(path / "rank-1" / "gpu.jsonl", [{"time": T0 + i, "gpu": 0, "utilization_gpu_percent": 51}
                                               for i in range(2)])
    wait_until(lambda: sorted(drawn(charts, "gpu_util")) == ["rank 0 · node-a · GPU 0", "rank 1 · node-b · GPU 0"],
               what="both GPUs named with their hosts")
    for r in (0, 1):
        meta = json.loads((path / f"rank-{r}" / "run.json").read_text())
        write_json(path / f"rank-{r}" / "run.json", {**meta, "status": "finished", "ended": T0 + 10})
    assert mon.parts.follower.done.wait(30)
