"""benchmarks/callbacks.py (the framework callbacks' overhead, docs/benchmarks.md) must not rot.

Its smoke run (2 rounds of 20 steps per framework) measures nothing meaningful; it checks that
each framework's worker still trains with every variant, that the marker callbacks saw the
window's steps, and that the figures the table prints are there and sane.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .test_benchmarks_smoke import REPO

pytestmark = pytest.mark.integration  # every test here starts a process

pytest.importorskip("lightning")


@pytest.mark.slow
def test_callbacks_smoke_run_measures_every_variant(tmp_path: Path) -> None:
    out = tmp_path / "callbacks.json"
    env = {k: v for k, v in os.environ.items() if k not in ("GPU_WIDGETS_BACKEND", "FAKE_NVML_CONFIG")}
    proc = subprocess.run([sys.executable, "-m", "benchmarks.callbacks", "--smoke", "--only", "lightning,keras",
                           "--json", str(out)], cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    results = json.loads(out.read_text())
    assert set(results) == {"lightning", "keras"}
    assert set(results["lightning"]["variants"]) == {"without A/A", "gpu-widgets", "DeviceStatsMonitor"}
    for fw, result in results.items():
        ours = result["variants"]["gpu-widgets"]
        # the callback's hooks ran inside the window (a share of its wall time above 0, below all of it)
        assert 0 < ours["hooks_share"]["median"] < 1, (fw, ours["hooks_share"])
        assert ours["overhead"] >= ours["hooks_share"]["median"]
        assert result["ms_per_step"]["without"]["median"] > 0
    assert "| lightning | gpu-widgets |" in proc.stdout and "| keras | gpu-widgets |" in proc.stdout
