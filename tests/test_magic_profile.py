"""%%gpuwatch --profile through a real IPython shell: real torch.profiler around real cells, read by
the profile analysis; the cell's result and its exceptions unchanged; a profile that cannot start
or be read is one line, never a failed cell."""
from __future__ import annotations

import sys

import pytest
from IPython.core.error import UsageError
from IPython.testing.globalipapp import get_ipython

pytest.importorskip("torch")

from gpu_widgets.profiling import Profile  # noqa: E402

from .widget_helpers import shared_simulated  # noqa: E402,F401

ip = get_ipython()
ip.run_line_magic("load_ext", "gpu_widgets")

SLOW_LOADER = """
import time, torch
class Slow(torch.utils.data.Dataset):
    def __len__(self):
        return 8
    def __getitem__(self, i):
        time.sleep(0.03)  # the input pipeline: 30 ms a sample
        return torch.full((4,), float(i))
total = 0.0
for x in torch.utils.data.DataLoader(Slow(), batch_size=2):
    total += float(x.sum())
total
"""


def run(cell: str):
    ip.user_ns.pop("_gpuwatch_profile", None)
    return ip.run_cell(cell, store_history=False)


def test_a_cell_without_a_monitor_is_one_step_and_its_slow_loader_is_named(shared_simulated, capsys):
    result = run("%%gpuwatch --quiet --profile\n" + SLOW_LOADER)
    out = capsys.readouterr().out
    # the cell ran as ever, its value unchanged
    assert result.success and result.result == sum(range(8)) * 4.0
    profile = ip.user_ns["_gpuwatch_profile"]
    assert isinstance(profile, Profile) and profile.done and profile.steps == 1
    assert profile.verdict == "input-bound", profile
    assert profile.breakdown["data_wait"] > 0.5 and abs(sum(profile.breakdown.values()) - 1) < 1e-6
    assert "%%gpuwatch --profile: input-bound: The loop waits for its data" in out
    assert out.index("%%gpuwatch: cell ran") < out.index("%%gpuwatch --profile:")  # after the GPU summary


def test_the_cells_exception_goes_on_unchanged_after_its_profile(shared_simulated, capsys):
    result = run("%%gpuwatch --quiet --profile\nimport torch\nx = torch.randn(64, 64) @ torch.randn(64, 64)\n"
                 "err = ZeroDivisionError('step 3')\nraise err")
    assert result.error_in_exec is ip.user_ns["err"]
    assert ip.user_ns["_gpuwatch_profile"].verdict == "compute-bound"
    assert "%%gpuwatch --profile: compute-bound" in capsys.readouterr().out


def test_a_profile_that_cannot_start_is_one_line_and_the_cell_runs(shared_simulated, capsys):
    import torch.profiler

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):  # another profiler runs
        result = run("%%gpuwatch --quiet --profile\n40 + 2")
    captured = capsys.readouterr()
    assert result.success and result.result == 42 and "_gpuwatch_profile" not in ip.user_ns
    assert "gpuwatch: no profile: %%gpuwatch --profile cannot start torch.profiler" in captured.err


def test_without_pytorch_the_profile_says_so(shared_simulated, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.profiler", None)  # import torch.profiler fails
    result = run("%%gpuwatch --quiet --profile\n'ran'")
    assert result.success and result.result == "ran"
    assert "gpuwatch: no profile: %%gpuwatch --profile needs PyTorch (torch.profiler)" in capsys.readouterr().err


def test_the_line_magic_refuses_profile():
    with pytest.raises(UsageError, match="--profile is for the cell magic"):
        ip.run_line_magic("gpuwatch", "--profile")


MONITORED = """
import time, torch
from gpu_widgets import TrainingMonitor
class Slow(torch.utils.data.Dataset):
    def __len__(self):
        return 6
    def __getitem__(self, i):
        time.sleep(0.03)
        return torch.ones(4)
setup = torch.randn(256, 256) @ torch.randn(256, 256)  # before the loop: not one of its steps
mon = TrainingMonitor("cell loop", display=False, run_log=False)
for x in mon.track(torch.utils.data.DataLoader(Slow(), batch_size=1)):
    mon.log(loss=float(x.sum()))
mon.finish()
"""


def test_a_monitored_loop_in_the_cell_is_profiled_step_by_step(shared_simulated, capsys):
    result = run("%%gpuwatch --quiet --profile\n" + MONITORED)
    assert result.success, result.error_in_exec
    profile = ip.user_ns["_gpuwatch_profile"]
    # 6 batches: 7 marks less the setup before the first and the end after the last
    assert profile.steps == 5 and profile.verdict == "input-bound", profile
    assert not any(o["name"] == "aten::mm" for o in profile.top_ops), profile.top_ops  # the setup left out
