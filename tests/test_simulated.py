"""The simulated backend: deterministic, plausible dynamics, scripted faults, clearly labelled."""
from __future__ import annotations

import os
import time

import pytest

from gpu_widgets.backends import ConfigError, SimulatedBackend, open_backend, parse_faults
from gpu_widgets.backends.faults import Fault
from gpu_widgets.metrics.throttle import BITS
from gpu_widgets.sampling.snapshot import take

# Readings follow the wall clock; with seed 0 this instant is 60 s into GPU 0's cycle (training).
T0 = 4167 * 240.0 + 60.0


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


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_backends_opened_at_different_times_read_the_same_values_at_the_same_instant():
    # The sidebar's server and a kernel start at different times but must show the same GPUs.
    clock = FakeClock(T0)
    early = SimulatedBackend(n_gpus=3, seed=5, clock=clock)
    early.open()
    clock.now += 5.0
    late = SimulatedBackend(n_gpus=3, seed=5, clock=clock)
    late.open()
    assert (early.t0, late.t0) == (T0, T0 + 5.0)
    for s in [5.0, 5.3, 17.0, 61.5, 250.0, 1000.25]:
        assert early.read_fast(T0 + s) == late.read_fast(T0 + s)
        assert early.read_slow(T0 + s) == late.read_slow(T0 + s)
    # a third one that has never read before agrees too: no history is involved
    fresh = SimulatedBackend(n_gpus=3, seed=5, t0=T0 + 900)
    fresh.open()
    assert fresh.read_fast(T0 + 1000.25) == early.read_fast(T0 + 1000.25)


def test_readings_vary_over_time_and_with_the_seed():
    a, b, other = sim(n_gpus=2, seed=3), sim(n_gpus=2, seed=3), sim(n_gpus=2, seed=4)
    fields = ("utilization_gpu_percent", "temperature_c", "power_w", "memory_used_bytes", "sm_clock_mhz")
    for field in fields:
        assert len(set(series(a, field, 0, range(0, 240, 3)))) > 1, field
    instants = [T0 + s for s in range(0, 240, 11)]
    assert [a.read_fast(t) for t in instants] == [b.read_fast(t) for t in instants]
    assert [a.read_fast(t) for t in instants] != [other.read_fast(t) for t in instants]


def test_two_gpus_are_never_idle_at_once():
    # Tests on the real clock (and demos) rely on some GPU being busy whenever they happen to run.
    for seed in (0, 1, 9):
        b = sim(n_gpus=2, seed=seed)
        for s in range(0, 480):
            assert max(d["utilization_gpu_percent"] for d in b.read_fast(T0 + s / 2)) >= 10, (seed, s)


def test_energy_only_grows_even_when_a_throttle_fault_lowers_power():
    b = sim(n_gpus=2, faults=parse_faults("throttle:0@3-90; throttle:1@20-70:sw_power_cap"))
    plain = sim(n_gpus=2)
    energy = [[d["energy_j"] for d in b.read_fast(T0 + s / 10)] for s in range(0, 1200, 3)]
    for gpu in (0, 1):
        e = [row[gpu] for row in energy]
        assert all(e2 >= e1 for e1, e2 in zip(e, e[1:])) and e[-1] > e[0], gpu
    after = b.read_fast(T0 + 150)
    ref = plain.read_fast(T0 + 150)
    assert after[0]["energy_j"] < ref[0]["energy_j"]  # slowed clocks drew less power
    assert after[1]["energy_j"] > ref[1]["energy_j"]  # held at the cap drew more


def test_thermal_fault_heats_with_a_lag_and_cools_after():
    b = sim(n_gpus=1, faults=parse_faults("throttle:0@10-70:hw_thermal_slowdown"))
    plain = sim(n_gpus=1)
    rise = [b.read_fast(T0 + s)[0]["temperature_c"] - plain.read_fast(T0 + s)[0]["temperature_c"] for s in (5, 15, 69, 100)]
    assert rise[0] == 0 and 0 < rise[1] < rise[2] and 0 < rise[3] < rise[2]


def test_many_gpus_have_plausible_memory_and_load():
    b = sim(n_gpus=64)
    for s in range(0, 240, 6):
        for d in b.read_fast(T0 + s):
            assert 0 < d["memory_used_bytes"] <= d["memory_total_bytes"], d["index"]
            assert 0 <= d["utilization_gpu_percent"] <= 100
    assert max(d["utilization_gpu_percent"] for d in b.read_fast(T0 + 100)[56:]) > 50


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


@pytest.mark.integration
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


