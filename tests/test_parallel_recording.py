"""Every rank of a torch.distributed launch records into one launch directory (issue 25): real
torchrun launches of CPU ranks (gloo on loopback), two "machines" told apart by
GPU_WIDGETS_HOSTNAME, the fallback without a store, the framework callbacks on every rank, and a
single-process run left exactly as it was. Plus the layout's helpers on hand-made directories."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gpu_widgets import TrainingMonitor
from gpu_widgets.parallel.env import rank_env
from gpu_widgets.runs import launch_dir, run_log

from .script_output import our_lines
from .torchrun import ROOT, free_port, rank_env as hermetic_env, torchrun
from .widget_helpers import run_dir, simulated_sampler  # noqa: F401 (run_dir: a fixture)

STEP_FILES = {"run.json", "steps.jsonl", "gpu.jsonl", "data_wait.jsonl"}
# run.json of a single-process run, as it was before launches existed
PLAIN_META = {"format", "title", "status", "started", "ended", "batch_size", "total_steps", "gpus_used",
              "gpu_summary", "pid", "host", "gpu_widgets_version", "steps", "log_calls", "error"}

# A hand-written DDP loop: the monitor is made BEFORE init_process_group, in a "notebook" (the
# display calls are recorded), and runs 20 steps through track().
DDP = textwrap.dedent("""
    import json, sys
    import torch, torch.distributed as dist
    import IPython.display
    from gpu_widgets.widgets import cell_hooks
    from gpu_widgets import TrainingMonitor

    shown = []
    class Handle:
        def update(self, obj):
            shown.append("update")
    IPython.display.display = lambda obj, display_id=None: shown.append("display") or Handle()
    cell_hooks.in_kernel = lambda: True  # as in a kernel: the monitor would display itself
    mon = TrainingMonitor("DDP tiny", flush_s=0.2)
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.utils.data.TensorDataset(torch.randn(80, 4), torch.randn(80, 1))
    with mon:
        for x, y in mon.track(torch.utils.data.DataLoader(data, batch_size=4)):
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad(); loss.backward(); opt.step()
            mon.log(loss=loss)
    bundle = sorted(mon._repr_mimebundle_())
    print("RESULT " + json.dumps({"rank": dist.get_rank(), "shown": shown, "bundle": bundle,
                                  "notes": mon.parts.run.notes, "errors": mon.errors}), flush=True)
    dist.destroy_process_group()
""")


def results(output: str) -> dict[int, dict]:
    found = [json.loads(line.split("RESULT ", 1)[1]) for line in output.splitlines() if "RESULT " in line]
    return {r["rank"]: r for r in found}


def the_launch(root: Path) -> Path:
    launches = [p for p in root.iterdir() if p.is_dir()]
    assert len(launches) == 1, f"one launch directory expected, found {launches}"
    return launches[0]


def meta(path: Path) -> dict:
    return json.loads((path / "run.json").read_text())


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.integration
def test_two_ranks_record_into_one_launch_and_rank_zero_alone_displays(tmp_path):
    # Given a 2-rank DDP loop whose monitor is made before the process group
    script = tmp_path / "ddp.py"
    script.write_text(DDP)
    runs = tmp_path / "runs"
    # When torchrun runs it
    done = torchrun(script, runs, nproc=2, env=hermetic_env(runs, GPU_WIDGETS_HOSTNAME="node-a"))
    assert not done.timed_out and done.returncode == 0, done.output[-4000:]
    # Then there is one launch directory, rank 0's view of it in its run.json
    launch = the_launch(runs)
    top = meta(launch)
    assert top["kind"] == "launch" and top["world_size"] == 2 and top["hosts"] == ["node-a"]
    assert top["status"] == "finished" and top["title"] == "DDP tiny" and top["ended"] >= top["started"]
    assert "MASTER_PORT=" in top["launch_key"]
    assert launch_dir.is_launch(launch) and [r for r, _ in launch_dir.rank_dirs(launch)] == [0, 1]
    # and each rank its run there, in today's files, with its rank fields
    for rank in (0, 1):
        path = launch_dir.rank_dir(launch, rank)
        assert STEP_FILES <= {p.name for p in path.iterdir()}
        m = meta(path)
        assert (m["rank"], m["world_size"], m["local_rank"], m["host"], m["launch"]) == (rank, 2, rank, "node-a",
                                                                                         launch.name)
        assert m["status"] == "finished" and m["steps"] == 20 and set(m) >= PLAIN_META
        assert [row["step"] for row in lines(path / "steps.jsonl")] == list(range(20))
    # and the ranks agreed through torchrun's store; rank 0 alone displayed, rank 1 printed one line
    by_rank = results(done.output)
    assert set(by_rank) == {0, 1}, done.output[-4000:]
    assert all("launch directory from the torchrun store" in by_rank[r]["notes"] for r in (0, 1))
    assert not by_rank[0]["errors"] and not by_rank[1]["errors"]
    assert by_rank[0]["shown"][:1] == ["display"] and by_rank[0]["bundle"] != ["text/plain"]
    assert by_rank[1]["shown"] == [] and by_rank[1]["bundle"] == ["text/plain"]
    assert our_lines(done.output) == [f"gpu-widgets: rank 1/2 records to {launch / 'rank-1'}"]


NODE = textwrap.dedent("""
    import time
    import torch.distributed as dist
    from gpu_widgets import TrainingMonitor
    dist.init_process_group("gloo")
    with TrainingMonitor("two nodes", display=False) as mon:
        for step in range(5):
            mon.log(loss=1.0 / (step + 1))
            time.sleep(0.1)  # rank 1's directory is made (on its monitor's thread) before rank 0 ends
            dist.barrier()
    dist.destroy_process_group()
