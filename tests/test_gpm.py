"""Issue 15: GPM metrics (SM active, occupancy, tensor, DRAM), per-process use and MIG instances, read
through the real pynvml bindings from the fake libnvidia-ml.so.1, only while someone asks."""
from __future__ import annotations

import asyncio
import ctypes
import json
import os
import subprocess
import sys
import time
import types

import pytest

from gpu_widgets.backends import SimulatedBackend, parse_faults
from gpu_widgets.backends.base import GPM_OFF, GPM_PENDING
from gpu_widgets.backends.nvml.backend import NvmlBackend
from gpu_widgets.backends.nvml.gpm import HELD, NEEDS_HOPPER, OLD_BINDINGS, OLD_DRIVER
from gpu_widgets.backends.nvml.library import Nvml
from gpu_widgets.metrics.fields import GPM_FIELDS
from gpu_widgets.sampling.sampler import Sampler
from gpu_widgets.sampling.snapshot import take

from .api_schema import validate_response
from .conftest import run_cli
from .fake_nvml import build_fake_nvml
from .test_server_api import get_json, wait_for

GIB = 1 << 30
ME = os.getpid()
PENDING = GPM_PENDING
BUSY_GPU = {"util_gpu": 100, "gpm_sm_util": 87, "gpm_sm_occupancy": 41, "gpm_tensor_util": 63, "gpm_dram_util": 30,
            "procs": [(ME, GIB)], "proc_util": [(ME, 71, 22)]}
GPM_CALLS = ("nvmlGpmQueryDeviceSupport", "nvmlGpmSampleAlloc", "nvmlGpmSampleGet", "nvmlGpmMetricsGet",
             "nvmlGpmMigSampleGet", "nvmlDeviceGetProcessesUtilizationInfo", "nvmlDeviceGetProcessUtilization")


def _lib() -> ctypes.CDLL:
    lib = ctypes.CDLL("libnvidia-ml.so.1")  # the fake the fixture loaded
    lib.fakeNvmlCallCount.restype = ctypes.c_ulonglong
    lib.fakeNvmlCallCount.argtypes = [ctypes.c_char_p]
    return lib


def calls(name: str) -> int:
    return _lib().fakeNvmlCallCount(name.encode())


def reset_calls() -> None:
    _lib().fakeNvmlResetCallCounts()  # the fake stays loaded for the whole session


def gpm(part: dict) -> dict:
    return {f: part[f] for f in GPM_FIELDS}


def reasons(part: dict) -> dict:
    return {f: part["unavailable"].get(f) for f in GPM_FIELDS}


def looking(backend: NvmlBackend, times: int = 2) -> list[dict]:
    """``times`` slow reads with GPM asked for; the last read's parts."""
    backend.gpm = True
    parts: list[dict] = []
    for _ in range(times):
        parts = backend.read_slow(time.time())
    return parts


@pytest.fixture
def backend(in_process_fake_nvml):
    opened: list[NvmlBackend] = []

    def make(config: dict, clock=time.monotonic) -> NvmlBackend:
        in_process_fake_nvml(config)
        reset_calls()
        b = NvmlBackend(clock=clock)
        b.open()
        opened.append(b)
        return b

    yield make
    for b in opened:
        b.close()


def test_a_hopper_gpu_gives_the_four_figures_and_each_process_its_share(backend):
    b = backend({"gpus": [BUSY_GPU]})
    [first] = looking(b, times=1)
    assert gpm(first) == dict.fromkeys(GPM_FIELDS) and reasons(first) == dict.fromkeys(GPM_FIELDS, PENDING)
    [part] = looking(b, times=2)
    assert gpm(part) == {"sm_active_percent": 87.0, "sm_occupancy_percent": 41.0, "tensor_active_percent": 63.0,
                         "dram_active_percent": 30.0}
    assert reasons(part) == dict.fromkeys(GPM_FIELDS) and part["mig_instances"] == []
    [proc] = part["processes"]
    assert (proc["pid"], proc["sm_percent"], proc["memory_bandwidth_percent"]) == (ME, 71.0, 22.0)
    assert "sm_percent" not in proc["unavailable"]
    assert calls("nvmlGpmSampleAlloc") == 2 and calls("nvmlGpmQueryDeviceSupport") == 1  # once, for three reads
    assert calls("nvmlGpmSampleGet") == 3 and calls("nvmlGpmMetricsGet") == 2
    b.close()
    assert calls("nvmlGpmSampleFree") == 2


