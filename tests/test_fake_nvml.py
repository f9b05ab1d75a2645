"""Tests for the fake NVML library, exercised through the real pynvml module.

pynvml loads libnvidia-ml.so.1 once per process, so every scenario runs in a
subprocess whose environment points LD_LIBRARY_PATH at the fake and
FAKE_NVML_CONFIG at a config file written by the test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.fake_nvml import (
    SOURCE,
    FakeNvmlBuildError,
    build_fake_nvml,
    exported_functions,
    fake_nvml_env,
    render_config,
    write_config,
)

NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_NO_DATA = 21

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is needed to build the fake NVML")

# Shared by the child scripts: call(fn, *args) returns the value or the
# NVMLError subclass name, so outcomes can travel back as JSON.
PRELUDE = textwrap.dedent(
    """
    import ctypes, json, sys, threading, time
    import pynvml as n

    def call(fn, *args):
        try:
            return fn(*args)
        except n.NVMLError as e:
            return type(e).__name__

    def emit(obj):
        print(json.dumps(obj), flush=True)
    """
)


@pytest.fixture(scope="module")
def lib_dir() -> Path:
    return build_fake_nvml()


@pytest.fixture
def cfg(tmp_path: Path) -> Path:
    return tmp_path / "fake_nvml.conf"


def child_env(lib_dir: Path, cfg: Path, **overrides: str | None) -> dict[str, str]:
    env = {**os.environ, **fake_nvml_env(lib_dir, cfg)}
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def run_child(lib_dir: Path, cfg: Path, body: str, **env_overrides: str | None):
    """Run PRELUDE + body in a fresh interpreter; return its last JSON line."""
    proc = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(body)],
        env=child_env(lib_dir, cfg, **env_overrides),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


H200 = {
    "name": "NVIDIA H200",
    "uuid": "GPU-12345678-9abc-def0-1234-56789abcdef0",
    "memory_total": 150754820096,
    "memory_used": 10 << 30,
    "memory_reserved": 512 << 20,
    "util_gpu": 97,
    "util_memory": 41,
    "temperature": 71,
    "fan": 55,
    "power_mw": 612345,
    "power_limit_mw": 690000,
    "power_default_limit_mw": 700000,
    "energy_mj": 123456789012345,
    "clock_graphics": 1755,
    "clock_sm": 1750,
    "clock_mem": 3201,
    "max_clock_sm": 1980,
    "max_clock_mem": 3202,
    "pstate": 2,
    "clocks_event_reasons": (1 << 40) | 0x20,
    "pcie_tx_kbps": 123456,
    "pcie_rx_kbps": 654321,
    "num_cores": 16896,
    "bus_width": 6144,
    "pcie_max_gen": 5,
    "pcie_max_width": 16,
    "cc_major": 9,
    "cc_minor": 0,
    "mig_current": 1,
    "mig_pending": 0,
    "procs": [(1234, 2 << 30), (5678, 3 << 30, 1, 2)],
    "graphics_procs": [(42, 1 << 20)],
}

QUERY_ALL = """
    n.nvmlInit()
    out = {
        "count": n.nvmlDeviceGetCount(),
        "driver": n.nvmlSystemGetDriverVersion(),
        "nvml": n.nvmlSystemGetNVMLVersion(),
        "cuda": n.nvmlSystemGetCudaDriverVersion(),
        "cuda_v2": n.nvmlSystemGetCudaDriverVersion_v2(),
        "gpus": [],
    }
    def procs(items):
        return [[p.pid, p.usedGpuMemory, p.gpuInstanceId, p.computeInstanceId] for p in items]
    for i in range(out["count"]):
        h = n.nvmlDeviceGetHandleByIndex(i)
        m1 = n.nvmlDeviceGetMemoryInfo(h)
        m2 = n.nvmlDeviceGetMemoryInfo(h, version=n.nvmlMemory_v2)
        u = n.nvmlDeviceGetUtilizationRates(h)
        out["gpus"].append({
            "index": n.nvmlDeviceGetIndex(h),
            "name": n.nvmlDeviceGetName(h),
            "uuid": n.nvmlDeviceGetUUID(h),
            "mem_v1": [m1.total, m1.free, m1.used],
            "mem_v2": [m2.version, m2.total, m2.reserved, m2.free, m2.used],
            "util": [u.gpu, u.memory],
            "temperature": n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU),
            "fan": n.nvmlDeviceGetFanSpeed(h),
            "power": n.nvmlDeviceGetPowerUsage(h),
            "enforced_limit": n.nvmlDeviceGetEnforcedPowerLimit(h),
            "mgmt_limit": n.nvmlDeviceGetPowerManagementLimit(h),
            "default_limit": n.nvmlDeviceGetPowerManagementDefaultLimit(h),
            "energy": n.nvmlDeviceGetTotalEnergyConsumption(h),
            "clocks": [n.nvmlDeviceGetClockInfo(h, t) for t in
                       (n.NVML_CLOCK_GRAPHICS, n.NVML_CLOCK_SM, n.NVML_CLOCK_MEM)],
            "max_clocks": [n.nvmlDeviceGetMaxClockInfo(h, t) for t in
                           (n.NVML_CLOCK_GRAPHICS, n.NVML_CLOCK_SM, n.NVML_CLOCK_MEM)],
            "pstate": n.nvmlDeviceGetPerformanceState(h),
            "event_reasons": n.nvmlDeviceGetCurrentClocksEventReasons(h),
            "throttle_reasons": n.nvmlDeviceGetCurrentClocksThrottleReasons(h),
            "pcie": [n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_TX_BYTES),
                     n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_RX_BYTES)],
            "compute_v3": procs(n.nvmlDeviceGetComputeRunningProcesses_v3(h)),
            "graphics_v3": procs(n.nvmlDeviceGetGraphicsRunningProcesses_v3(h)),
            "compute_v2": procs(n.nvmlDeviceGetComputeRunningProcesses_v2(h)),
            "graphics_v2": procs(n.nvmlDeviceGetGraphicsRunningProcesses_v2(h)),
            "cores": n.nvmlDeviceGetNumGpuCores(h),
            "bus_width": n.nvmlDeviceGetMemoryBusWidth(h),
            "pcie_max": [n.nvmlDeviceGetMaxPcieLinkGeneration(h), n.nvmlDeviceGetMaxPcieLinkWidth(h)],
            "cc": list(n.nvmlDeviceGetCudaComputeCapability(h)),
            "mig": n.nvmlDeviceGetMigMode(h),
        })
    n.nvmlShutdown()
    emit(out)