""")


@pytest.mark.integration
def test_two_machines_make_one_launch_with_both_hosts(tmp_path):
    # Given two "machines" (two torchrun launchers, one rank each, one master port)
    script = tmp_path / "node.py"
    script.write_text(NODE)
    runs, port = tmp_path / "runs", free_port()

    def node(rank: int, host: str):
        return torchrun(script, runs, nproc=1, nnodes=2, node_rank=rank, master_port=port, timeout_s=120,
                        env=hermetic_env(runs, GPU_WIDGETS_HOSTNAME=host))

    # When both run at once
    with ThreadPoolExecutor(2) as pool:
        done = list(pool.map(node, (0, 1), ("node-a", "node-b")))
    for d in done:
        assert not d.timed_out and d.returncode == 0, d.output[-4000:]
    # Then they made one launch that lists both hosts, each rank with its own
    launch = the_launch(runs)
    assert meta(launch)["hosts"] == ["node-a", "node-b"] and meta(launch)["world_size"] == 2
    assert [(m["rank"], m["host"]) for m in (meta(launch / "rank-0"), meta(launch / "rank-1"))] == \
        [(0, "node-a"), (1, "node-b")]


FALLBACK = textwrap.dedent("""
    import json
    from gpu_widgets import TrainingMonitor
    with TrainingMonitor("no store", display=False) as mon:
        mon.log(loss=1.0)
    print("RESULT " + json.dumps({"rank": 0, "notes": mon.parts.run.notes, "dir": str(mon.run_dir)}), flush=True)
""")


@pytest.mark.integration
def test_without_a_store_the_ranks_agree_from_their_environment(tmp_path):
    # Given two processes given RANK / WORLD_SIZE by hand (no torchrun, no process group)
    script = tmp_path / "alone.py"
    script.write_text(FALLBACK)
    runs = tmp_path / "runs"
    common = dict(WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT="1234")
    procs = [subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True,
                              env=hermetic_env(runs, RANK=str(r), LOCAL_RANK=str(r), **common)) for r in (0, 1)]
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    # Then both wrote into one launch named from the environment, and say so
    launch = the_launch(runs)
    assert launch.name.startswith(time.strftime("%Y%m%d") + "-no-store-"), launch.name
    assert {p.name for p in launch.iterdir()} == {"run.json", "rank-0", "rank-1"}
    for out in outputs:
        [result] = results(out).values()
        assert "launch directory from the launch's environment (no store)" in result["notes"]
    # and a second launch with the same environment gets a directory of its own
    again = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                           env=hermetic_env(runs, RANK="1", LOCAL_RANK="1", **common))
    assert again.returncode == 0, again.stderr
    assert len([p for p in runs.iterdir() if p.is_dir()]) == 2


# -- callbacks on every rank ------------------------------------------------------------------------
HF = textwrap.dedent("""
    import torch, transformers
    from gpu_widgets.integrations.transformers import GpuWidgetsCallback

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)
        def forward(self, x, y):
            return {"loss": torch.nn.functional.mse_loss(self.layer(x), y)}

    class Data(torch.utils.data.Dataset):
        def __len__(self):
            return 32
        def __getitem__(self, i):
            x = torch.randn(4, generator=torch.Generator().manual_seed(i))
            return {"x": x, "y": x.sum(0, keepdim=True)}

    torch.manual_seed(0)
    args = transformers.TrainingArguments(output_dir="out", use_cpu=True, report_to=[], save_strategy="no",
                                          num_train_epochs=1, per_device_train_batch_size=4, logging_steps=2,
                                          disable_tqdm=True, ddp_backend="gloo")
    transformers.Trainer(model=Tiny(), args=args, train_dataset=Data(), callbacks=[GpuWidgetsCallback()]).train()