def test_a_gpu_without_gpm_says_it_needs_hopper_and_is_asked_once(backend):
    b = backend({"gpus": [{**BUSY_GPU, "gpm_supported": 0, "cc_major": 8}]})
    [part] = looking(b, times=3)
    assert gpm(part) == dict.fromkeys(GPM_FIELDS) and reasons(part) == dict.fromkeys(GPM_FIELDS, NEEDS_HOPPER)
    assert NEEDS_HOPPER.startswith("needs a Hopper or newer GPU")
    assert calls("nvmlGpmQueryDeviceSupport") == 1 and calls("nvmlGpmSampleAlloc") == 0
    assert part["processes"][0]["sm_percent"] == 71.0  # per-process use does not need GPM


def test_one_metric_failing_leaves_the_others(backend):
    b = backend({"gpus": [{**BUSY_GPU, "gpm_metric_errors": [(5, 3), (10, 999)]}]})  # tensor, DRAM
    [part] = looking(b)
    assert (part["sm_active_percent"], part["sm_occupancy_percent"]) == (87.0, 41.0)
    assert part["tensor_active_percent"] is None and part["dram_active_percent"] is None
    assert part["unavailable"]["tensor_active_percent"] == "not supported on this GPU"
    assert part["unavailable"]["dram_active_percent"] == "NVML reported an unknown error"


def test_counters_held_by_another_tool_are_named_and_asked_again(backend, in_process_fake_nvml):
    held = {"gpus": [{**BUSY_GPU, "error": {"nvmlGpmSampleGet": 19}}]}  # NVML_ERROR_IN_USE
    b = backend(held)
    [part] = looking(b)
    assert reasons(part) == dict.fromkeys(GPM_FIELDS, HELD) and "DCGM" in HELD
    in_process_fake_nvml({"gpus": [BUSY_GPU]})  # the other tool let go
    [part] = looking(b)
    assert part["sm_active_percent"] == 87.0


def test_a_gpu_lost_between_the_two_samples_is_lost_and_starts_afresh(backend, in_process_fake_nvml):
    now = [1000.0]
    b = backend({"gpus": [BUSY_GPU, {**BUSY_GPU, "gpm_sm_util": 12}]}, clock=lambda: now[0])
    looking(b, times=1)  # the first sample of each GPU
    in_process_fake_nvml({"gpus": [{**BUSY_GPU, "error": {"nvmlGpmSampleGet": 15}}, {**BUSY_GPU, "gpm_sm_util": 12}]})
    parts = looking(b, times=1)
    assert [p["index"] for p in parts] == [1] and parts[0]["sm_active_percent"] == 12.0  # GPU 1 unharmed
    fast = b.read_fast(time.time())
    assert fast[0]["status"] == "lost" and fast[0]["unavailable"]["sm_active_percent"].startswith("GPU is lost")
    looking(b, times=1)
    assert calls("nvmlGpmSampleFree") == 2  # GPU 0's buffers, freed on the slow thread
    in_process_fake_nvml({"gpus": [BUSY_GPU, {**BUSY_GPU, "gpm_sm_util": 12}]})  # back
    now[0] += 6  # past the 5 s retry
    assert b.read_fast(time.time())[0]["status"] == "ok"
    [p0, _] = looking(b, times=1)
    assert reasons(p0) == dict.fromkeys(GPM_FIELDS, PENDING)  # no sample spans the loss
    [p0, _] = looking(b, times=1)
    assert p0["sm_active_percent"] == 87.0 and calls("nvmlGpmSampleAlloc") == 6


class _OldBindings:
    """An nvidia-ml-py from before GPM and per-process utilization info: those names are missing."""

    HIDDEN = ("nvmlGpmQueryDeviceSupport", "nvmlGpmSampleAlloc", "nvmlGpmSampleGet", "nvmlGpmSampleFree",
              "nvmlGpmMetricsGet", "nvmlGpmMigSampleGet", "c_nvmlGpmMetricsGet_t", "nvmlDeviceGetProcessesUtilizationInfo")

    def __init__(self) -> None:
        self.real = Nvml()

    def ensure(self):
        module = self.real.ensure()
        shown = {k: v for k, v in vars(module).items() if k not in self.HIDDEN}
        return types.SimpleNamespace(**shown)


def test_old_bindings_without_gpm_say_so_and_fall_back_for_processes(in_process_fake_nvml):
    in_process_fake_nvml({"gpus": [BUSY_GPU]})
    reset_calls()
    b = NvmlBackend(nvml=_OldBindings())
    b.open()
    [part] = looking(b)
    assert reasons(part) == dict.fromkeys(GPM_FIELDS, OLD_BINDINGS)
    assert part["processes"][0]["sm_percent"] == 71.0
    # two reads, each asking the size first (NVML's two-call protocol)
    assert calls("nvmlDeviceGetProcessUtilization") == 4 and calls("nvmlDeviceGetProcessesUtilizationInfo") == 0
    b.close()


