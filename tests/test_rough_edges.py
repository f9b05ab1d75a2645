"""Rough edges a new user hit (issue 12): the step count in the monitor's header, `make build`
after `make test`, `make lab` leaving the tracked example notebooks alone, and a script that dies
recording its run as failed or interrupted."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from .test_monitor import header, make

ROOT = Path(__file__).resolve().parents[1]
MAKEFILE = (ROOT / "Makefile").read_text()
HAVE_MAKE = shutil.which("make") is not None


# -- the step shown is the number of steps done ---------------------------------------------------
def test_a_300_step_track_loop_ends_at_300_of_300():
    mon = make(run_log=False)
    for _ in mon.track(range(300)):
        mon.log(loss=0.5)
    mon.refresh()
    assert mon.total_steps == 300 and mon.step == 299  # mon.step: the last step, as documented
    assert "step 300 / 300 (100%)" in header(mon)
    mon.finish()


@pytest.mark.parametrize(("first", "half_text"), [(0, "step 150 / 300 (50%)"), (1, "step 150 / 300 (50%)")])
def test_user_numbered_steps_from_0_or_from_1_both_end_at_300(first, half_text):
    mon = make(run_log=False, total_steps=300)
    for step in range(first, first + 300):
        mon.log(step=step, loss=0.5)
        if step == first + 149:
            mon.refresh()
            assert half_text in header(mon)
    mon.refresh()
    assert "step 300 / 300 (100%)" in header(mon)
    assert mon.step == first + 299
    mon.finish()


def test_no_step_logged_shows_no_step():
    mon = make(run_log=False, total_steps=10)
    mon.refresh()
    assert "step " not in header(mon)
    mon.finish()


# -- `make build`'s check for the `build` tool ----------------------------------------------------
def build_check_command() -> str:
    lines = [ln for ln in MAKEFILE.splitlines() if "pip install build" in ln]
    assert len(lines) == 1, "the Makefile's `build` target should have one check for the build tool"
    check = lines[0].strip().lstrip("@").split("||")[0].strip()
    return check.replace(">/dev/null 2>&1", "").strip()


def run_check(python: Path) -> int:
    cmd = build_check_command().replace("$(PY)", str(python))
    return subprocess.run(["bash", "-c", cmd], cwd=ROOT, capture_output=True, timeout=60).returncode


def tool_runs(python: Path) -> bool:
    """What the check must predict: whether `python -m build` works from the repository root."""
    done = subprocess.run([str(python), "-m", "build", "--version"], cwd=ROOT, capture_output=True, timeout=60)
    return done.returncode == 0


@pytest.mark.integration
def test_build_check_is_not_fooled_by_the_tests_build_folder(tmp_path):
    (ROOT / "build").mkdir(exist_ok=True)  # what the tests leave behind (git-ignored)
    bare = tmp_path / "venv"
    venv.create(bare, with_pip=False)  # certainly without the build tool
    bare_python = bare / "bin" / "python"
    assert not tool_runs(bare_python)
    assert run_check(bare_python) != 0, "the check says `build` is installed in a venv without it"
    # The project's venv (editable install: the repository is on sys.path), either way.
    assert (run_check(Path(sys.executable)) == 0) == tool_runs(Path(sys.executable))


# -- `make lab` runs a working copy of the examples -----------------------------------------------
def lab_examples(src: Path, dst: Path) -> str:
    done = subprocess.run(["make", "-s", "lab-examples", f"EXAMPLES={src}", f"LAB_EXAMPLES={dst}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.integration
@pytest.mark.skipif(not HAVE_MAKE, reason="make is not installed")
def test_lab_copies_the_scripts_the_notebooks_run_too(tmp_path):
    src, dst = tmp_path / "examples", tmp_path / "lab"
    src.mkdir()
    (src / "distributed.ipynb").write_text("nb")
    (src / "distributed_train.py").write_text("print('train')")
    lab_examples(src, dst)
    assert (dst / "distributed_train.py").read_text() == "print('train')"
    assert {p.name for p in (ROOT / "examples").glob("*.py")} >= {"distributed_train.py"}


@pytest.mark.integration
@pytest.mark.skipif(not HAVE_MAKE, reason="make is not installed")
def test_lab_copies_refreshes_and_never_overwrites_edits(tmp_path):
    src, dst = tmp_path / "examples", tmp_path / "lab"
    src.mkdir()
    (src / "a.ipynb").write_text("a1")
    (src / "b.ipynb").write_text("b1")
    assert "copied" in lab_examples(src, dst)
    assert (dst / "a.ipynb").read_text() == "a1" and (dst / "b.ipynb").read_text() == "b1"
    assert lab_examples(src, dst) == ""  # nothing changed: nothing to say
    (dst / "a.ipynb").write_text("a1 with outputs")  # the user ran it
    (src / "a.ipynb").write_text("a2")
    (src / "b.ipynb").write_text("b2")
    out = lab_examples(src, dst)
    assert (dst / "a.ipynb").read_text() == "a1 with outputs", "an edited copy was overwritten"
    assert re.search(r"NOTE: .*a\.ipynb changed, but .*a\.ipynb has your edits", out)
    assert (dst / "b.ipynb").read_text() == "b2" and "refreshed" in out
    (dst / "a.ipynb").unlink()  # the note's advice: delete it to get the new one
    lab_examples(src, dst)
    assert (dst / "a.ipynb").read_text() == "a2"


@pytest.mark.integration
def test_lab_starts_in_the_working_copy_which_git_and_the_sdist_leave_out():
    recipe = MAKEFILE.split("\nlab:", 1)[1].split("\n\n", 1)[0]
    assert "lab-examples" in recipe.splitlines()[0]
    assert 'cd "$(LAB_EXAMPLES)" && exec' in recipe
    folder = re.search(r"^LAB_EXAMPLES \?= (\S+)$", MAKEFILE, re.M).group(1)
    assert not (ROOT / folder).resolve().is_relative_to(ROOT / "examples")
    if shutil.which("git") and (ROOT / ".git").exists():
        ignored = subprocess.run(["git", "check-ignore", "-q", f"{folder}/quickstart.ipynb"], cwd=ROOT)
        assert ignored.returncode == 0, f"{folder} is not git-ignored"
    # tomllib is 3.11+: read the sdist section as text
    sdist = (ROOT / "pyproject.toml").read_text().split("[tool.hatch.build.targets.sdist]")[1].split("\n[", 1)[0]
    top = "/" + folder.split("/")[0]
    assert f'"{top}",' in sdist, f"the sdist does not exclude {top}"


# -- a script that dies takes its run down with it ------------------------------------------------
SCRIPT = """
import sys
from gpu_widgets import TrainingMonitor
import IPython  # as ipywidgets does: the module alone is no IPython shell
mon = TrainingMonitor(gpus=[], display=False)
for step in range(3):
    mon.log(step=step, loss=1.0 / (step + 1))
