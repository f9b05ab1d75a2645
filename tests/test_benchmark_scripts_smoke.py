"""The benchmark scripts beside the suite (docs/benchmarks.md: the cluster view, the family walk,
the device-file scan, a cell's line, opening a tab) run end to end in their smoke form and print
every figure. The suite's own smoke run is in tests/test_benchmarks_smoke.py (a module each, so two
workers run them side by side)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .test_benchmarks_smoke import REPO


@pytest.mark.integration
def test_cluster_benchmark_smoke_run(tmp_path: Path) -> None:
    # Given a real prometheus scraping 50 synthetic hosts, when the cluster benchmark's smoke run
    # runs (about 15 s), then every sidebar refresh succeeded and each target has a verdict
    from .prometheus_fixture import require_prometheus

    require_prometheus()
    out = tmp_path / "cluster.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.cluster", "--smoke", "--json", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    result = json.loads(out.read_text())
    load = result["load"]
    assert load["errors"] == 0 and load["hosts_listed"] == 50, load["error_text"]
    assert load["overview_ms"]["n"] > 0 and load["detail_ms"]["n"] > 0 and load["loop_lag_ms"]["n"] > 0
    assert [t["status"] in ("met", "MISSED") for t in result["targets"]] == [True, True, True]
    assert "| cluster endpoint p95" in proc.stdout


@pytest.mark.integration
def test_kernel_look_benchmark_smoke_run() -> None:
    # The family-walk benchmark (docs/benchmarks.md) runs and prints both figures and their ratio
    proc = subprocess.run([sys.executable, "-m", "benchmarks.kernel_look", "--processes", "10", "--kernels", "1",
                           "--rounds", "2"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    assert "psutil children(recursive=True) per kernel" in proc.stdout and "ratio:" in proc.stdout


@pytest.mark.integration
def test_device_file_scan_benchmark_smoke_run(tmp_path: Path) -> None:
    # The container scan's benchmark (docs/benchmarks.md) runs, finds its holders and prints every figure
    out = tmp_path / "device_files.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.device_files", "--processes", "20", "--holders", "2",
                           "--rounds", "5", "--json", str(out)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    figures = json.loads(out.read_text())
    assert figures["processes_scanned"] >= 22 and figures["refresh_ms"] > figures["steady_ms"] > 0
    assert figures["per_read_ms_k1"] >= figures["per_read_ms_k150"] > 0
    assert "per slow read, lists changing every   1 reads" in proc.stdout and "x the 2 ms target" in proc.stdout


@pytest.mark.integration
def test_cell_cost_benchmark_smoke_run(tmp_path: Path) -> None:
    # The cells/summary benchmark (docs/benchmarks.md) fills its hour and prints each cell's cost
    out = tmp_path / "cell_cost.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.cell_cost", "--gpus", "2", "--rounds", "3",
                           "--json", str(out)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    figures = json.loads(out.read_text())
    assert figures["history_samples"] == 3600 and figures["ledger_entries"] == 360
    assert figures["cell 1 h"]["median_ms"] > 0 and figures["cell 1 h"]["bytes"] > 500
    assert "x the 5.0 ms target" in proc.stdout


@pytest.mark.integration
def test_tab_storm_benchmark_smoke_run(tmp_path: Path) -> None:
    # The tab-opening benchmark (docs/benchmarks.md §10) runs against a real server and reports a
    # gzipped first frame of the window at the chart's width, the storm and the steady bytes
    out = tmp_path / "tab_storm.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.tab_storm", "--smoke", "--json", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    run = json.loads(out.read_text())["runs"][-1]
    frame = run["first_frame"]
    assert frame["gzip"] and frame["points"] == 300 and frame["status"] == 200
    assert 0 < frame["bytes"]["samples"] < 120_000  # plain JSON of this window is ~470 KB
    assert run["storms"][0]["tabs"] == 10 and run["storms"][0]["status_ms"]["n"] > 0
    assert run["steady"]["polls"] >= 2 and run["steady"]["bytes_per_s"] > 0
    assert "| after | 300 |" in proc.stdout and "first frame <= 60 KB per tab" in proc.stdout
