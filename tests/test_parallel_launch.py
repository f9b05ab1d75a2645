"""``gpu_widgets.launch``: a torchrun job started from a notebook (issue 25). Real torchrun launches
of CPU ranks (gloo on loopback) through the launcher: one launch directory handed to the ranks in
$GPU_WIDGETS_LAUNCH_DIR, followed once rank 0 records; the output in a file; stop() ends every
rank; an interrupt of the launching process leaves the job running; bad arguments refused before
anything starts. Plus the rendezvous's launcher branch on its own."""
from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

import gpu_widgets
from gpu_widgets.monitor import launcher
from gpu_widgets.parallel import rendezvous
from gpu_widgets.parallel.env import rank_env
from gpu_widgets.runs import launch_dir

from .torchrun import free_port, rank_env as hermetic_env, torchrun

pytest.importorskip("torch")

# 2 ranks log 10 steps each; rank 1 fails when asked to
TINY = textwrap.dedent("""
    import sys, torch.distributed as dist
    from gpu_widgets import TrainingMonitor
    dist.init_process_group("gloo")
    mon = TrainingMonitor("tiny launch", flush_s=0.2)
    with mon:
        for step in range(10):
            mon.log(loss=1.0 / (step + 1))
    if "--fail" in sys.argv and dist.get_rank() == 1:
        raise SystemExit("rank 1 gives up")
    print(f"rank {dist.get_rank()} trained", flush=True)
    dist.destroy_process_group()
""")
# a job that never ends on its own (no torch.distributed: it only has to be there)
LONG = "import time\nprint('sleeping', flush=True)\ntime.sleep(600)\n"
# ... whose ranks ignore SIGTERM: only SIGKILL ends them
STUBBORN = "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n" + LONG


@pytest.fixture
def hermetic(tmp_path, monkeypatch):
    """The launching process's environment as tests/torchrun.py gives ranks theirs; its cwd tmp."""
    runs = tmp_path / "runs"
    env = hermetic_env(runs)
    for key in list(os.environ):
        if key not in env:
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)
    return runs


def loopback() -> list[str]:
    return ["--master_addr=127.0.0.1", f"--master_port={free_port()}"]