raise {error}("boom in step 3")
"""


@pytest.mark.integration
@pytest.mark.parametrize(("error", "status"), [("RuntimeError", "failed"), ("KeyboardInterrupt", "interrupted")])
def test_a_script_that_dies_records_how_its_run_ended(tmp_path, error, status):
    env = {**os.environ, "GPU_WIDGETS_RUN_DIR": str(tmp_path), "GPU_WIDGETS_BACKEND": "simulated"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT.format(error=error)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode != 0 and "boom in step 3" in proc.stderr
    (run_json,) = tmp_path.glob("*/run.json")
    meta = json.loads(run_json.read_text())
    assert meta["status"] == status, meta


# -- steps/s counts steps, not the rows a framework chose to log ---------------------------------
def test_steps_per_second_counts_steps_when_only_every_50th_is_logged():
    from gpu_widgets.runs.records import Records

    every_50th, each = Records(), Records()
    for i in range(11):  # 10 s, a row every second for 50 steps each: 50 steps/s
        every_50th.append(50 * i, 1000.0 + i, {"loss": 1.0})
        each.append(i, 1000.0 + i, {"loss": 1.0})
    assert every_50th.rate() == 50.0 and every_50th.rate(window_s=4) == 50.0
    assert each.rate() == 1.0
    same_step = Records()  # a loop that logs twice per step without step numbers that advance
    for i in range(5):
        same_step.append(0, 1000.0 + i, {"loss": 1.0})
    assert same_step.rate() == 1.0  # rows, as before
