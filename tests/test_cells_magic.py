"""``%gpu_cells`` in plain IPython (no Jupyter server): the kernel's own cell hooks and sampler,
on simulated GPUs that a real process claims memory of (gpu_widgets.simulated_use). Through the
server (cells/summary), it is tested in tests/test_cells_browser.py with the example notebook."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # runs IPython as a process

# The process's sampler reads process lists every 0.5 s (2 s by default): a 2.5 s cell then holds
# several reads even on a loaded machine, where one late read at 2 s missed the first cell.
SCRIPT = """
from gpu_widgets.sampling.sampler import get_sampler
get_sampler(start=False, interval_s=0.5, slow_interval_s=0.5)
%load_ext gpu_widgets
%gpu_cells
import time
from gpu_widgets.simulated_use import hold, release
hold(0, 3 << 30); time.sleep(2.5)
x = sum(range(10))
hold(1, 1 << 30); release(0); time.sleep(2.5)
release(); time.sleep(2.5)
%gpu_cells
%gpu_cells --last 0
%gpu_cells --bogus
"""


def test_gpu_cells_in_plain_ipython_lists_the_cells_that_held_gpu_memory(tmp_path: Path):
    env = {**os.environ, "GPU_WIDGETS_BACKEND": "simulated", "GPU_WIDGETS_SIMULATED_USE_DIR": str(tmp_path),
           "IPYTHONDIR": str(tmp_path / "ipython"), "GPU_WIDGETS_RUN_DIR": str(tmp_path / "runs")}
    ipython = Path(sys.executable).with_name("ipython")
    done = subprocess.run([str(ipython), "--no-banner", "--quick", "--colors=NoColor", "--simple-prompt",
                           "--InteractiveShell.history_length=0"],
                          input=SCRIPT, capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    out, err = done.stdout, done.stderr
    # The first call says where its figures come from, and from when
    assert "no Jupyter server for this kernel: its own sampler books its GPU memory from now on" in out
    # Then the bill: the cells that held memory, each with its GPUs and peak
    first = next((line for line in out.splitlines() if "hold(0, 3 << 30); time.sleep(2.5)" in line), None)
    assert first is not None and "3.0 GiB" in first and "2.5 s" in first, out
    both = next((line for line in out.splitlines() if "hold(1, 1 << 30); release(0)" in line), None)
    assert both is not None and "0, 1" in both and "4.0 GiB" in both, out
    # x = sum(...) only kept memory on GPU 0: it has a row only if the simulated GPU 0 was busy
    # then (its load follows the clock), and adds no GPU-seconds (2.5 s + 2 GPUs × 2.5 s + 2.5 s)
    cells = 4 if any("x = sum(range(10))" in line for line in out.splitlines()) else 3
    assert f"Total: {cells} cells · 10 GPU-seconds" in out, out
    assert "(figures from this kernel's own sampler (cells since it started watching))" in out
    # Bad options: a usage line, no traceback
    assert "%gpu_cells: argument --last: invalid number of cells value: '0'" in out + err
    assert "%gpu_cells: unrecognized arguments: --bogus" in out + err
    assert "Traceback" not in out + err