def tree_of(pid: int) -> list[psutil.Process]:
    try:
        return [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    return [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def wait_for(check, timeout_s: float = 60.0) -> None:
    end = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.1)


def kill_all(procs: list[psutil.Process]) -> None:
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.kill()


@pytest.mark.integration
def test_a_two_rank_launch_records_into_the_launchers_directory_and_is_followed(hermetic, tmp_path):
    # Given a 2-rank script
    (tmp_path / "tiny.py").write_text(TINY)
    # When the notebook launches it through gpu_widgets.launch and waits
    job = gpu_widgets.launch([*loopback(), "--nproc_per_node=2", "tiny.py"], title="tiny", display=False)
    assert job.run_dir.parent == hermetic.resolve() and job.run_dir.is_dir()  # made before any rank started
    assert job.wait(120) == 0, job.output()
    # Then the ranks recorded into that one directory, told by the launcher
    assert [p for p in hermetic.iterdir()] == [job.run_dir]
    assert [r for r, _ in launch_dir.rank_dirs(job.run_dir)] == [0, 1]
    for rank in (0, 1):
        meta = json.loads((launch_dir.rank_dir(job.run_dir, rank) / "run.json").read_text())
        assert meta["status"] == "finished" and meta["steps"] == 10 and meta["launch"] == job.run_dir.name
    assert json.loads((job.run_dir / "run.json").read_text())["kind"] == "launch"
    # and the launch is followed: world_size 2, rank 0's loss
    mon = job.monitor
    assert mon is not None and mon.world_size == 2
    assert mon.parts.follower.done.is_set()  # wait() waited for its last read
    assert mon.status == "finished" and mon.step == 9 and len(mon.ranks) == 2
    # and the output went to torchrun.log, not here: both ranks' lines
    text = job.output()
    assert "rank 0 trained" in text and "rank 1 trained" in text and "rank 1/2 records to" in text
    assert job.output(tail=1).count("\n") == 0 and job.output(tail=0) == ""
    assert not job.running and job.returncode == 0 and job.status == "finished"
    assert job.stop() == 0  # a job that ended: nothing to do


@pytest.mark.integration
def test_ranks_started_on_another_machine_find_the_launchers_directory(hermetic, tmp_path):
    # Given a launch of 2 "machines", 1 rank each: this one through gpu_widgets.launch, the other
    # (another host name) through a plain torchrun that knows nothing of the launcher
    (tmp_path / "tiny.py").write_text(TINY)
    port = free_port()
    other: dict = {}
    machine_b = threading.Thread(target=lambda: other.update(done=torchrun(
        tmp_path / "tiny.py", hermetic, nproc=1, nnodes=2, node_rank=1, master_port=port,
        env=hermetic_env(hermetic, GPU_WIDGETS_HOSTNAME="node-b"))))
    machine_b.start()
    job = gpu_widgets.launch(["--nnodes=2", "--node_rank=0", "--master_addr=127.0.0.1", f"--master_port={port}",
                              "--nproc_per_node=1", "tiny.py"], display=False)
    code = job.wait(120)
    machine_b.join(150)
    assert code == 0, job.output()
    assert other["done"].returncode == 0, other["done"].output[-3000:]
    # Then both ranks recorded into the launcher's directory: rank 0 named it in torchrun's store
    assert [p for p in hermetic.iterdir()] == [job.run_dir]
    assert [r for r, _ in launch_dir.rank_dirs(job.run_dir)] == [0, 1]
    assert job.monitor.world_size == 2 and [r["host"] for r in job.monitor.ranks][1] == "node-b"
    rank1 = json.loads((launch_dir.rank_dir(job.run_dir, 1) / "run.json").read_text())
    assert rank1["launch"] == job.run_dir.name


@pytest.mark.integration
def test_a_failing_rank_shows_as_a_failed_launch_with_torchruns_report(hermetic, tmp_path):
    (tmp_path / "tiny.py").write_text(TINY)
    job = gpu_widgets.launch([*loopback(), "--nproc_per_node=2", "tiny.py", "--fail"], display=False)
    assert job.wait(120) not in (0, None)
    assert job.status.startswith("failed (exit ") and "torchrun: failed" in job.line()
    text = job.output(tail=400)
    assert "rank 1 gives up" in text and "ChildFailedError" in text  # torchrun's own words


@pytest.mark.integration
@pytest.mark.parametrize("script", [LONG, STUBBORN], ids=["ranks-end-on-sigterm", "ranks-ignore-sigterm"])
def test_stop_ends_every_rank(hermetic, tmp_path, script):
    # Given a 2-rank job that would run for 10 minutes
    (tmp_path / "long.py").write_text(script)
    job = gpu_widgets.launch(str(tmp_path / "long.py"), nproc_per_node=2, display=False)
    wait_for(lambda: job.output().count("sleeping") == 2)
    procs = tree_of(job.pid)
    try:
        assert len(procs) >= 3  # torchrun and its 2 ranks
        # When it is stopped
        began = time.monotonic()
        code = job.stop(timeout=2)
        # Then no process of it is left, and it says so
        assert code is not None and time.monotonic() - began < 15
        assert alive(procs) == []
        assert job.status == "stopped" and not job.running and job.stop() == code  # idempotent
    finally:
        kill_all(procs)


# The "kernel": a Python that launches, then is interrupted as Jupyter interrupts a kernel (SIGINT
# to its process group).
KERNEL = textwrap.dedent("""
    import sys, time
    import gpu_widgets
    job = gpu_widgets.launch([sys.argv[1]], nproc_per_node=2, display=False)
    print("PID", job.pid, flush=True)
    time.sleep(600)
""")


@pytest.mark.integration
def test_interrupting_the_launching_process_leaves_the_job_running(hermetic, tmp_path):
    (tmp_path / "long.py").write_text(LONG)
    (tmp_path / "kernel.py").write_text(KERNEL)
    kernel = subprocess.Popen([sys.executable, "kernel.py", "long.py"], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    procs: list[psutil.Process] = []
    try:
        line = kernel.stdout.readline()
        assert line.startswith("PID "), line
        torchrun = int(line.split()[1])
        (launch,) = hermetic.iterdir()
        wait_for(lambda: (launch / launcher.LOG_NAME).read_text().count("sleeping") == 2)
        procs = tree_of(torchrun)
        assert len(procs) >= 3
        # When the "kernel" is interrupted
        os.killpg(kernel.pid, signal.SIGINT)
        assert kernel.wait(30) != 0  # KeyboardInterrupt ended it
        # Then the job runs on: torchrun and both ranks
        time.sleep(2)
        assert len(alive(procs)) == len(procs)
    finally:
        kill_all([*procs])
        with contextlib.suppress(ProcessLookupError):
            os.killpg(kernel.pid, signal.SIGKILL)
        kernel.wait(10)


# 2 ranks record 10 steps, then stay in the run until stopped
RECORD_THEN_WAIT = textwrap.dedent("""
    import time, torch.distributed as dist
    from gpu_widgets import TrainingMonitor
    dist.init_process_group("gloo")
    mon = TrainingMonitor("waits", flush_s=0.2)
    with mon:
        for step in range(10):
            mon.log(loss=1.0 / (step + 1))
        print("logged", flush=True)
        time.sleep(600)
""")


@pytest.mark.integration
def test_in_a_notebook_it_shows_a_status_line_stop_show_output_and_the_charts(hermetic, tmp_path, monkeypatch):
    # Given a notebook (displays recorded) and a job that records, then runs on
    from IPython import display as ipy_display

    from gpu_widgets.widgets import cell_hooks

    shown: list = []
    monkeypatch.setattr(cell_hooks, "in_kernel", lambda: True)
    monkeypatch.setattr(ipy_display, "display", lambda obj, **kw: shown.append(obj))
    (tmp_path / "job.py").write_text(RECORD_THEN_WAIT)
    job = gpu_widgets.launch([*loopback(), "--nproc_per_node=2", "job.py"])
    procs: list[psutil.Process] = []
    try:
        # Then one box: the status line, Stop, Show output; the output hidden
        (box,) = shown
        (status, stop, toggle), out, slot = box.children[0].children, box.children[1], box.children[2]
        assert f"torchrun: running, pid {job.pid}" in status.value and str(job.run_dir) in status.value
        assert (stop.description, toggle.description, out.layout.display) == ("Stop", "Show output", "none")
        # and the followed launch's widget below, once rank 0 records
        wait_for(lambda: slot.children and "logged" in job.output())
        assert slot.children == (job.monitor.widget,) and job.monitor.world_size == 2
        # When the output is shown: the log's end, escaped, not the notebook's output
        toggle.value = True
        wait_for(lambda: "logged" in out.value)
        assert out.layout.display == "block" and toggle.description == "Hide output"
        # When Stop is clicked: the job ends (on a thread: the click returns at once)
        procs = tree_of(job.pid)
        began = time.monotonic()
        stop.click()
        assert time.monotonic() - began < 1.0
        wait_for(lambda: not job.running and "torchrun: stopped" in status.value, 40)
        assert stop.disabled and alive(procs) == []
    finally:
        job.stop(timeout=2)
        kill_all(procs)


@pytest.mark.parametrize("args,kw,error,words", [
    ("train.py", {}, TypeError, "nproc_per_node=2"),
    (["--nproc_per_node=2", 3], {}, TypeError, "3 (int) is not"),
    ({"script": "x.py"}, {}, TypeError, "got dict"),
    (["--nproc_per_node=2", "missing.py"], {}, FileNotFoundError, "missing.py"),
    (["--nproc_per_node"], {}, ValueError, "torchrun would refuse these arguments"),
    (["--bogus", "train.py"], {}, ValueError, "unrecognized arguments: --bogus"),
    (["train.py"], {"nproc_per_node": 0}, ValueError, "nproc_per_node is a whole number"),
    (["--nproc_per_node=2", "train.py"], {"nproc_per_node": 2}, ValueError, "given twice"),
    (["train.py"], {"nproc_per_node": 2, "title": 5}, TypeError, "title is a string"),
])
def test_bad_arguments_are_refused_before_anything_starts(hermetic, tmp_path, args, kw, error, words):
    (tmp_path / "train.py").write_text("print('hi')\n")
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(error, match=re.escape(words)):
        gpu_widgets.launch(args, display=False, **kw)
    assert not hermetic.exists()  # no launch directory
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before  # no process


@pytest.mark.integration
def test_output_tail_is_checked(hermetic, tmp_path):
    (tmp_path / "train.py").write_text("print('hi')\n")
    job = gpu_widgets.launch(["--standalone", "--nproc_per_node=1", "train.py"], display=False)
    job.wait(60)
    for bad in (-1, 1.5, True, 10**6):
        with pytest.raises(ValueError, match="tail is a whole number"):
            job.output(bad)
    # one rank records no launch: the notes say why nothing is followed
    assert job.monitor is None and any("recorded nothing" in n for n in job.notes)


# -- the rendezvous's branch: the directory launch() made ---------------------------------------------
def ranks_of(rank: int, **extra: str) -> tuple[dict[str, str], object]:
    env = {"RANK": str(rank), "WORLD_SIZE": "2", **extra}
    return env, rank_env(env)


def test_rendezvous_takes_the_launchers_directory(tmp_path):
    given = tmp_path / "runs" / "20261204-120000-tiny-abcdef"
    given.mkdir(parents=True)
    meta = {"kind": "launch", "title": "tiny", "world_size": 2}
    for rank in (1, 0):  # rank 1 first: it waits for nobody
        env, ranks = ranks_of(rank, GPU_WIDGETS_LAUNCH_DIR=str(given))
        place = rendezvous.agree(tmp_path / "elsewhere", "tiny", ranks, meta, env=env, timeout_s=0.1)
        assert place.launch == given and place.rank_path == given / f"rank-{rank}"
        assert place.via == rendezvous.VIA_LAUNCHER == "launch directory from gpu_widgets.launch"
        assert place.notes == [rendezvous.VIA_LAUNCHER]
    assert json.loads((given / "run.json").read_text()) == meta  # rank 0 wrote the launch's run.json
    assert not (tmp_path / "elsewhere").exists()


@pytest.mark.parametrize("case", ["relative", "missing", "later run", "restart", "rank there"])
def test_rendezvous_falls_back_when_the_launchers_directory_cannot_hold_the_run(tmp_path, case):
    given = tmp_path / "20261204-120000-tiny-abcdef"
    given.mkdir()
    value = {"relative": "runs/x", "missing": str(tmp_path / "gone")}.get(case, str(given))
    extra = {"TORCHELASTIC_RESTART_COUNT": "1"} if case == "restart" else {}
    if case == "rank there":
        (given / "rank-1").mkdir()
    env, ranks = ranks_of(1, GPU_WIDGETS_LAUNCH_DIR=value, **extra)
    place = rendezvous.agree(tmp_path / "root", "tiny", ranks, {}, env=env, timeout_s=0.1,
                             index=1 if case == "later run" else 0)
    assert place.via == rendezvous.VIA_ENV and place.launch.parent == tmp_path / "root"
    assert any("GPU_WIDGETS_LAUNCH_DIR" in n or "first run" in n for n in place.notes), place.notes