"""

NO_MIG = 0xFFFFFFFF  # gpuInstanceId/computeInstanceId when not given


@pytest.mark.integration
def test_configured_values_reach_pynvml(lib_dir, cfg):
    write_config(
        cfg,
        {
            "driver_version": "575.51.03",
            "nvml_version": "12.575.51.03",
            "cuda_driver_version": 12090,
            "gpus": [H200, {"name": "NVIDIA A100-SXM4-40GB", "memory_total": 40 << 30, "memory_free": 1234}],
        },
    )
    out = run_child(lib_dir, cfg, QUERY_ALL)
    assert out["count"] == 2
    assert (out["driver"], out["nvml"], out["cuda"], out["cuda_v2"]) == ("575.51.03", "12.575.51.03", 12090, 12090)

    g = out["gpus"][0]
    free = H200["memory_total"] - H200["memory_used"] - H200["memory_reserved"]
    assert g["index"] == 0
    assert (g["name"], g["uuid"]) == (H200["name"], H200["uuid"])
    assert g["mem_v1"] == [H200["memory_total"], free, H200["memory_used"]]
    assert g["mem_v2"] == [0x02000028, H200["memory_total"], H200["memory_reserved"], free, H200["memory_used"]]
    assert g["util"] == [97, 41]
    assert (g["temperature"], g["fan"], g["power"]) == (71, 55, 612345)
    assert (g["enforced_limit"], g["mgmt_limit"], g["default_limit"]) == (690000, 690000, 700000)
    assert g["energy"] == 123456789012345
    assert g["clocks"] == [1755, 1750, 3201]
    assert g["max_clocks"] == [1980, 1980, 3202]  # graphics reports the SM maximum
    assert g["pstate"] == 2
    assert g["event_reasons"] == g["throttle_reasons"] == (1 << 40) | 0x20
    assert g["pcie"] == [123456, 654321]
    expected_compute = [[1234, 2 << 30, NO_MIG, NO_MIG], [5678, 3 << 30, 1, 2]]
    assert g["compute_v3"] == g["compute_v2"] == expected_compute
    assert g["graphics_v3"] == g["graphics_v2"] == [[42, 1 << 20, NO_MIG, NO_MIG]]
    assert (g["cores"], g["bus_width"], g["pcie_max"], g["cc"], g["mig"]) == (16896, 6144, [5, 16], [9, 0], [1, 0])

    a100 = out["gpus"][1]
    assert a100["index"] == 1
    assert a100["name"] == "NVIDIA A100-SXM4-40GB"
    assert a100["mem_v1"] == [40 << 30, 1234, 0]  # explicit memory_free wins
    assert a100["compute_v3"] == a100["graphics_v3"] == []


@pytest.mark.integration
def test_near_empty_config_gives_plausible_gpus(lib_dir, cfg):
    write_config(cfg, {"device_count": 3})
    out = run_child(lib_dir, cfg, QUERY_ALL)
    assert out["count"] == 3
    assert (out["driver"], out["nvml"], out["cuda"]) == ("580.65.06", "13.580.65.06", 13000)
    uuids = [g["uuid"] for g in out["gpus"]]
    assert len(set(uuids)) == 3 and all(u.startswith("GPU-") for u in uuids)
    g = out["gpus"][0]
    assert g["name"].startswith("NVIDIA H100")
    total = g["mem_v1"][0]
    assert total > 0 and g["mem_v1"] == [total, total, 0]
    assert g["cc"] == [9, 0] and g["compute_v3"] == []


@pytest.mark.integration
def test_lost_gpu_fails_while_the_other_works(lib_dir, cfg):
    body = """
        n.nvmlInit()
        emit({
            "count": n.nvmlDeviceGetCount(),
            "gpu0": n.nvmlDeviceGetUtilizationRates(n.nvmlDeviceGetHandleByIndex(0)).gpu,
            "gpu1_handle": call(n.nvmlDeviceGetHandleByIndex, 1),
            "bad_index": call(n.nvmlDeviceGetHandleByIndex, 2),
        })
    """
    write_config(cfg, {"gpus": [{"util_gpu": 12}, {"error": {"*": NVML_ERROR_GPU_IS_LOST}}]})
    out = run_child(lib_dir, cfg, body)
    assert out == {
        "count": 2,
        "gpu0": 12,
        "gpu1_handle": "NVMLError_GpuIsLost",
        "bad_index": "NVMLError_InvalidArgument",
    }

    # A specific entry beats the wildcard: the handle works, its uses do not.
    body = """
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(1)
        try:
            n.nvmlDeviceGetName(h)
        except n.NVMLError_GpuIsLost as e:
            emit({"lost": str(e), "util": call(n.nvmlDeviceGetUtilizationRates, h)})
    """
    write_config(
        cfg,
        {"gpus": [{}, {"error": {"*": NVML_ERROR_GPU_IS_LOST, "nvmlDeviceGetHandleByIndex_v2": 0}}]},
    )
    assert run_child(lib_dir, cfg, body) == {"lost": "GPU is lost", "util": "NVMLError_GpuIsLost"}


@pytest.mark.integration
def test_per_function_and_system_errors(lib_dir, cfg):
    write_config(
        cfg,
        {
            "gpus": [
                {"fan": 40, "error": {"nvmlDeviceGetFanSpeed": NVML_ERROR_NOT_SUPPORTED}},
                {"fan": 41, "error": {"nvmlDeviceGetPowerUsage": NVML_ERROR_NO_DATA}},
            ],
            "error": {"nvmlSystemGetCudaDriverVersion_v2": NVML_ERROR_FUNCTION_NOT_FOUND},
        },
    )
    body = """
        n.nvmlInit()
        h0, h1 = n.nvmlDeviceGetHandleByIndex(0), n.nvmlDeviceGetHandleByIndex(1)
        try:
            n.nvmlDeviceGetPowerUsage(h1)
        except n.NVMLError as e:
            no_data = [type(e).__name__, str(e)]  # pynvml asks nvmlErrorString for code 21
        emit({
            "fan0": call(n.nvmlDeviceGetFanSpeed, h0),
            "fan1": call(n.nvmlDeviceGetFanSpeed, h1),
            "power0": call(n.nvmlDeviceGetPowerUsage, h0),
            "no_data": no_data,
            "cuda_v2": call(n.nvmlSystemGetCudaDriverVersion_v2),
            "cuda": call(n.nvmlSystemGetCudaDriverVersion),
            "strings": [n.nvmlErrorString(c) for c in (3, 9, 10, 13, 15, 999, 12345)],
        })
    """
    out = run_child(lib_dir, cfg, body)
    assert out["fan0"] == "NVMLError_NotSupported"
    assert out["fan1"] == 41
    assert out["power0"] == 70000
    assert out["no_data"] == ["NVMLError_NoData", "No data"]
    assert out["cuda_v2"] == "NVMLError_FunctionNotFound"
    assert out["cuda"] == 13000
    assert out["strings"] == [
        "Not Supported",
        "Driver Not Loaded",
        "Timeout",
        "Function Not Found",
        "GPU is lost",
        "Unknown Error",
        "Unknown Error",
    ]


LIVE_QUERY = """
    n.nvmlInit()
    held = [n.nvmlDeviceGetHandleByIndex(i) for i in range(2)]
    for _ in sys.stdin:
        emit({
            "held": [call(lambda h: n.nvmlDeviceGetUtilizationRates(h).gpu, h) for h in held],
            "fresh": [call(lambda i: n.nvmlDeviceGetUtilizationRates(n.nvmlDeviceGetHandleByIndex(i)).gpu, i)
                      for i in range(2)],
        })