SCRIPT = """
import json, time
from gpu_widgets.backends.nvml.backend import NvmlBackend
b = NvmlBackend(); b.open(); b.gpm = True
for _ in range(2):
    [part] = b.read_slow(time.time())
print(json.dumps(part))
"""


@pytest.mark.integration
def test_a_driver_without_the_gpm_symbols_says_so(fake_driver, tmp_path):
    old = ["nvmlGpmQueryDeviceSupport", "nvmlGpmSampleAlloc", "nvmlGpmSampleGet", "nvmlGpmSampleFree",
           "nvmlGpmMetricsGet", "nvmlGpmMigSampleGet", "nvmlDeviceGetProcessesUtilizationInfo"]
    lib = build_fake_nvml(tmp_path / "build", omit=old)
    fake_driver.write({"gpus": [{**BUSY_GPU, "procs": [(1, GIB)], "proc_util": [(1, 40, 9)]}]})
    env = {**fake_driver.env(), "LD_LIBRARY_PATH": str(lib)}
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    part = json.loads(done.stdout)
    assert reasons(part) == dict.fromkeys(GPM_FIELDS, OLD_DRIVER)
    [proc] = part["processes"]  # the older per-process call still answers
    assert (proc["sm_percent"], proc["memory_bandwidth_percent"]) == (40.0, 9.0)


def test_mig_instances_are_rows_with_memory_gpm_and_their_processes(backend):
    b = backend({"gpus": [{**BUSY_GPU, "mig_current": 1, "procs": [(ME, GIB, 1, 0), (1, 2 * GIB, 2, 0)],
                           "mig_devices": [(1, 0, GIB, 10 * GIB, 50, 20, 10, 5), (2, 0, 2 * GIB, 20 * GIB, 9, 3, 0, 2)]}]})
    [part] = looking(b)
    m1, m2 = part["mig_instances"]
    assert (m1["index"], m1["gpu_instance_id"], m1["compute_instance_id"]) == (0, 1, 0)
    assert m1["uuid"].startswith("MIG-") and m1["uuid"] != m2["uuid"]
    assert (m1["memory_used_bytes"], m1["memory_total_bytes"], m1["pids"]) == (GIB, 10 * GIB, [ME])
    assert gpm(m1) == {"sm_active_percent": 50.0, "sm_occupancy_percent": 20.0, "tensor_active_percent": 10.0,
                       "dram_active_percent": 5.0}
    assert (m2["sm_active_percent"], m2["pids"], m2["unavailable"]) == (9.0, [1], {})
    b.gpm = False
    [part] = b.read_slow(time.time())
    assert part["mig_instances"][0]["memory_total_bytes"] == 10 * GIB  # memory is read without GPM
    assert reasons(part["mig_instances"][0]) == dict.fromkeys(GPM_FIELDS, GPM_OFF)


def test_mig_without_gpm_support_says_so(backend):
    b = backend({"gpus": [{**BUSY_GPU, "mig_current": 1, "gpm_mig_supported": 0, "mig_devices": [(1, 0, GIB, 10 * GIB)]}]})
    [part] = looking(b)
    [m] = part["mig_instances"]
    assert reasons(m) == dict.fromkeys(GPM_FIELDS, "GPM is not supported for MIG instances on this GPU or driver")


def test_nobody_looking_costs_no_gpm_call_and_a_lease_turns_it_on_and_off(in_process_fake_nvml):
    in_process_fake_nvml({"gpus": [BUSY_GPU]})
    reset_calls()
    b = NvmlBackend()
    sampler = Sampler(b, interval_s=0.1, slow_interval_s=0.1)
    with sampler:
        deadline = time.monotonic() + 20
        while sampler.ticks < 10:
            assert time.monotonic() < deadline, "the sampler did not tick"
            time.sleep(0.05)
        assert sum(calls(c) for c in GPM_CALLS) == 0, {c: calls(c) for c in GPM_CALLS}
        assert reasons(sampler.latest["devices"][0]) == dict.fromkeys(GPM_FIELDS, GPM_OFF)
        assert sampler.latest["devices"][0]["processes"][0]["unavailable"]["sm_percent"] == GPM_OFF
        sampler.want_gpm("test", lease_s=0.5)
        while (sampler.latest["devices"][0]["sm_active_percent"] or 0) != 87.0:
            assert time.monotonic() < deadline, "GPM never arrived"
            time.sleep(0.05)
        assert sampler.latest["devices"][0]["processes"][0]["sm_percent"] == 71.0
        while sampler.gpm_wanted:  # the lease runs out without renewal
            assert time.monotonic() < deadline, "the lease never ended"
            time.sleep(0.05)
        time.sleep(0.3)
        before = calls("nvmlGpmSampleGet")
        time.sleep(0.5)
        assert calls("nvmlGpmSampleGet") == before and sampler.latest["devices"][0]["sm_active_percent"] is None
        sampler.want_gpm("forever", lease_s=None)
        assert sampler.gpm_wanted
        sampler.release_gpm("forever")
        assert not sampler.gpm_wanted
    with pytest.raises(ValueError, match="lease_s must be a positive number of seconds or None"):
        sampler.want_gpm("x", lease_s=-1)


