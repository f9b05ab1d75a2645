from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from gpu_widgets.runs.run_log import default_root

from . import fake_nvml
from .fake_nvml import fake_nvml_env, write_config
from .quick_mode import pytest_addoption, pytest_collection_modifyitems, pytest_configure  # noqa: F401 (hooks)

# Tests decide the backend themselves; a developer's shell settings must not leak in.
for _var in ("GPU_WIDGETS_BACKEND", "GPU_WIDGETS_SIMULATED_GPUS", "GPU_WIDGETS_SIMULATED_FAULTS",
             "GPU_WIDGETS_SIMULATED_SEED", "FAKE_NVML_CONFIG", "CUDA_VISIBLE_DEVICES"):
    os.environ.pop(_var, None)

# Run logs go to one temporary directory for the whole session, set in os.environ so that every
# subprocess, Jupyter server and kernel a test starts inherits it (tests that want their own set
# GPU_WIDGETS_RUN_DIR themselves). The user's own run directory is never written: see
# pytest_sessionfinish below and tests/test_run_log.py.
# The user's directories: the platform's default, and theirs when their shell sets one.
_USER_RUN_ROOTS = {default_root(os.environ), default_root({k: v for k, v in os.environ.items() if k != "GPU_WIDGETS_RUN_DIR"})}


def _user_runs() -> set[Path]:
    return {root / name for root in _USER_RUN_ROOTS if root.is_dir() for name in os.listdir(root)}


_USER_RUNS_BEFORE = _user_runs()
SESSION_RUN_DIR = Path(tempfile.mkdtemp(prefix="gpu-widgets-test-runs-"))
os.environ["GPU_WIDGETS_RUN_DIR"] = str(SESSION_RUN_DIR)
atexit.register(shutil.rmtree, SESSION_RUN_DIR, True)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the session in CI when a run appeared in the user's own run directory. On a developer's
    machine only say so: a notebook of theirs running meanwhile writes there too."""
    new = _user_runs() - _USER_RUNS_BEFORE
    if new:
        print(f"\nruns appeared in the user's run directory during the tests: {sorted(map(str, new))[:5]}"
              + ("" if os.environ.get("CI") else " (not failing: outside CI they may be your own notebooks' runs)"),
              file=sys.stderr)
        if os.environ.get("CI"):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def fake_nvml_lib() -> Path:
    """Directory holding the fake libnvidia-ml.so.1 (compiled once per session)."""
    return fake_nvml.build_fake_nvml()  # through the module: a quick run allows its compile there


class FakeDriver:
    """A fake NVML driver for subprocesses: write what it reports, get the env to run under it."""

    def __init__(self, lib_dir: Path, config_path: Path) -> None:
        self.lib_dir, self.config_path = lib_dir, config_path

    def write(self, config: dict) -> None:
        write_config(self.config_path, config)

    def env(self, **extra: str) -> dict[str, str]:
        return {**os.environ, **fake_nvml_env(self.lib_dir, self.config_path), **extra}


@pytest.fixture
def fake_driver(fake_nvml_lib: Path, tmp_path: Path) -> FakeDriver:
    return FakeDriver(fake_nvml_lib, tmp_path / "fake-nvml.conf")


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpu_widgets.cli", *args],
        capture_output=True, text=True, env=env if env is not None else dict(os.environ), timeout=timeout,
    )


pytest_plugins = ("pytest_jupyter.jupyter_server",)


@pytest.fixture
def gw_config() -> dict:
    """The GpuWidgets server settings a test runs with (override the fixture to change them)."""
    return {"backend": "simulated", "interval_s": 0.1}


@pytest.fixture
def jp_server_config(gw_config: dict) -> dict:
    return {"ServerApp": {"jpserver_extensions": {"gpu_widgets": True}}, "GpuWidgets": gw_config}


@pytest.fixture
def fake_nvml_config() -> dict:
    """What the in-process fake driver reports when the server starts (parametrize to change)."""
    return {"device_count": 0}


@pytest.fixture
def in_process_fake_nvml(fake_nvml_lib: Path, fake_nvml_config: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Load the fake libnvidia-ml.so.1 into this process, so the in-process Jupyter server's NVML
    backend talks to it through the real pynvml. Yields a function that rewrites its config.
    List it before jp_fetch so the driver is in place when the server starts."""
    import ctypes

    from gpu_widgets.backends.nvml.library import NVML

    config = tmp_path / "fake-nvml.conf"
    write_config(config, fake_nvml_config)
    monkeypatch.setenv("FAKE_NVML_CONFIG", str(config))
    # Loaded by path with the soname libnvidia-ml.so.1: pynvml's dlopen then finds this one.
    ctypes.CDLL(str(fake_nvml_lib / "libnvidia-ml.so.1"))
    NVML.shutdown()
    NVML.reset()
    yield lambda cfg: write_config(config, cfg)
    NVML.shutdown()
    NVML.reset()
