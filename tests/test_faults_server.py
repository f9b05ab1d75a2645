"""Each NVML fault injected into a running Jupyter server through a fake libnvidia-ml.so.1: the
API keeps answering 200 with nulls and reasons, stays fast, and recovers without a restart."""
from __future__ import annotations

import json
import os
import time
import urllib.error

import pytest

from .fake_nvml import build_fake_nvml, fake_nvml_env, write_config
from .lab_server import LabServer

pytestmark = pytest.mark.integration  # every test here starts a process

GIB = 1 << 30
ROUTES = ("status", "devices", "samples/latest", "samples", "processes")
BASE = [{"name": "NVIDIA H100 80GB HBM3", "util_gpu": 90, "temperature": 65, "power_mw": 500_000,
         "memory_used": 20 * GIB, "procs": [(os.getpid(), 2 * GIB), (4_300_001, GIB)]},
        {"name": "NVIDIA H100 80GB HBM3", "util_gpu": 40}]


def gpus(**per_gpu_changes):
    out = [dict(g) for g in BASE]
    for index, change in per_gpu_changes.items():
        out[int(index[1:])].update(change)
    return out


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("faults")
    config = tmp / "nvml.conf"
    write_config(config, {"gpus": BASE})
    env = {**fake_nvml_env(build_fake_nvml(), config), "GPU_WIDGETS_BACKEND": "nvml"}
    with LabServer(tmp, env=env, args=("--GpuWidgets.interval_s=0.2", "--GpuWidgets.slow_interval_s=0.5")) as srv:
        srv.config = config
        yield srv


