"""Shared set-up for the notebook-side tests (monitor, dashboard, magic, run log)."""
from __future__ import annotations

import math
import threading
import time
from typing import Any

import pytest

from gpu_widgets.sampling import sampler as sampler_module
from gpu_widgets.backends import Backend, NoGpuBackend, SimulatedBackend
from gpu_widgets.widgets import leases as sampling
from gpu_widgets.sampling.sampler import Sampler


@pytest.fixture(autouse=True)
def run_dir(tmp_path, monkeypatch):
    """Every test writes its run logs under tmp (never the user's data directory)."""
    path = tmp_path / "runs"
    monkeypatch.setenv("GPU_WIDGETS_RUN_DIR", str(path))
    return path


@pytest.fixture
def shared_simulated(monkeypatch):
    """A fresh process-wide sampler on simulated GPUs; checks every lease was given back."""
    monkeypatch.setenv("GPU_WIDGETS_BACKEND", "simulated")
    monkeypatch.setattr(sampler_module, "_shared", None)
    yield
    shared = sampler_module._shared
    assert sampling.holders() == 0, "a widget kept its lease on the shared sampler"
    if shared is not None:
        assert not shared.running, "the shared sampler kept running after the last widget let go"
        shared.stop()


def simulated_sampler(n_gpus: int = 2) -> Sampler:
    """A sampler the test drives by hand with tick() (no thread)."""
    backend = SimulatedBackend(n_gpus=n_gpus, seed=1)
    backend.open()
    return Sampler(backend, interval_s=1.0)


def no_gpu_sampler(reason: str = "libnvidia-ml.so.1 not found") -> Sampler:
    return Sampler(NoGpuBackend(reason))


def marks(widget_charts: dict, chart: str | None = None) -> dict[str, Any]:
    """{line label: Lines mark} of one chart of a ChartsView, or of all (labels must not clash)."""
    charts = widget_charts.values() if chart is None else [widget_charts[chart]]
    return {name: mark for c in charts for name, mark in c.lines.items()}


def same(a: Any, b: Any) -> bool:
    """Equal, with NaN equal to NaN, and of the same type (an int stays an int)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


def same_rows(a: list[dict], b: list[dict], ignore: tuple[str, ...] = ()) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if set(x) - set(ignore) != set(y) - set(ignore):
            return False
        if not all(same(x[k], y[k]) for k in x if k not in ignore):
            return False
    return True


def monitor_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "gpu-widgets-monitor" and t.is_alive()]


GIB = 1 << 30


class FixedBackend(Backend):
    """GPUs that report what the test says (as a real driver would: backend "nvml")."""

    name = "nvml"

    def __init__(self, *devices: dict) -> None:
        super().__init__()
        self.devices = [
            {"index": i, "uuid": f"GPU-0000000{i}-fixed", "name": "Fixed GPU", "status": "ok",
             "utilization_gpu_percent": 0, "utilization_memory_percent": 0, "memory_used_bytes": GIB,
             "memory_free_bytes": 79 * GIB, "memory_total_bytes": 80 * GIB, "temperature_c": 35, "power_w": 70.0,
             "power_limit_w": 700.0, "energy_j": 1000.0, "throttle_reasons": 0x1, "unavailable": {}, **d}  # gpu_idle, as NVML's bitmask
            for i, d in enumerate(devices)
        ]

    def open(self) -> None:
        pass

    def device_info(self) -> list[dict]:
        return [{"index": d["index"], "uuid": d["uuid"], "name": d["name"]} for d in self.devices]

    def read_fast(self, t: float) -> list[dict]:
        return [dict(d) for d in self.devices]

    def read_slow(self, t: float) -> list[dict]:
        return [{"index": d["index"], "processes": [], "unavailable": {}} for d in self.devices]


def fixed_sampler(*devices: dict) -> Sampler:
    return Sampler(FixedBackend(*devices))


class HangingBackend(FixedBackend):
    """A FixedBackend whose reads hang while ``hang`` is set, until ``release`` is set."""

    def __init__(self, *devices: dict) -> None:
        super().__init__(*devices)
        self.hang, self.release = threading.Event(), threading.Event()

    def read_fast(self, t: float) -> list[dict]:
        if self.hang.is_set():
            self.release.wait(30)
        return super().read_fast(t)


def wait_until(predicate: Any, timeout: float = 15.0, what: str = "") -> Any:
    """The predicate's first true value; AssertionError after ``timeout`` s ("timed out waiting for ``what``")."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}" if what else "timed out"
        time.sleep(0.02)
    return value
