"""Reading a launch back (runs/launch_read.py) and listing it (`gpu-widgets runs`): hand-made
launch directories in the spec's layout, whole and damaged."""
from __future__ import annotations

import json
import os

import pytest

from gpu_widgets.runs.launch_read import MAX_BINS, launch_status, read_launch, world_size
from gpu_widgets.runs.run_log import write_json

from .conftest import run_cli
from .launch_fixtures import data_wait_bins, heartbeat, make_launch, write_lines


def test_a_launch_reads_as_its_ranks_with_status_steps_host_bins_and_heartbeat(tmp_path):
    beats = (heartbeat(20), heartbeat(19, "data"))
    path = make_launch(tmp_path, statuses=("running", "running"), steps=(20, 19), waits=(0.001, 0.05),
                       heartbeats=beats)
    launch = read_launch(path)
    assert (launch.title, launch.world_size, launch.status, launch.hosts) == ("ddp toy", 2, "running",
                                                                              ["node-a", "node-b"])
    assert [r.as_dict() for r in launch.ranks] == [
        {"rank": 0, "host": "node-a", "status": "running", "step": 20},
        {"rank": 1, "host": "node-b", "status": "running", "step": 19}]
    assert launch.ranks[1].bins == data_wait_bins(19, 0.05)
    assert launch.ranks[1].heartbeat["phase"] == "data" and launch.notes == []
    # without detail (the listing): statuses and rank 0's steps only
    brief = read_launch(path, detail=False)
    assert [(r.steps, r.bins, r.heartbeat) for r in brief.ranks] == [(20, [], None), (None, [], None)]


@pytest.mark.parametrize("statuses, expected", [
    (["finished", "failed", "running"], "failed"), (["finished", "running"], "running"),
    (["idle", "finished"], "running"), (["interrupted", "finished"], "interrupted"),
    (["finished", "finished"], "finished"), (["finished", "unfinished"], "unfinished"),
    (["finished", "missing"], "unfinished"), ([], "unfinished")])
def test_the_launch_status_aggregates_the_ranks(statuses, expected):
    assert launch_status(statuses) == expected


def test_world_size_from_run_json_else_the_rank_directories():
    notes = []
    assert world_size({"world_size": 4}, [0, 1], notes) == 4 and notes == []
    assert world_size({"world_size": 2}, [0, 1, 2], notes) == 3 and "rank-2" in notes[-1]
    for bad in (0, -1, True, "2", 10**9, 2.0):
        notes = []
        assert world_size({"world_size": bad}, [0, 1, 2], notes) == 3
        assert "'world_size' is not a whole number from 1 to 4096" in notes[0]
    assert world_size({}, []) == 1


def test_a_rank_missing_its_directory_is_listed_as_missing(tmp_path):
    path = make_launch(tmp_path, hosts=("node-a",), statuses=("finished",), steps=(5,), waits=(0.0,), world_size=3)
    launch = read_launch(path)
    assert [r.status for r in launch.ranks] == ["finished", "missing", "missing"]
    assert launch.status == "unfinished"
    assert launch.notes == [f"{path}: no directories for ranks 1, 2 (of 3)"]


def test_damaged_files_are_notes_naming_the_file_and_line_never_errors(tmp_path):
    path = make_launch(tmp_path, heartbeats=(heartbeat(20), heartbeat(20)))
    r1 = path / "rank-1"
    (r1 / "run.json").write_text('{"status": "finished", "host": 7, "pid": "x"')  # torn
    write_lines(r1 / "data_wait.jsonl", [{"time": 1.0, "wait_s": 2.0, "step_s": 1.0, "steps": 1}])
    with (r1 / "data_wait.jsonl").open("a") as f:
        f.write("not json\n")
    (path / "rank-0" / "heartbeat.json").write_text("[" * 3000 + "]" * 3000)
    (path / "rank-0" / "data_wait.jsonl").unlink()
    os.mkfifo(path / "rank-0" / "data_wait.jsonl")  # a FIFO must not hang the reader
    launch = read_launch(path)
    text = "\n".join(launch.notes)
    assert "run.json could not be read (JSONDecodeError)" in text
    assert f"{r1 / 'data_wait.jsonl'}: line 5: 'wait_s' (2.0) is longer than 'step_s'" in text
    assert f"{r1 / 'data_wait.jsonl'}: line 6 is not JSON" in text
    assert "heartbeat" in text and "FIFO" in text
    assert [r.status for r in launch.ranks] == ["finished", "unknown"]
    assert launch.ranks[0].heartbeat is None and launch.ranks[0].bins == []
    assert len(launch.ranks[1].bins) == 4  # the four good bins