def wait_latest(srv, predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while True:
        snap = srv.api("samples/latest")
        if snap["devices"] and predicate(snap["devices"]):
            return snap
        assert time.monotonic() < deadline, f"timed out; last: {json.dumps(snap)[:2000]}"
        time.sleep(0.1)


def all_routes_answer_200(srv):
    for route in ROUTES:
        srv.api(route)  # urllib raises on any non-2xx


def test_baseline_values(driver):
    snap = wait_latest(driver, lambda d: d[0]["utilization_gpu_percent"] == 90 and d[0]["processes"])
    d0 = snap["devices"][0]
    assert d0["temperature_c"] == 65 and d0["power_w"] == 500.0
    by_pid = {p["pid"]: p for p in d0["processes"]}
    assert by_pid[os.getpid()]["command"]  # ours: shown
    ended = by_pid[4_300_001]  # NVML lists it, the OS does not know it (ended / other container)
    assert ended["name"] is None and ended["used_memory_bytes"] == GIB
    assert ended["unavailable"]["name"]


@pytest.mark.parametrize(
    "function,code,field,words",
    [
        ("nvmlDeviceGetFanSpeed", 3, "fan_percent", "not supported on this GPU"),
        ("nvmlDeviceGetTotalEnergyConsumption", 13, "energy_j", "function not found"),
        ("nvmlDeviceGetTemperature", 999, "temperature_c", "unknown error"),
        ("nvmlDeviceGetPowerUsage", 10, "power_w", "timed out"),
        ("nvmlDeviceGetPcieThroughput", 4, "pcie_tx_bytes_per_s", "no permission"),
        ("nvmlDeviceGetComputeRunningProcesses_v3", 999, "processes", "unknown error"),
    ],
)
def test_a_failing_field_is_null_with_its_reason_and_the_rest_keeps_updating(driver, function, code, field, words):
    write_config(driver.config, {"gpus": gpus(g0={"util_gpu": 91, "error": {function: code}})})
    snap = wait_latest(driver, lambda d: d[0][field] is None and d[0]["utilization_gpu_percent"] == 91)
    d0, d1 = snap["devices"]
    assert words in d0["unavailable"][field]
    assert d0["status"] == "ok" and d1[field] is not None or field == "processes"
    all_routes_answer_200(driver)
    if code in (999, 10):  # transient: the value comes back once NVML answers again
        write_config(driver.config, {"gpus": gpus(g0={"util_gpu": 92})})
        wait_latest(driver, lambda d: d[0][field] is not None and d[0]["utilization_gpu_percent"] == 92)
    write_config(driver.config, {"gpus": BASE})


def test_a_lost_gpu_is_marked_and_comes_back_within_15_s_without_a_restart(driver):
    write_config(driver.config, {"gpus": gpus(g0={"util_gpu": 93}, g1={"error": {"*": 15}})})
    snap = wait_latest(driver, lambda d: d[1]["status"] == "lost")
    assert snap["devices"][0]["utilization_gpu_percent"] == 93
    assert "GPU is lost" in snap["devices"][1]["unavailable"]["utilization_gpu_percent"]
    all_routes_answer_200(driver)
    history = driver.api("samples")
    assert any(history["devices"][1]["lost"]), "the history marks the lost period"
    write_config(driver.config, {"gpus": gpus(g1={"util_gpu": 44})})
    t = time.monotonic()
    wait_latest(driver, lambda d: d[1]["status"] == "ok" and d[1]["utilization_gpu_percent"] == 44, timeout=20)
    assert time.monotonic() - t < 15


def test_slow_nvml_calls_do_not_slow_the_api(driver):
    slow = {"nvmlDeviceGetPcieThroughput": 400, "nvmlDeviceGetUtilizationRates": 300,
            "nvmlDeviceGetComputeRunningProcesses_v3": 400}
    write_config(driver.config, {"gpus": BASE, "delay_ms": slow})
    time.sleep(1.0)  # the sampler is now inside slow calls most of the time
    worst = 0.0
    for _ in range(20):
        for route in ("status", "samples/latest", "processes"):
            t = time.monotonic()
            driver.api(route)
            worst = max(worst, time.monotonic() - t)
    write_config(driver.config, {"gpus": BASE})
    # every NVML call now takes 300-400 ms; a handler that waited on one would take that long
    assert worst < 0.25, f"slowest API answer {worst * 1000:.0f} ms while NVML calls take 300+ ms"


HANG_MS = 3_600_000  # the fake's longest delay: the call returns only when the config lets it


def wait_status(srv, predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not predicate(status := srv.api("status")):
        assert time.monotonic() < deadline, f"timed out; last: {status}"
        time.sleep(0.1)
    return status


def wait_until_ok(srv, route, timeout=30.0):
    deadline = time.monotonic() + timeout
    while (answer := srv.api(route))["status"] != "ok":
        assert time.monotonic() < deadline, f"timed out; last: {answer}"
        time.sleep(0.1)
    return answer


def test_a_hung_nvml_call_is_stale_naming_the_call_and_recovers_when_it_returns(driver):
    wait_latest(driver, lambda d: d[1]["status"] == "ok")
    write_config(driver.config, {"gpus": gpus(g1={"delay_ms": {"nvmlDeviceGetPowerUsage": HANG_MS}})})
    # interval 0.2 s: stale after 2 s (3 intervals, at least 2 s); the margin is wide. (On a loaded machine a late tick can
    # be stale for a moment inside another call: wait for the hung one.)
    hung = "nvmlDeviceGetPowerUsage on GPU 1 has not returned"
    status = wait_status(driver, lambda s: s["status"] == "stale" and s["reason"] == hung)
    assert status["sample_age_s"] > 2
    latest = driver.api("samples/latest")
    assert latest["status"] == "stale" and latest["reason"] == status["reason"]
    assert latest["sample_age_s"] >= status["sample_age_s"] and len(latest["devices"]) == 2  # the last sample
    all_routes_answer_200(driver)
    write_config(driver.config, {"gpus": BASE})  # the call returns
    status = wait_status(driver, lambda s: s["status"] == "ok")
    assert status["reason"] is None and status["sample_age_s"] < 10
    latest = wait_until_ok(driver, "samples/latest")
    assert latest["reason"] is None and latest["sample_age_s"] is not None


def test_a_hung_process_list_says_so_instead_of_waiting_for_ever(driver):
    wait_latest(driver, lambda d: d[0]["processes"] is not None)
    hang = {"nvmlDeviceGetComputeRunningProcesses_v3": HANG_MS}
    write_config(driver.config, {"gpus": gpus(g0={"util_gpu": 94, "delay_ms": hang})})
    # slow interval 0.5 s: the slow fields turn null 2 s after the last slow read
    snap = wait_latest(driver, lambda d: d[0]["processes"] is None and d[0]["utilization_gpu_percent"] == 94)
    reason = snap["devices"][0]["unavailable"]["processes"]
    assert "nvmlDeviceGetComputeRunningProcesses_v3 on GPU 0 has not returned" in reason and "not read for" in reason
    wait_until_ok(driver, "status")  # the fast fields stay fresh while the slow read hangs
    assert driver.api("samples/latest")["devices"][0]["processes"] is None
    write_config(driver.config, {"gpus": BASE})
    wait_latest(driver, lambda d: d[0]["processes"] is not None)


def test_a_call_that_hangs_while_opening_is_reported_not_ok_without_devices(tmp_path):
    config = tmp_path / "nvml.conf"
    write_config(config, {"gpus": [{}, {"delay_ms": {"nvmlDeviceGetMemoryBusWidth": HANG_MS}}]})
    env = {**fake_nvml_env(build_fake_nvml(), config), "GPU_WIDGETS_BACKEND": "nvml"}
    with LabServer(tmp_path, env=env, args=("--GpuWidgets.interval_s=0.2",)) as srv:
        # the spec cards are read before sampling starts; stale 5 s after the start at the latest
        status = wait_status(srv, lambda s: s["status"] != "starting")
        assert status["status"] == "stale", status
        assert status["reason"] == "nvmlDeviceGetMemoryBusWidth on GPU 1 has not returned (opening the GPU backend)"
        assert status["sample_age_s"] is None
        latest = srv.api("samples/latest")
        assert latest["status"] == "stale" and latest["devices"] == []
        all_routes_answer_200(srv)
        write_config(config, {"gpus": [{}, {}]})
        wait_status(srv, lambda s: s["status"] == "ok" and s["device_count"] == 2)
        wait_latest(srv, lambda d: len(d) == 2)


def test_without_any_nvml_library_every_route_answers_200_with_the_reason(tmp_path):
    env = {"GPU_WIDGETS_BACKEND": "auto", "LD_LIBRARY_PATH": ""}
    with LabServer(tmp_path, env=env) as srv:
        deadline = time.monotonic() + 20
        while (status := srv.api("status"))["status"] == "starting":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert status["status"] == "no_gpu" and "libnvidia-ml.so.1" in status["reason"]
        all_routes_answer_200(srv)


def test_an_older_driver_without_new_functions_still_reports(tmp_path):
    lib = build_fake_nvml(omit=["nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetCurrentClocksEventReasons",
                                "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlSystemGetCudaDriverVersion_v2",
                                "nvmlDeviceGetNumGpuCores"])
    config = tmp_path / "nvml.conf"
    write_config(config, {"cuda_driver_version": 11040, "gpus": [{"util_gpu": 70, "memory_used": 4 * GIB,
                                                                   "clocks_event_reasons": 4, "procs": [(os.getpid(), GIB)]}]})
    env = {**fake_nvml_env(lib, config), "GPU_WIDGETS_BACKEND": "nvml"}
    with LabServer(tmp_path, env=env, args=("--GpuWidgets.interval_s=0.2",)) as srv:
        snap = wait_latest(srv, lambda d: d[0]["processes"] is not None)
        d0 = snap["devices"][0]
        assert d0["utilization_gpu_percent"] == 70 and d0["memory_used_bytes"] > 0
        assert d0["throttle_reasons"] == ["sw_power_cap"]
        assert [p["pid"] for p in d0["processes"]] == [os.getpid()]
        assert snap["cuda_driver_version"] == "11.4"
        card = srv.api("devices")["devices"][0]
        assert card["cores"] is None and "function not found" in card["unavailable"]["cores"]


def test_a_bad_setting_is_a_no_gpu_state_with_the_message_not_a_crash(tmp_path):
    with LabServer(tmp_path, env={"GPU_WIDGETS_BACKEND": "cuda"}) as srv:
        deadline = time.monotonic() + 20
        while (status := srv.api("status"))["status"] == "starting":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert status["status"] == "no_gpu" and "GPU_WIDGETS_BACKEND='cuda' is not a backend" in status["reason"]


def test_unknown_route_is_404_json_not_500(driver):
    with pytest.raises(urllib.error.HTTPError) as info:
        driver.api("samples/oldest")
    assert info.value.code == 404