@pytest.mark.parametrize("n_gpus,seed", [(2, 0), (8, 0), (8, 11)])
def test_simulated_gpus_raise_no_alert_unless_a_fault_is_scripted(n_gpus, seed):
    # A first look at the demo must not be covered by made-up alerts: two whole cycles of every
    # kind of simulated GPU (their load and memory repeat every 8 GPUs) through the server's rules
    # at their default thresholds raise nothing.
    from gpu_widgets.alerts.engine import AlertEngine

    quiet, scripted = AlertEngine(), AlertEngine()
    plain = sim(n_gpus=n_gpus, seed=seed)
    faulty = sim(n_gpus=n_gpus, seed=seed, faults=parse_faults("lost:1@30-40"))
    for i in range(2 * 480):
        quiet.on_sample(take(plain, T0 + i * 0.5))
        if i < 120:
            scripted.on_sample(take(faulty, T0 + i * 0.5))
    assert quiet.evaluations == 960 and quiet.episodes() == []
    # Asked for, a fault does raise its alert: the rules ran on these samples.
    assert [(e["kind"], e["gpu"]) for e in scripted.episodes()] == [("lost", 1)]


def test_simulated_memory_stays_well_under_the_memory_alert_and_keeps_room_on_gpus_0_and_1():
    b = sim(n_gpus=8)
    for s in range(0, 240):
        for d in b.read_fast(T0 + s):
            assert d["memory_used_bytes"] <= 0.6 * d["memory_total_bytes"], (s, d["index"])
            if d["index"] < 2:
                assert d["memory_free_bytes"] >= 40 * (1 << 30), (s, d["index"])


@pytest.mark.integration
def test_a_real_process_that_holds_simulated_memory_shows_on_that_gpu_until_it_lets_go(tmp_path, monkeypatch):
    import json as _json
    import subprocess as _sp
    import sys as _sys

    from gpu_widgets.backends import simulated_use
    from gpu_widgets.simulated_use import hold, release

    monkeypatch.setenv(simulated_use.ENV_DIR, str(tmp_path))
    monkeypatch.setattr(simulated_use, "READ_EVERY_S", 0.0)
    backend = SimulatedBackend(n_gpus=2)
    backend.open()
    t = time.time()  # readings are a function of the time: the same t before and after the claim
    base = backend.read_fast(t)[0]["memory_used_bytes"]
    # Given this process holding 3 GiB of GPU 0 and a child holding 1 GiB of GPU 1
    hold(0, 3 << 30)
    child = _sp.Popen([_sys.executable, "-c", "import sys, time; from gpu_widgets.simulated_use import hold; "
                       "hold(1, 1 << 30); print('held', flush=True); time.sleep(60)"],
                      stdout=_sp.PIPE, env={**os.environ, simulated_use.ENV_DIR: str(tmp_path)})
    try:
        assert child.stdout.readline() == b"held\n"
        slow = backend.read_slow(time.time())
        mine = {p["pid"]: p for d in slow for p in d["processes"] if p["pid"] in (os.getpid(), child.pid)}
        # Then each is listed on its GPU, described as the real process it is, and GPU 0's memory grew
        assert mine[os.getpid()]["used_memory_bytes"] == 3 << 30 and mine[os.getpid()]["matched_by"] == "pid"
        assert mine[child.pid]["used_memory_bytes"] == 1 << 30
        assert [d["index"] for d in slow if any(p["pid"] == child.pid for p in d["processes"])] == [1]
        assert backend.read_fast(t)[0]["memory_used_bytes"] - base == 3 << 30
    finally:
        child.kill()
        child.wait()
    # When the child ends its claim is gone (its file stays: no reader trusts it); release() lets go of ours
    release()
    assert not [p for d in backend.read_slow(time.time()) for p in d["processes"] if p["pid"] in (os.getpid(), child.pid)]
    # Bad claims are nobody's: a reused pid, an oversized file, nonsense, an out-of-range GPU
    (tmp_path / "1.json").write_text(_json.dumps({"pid": os.getpid(), "create_time": 1.0, "gpus": {"0": 5}}))
    (tmp_path / "2.json").write_text("x" * (simulated_use.MAX_FILE_BYTES + 1))
    (tmp_path / "3.json").write_text("{not json")
    (tmp_path / "4.json").write_text(_json.dumps({"pid": os.getpid(), "create_time": 0, "gpus": {"99": 5}}))
    assert simulated_use.read_claims() == {}
    for gpu, size in ((-1, 1), (64, 1), ("0", 1), (0, -1), (0, 1.5), (0, True)):
        with pytest.raises(ValueError):
            hold(gpu, size)