""")


@pytest.mark.integration
def test_the_hf_trainer_records_every_rank(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    # Given a Trainer on two gloo ranks (32 samples, batch 4: 4 steps per rank), the callback on both
    script = tmp_path / "hf.py"
    script.write_text(HF)
    runs = tmp_path / "runs"
    done = torchrun(script, runs, nproc=2)
    assert not done.timed_out and done.returncode == 0, done.output[-4000:]
    # Then both ranks recorded the run into one launch, rank 0 announcing it, rank 1 its own line
    launch = the_launch(runs)
    assert meta(launch)["world_size"] == 2 and meta(launch)["status"] == "finished"
    for rank in (0, 1):
        m = meta(launch / f"rank-{rank}")
        assert m["rank"] == rank and m["status"] == "finished" and m["total_steps"] == 4
        assert [row["step"] for row in lines(launch / f"rank-{rank}" / "steps.jsonl") if "loss" in row] == [2, 4]
        # the model's forward, timed through its hooks inside the DDP wrapper the Trainer made
        bins = lines(launch / f"rank-{rank}" / "data_wait.jsonl")
        assert bins and all(0 < b["forward_s"] <= b["step_s"] for b in bins), bins
    assert sorted(our_lines(done.output)) == [f"gpu-widgets: rank 1/2 records to {launch / 'rank-1'}",
                                              f"gpu-widgets: recording this run in {launch / 'rank-0'}"]


# -- a single process, and bad variables ----------------------------------------------------------
def test_a_single_process_run_is_unchanged(run_dir, monkeypatch):  # noqa: F811
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GPU_WIDGETS_HOSTNAME", "ignored-for-one-process")
    with TrainingMonitor("one", display=False, sampler=simulated_sampler()) as mon:
        mon.log(loss=1.0)
    assert mon.run_dir.parent == run_dir and not launch_dir.is_launch(mon.run_dir)
    assert set(meta(mon.run_dir)) == PLAIN_META and meta(mon.run_dir)["host"] == os.uname().nodename
    assert not any(p.name.startswith("rank-") for p in mon.run_dir.iterdir())
    # a world of one is one process too
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    with TrainingMonitor("one of one", display=False, sampler=simulated_sampler()) as mon:
        mon.log(loss=1.0)
    assert set(meta(mon.run_dir)) == PLAIN_META


@pytest.mark.parametrize("rank, world, message", [
    ("x", "2", "RANK='x' is not a whole number"),
    ("2", "2", "RANK=2 is not below WORLD_SIZE=2"),
    ("0", "two", "WORLD_SIZE='two' is not a whole number"),
    ("0", "0", "WORLD_SIZE=0 must be at least 1"),
    ("-1", "2", "RANK=-1 must be at least 0"),
])
def test_unsound_rank_variables_are_a_clear_error(monkeypatch, rank, world, message):
    monkeypatch.setenv("RANK", rank)
    monkeypatch.setenv("WORLD_SIZE", world)
    with pytest.raises(ValueError, match=message):
        TrainingMonitor(display=False)
    TrainingMonitor(display=False, run_log=False)  # not recording: nothing to place


def test_the_rank_environment():
    env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
           "GPU_WIDGETS_HOSTNAME": " node-b ", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
    r = rank_env(env)
    assert (r.rank, r.world_size, r.local_rank, r.local_world_size, r.node_rank, r.host) == (3, 4, 1, 2, 1, "node-b")
    assert r.launch_key == rank_env({**env, "RANK": "0", "LOCAL_RANK": "0"}).launch_key
    assert r.launch_key != rank_env({**env, "MASTER_PORT": "29501"}).launch_key
    assert rank_env({"RANK": "1", "WORLD_SIZE": "2", "NODE_RANK": "1"}).node_rank == 1
    assert rank_env({"RANK": "1", "WORLD_SIZE": "2", "GPU_WIDGETS_HOSTNAME": " "}).host  # the machine's name
    assert rank_env({}) is None and rank_env({"WORLD_SIZE": "2"}) is None  # Lightning's launcher: the group tells
    with pytest.raises(ValueError, match="LOCAL_RANK='a'"):
        rank_env({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "a"})


# -- the layout's helpers, and pruning a launch whole ------------------------------------------------
def test_rank_directories_and_heartbeats_are_read_carefully(tmp_path):
    launch = tmp_path / "20261201-120000-x-abcdef"
    for name in ("rank-10", "rank-2", "rank-0", "rank-01", "rank-x", "notes"):
        (launch / name).mkdir(parents=True)
    (launch / "rank-3").write_text("a file, not a rank")
    assert [r for r, _ in launch_dir.rank_dirs(launch)] == [0, 2, 10] and launch_dir.is_launch(launch)
    assert not launch_dir.is_launch(tmp_path) and launch_dir.rank_dirs(tmp_path / "missing", []) == []
    with pytest.raises(ValueError):
        launch_dir.rank_dir(launch, -1)
    beat = {"time": 100.0, "pid": 7, "step": 3, "phase": "forward", "phase_since": 99.5, "step_started": None}
    (launch / "rank-0" / "heartbeat.json").write_text(json.dumps(beat))
    assert launch_dir.read_heartbeat(launch / "rank-0") == beat
    notes: list[str] = []
    for bad in ({**beat, "phase": "dancing"}, {**beat, "step": -1}, {**beat, "time": "soon"}, [1, 2], "x" * 5000):
        (launch / "rank-2" / "heartbeat.json").write_text(json.dumps(bad))
        assert launch_dir.read_heartbeat(launch / "rank-2" / "heartbeat.json", notes) is None
    assert len(notes) == 5 and "phase" in notes[0] and "over 4,096 bytes" in notes[4]
    assert launch_dir.read_heartbeat(launch / "rank-10", notes) is None and len(notes) == 5  # none yet: no note


def test_a_launch_is_pruned_whole_and_never_while_a_rank_writes(tmp_path):
    root = tmp_path / "runs"
    old, live = root / "20261101-120000-old-aaaaaa", root / "20261101-130000-live-bbbbbb"
    for launch in (old, live):
        for rank in (0, 1):
            (launch / f"rank-{rank}").mkdir(parents=True)
            (launch / f"rank-{rank}" / "run.json").write_text("{}")
            (launch / f"rank-{rank}" / "steps.jsonl").write_text("x" * 1000)
        (launch / "run.json").write_text(json.dumps({"kind": "launch"}))
    other_machine = root / "20261101-140000-half-cccccc"  # rank 0 wrote elsewhere: rank dirs alone
    (other_machine / "rank-1").mkdir(parents=True)
    (other_machine / "rank-1" / "run.json").write_text("{}")
    (other_machine / "rank-1" / "steps.jsonl").write_text("x" * 1000)
    now = time.time()
    for path in (old, other_machine, live / "rank-0"):
        for f in path.rglob("*"):
            os.utime(f, (now - 3600, now - 3600))
    # rank 1 of "live" wrote a minute ago: the launch is live, though rank 0's files are old
    removed = run_log.prune(root, max_bytes=100, now=now + 60)
    assert sorted(p.name for p in removed) == sorted([old.name, other_machine.name])
    assert not old.exists() and live.exists() and (live / "rank-0").exists()
