"""The benchmark suite (benchmarks/, docs/benchmarks.md) must not rot: its smoke run takes seconds.

The smoke run measures nothing meaningful (tiny counts); it checks that every section still runs
end to end on the fake driver (the sampler workers, a real Jupyter server with the lag probe, a
PyTorch loop, the widget payload capture, the fast-forwarded memory run) and writes its JSON.
It runs without the contenders (--no-peers), as on a fresh checkout, and says why they are skipped.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SECTIONS = ("sampler", "server", "training", "payload", "memory", "history", "parallel", "profile")


def run_smoke(tmp_path: Path, *args: str, timeout: float = 240) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "results.json"
    env = {k: v for k, v in os.environ.items() if k not in ("GPU_WIDGETS_BACKEND", "FAKE_NVML_CONFIG")}
    proc = subprocess.run([sys.executable, "-m", "benchmarks.run", "--smoke", "--json", str(out), *args],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    return proc, json.loads(out.read_text())


@pytest.mark.integration
@pytest.mark.slow
def test_smoke_run_covers_every_section_and_writes_json(tmp_path: Path) -> None:
    # Given no contenders, when the smoke run runs, then every section produced numbers
    proc, results = run_smoke(tmp_path, "--no-peers")
    assert set(results["sections"]) == set(SECTIONS)
    for name, section in results["sections"].items():
        assert "error" not in section, f"{name}: {section.get('error')}\n{section.get('traceback')}"
    sampler = results["sections"]["sampler"]["contenders"]
    assert {"floor", "gpu-widgets"} <= set(sampler)
    # the floor makes exactly the NVML calls our sampler makes (counted by the fake library)
    assert sampler["floor"]["modes"]["full"]["calls"]["per_function"] == \
        sampler["gpu-widgets"]["modes"]["full"]["calls"]["per_function"]
    stage = results["sections"]["server"]["gpu-widgets"]["stages"][-1]
    assert stage["requests"] > 0 and stage["errors"] == 0
    assert stage["nvml_calls_per_s"]["total"] > 0 and stage["loop_lag_ms"]["n"] > 0
    assert results["machine"]["cpu"] and results["versions"]["project venv"]["gpu-widgets"]
    history = results["sections"]["history"]["stages"]
    assert [s["heavy_clients"] for s in history] == [0, 1] and not any(s["errors"] for s in history)
    assert history[-1]["heavy_bytes_max"] and history[-1]["status_ms"]["n"] > 0
    parallel = results["sections"]["parallel"]
    assert {r["distributed_calls_per_step"] for r in parallel["overhead"]["ranks"].values()} == {0}
    assert parallel["follow"]["world_size"] == 2 and parallel["follow"]["redraw"]["draws"] > 0
    profile = results["sections"]["profile"]["loops"]
    assert {k: v["verdicts"] for k, v in profile.items()} == {"small ops": ["launch-bound"], "matmul": ["compute-bound"]}
    # and the skipped contenders are named with the reason
    assert "skipped nvitop: peers disabled (--no-peers)" in proc.stdout
    assert "## Targets" in proc.stdout


# Put first on PYTHONPATH, this hides every checkout (a folder with both packages) that an editable
# install's .pth file adds to sys.path (site runs it after the .pth files): what a regular install sees.
_REGULAR_INSTALL = """
import os, sys
def _checkout(p):
    return all(os.path.isdir(os.path.join(p or ".", name)) for name in ("gpu_widgets", "benchmarks"))
sys.path[:] = [p for p in sys.path if not _checkout(p)]
"""


@pytest.mark.integration
def test_the_server_loads_the_probe_from_a_regular_install(tmp_path: Path) -> None:
    # Given an environment where gpu_widgets imports (as from site-packages) but this checkout's
    # benchmarks package does not
    shim = tmp_path / "site"
    shim.mkdir()
    (shim / "gpu_widgets").symlink_to(REPO / "gpu_widgets", target_is_directory=True)
    (shim / "sitecustomize.py").write_text(_REGULAR_INSTALL)
    env = {k: v for k, v in os.environ.items() if k not in ("GPU_WIDGETS_BACKEND", "FAKE_NVML_CONFIG")}
    env["PYTHONPATH"] = str(shim)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    seen = subprocess.run([sys.executable, "-c", "import gpu_widgets, importlib.util as u; "
                           "print(u.find_spec('benchmarks') is None)"],
                          cwd=elsewhere, env=env, capture_output=True, text=True, timeout=60)
    assert seen.stdout.strip() == "True", seen.stderr
    # When the history section (the one whose server lacked the probe: HTTP 404) runs from the checkout
    out = tmp_path / "results.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.run", "--smoke", "--no-peers", "--only", "history",
                           "--json", str(out)], cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    # Then its server found the probe and every request succeeded
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    history = json.loads(out.read_text())["sections"]["history"]
    assert "error" not in history, history.get("error")
    assert history["stages"] and not any(s["errors"] for s in history["stages"])


@pytest.mark.integration
def test_unknown_section_is_a_usage_error() -> None:
    proc = subprocess.run([sys.executable, "-m", "benchmarks.run", "--only", "nope"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "unknown section" in proc.stderr


PEERS_PY = REPO / "benchmarks" / ".cache" / "venv-peers" / "bin" / "python"


@pytest.mark.slow
@pytest.mark.skipif(not PEERS_PY.exists(), reason="no contenders' venv (make bench creates it)")
def test_smoke_run_with_the_contenders(tmp_path: Path) -> None:
    proc, results = run_smoke(tmp_path, "--only", "sampler,training")
    sampler = results["sections"]["sampler"]
    assert {"nvitop", "gpustat", "jupyterlab-nvdashboard"} <= set(sampler["contenders"]), sampler["skipped"]
    assert {"livelossplot", "tqdm.notebook"} <= set(results["sections"]["training"]["variants"])