def test_only_the_recent_bins_are_read_from_a_long_data_wait_file(tmp_path):
    path = make_launch(tmp_path, hosts=("a", "b"))
    long = path / "rank-1" / "data_wait.jsonl"
    write_lines(long, data_wait_bins(50_000, 0.002, per_bin=5))
    with long.open("a") as f:
        f.write('{"time": 1.0, "wait_s": "slow", "step_s": 1.0, "steps": 1}\n{"time": 2.0, "wai')  # + a torn last line
    launch = read_launch(path)
    bins = launch.ranks[1].bins
    assert len(bins) == MAX_BINS and bins[-1]["time"] == data_wait_bins(50_000, 0.002)[-1]["time"]
    assert launch.notes == [f"{long}: line 1 from the end: 'wait_s' must be a number, got 'slow': skipped"]


@pytest.mark.integration
def test_gpu_widgets_runs_lists_a_launch_as_one_row_with_its_world_size(tmp_path):
    make_launch(tmp_path, name="20260101-120000-ddp-a-a1b2c3", title="ddp a", statuses=("finished", "failed"),
                steps=(30, 12))
    make_launch(tmp_path, name="20260101-130000-ddp-b-d4e5f6", title="ddp b", statuses=("running", "finished"),
                steps=(7, 9), started=1_767_000_100.0, launch_status="running")
    single = tmp_path / "20260101-110000-plain-0a0b0c"
    single.mkdir()
    write_json(single / "run.json", {"format": 1, "title": "plain", "status": "finished", "started": 1_766_999_000.0})
    write_lines(single / "steps.jsonl", [{"step": i, "time": 1_766_999_000.0 + i, "loss": 1.0} for i in range(4)])
    listed = json.loads(run_cli("runs", "--json", "--dir", str(tmp_path)).stdout)
    assert [(r["name"], r["status"], r["steps"], r["world_size"]) for r in listed] == [
        ("ddp b", "running", 7, 2), ("ddp a", "failed", 30, 2), ("plain", "finished", 4, 1)]
    assert all(r["note"] is None for r in listed)
    out = run_cli("runs", "--dir", str(tmp_path))
    header, *rows = out.stdout.splitlines()
    assert header.split() == ["NAME", "STATUS", "STEPS", "RANKS", "STARTED", "UPDATED", "DIRECTORY"]
    assert len(rows) == 3 and rows[1].split()[:5] == ["ddp", "a", "failed", "30", "2"]
    # a launch's rank directories are never runs of their own, even listed from inside it
    inside = json.loads(run_cli("runs", "--json", "--dir", str(tmp_path / "20260101-120000-ddp-a-a1b2c3")).stdout)
    assert inside == []


@pytest.mark.integration
def test_single_process_listings_keep_their_columns(tmp_path):
    single = tmp_path / "20260101-110000-plain-0a0b0c"
    single.mkdir()
    write_json(single / "run.json", {"format": 1, "title": "plain", "status": "finished"})
    out = run_cli("runs", "--dir", str(tmp_path))
    assert out.stdout.splitlines()[0].split() == ["NAME", "STATUS", "STEPS", "STARTED", "UPDATED", "DIRECTORY"]


@pytest.mark.integration
def test_a_launch_with_a_damaged_run_json_is_still_one_row_with_a_note(tmp_path):
    path = make_launch(tmp_path, statuses=("finished", "finished"))
    (path / "run.json").write_text("{broken")
    listed = json.loads(run_cli("runs", "--json", "--dir", str(tmp_path)).stdout)
    assert [(r["status"], r["world_size"]) for r in listed] == [("finished", 2)]
    assert "run.json could not be read" in listed[0]["note"]
