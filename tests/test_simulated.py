"""The simulated backend: deterministic, plausible dynamics, scripted faults, clearly labelled."""
from __future__ import annotations

import pytest

from gpu_widgets.backends import ConfigError, SimulatedBackend, open_backend, parse_faults
from gpu_widgets.backends.faults import Fault
from gpu_widgets.metrics.throttle import BITS
from gpu_widgets.sampling.snapshot import take

T0 = 1_000_000.0


def series(backend: SimulatedBackend, field: str, gpu: int, seconds: range) -> list:
    return [backend.read_fast(T0 + s)[gpu][field] for s in seconds]


def sim(**kw) -> SimulatedBackend:
    b = SimulatedBackend(t0=T0, **kw)
    b.open()
    return b


def test_same_seed_same_values_different_seed_different_values():
    a, b, c = sim(n_gpus=3, seed=7), sim(n_gpus=3, seed=7), sim(n_gpus=3, seed=8)
    for s in range(0, 300, 7):
        assert take(a, T0 + s) == take(b, T0 + s)
    assert [take(a, T0 + s)["devices"] for s in range(0, 100, 5)] != [
        take(c, T0 + s)["devices"] for s in range(0, 100, 5)
    ]


def test_values_do_not_depend_on_how_often_they_are_read():
    dense, sparse = sim(seed=1), sim(seed=1)
    for s in range(0, 200):
        dense.read_fast(T0 + s)
    assert dense.read_fast(T0 + 200.0) == sparse.read_fast(T0 + 200.0)


def test_devices_are_named_simulated_and_the_backend_says_so():
    b = sim(n_gpus=4)
    snap = take(b, T0 + 1)
    assert snap["backend"] == "simulated"
    assert len(snap["devices"]) == 4
    assert all(d["name"].startswith("Simulated ") for d in snap["devices"])
    assert all(d["name"].startswith("Simulated ") for d in b.device_info())
    assert len({d["uuid"] for d in b.device_info()}) == 4


def test_dynamics_are_plausible():
    b = sim(n_gpus=1, seed=2)
    util = series(b, "utilization_gpu_percent", 0, range(0, 240))
    temp = series(b, "temperature_c", 0, range(0, 240))
    power = series(b, "power_w", 0, range(0, 240))
    energy = series(b, "energy_j", 0, range(0, 240))
    assert max(util) > 85 and min(util) < 5
    # temperature lags utilization: after the load drops, it is still falling 10 s later
    drop = next(i for i in range(1, 240) if util[i - 1] > 50 and util[i] < 10)
    assert temp[drop + 10] < temp[drop] and temp[drop + 10] > 40
    # power follows utilization
    busy = [p for p, u in zip(power, util) if u > 80]
    idle = [p for p, u in zip(power, util) if u < 5]
    assert min(busy) > max(idle)
    assert all(e2 >= e1 for e1, e2 in zip(energy, energy[1:]))
    mem = series(b, "memory_used_bytes", 0, range(0, 480))
    assert len(set(mem)) >= 4  # memory steps as the model loads, and drops after the run


def test_lost_fault_marks_the_gpu_lost_for_its_window_only():
    b = sim(n_gpus=2, faults=(Fault("lost", 1, 30, 60),))
    assert b.read_fast(T0 + 29)[1]["status"] == "ok"
    during = b.read_fast(T0 + 30)
    assert during[0]["status"] == "ok" and during[0]["utilization_gpu_percent"] is not None
    assert during[1]["status"] == "lost" and during[1]["utilization_gpu_percent"] is None
    assert "simulated" in during[1]["unavailable"]["temperature_c"]
    assert [p["index"] for p in b.read_slow(T0 + 30)] == [0]
    assert b.read_fast(T0 + 60)[1]["status"] == "ok"


def test_throttle_fault_shows_the_reason_and_slows_clocks():
    b = sim(n_gpus=1, faults=parse_faults("throttle:0@10-40:sw_power_cap"))
    before = b.read_fast(T0 + 5)[0]
    during = b.read_fast(T0 + 20)[0]
    assert not before["throttle_reasons"] & BITS["sw_power_cap"]  # NVML's bitmask, as a real GPU's
    assert during["throttle_reasons"] == BITS["sw_power_cap"]
    assert during["power_w"] == pytest.approx(during["power_limit_w"], rel=0.01)
    assert during["sm_clock_mhz"] < before["sm_clock_mhz"]
    thermal = sim(n_gpus=1, faults=parse_faults("throttle:0@0-100"))
    assert thermal.read_fast(T0 + 50)[0]["throttle_reasons"] == BITS["hw_thermal_slowdown"]


def test_unsupported_fault_and_the_native_fanless_board():
    b = sim(n_gpus=2, faults=parse_faults("unsupported:0:power_w; unsupported:1:processes"))
    d0, d1 = b.read_fast(T0 + 1)
    assert d0["power_w"] is None and "simulated fault" in d0["unavailable"]["power_w"]
    assert d1["power_w"] is not None
    assert d0["fan_percent"] is None and "passively cooled" in d0["unavailable"]["fan_percent"]
    slow = b.read_slow(T0 + 1)
    assert slow[1]["processes"] is None and slow[0]["processes"] is not None


@pytest.mark.parametrize(
    "spec,words",
    [
        ("boom:0", "unknown fault kind"),
        ("lost", "missing ':GPU'"),
        ("lost:x", "GPU must be an index"),
        ("lost:0@abc", "START or START-END"),
        ("lost:0@50-10", "must come after"),
        ("throttle:0@1-2:too_hot", "unknown throttle reason"),
        ("unsupported:0:nonsense", "needs a sample field"),
    ],
)
def test_bad_fault_specs_say_what_is_wrong(spec, words):
    with pytest.raises(ValueError, match=words) as info:
        parse_faults(spec)
    assert "KIND:GPU" in str(info.value)


def test_environment_settings_are_checked():
    env = {"GPU_WIDGETS_BACKEND": "simulated", "GPU_WIDGETS_SIMULATED_GPUS": "8"}
    assert len(open_backend(env=env).device_info()) == 8
    for key, value, words in [
        ("GPU_WIDGETS_SIMULATED_GPUS", "two", "not a whole number"),
        ("GPU_WIDGETS_SIMULATED_GPUS", "0", "out of range"),
        ("GPU_WIDGETS_SIMULATED_FAULTS", "lost:5", "only 2 simulated GPUs"),
        ("GPU_WIDGETS_BACKEND", "cuda", "use one of auto, nvml, simulated"),
    ]:
        bad = {"GPU_WIDGETS_BACKEND": "simulated", key: value}
        with pytest.raises(ConfigError, match=words):
            open_backend(env=bad)


def test_auto_never_falls_back_to_simulated():
    # A fresh process: this one may have loaded the fake NVML library for the server tests.
    import subprocess
    import sys

    code = (
        "from gpu_widgets.backends import open_backend;"
        "b = open_backend(env={'GPU_WIDGETS_BACKEND': 'auto'}); print(b.name, b.status, b.reason)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("none no_gpu ") and "libnvidia-ml.so.1" in out