"""


@pytest.mark.integration
def test_rewriting_config_changes_a_running_process(lib_dir, cfg):
    write_config(cfg, {"gpus": [{"util_gpu": 10}, {"util_gpu": 20}]})
    child = subprocess.Popen(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(LIVE_QUERY)],
        env=child_env(lib_dir, cfg),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )

    def ask() -> dict:
        child.stdin.write("q\n")
        child.stdin.flush()
        return json.loads(child.stdout.readline())

    try:
        assert ask() == {"held": [10, 20], "fresh": [10, 20]}

        write_config(cfg, {"gpus": [{"util_gpu": 11}, {"util_gpu": 21, "error": {"*": NVML_ERROR_GPU_IS_LOST}}]})
        lost = "NVMLError_GpuIsLost"
        assert ask() == {"held": [11, lost], "fresh": [11, lost]}

        write_config(cfg, {"gpus": [{"util_gpu": 12}, {"util_gpu": 22}]})
        assert ask() == {"held": [12, 22], "fresh": [12, 22]}

        # Same size, back to back (same clock tick): every rewrite is seen.
        for value in (31, 32, 33, 34):
            write_config(cfg, {"gpus": [{"util_gpu": value}, {"util_gpu": value}]})
            assert ask()["held"] == [value, value]
    finally:
        child.stdin.close()
        assert child.wait(timeout=10) == 0


@pytest.mark.integration
def test_concurrent_calls_during_rewrites(lib_dir, cfg):
    """Several threads sampling while the file keeps changing: no crash, no torn reads."""
    write_config(cfg, {"gpus": [{"util_gpu": 0, "util_memory": 0}]})
    body = """
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        seen, stop = set(), time.monotonic() + 0.6
        def worker():
            while time.monotonic() < stop:
                u = n.nvmlDeviceGetUtilizationRates(h)
                seen.add((u.gpu, u.memory))
                n.nvmlDeviceGetComputeRunningProcesses(h)
        print("ready", flush=True)
        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads: t.start()
        for t in threads: t.join()
        emit(sorted(seen))
    """
    child = subprocess.Popen(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(body)],
        env=child_env(lib_dir, cfg),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout.readline().strip() == "ready"
    for value in range(1, 30):
        procs = [(pid, pid << 20) for pid in range(1, value % 7 + 1)]
        write_config(cfg, {"gpus": [{"util_gpu": value, "util_memory": value, "procs": procs}]})
        time.sleep(0.01)
    out, _ = child.communicate(timeout=20)
    assert child.returncode == 0
    seen = json.loads(out.strip().splitlines()[-1])
    assert all(gpu == mem for gpu, mem in seen), "utilization mixed two configs"
    assert len(seen) > 1


@pytest.mark.integration
def test_driver_not_loaded(lib_dir, cfg):
    body = """
        try:
            n.nvmlInit()
            emit("ok")
        except n.NVMLError as e:
            emit([type(e).__name__, str(e)])
    """
    write_config(cfg, {"init_error": NVML_ERROR_DRIVER_NOT_LOADED, "device_count": 1})
    expected = ["NVMLError_DriverNotLoaded", "Driver Not Loaded"]
    assert run_child(lib_dir, cfg, body) == expected
    # No config at all means "no driver" too.
    assert run_child(lib_dir, cfg, body, FAKE_NVML_CONFIG=None) == expected
    assert run_child(lib_dir, cfg, body, FAKE_NVML_CONFIG=str(cfg) + ".missing") == expected


@pytest.mark.integration
def test_uninitialized_refcount_and_bad_arguments(lib_dir, cfg):
    write_config(cfg, {"gpus": [{"procs": [(1, 100), (2, 200)]}, {}]})
    body = """
        from ctypes import byref, c_uint, c_void_p, create_string_buffer
        lib = ctypes.CDLL("libnvidia-ml.so.1")
        count = c_uint(0)
        out = {"before_init": lib.nvmlDeviceGetCount_v2(byref(count)),
               "shutdown_before_init": lib.nvmlShutdown()}
        out["init"] = [lib.nvmlInit_v2(), lib.nvmlInitWithFlags(0)]
        out["shutdown1"] = lib.nvmlShutdown()
        out["count_after_one_shutdown"] = [lib.nvmlDeviceGetCount_v2(byref(count)), count.value]

        handle = c_void_p()
        lib.nvmlDeviceGetHandleByIndex_v2(0, byref(handle))
        name = create_string_buffer(96)
        out["bad_handle"] = lib.nvmlDeviceGetName(c_void_p(16), name, 96)
        out["misaligned_handle"] = lib.nvmlDeviceGetName(c_void_p(handle.value + 1), name, 96)
        out["small_buffer"] = lib.nvmlDeviceGetName(handle, name, 4)
        out["bad_sensor"] = lib.nvmlDeviceGetTemperature(handle, 1, byref(c_uint()))

        # Two-call protocol of the process queries.
        n_procs = c_uint(0)
        out["procs_null"] = [lib.nvmlDeviceGetComputeRunningProcesses_v3(handle, byref(n_procs), None), n_procs.value]
        arr = (n.c_nvmlProcessInfo_v3_t * 2)()
        n_procs.value = 1
        out["procs_small"] = [lib.nvmlDeviceGetComputeRunningProcesses_v3(handle, byref(n_procs), arr), n_procs.value]
        out["procs_ok"] = [lib.nvmlDeviceGetComputeRunningProcesses_v3(handle, byref(n_procs), arr), n_procs.value,
                           [arr[0].pid, arr[1].usedGpuMemory]]
        h1 = c_void_p()
        lib.nvmlDeviceGetHandleByIndex_v2(1, byref(h1))
        n_procs.value = 0
        out["procs_none"] = [lib.nvmlDeviceGetComputeRunningProcesses_v3(h1, byref(n_procs), None), n_procs.value]

        out["shutdown2"] = lib.nvmlShutdown()
        out["after_shutdown"] = lib.nvmlDeviceGetCount_v2(byref(count))
        out["shutdown3"] = lib.nvmlShutdown()

        # pynvml's view of a wrong struct version.
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        out["mem_v1_version"] = call(n.nvmlDeviceGetMemoryInfo, h, 1)
        emit(out)
    """
    out = run_child(lib_dir, cfg, body)
    assert out == {
        "before_init": NVML_ERROR_UNINITIALIZED,
        "shutdown_before_init": NVML_ERROR_UNINITIALIZED,
        "init": [0, 0],
        "shutdown1": 0,
        "count_after_one_shutdown": [0, 2],
        "bad_handle": NVML_ERROR_INVALID_ARGUMENT,
        "misaligned_handle": NVML_ERROR_INVALID_ARGUMENT,
        "small_buffer": NVML_ERROR_INSUFFICIENT_SIZE,
        "bad_sensor": NVML_ERROR_INVALID_ARGUMENT,
        "procs_null": [NVML_ERROR_INSUFFICIENT_SIZE, 2],
        "procs_small": [NVML_ERROR_INSUFFICIENT_SIZE, 2],
        "procs_ok": [0, 2, [1, 200]],
        "procs_none": [0, 0],
        "shutdown2": 0,
        "after_shutdown": NVML_ERROR_UNINITIALIZED,
        "shutdown3": NVML_ERROR_UNINITIALIZED,
        "mem_v1_version": "NVMLError_ArgumentVersionMismatch",
    }


@pytest.mark.integration
def test_omitted_symbols_raise_function_not_found(tmp_path, cfg):
    omit = ["nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetComputeRunningProcesses_v3"]
    old_driver = build_fake_nvml(tmp_path / "build", omit=omit)
    write_config(cfg, {"gpus": [{"memory_used": 5, "procs": [(7, 8)]}]})
    body = """
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        lib = ctypes.CDLL("libnvidia-ml.so.1")
        emit({
            "mem_v2": call(n.nvmlDeviceGetMemoryInfo, h, n.nvmlMemory_v2),
            "mem_v1_used": n.nvmlDeviceGetMemoryInfo(h).used,
            "procs_v3": call(n.nvmlDeviceGetComputeRunningProcesses_v3, h),
            "procs_v2": [p.pid for p in n.nvmlDeviceGetComputeRunningProcesses_v2(h)],
            "symbols": [hasattr(lib, "nvmlDeviceGetMemoryInfo_v2"), hasattr(lib, "nvmlDeviceGetMemoryInfo")],
        })
    """
    assert run_child(old_driver, cfg, body) == {
        "mem_v2": "NVMLError_FunctionNotFound",
        "mem_v1_used": 5,
        "procs_v3": "NVMLError_FunctionNotFound",
        "procs_v2": [7],
        "symbols": [False, True],
    }


@pytest.mark.integration
def test_delay_slows_only_that_call_and_does_not_block_others(lib_dir, cfg):
    write_config(cfg, {"device_count": 2, "delay_ms": {"nvmlDeviceGetPcieThroughput": 20}})
    body = """
        n.nvmlInit()
        elapsed = []
        for i in range(2):
            h = n.nvmlDeviceGetHandleByIndex(i)
            t = time.perf_counter()
            n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_TX_BYTES)
            elapsed.append(time.perf_counter() - t)
        emit(elapsed)
    """
    assert all(seconds >= 0.015 for seconds in run_child(lib_dir, cfg, body))

    # The config lock is not held while sleeping: a long delayed call on one
    # thread must not stall another thread's undelayed call.
    write_config(cfg, {"device_count": 1, "delay_ms": {"nvmlDeviceGetPcieThroughput": 800}})
    body = """
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        slow = threading.Thread(target=n.nvmlDeviceGetPcieThroughput, args=(h, 0))
        start = time.perf_counter()
        slow.start()
        time.sleep(0.05)
        n.nvmlDeviceGetUtilizationRates(h)
        other = time.perf_counter() - start
        slow.join()
        emit([other, time.perf_counter() - start])
    """
    other, slow = run_child(lib_dir, cfg, body)
    assert slow >= 0.75
    assert other < 0.4


@pytest.mark.integration
def test_a_per_gpu_delay_hangs_one_gpu_until_a_rewrite_lets_it_return(lib_dir, cfg):
    hang = {"gpus": [{}, {"delay_ms": {"nvmlDeviceGetPowerUsage": 3_600_000}}]}
    write_config(cfg, hang)
    assert "gpu.1.delay_ms.nvmlDeviceGetPowerUsage = 3600000" in render_config(hang)
    body = f"""
        import os
        n.nvmlInit()
        h0, h1 = n.nvmlDeviceGetHandleByIndex(0), n.nvmlDeviceGetHandleByIndex(1)
        t = time.perf_counter()
        n.nvmlDeviceGetPowerUsage(h0)
        gpu0 = time.perf_counter() - t
        hung = threading.Thread(target=n.nvmlDeviceGetPowerUsage, args=(h1,))
        hung.start()
        hung.join(0.5)
        still_hung = hung.is_alive()
        tmp = os.environ["FAKE_NVML_CONFIG"] + ".new"
        with open(tmp, "w") as f:
            f.write({render_config({"device_count": 2})!r})
        os.replace(tmp, os.environ["FAKE_NVML_CONFIG"])
        t = time.perf_counter()
        hung.join(10)
        emit([gpu0, still_hung, hung.is_alive(), time.perf_counter() - t])
    """
    gpu0, still_hung, alive_after, released_in = run_child(lib_dir, cfg, body)
    assert gpu0 < 0.4  # the delay is GPU 1's only
    assert still_hung and not alive_after
    assert released_in < 5  # the rewrite ended the sleep, not the hour


@pytest.mark.integration
def test_call_counts(lib_dir, cfg):
    write_config(cfg, {"gpus": [{"error": {"nvmlDeviceGetFanSpeed": NVML_ERROR_NOT_SUPPORTED}}]})
    body = """
        lib = ctypes.CDLL("libnvidia-ml.so.1")  # the same library pynvml loads
        lib.fakeNvmlCallCount.restype = ctypes.c_ulonglong
        lib.fakeNvmlCallCount.argtypes = [ctypes.c_char_p]
        count = lambda name: lib.fakeNvmlCallCount(name and name.encode())
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        out = {"before_reset": count("nvmlInitWithFlags")}
        lib.fakeNvmlResetCallCounts()
        for _ in range(3):
            n.nvmlDeviceGetUtilizationRates(h)
        call(n.nvmlDeviceGetFanSpeed, h)   # failed calls count too
        n.nvmlDeviceGetHandleByIndex(0)
        names = ["nvmlDeviceGetUtilizationRates", "nvmlDeviceGetFanSpeed",
                 "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetName", "noSuchFunction", "*", None]
        out["counts"] = {str(name): count(name) for name in names}
        lib.fakeNvmlResetCallCounts()
        out["after_reset"] = count(None)
        emit(out)
    """
    out = run_child(lib_dir, cfg, body)
    assert out["before_reset"] == 1
    assert out["counts"] == {
        "nvmlDeviceGetUtilizationRates": 3,
        "nvmlDeviceGetFanSpeed": 1,
        "nvmlDeviceGetHandleByIndex_v2": 1,
        "nvmlDeviceGetName": 0,
        "noSuchFunction": 0,
        "*": 5,
        "None": 5,
    }
    assert out["after_reset"] == 0


@pytest.mark.integration
def test_hand_written_config_format(lib_dir, cfg):
    cfg.write_text(
        textwrap.dedent(
            """\
            # comments and blank lines are ignored

              device_count=1
            some_future_key = whatever
            gpu.0.clocks_event_reasons = 0x10000000004
            gpu.0.util_gpu =   7
            gpu.0.name = Tesla  T4
            gpu.0.temperature = hot
            gpu.0.procs = 11:22 , 33:44:5:6,
            gpu.0.graphics_procs =
            gpu.0.no_such_field = 1
            gpu.0.error.nvmlNoSuchFunction = 3
            """
        )
    )
    body = """
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        emit([n.nvmlDeviceGetCurrentClocksEventReasons(h), n.nvmlDeviceGetUtilizationRates(h).gpu,
              n.nvmlDeviceGetName(h), n.nvmlDeviceGetTemperature(h, 0),
              [[p.pid, p.usedGpuMemory, p.gpuInstanceId] for p in n.nvmlDeviceGetComputeRunningProcesses(h)],
              n.nvmlDeviceGetGraphicsRunningProcesses(h)])
    """
    proc = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(body)],
        env=child_env(lib_dir, cfg),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    reasons, util, name, temperature, procs, graphics = json.loads(proc.stdout)
    assert reasons == 0x10000000004
    assert (util, name) == (7, "Tesla  T4")
    assert temperature == 35  # the malformed line is ignored, with a warning
    assert "gpu.0.temperature" in proc.stderr and "fake_nvml" in proc.stderr
    assert procs == [[11, 22, NO_MIG], [33, 44, 5]]
    assert graphics == []


@pytest.mark.integration
def test_string_values_can_be_raw_bytes(lib_dir, cfg):
    # A name that is not UTF-8 reaches the caller byte for byte; a backslash survives the escaping.
    write_config(cfg, {"gpus": [{"name": b"Tesla \xff\xfeT4", "uuid": "GPU-a\\b"}]})
    with open(cfg, "a") as f:
        f.write("gpu.0.uuid = GPU-\\x00\n")  # a NUL byte is refused: the line is ignored
    body = """
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        buf = ctypes.create_string_buffer(96)
        assert n._nvmlGetFunctionPointer("nvmlDeviceGetName")(h, buf, 96) == 0
        emit([list(buf.value), n.nvmlDeviceGetUUID(h)])
    """
    proc = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(body)],
        env=child_env(lib_dir, cfg),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    name, uuid = json.loads(proc.stdout)
    assert bytes(name) == b"Tesla \xff\xfeT4"
    assert uuid == "GPU-a\\b"
    assert "gpu.0.uuid" in proc.stderr
    with pytest.raises(ValueError, match="NUL"):
        render_config({"gpus": [{"name": b"a\0b"}]})


def test_render_config():
    text = render_config(
        {
            "gpus": {1: {"name": "X", "procs": [(1234, 2 << 30)], "error": {"*": 15}}},
            "error": {"nvmlSystemGetCudaDriverVersion_v2": 13},
            "delay_ms": {"nvmlDeviceGetPcieThroughput": 20},
        }
    )
    lines = text.splitlines()
    assert "device_count = 2" in lines  # derived from the highest index given
    assert "gpu.1.name = X" in lines
    assert "gpu.1.procs = 1234:2147483648" in lines
    assert "gpu.1.error.* = 15" in lines
    assert "error.nvmlSystemGetCudaDriverVersion_v2 = 13" in lines
    assert "delay_ms.nvmlDeviceGetPcieThroughput = 20" in lines
    assert "gpu.0.procs = " in render_config({"gpus": [{"procs": []}]}).splitlines()
    with pytest.raises(ValueError, match="util"):
        render_config({"gpus": [{"util": 5}]})
    with pytest.raises(ValueError, match="devices"):
        render_config({"devices": 1})
    with pytest.raises(ValueError):
        render_config({"gpus": [{"name": "two\nlines"}]})


def test_write_config_is_atomic_and_always_moves_mtime(tmp_path):
    path = tmp_path / "c.conf"
    stamps = []
    for value in range(10, 20):
        write_config(path, {"gpus": [{"util_gpu": value}]})
        stamps.append(path.stat().st_mtime_ns)
    assert all(later > earlier for earlier, later in zip(stamps, stamps[1:]))
    assert "gpu.0.util_gpu = 19" in path.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["c.conf"]  # no temp files left


def test_env_prepends_library_path(tmp_path, monkeypatch):
    monkeypatch.setenv("LD_LIBRARY_PATH", "/opt/other")
    env = fake_nvml_env(tmp_path, tmp_path / "c.conf")
    assert env == {
        "LD_LIBRARY_PATH": f"{tmp_path.resolve()}:/opt/other",
        "FAKE_NVML_CONFIG": str((tmp_path / "c.conf").resolve()),
    }


def test_build_is_cached_and_validated(lib_dir, monkeypatch):
    lib = lib_dir / "libnvidia-ml.so.1"
    before = lib.stat().st_mtime_ns
    assert build_fake_nvml() == lib_dir
    assert lib.stat().st_mtime_ns == before  # reused, not rebuilt
    with pytest.raises(ValueError, match="nvmlNoSuchThing"):
        build_fake_nvml(omit=["nvmlNoSuchThing"])
    monkeypatch.setenv("FAKE_NVML_CC", "no-such-compiler-here")
    with pytest.raises(FakeNvmlBuildError, match="no-such-compiler-here"):
        build_fake_nvml(lib_dir.parent / "never")


@pytest.mark.integration
@pytest.mark.parametrize("omit_all", [False, True], ids=["full", "every-symbol-omitted"])
def test_source_compiles_without_warnings(omit_all):
    defines = [f"-DFAKE_NVML_OMIT_{name}" for name in sorted(exported_functions())] if omit_all else []
    proc = subprocess.run(
        ["gcc", "-fsyntax-only", "-std=gnu11", "-Wall", "-Wextra", "-Werror", *defines, str(SOURCE)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert len(exported_functions()) == 55