GPM_SERVER = {"backend": "nvml", "interval_s": 0.1, "slow_interval_s": 0.1}


@pytest.mark.parametrize("gw_config,fake_nvml_config", [(GPM_SERVER, {"gpus": [BUSY_GPU]})])
async def test_the_api_gives_the_fields_when_asked(in_process_fake_nvml, jp_fetch):
    plain = await wait_for(jp_fetch, lambda s: s["devices"] and s["devices"][0]["processes"] is not None,
                           path=("samples", "latest"))
    assert reasons(plain["devices"][0]) == dict.fromkeys(GPM_FIELDS, GPM_OFF)
    deadline = time.monotonic() + 20
    while True:
        snap = await get_json(jp_fetch, "samples", "latest", params={"gpm": "1"})
        if snap["devices"][0]["sm_active_percent"] is not None:
            break
        assert time.monotonic() < deadline, snap
        await asyncio.sleep(0.1)
    validate_response("/samples/latest", snap)
    d = snap["devices"][0]
    assert (d["sm_active_percent"], d["tensor_active_percent"], d["mig_instances"]) == (87.0, 63.0, [])
    assert d["processes"][0]["sm_percent"] == 71.0
    with pytest.raises(Exception) as bad:
        await get_json(jp_fetch, "samples", "latest", params={"gpm": "yes"})
    assert "gpm: expected 1 or 0, got 'yes'" in bad.value.response.body.decode()
    with pytest.raises(Exception) as bad:
        await get_json(jp_fetch, "samples", "latest", params={"verbose": "1"})
    assert "verbose: unknown parameter (valid: gpm)" in bad.value.response.body.decode()


@pytest.mark.integration
def test_the_cli_snapshot_takes_its_two_samples(fake_driver):
    fake_driver.write({"gpus": [{**BUSY_GPU, "procs": [(1, GIB)], "proc_util": [(1, 71, 22)]}]})
    done = run_cli("snapshot", "--json", "--backend", "nvml", env=fake_driver.env())
    assert done.returncode == 0, done.stderr
    d = json.loads(done.stdout)["devices"][0]
    assert gpm(d) == {"sm_active_percent": 87.0, "sm_occupancy_percent": 41.0, "tensor_active_percent": 63.0,
                      "dram_active_percent": 30.0}
    assert d["processes"][0]["sm_percent"] == 71.0
    table = run_cli("snapshot", "--backend", "nvml", env=fake_driver.env()).stdout
    header, row = table.splitlines()[1:3]
    assert "Util  SM act  Tensor" in header and "100%  87%     63%" in row, table


def test_the_simulated_small_kernels_episode_is_busy_but_idle_and_deterministic():
    def reading(t: float) -> dict:
        sim = SimulatedBackend(n_gpus=2, t0=1000.0, faults=parse_faults("small_kernels:0@10-70"))
        sim.open()
        return take(sim, t, gpm=True)["devices"][0]

    during, again, after = reading(1040.0), reading(1040.0), reading(1100.0)
    assert during == again
    assert during["utilization_gpu_percent"] >= 95 and during["sm_active_percent"] <= 10
    assert during["tensor_active_percent"] <= 1 and during["processes"][0]["sm_percent"] <= 10
    assert after["sm_active_percent"] > 50  # the episode ended: GPU 0 trains again, its SMs busy
    sim = SimulatedBackend(n_gpus=1, t0=0.0)
    sim.open()
    off = take(sim, 50.0)["devices"][0]
    assert reasons(off) == dict.fromkeys(GPM_FIELDS, GPM_OFF)
    with pytest.raises(ValueError, match="unknown fault kind"):
        parse_faults("tiny_kernels:0@1-2")
