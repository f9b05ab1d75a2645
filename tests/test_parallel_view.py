"""A launch seen through a TrainingMonitor: load() and follow() of a launch directory made by hand
show rank 0's run with the launch's world (world_size, ranks, straggler, the header's line);
single-process runs keep world_size 1, themselves as the only rank, no straggler."""
from __future__ import annotations

import threading
import time
import warnings

import pytest

from gpu_widgets import TrainingMonitor
from gpu_widgets.parallel.env import host_name
from gpu_widgets.runs.run_log import write_json

from .launch_fixtures import heartbeat, make_launch
from .widget_helpers import wait_until


def test_load_of_a_launch_shows_rank_0_and_names_the_input_straggler(tmp_path):
    path = make_launch(tmp_path, waits=(0.001, 0.051), steps=(20, 18))
    mon = TrainingMonitor.load(path)
    assert mon.world_size == 2 and mon.run_dir == path and mon.status == "finished"
    assert mon.ranks == [{"rank": 0, "host": "node-a", "status": "finished", "step": 20},
                         {"rank": 1, "host": "node-b", "status": "finished", "step": 18}]
    s = mon.straggler
    assert (s["rank"], s["host"], s["cause"]) == (1, "node-b", "input") and s["excess_s"] == pytest.approx(0.05)
    steps, losses = mon.series("loss")  # rank 0's loss, as rank 0 logged it
    assert steps == list(range(20)) and losses[3] == pytest.approx(0.25)
    assert {r["gpu"] for r in mon.gpu_rows()} == {0}  # rank 0's GPU
    header = mon.parts.header_html()
    assert ("2 ranks on 2 hosts · rank 1 (node-b) waits 51 ms per step for data, the others 1 ms: its input "
            "pipeline is the bottleneck") in header


def test_load_of_a_balanced_launch_says_how_its_ranks_ended(tmp_path):
    path = make_launch(tmp_path, hosts=("node-a", "node-a", "node-a"), statuses=("finished", "finished", "failed"),
                       steps=(20, 20, 7), waits=(0.002, 0.002, 0.002))
    mon = TrainingMonitor.load(path)
    assert mon.world_size == 3 and mon.straggler is None
    assert [r["status"] for r in mon.ranks] == ["finished", "finished", "failed"]
    assert "3 ranks on 1 host · 2 finished, 1 failed" in mon.parts.header_html()


def test_a_damaged_rank_is_a_warning_and_the_launch_still_loads(tmp_path):
    path = make_launch(tmp_path)
    (path / "rank-1" / "run.json").write_text("{torn")
    with pytest.warns(RuntimeWarning, match="rank-1: run.json could not be read"):
        mon = TrainingMonitor.load(path)
    assert [r["status"] for r in mon.ranks] == ["finished", "unknown"] and mon.series("loss")[0][-1] == 19


def test_a_launch_without_its_rank_0_says_so(tmp_path):
    path = make_launch(tmp_path)
    for f in (path / "rank-0").iterdir():
        f.unlink()
    (path / "rank-0").rmdir()
    for how in (TrainingMonitor.load, lambda p: TrainingMonitor.follow(p, display=False)):
        with pytest.raises(FileNotFoundError, match="a launch without a rank-0 directory.*rank-1"):
            how(path)


def test_single_process_runs_are_one_rank_without_a_straggler(tmp_path):
    mon = TrainingMonitor("solo", run_log=tmp_path, display=False)
    assert (mon.world_size, mon.straggler) == (1, None)
    assert mon.ranks == [{"rank": 0, "host": host_name(), "status": "ready", "step": 0}]
    for i in range(3):
        mon.log(loss=1.0 / (i + 1))
    mon.finish()
    assert mon.ranks == [{"rank": 0, "host": host_name(), "status": "finished", "step": 3}]
    assert "gpuw-world" not in mon.parts.header_html()
    loaded = TrainingMonitor.load(mon.run_dir)
    assert (loaded.world_size, loaded.straggler) == (1, None)
    meta_host = loaded.parts.host
    assert loaded.ranks == [{"rank": 0, "host": meta_host, "status": "finished", "step": 3}] and meta_host
    assert "gpuw-world" not in loaded.parts.header_html()


def test_follow_of_a_launch_sees_a_rank_stop_then_stall_and_the_launch_end(tmp_path):
    path = make_launch(tmp_path, statuses=("running", "running"), heartbeats=(heartbeat(20), heartbeat(20)))
    beats = {0: lambda: heartbeat(20), 1: lambda: heartbeat(20)}
    stop = threading.Event()

    def rank_threads():  # what each rank's monitor thread does: rewrite its heartbeat every 0.2 s
        while not stop.wait(0.2):
            for r, beat in list(beats.items()):
                write_json(path / f"rank-{r}" / "heartbeat.json", beat())

    writer = threading.Thread(target=rank_threads, daemon=True)
    writer.start()
    try:
        mon = TrainingMonitor.follow(path, display=False, poll_s=0.05)
        wait_until(lambda: mon.ranks[0]["step"] == 20, what="the first pass")
        assert mon.world_size == 2 and mon.straggler is None and mon.status == "running"
        # rank 1's process died 41 s ago: its heartbeat is that old, the others' fresh
        beats[1] = lambda: heartbeat(20, "idle", at=time.time() - 41)
        s = wait_until(lambda: mon.straggler, what="the stopped rank")
        assert (s["rank"], s["cause"]) == (1, "stalled") and s["excess_s"] > 30
        assert "rank 1 (node-b) stopped writing 41 s ago (its process may have died)" in mon.parts.header_html()
        # alive again, but stuck waiting for its data while rank 0 waits in the all-reduce
        beats[1] = lambda: heartbeat(20, "data", since=time.time() - 30)
        wait_until(lambda: "has not finished step 21 for 30 s" in mon.parts.header_html(), what="the stalled rank")
        assert mon.straggler["cause"] == "stalled"
        beats[1] = lambda: heartbeat(21)  # it caught up
        wait_until(lambda: mon.straggler is None, what="the verdict to clear")
        # rank 0 ends: following ends, with the ranks as they were read last
        for r in (0, 1):
            write_json(path / f"rank-{r}" / "run.json", {
                "format": 1, "title": "ddp toy", "status": "finished", "started": 1.0, "ended": 2.0,
                "host": f"node-{'ab'[r]}", "rank": r, "world_size": 2})
        assert mon.parts.follower.done.wait(15)
        assert mon.status == "finished" and [r["status"] for r in mon.ranks] == ["finished", "finished"]
    finally:
        stop.set()
        writer.join(5)


def test_follow_of_a_plain_run_is_unchanged(tmp_path):
    mon = TrainingMonitor("plain", run_log=tmp_path, display=False)
    mon.log(loss=1.0)
    mon.finish()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to say about a launch
        seen = TrainingMonitor.follow(mon.run_dir, display=False, poll_s=0.05)
    assert seen.parts.follower.done.wait(15) and seen.parts.follower.launch is None
    assert (seen.world_size, seen.straggler, [r["step"] for r in seen.ranks]) == (1, None, [1])
