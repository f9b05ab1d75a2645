"""`gpu-widgets runs` from the outside: a real process writes runs (finished, failed, one still
running) to a tmp run-log directory, and the command lists them as a user would see them."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .conftest import run_cli

pytestmark = pytest.mark.integration  # every test here starts a process

ROOT = Path(__file__).resolve().parents[1]
WRITER = textwrap.dedent("""
    import sys, time
    from gpu_widgets import TrainingMonitor
    done = TrainingMonitor("resnet baseline", display=False)
    for i in range(30):
        done.log(loss=1 / (i + 1))
    done.finish()
    time.sleep(0.02)  # distinct start times: the order is the point
    bad = TrainingMonitor("lr too high", display=False)
    for i in range(7):
        bad.log(loss=float(i))
    bad.fail(FloatingPointError("loss is nan"))
    time.sleep(0.02)
    live = TrainingMonitor("still training", display=False)
    for i in range(5):
        live.log(loss=1.0)
    live.refresh()  # on disk now
    print("ready", flush=True)
    sys.stdin.readline()  # runs until the test is done with it
""")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    env = {**os.environ, "GPU_WIDGETS_RUN_DIR": str(root), "GPU_WIDGETS_BACKEND": "simulated"}
    proc = subprocess.Popen([sys.executable, "-c", WRITER], env=env, cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    yield root, proc
    proc.kill()
    proc.wait(10)


def env_for(root: Path) -> dict[str, str]:
    return {**os.environ, "GPU_WIDGETS_RUN_DIR": str(root)}


def test_runs_lists_the_runs_newest_first_with_status_steps_and_directory(runs):
    root, _ = runs
    out = run_cli("runs", env=env_for(root))
    assert out.returncode == 0, out.stderr
    header, *rows = out.stdout.splitlines()
    assert header.split() == ["NAME", "STATUS", "STEPS", "STARTED", "UPDATED", "DIRECTORY"]
    assert [r.split("  ")[0] for r in rows] == ["still training", "lr too high", "resnet baseline"]
    for row, status, steps, slug in zip(rows, ["running", "failed", "finished"], [5, 7, 30],
                                        ["still-training", "lr-too-high", "resnet-baseline"]):
        d = next(p for p in root.iterdir() if f"-{slug}-" in p.name)
        cells = row.split()
        assert status in cells and f"{steps}" in cells and row.endswith(str(d)), row


def test_runs_json_limit_and_dir(runs):
    root, _ = runs
    out = run_cli("runs", "--json", "--dir", str(root))  # --dir without the environment variable
    listed = json.loads(out.stdout)
    assert [(r["name"], r["status"], r["steps"]) for r in listed] == [
        ("still training", "running", 5), ("lr too high", "failed", 7), ("resnet baseline", "finished", 30)]
    assert all(r["started"] <= r["updated"] and Path(r["directory"]).parent == root for r in listed)
    one = run_cli("runs", "--limit", "1", env=env_for(root))
    assert one.returncode == 0 and len(one.stdout.splitlines()) == 3  # header, the newest run, a note
    assert "still training" in one.stdout and "2 older runs not shown: --all shows them" in one.stdout
    assert len(run_cli("runs", "--limit", "1", "--all", env=env_for(root)).stdout.splitlines()) == 4


def test_a_killed_writer_shows_as_unfinished(runs):
    root, proc = runs
    proc.kill()
    proc.wait(10)
    listed = json.loads(run_cli("runs", "--json", env=env_for(root)).stdout)
    assert [r["status"] for r in listed] == ["unfinished", "failed", "finished"]


def test_bad_arguments_exit_2_with_a_clear_message(tmp_path):
    for args, message in [
        (["--limit", "x"], "argument --limit: expected a whole number of runs, got 'x'"),
        (["--limit", "0"], "argument --limit: must be at least 1, got '0'"),
        (["--dir", str(tmp_path / "nope")], f"--dir '{tmp_path / 'nope'}' does not exist"),
        (["--color"], "unrecognized arguments: --color"),
    ]:
        out = run_cli("runs", *args)
        assert out.returncode == 2 and message in out.stderr, (args, out.stderr)
    empty = run_cli("runs", "--dir", str(tmp_path))
    assert empty.returncode == 0 and empty.stdout.strip() == f"No runs in {tmp_path}"
    assert run_cli("runs", "--json", "--dir", str(tmp_path)).stdout.strip() == "[]"


def test_a_missing_run_dir_is_the_same_error_from_the_variable_as_from_dir(tmp_path):
    missing, a_file = tmp_path / "nope", tmp_path / "file"
    a_file.write_text("not a directory")
    env = {k: v for k, v in os.environ.items() if k != "GPU_WIDGETS_RUN_DIR"}
    for source, path, what in [("--dir", missing, "does not exist"), ("$GPU_WIDGETS_RUN_DIR", missing, "does not exist"),
                               ("--dir", a_file, "is not a directory"),
                               ("$GPU_WIDGETS_RUN_DIR", a_file, "is not a directory")]:
        for json_flag in ([], ["--json"]):
            if source == "--dir":
                out = run_cli("runs", *json_flag, "--dir", str(path), env=env)
            else:
                out = run_cli("runs", *json_flag, env={**env, "GPU_WIDGETS_RUN_DIR": str(path)})
            assert (out.returncode, out.stdout) == (2, ""), (source, out)
            assert out.stderr.strip() == f"gpu-widgets runs: error: {source} '{path}' {what}", out.stderr
    # --dir wins over the variable, as its help says
    good = run_cli("runs", "--dir", str(tmp_path), env={**env, "GPU_WIDGETS_RUN_DIR": str(missing)})
    assert good.returncode == 0 and good.stdout.strip() == f"No runs in {tmp_path}"


def test_a_new_user_without_the_default_run_dir_yet_has_no_runs(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "GPU_WIDGETS_RUN_DIR"}
    env.update(HOME=str(tmp_path), XDG_DATA_HOME=str(tmp_path / "data"))
    out = run_cli("runs", env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("No runs in ") and str(tmp_path) in out.stdout
    assert not (tmp_path / "data" / "gpu-widgets").exists()  # listing creates nothing
