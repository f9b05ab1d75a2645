"""The test suite never writes into the user's own run directory (~/.local/share/gpu-widgets/runs):
tests/conftest.py points GPU_WIDGETS_RUN_DIR at a session directory in os.environ, which every
process a test starts inherits, and fails the session if a run appears in the user's directory."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_widgets.runs.run_log import default_root

from .conftest import SESSION_RUN_DIR

CODE = """
from gpu_widgets import TrainingMonitor
mon = TrainingMonitor("t", display=False)
mon.log(loss=1.0)
mon.finish()
from gpu_widgets.runs.run_log import default_root
print(default_root({}))  # where runs go when GPU_WIDGETS_RUN_DIR is not set
print(mon.run_dir)
"""


@pytest.mark.integration
def test_a_monitor_run_in_a_subprocess_lands_in_the_session_directory_not_the_default(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    # The environment tests hand their subprocesses, with the default resolved inside a tmp HOME.
    env = {k: v for k, v in os.environ.items() if k != "XDG_DATA_HOME"}
    env.update(HOME=str(home), GPU_WIDGETS_BACKEND="simulated")
    proc = subprocess.run([sys.executable, "-c", CODE], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    default, run_dir = map(Path, proc.stdout.strip().splitlines()[-2:])
    assert home in default.parents  # the default would be inside the tmp HOME
    assert run_dir.parent == SESSION_RUN_DIR and (run_dir / "run.json").is_file()
    assert not default.exists() and not any(home.rglob("run.json"))


def test_the_session_directory_is_not_the_users():
    assert os.environ["GPU_WIDGETS_RUN_DIR"] == str(SESSION_RUN_DIR)
    assert not SESSION_RUN_DIR.is_relative_to(default_root({}))
