"""The Prometheus export at {base_url}gpu-widgets/metrics, through real HTTP with auth on.

Values come from the fake libnvidia-ml.so.1 (exact numbers in, exact DCGM units out) or from the
simulated backend; the exposition is read back with prometheus-client's own parser.
"""
from __future__ import annotations

import asyncio
import ctypes
import json
import os
import re
import socket
import time

import psutil
import pytest
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families
from tornado.httpclient import HTTPClientError

from gpu_widgets import __version__
from gpu_widgets.export.families import DEVICE_LABELS

from .test_server_api import notebook_kernel

GIB = 1 << 30
DCGM = {  # name -> type, as dcgm-exporter's default counters
    "DCGM_FI_DEV_GPU_UTIL": "gauge", "DCGM_FI_DEV_MEM_COPY_UTIL": "gauge", "DCGM_FI_DEV_FB_USED": "gauge",
    "DCGM_FI_DEV_FB_FREE": "gauge", "DCGM_FI_DEV_GPU_TEMP": "gauge", "DCGM_FI_DEV_POWER_USAGE": "gauge",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "counter", "DCGM_FI_DEV_SM_CLOCK": "gauge", "DCGM_FI_DEV_MEM_CLOCK": "gauge",
}
NVML_SERVER = {"backend": "nvml", "interval_s": 0.1, "hostname": "gpu-node-7"}
DRIVER = {"gpus": [
    {"name": "NVIDIA H200", "util_gpu": 97, "util_memory": 41, "memory_total": 141 * GIB, "memory_used": 37 * GIB,
     "memory_free": 100 * GIB, "temperature": 71, "power_mw": 612_500, "energy_mj": 123_456_789,
     "clock_sm": 1980, "clock_mem": 3201, "clocks_event_reasons": 0x24,
     "procs": [(os.getpid(), 20 * GIB)]},
    {"name": "NVIDIA H200", "util_gpu": 3, "error": {"nvmlDeviceGetTemperature": 3}},  # 3: not supported
]}


async def scrape(jp_fetch, **kw) -> tuple[str, dict]:
    response = await jp_fetch("gpu-widgets", "metrics", **kw)
    assert response.headers["Content-Type"] == CONTENT_TYPE_LATEST
    text = response.body.decode()
    return text, {f.name: f for f in text_string_to_metric_families(text)}


def series(families: dict, name: str) -> dict[str, tuple[dict, float]]:
    """gpu index (or "") -> (labels, value) of one family's samples."""
    return {s.labels.get("gpu", ""): (s.labels, s.value) for s in families[name].samples}


async def scrape_until(jp_fetch, predicate, timeout: float = 20.0) -> tuple[str, dict]:
    deadline = time.monotonic() + timeout
    while True:
        text, families = await scrape(jp_fetch)
        if predicate(families):
            return text, families
        assert time.monotonic() < deadline, f"timed out; last scrape:\n{text}"
        await asyncio.sleep(0.1)


def has_processes(families: dict) -> bool:
    return "gpu_widgets_process_gpu_memory_bytes" in families and "DCGM_FI_DEV_GPU_UTIL" in families


def has_a_colleague(families: dict) -> bool:
    """The simulated colleague's job runs only while odd GPU 1 is busy: wait for it, not just any process."""
    if not has_processes(families):
        return False
    return any(p.labels["user"] in ("", "simulated-colleague")
               for p in families["gpu_widgets_process_gpu_memory_bytes"].samples)


@pytest.mark.parametrize("gw_config,fake_nvml_config", [(NVML_SERVER, DRIVER)])
async def test_the_driver_values_come_out_in_dcgm_names_units_and_labels(in_process_fake_nvml, jp_fetch):
    text, fam = await scrape_until(jp_fetch, has_processes)
    assert {name: fam[name].type for name in DCGM if name in fam} == DCGM
    labels, _ = series(fam, "DCGM_FI_DEV_GPU_UTIL")["0"]
    assert set(labels) == set(DEVICE_LABELS)
    assert labels["device"] == "nvidia0" and labels["modelName"] == "NVIDIA H200"
    assert labels["Hostname"] == "gpu-node-7" and labels["UUID"].startswith("GPU-")
    value = {name: series(fam, name)["0"][1] for name in DCGM}
    assert value == {
        "DCGM_FI_DEV_GPU_UTIL": 97, "DCGM_FI_DEV_MEM_COPY_UTIL": 41,
        "DCGM_FI_DEV_FB_USED": 37 * 1024, "DCGM_FI_DEV_FB_FREE": 100 * 1024,  # MiB
        "DCGM_FI_DEV_GPU_TEMP": 71, "DCGM_FI_DEV_POWER_USAGE": 612.5,  # W
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 123_456_789,  # mJ, as the driver counts it
        "DCGM_FI_DEV_SM_CLOCK": 1980, "DCGM_FI_DEV_MEM_CLOCK": 3201,
    }
    # The counter keeps dcgm-exporter's bare name (no "_total"): dashboards query exactly that.
    assert re.search(r"^# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter$", text, re.M)
    assert re.search(r"^DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION\{.*gpu=\"0\".*\} 1\.23456789e\+0?8$", text, re.M)
    assert "_TOTAL_ENERGY_CONSUMPTION_total" not in text
    # GPU 1 has no temperature sensor: no series, never a 0, and the gap is said.
    assert set(series(fam, "DCGM_FI_DEV_GPU_TEMP")) == {"0"}
    assert series(fam, "DCGM_FI_DEV_GPU_UTIL")["1"][1] == 3
    gaps = {(s.labels["gpu"], s.labels["field"]) for s in fam["gpu_widgets_field_unavailable"].samples}
    assert ("1", "temperature_c") in gaps and ("0", "temperature_c") not in gaps
    # Throttle reasons 0x24 = power cap + software thermal slowdown.
    active = {(s.labels["gpu"], s.labels["reason"]) for s in fam["gpu_widgets_throttle_active"].samples if s.value == 1}
    assert {r for g, r in active if g == "0"} == {"sw_power_cap", "sw_thermal_slowdown"}
    # Our own process, with its user; not a kernel of this server.
    (proc,) = fam["gpu_widgets_process_gpu_memory_bytes"].samples
    assert proc.value == 20 * GIB
    assert proc.labels["pid"] == str(os.getpid()) and proc.labels["user"] == psutil.Process().username()
    assert proc.labels["kernel_id"] == "" and proc.labels["notebook_path"] == ""
    info = fam["gpu_widgets_info"].samples[0]
    assert info.labels == {"version": __version__, "backend": "nvml", "simulated": "false", "Hostname": "gpu-node-7"}
    assert series(fam, "gpu_widgets_up")[""][1] == 1
    assert 0 <= series(fam, "gpu_widgets_last_sample_age_seconds")[""][1] < 10


@pytest.mark.parametrize("gw_config,fake_nvml_config", [(NVML_SERVER, {"gpus": [{"util_gpu": 50}, {"util_gpu": 60}]})])
async def test_a_lost_gpu_loses_its_readings_and_shows_lost(in_process_fake_nvml, jp_fetch):
    await scrape_until(jp_fetch, lambda f: "DCGM_FI_DEV_GPU_UTIL" in f and len(f["DCGM_FI_DEV_GPU_UTIL"].samples) == 2)
    in_process_fake_nvml({"gpus": [{"util_gpu": 51}, {"util_gpu": 60, "error": {"*": 15}}]})  # 15: GPU is lost
    _, fam = await scrape_until(jp_fetch, lambda f: series(f, "gpu_widgets_gpu_lost")["1"][1] == 1)
    for name in DCGM:
        assert "1" not in series(fam, name), f"{name} still has a value for the lost GPU"
    assert series(fam, "DCGM_FI_DEV_GPU_UTIL")["0"][1] == 51
    assert series(fam, "gpu_widgets_gpu_lost")["0"][1] == 0
    assert series(fam, "gpu_widgets_up")[""][1] == 1  # the exporter itself is fine


@pytest.mark.parametrize("gw_config,fake_nvml_config", [(NVML_SERVER, DRIVER)])
async def test_a_scrape_makes_no_driver_call_and_scrapers_share_one_render(in_process_fake_nvml, jp_fetch, jp_serverapp):
    await scrape_until(jp_fetch, has_processes)
    service = jp_serverapp.web_app.settings["gpu_widgets_service"]
    service.sampler.stop()  # no more ticks: any driver call from now on would be the scrape's
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    lib.fakeNvmlCallCount.restype = ctypes.c_ulonglong
    lib.fakeNvmlCallCount.argtypes = [ctypes.c_char_p]
    lib.fakeNvmlResetCallCounts()
    first, _ = await scrape(jp_fetch)
    bodies = await asyncio.gather(*(scrape(jp_fetch) for _ in range(10)))
    assert lib.fakeNvmlCallCount(b"*") == 0
    exposition = jp_serverapp.web_app.settings["gpu_widgets_scrapes"].exposition
    renders = exposition.renders
    await scrape(jp_fetch)
    assert exposition.renders == renders  # the same sample is not rendered again
    assert {body.split("# HELP gpu_widgets_info")[0] for body, _ in bodies} == {first.split("# HELP gpu_widgets_info")[0]}
    # The counter is live: a read of the driver shows up in it.
    service.sampler.backend.read_fast(time.time())
    assert lib.fakeNvmlCallCount(b"*") > 0


@pytest.mark.parametrize("gw_config,fake_nvml_config",
                         [(NVML_SERVER, {"delay_ms": {"nvmlInitWithFlags": 3000, "nvmlInit_v2": 3000},
                                         "gpus": [{"util_gpu": 5}]})])
async def test_while_the_sampler_starts_only_health_is_served(in_process_fake_nvml, jp_fetch):
    text, fam = await scrape(jp_fetch)
    assert series(fam, "gpu_widgets_up")[""][1] == 0
    assert series(fam, "gpu_widgets_status")[""][0]["status"] == "starting"
    assert fam["gpu_widgets_info"].samples[0].labels["simulated"] == "false"
    assert not any(name.startswith("DCGM_") for name in fam), text
    await scrape_until(jp_fetch, lambda f: series(f, "gpu_widgets_up")[""][1] == 1)


async def test_simulated_gpus_are_labelled_simulated(jp_fetch):
    _, fam = await scrape_until(jp_fetch, has_a_colleague, timeout=40.0)
    info = fam["gpu_widgets_info"].samples[0].labels
    assert (info["backend"], info["simulated"], info["Hostname"]) == ("simulated", "true", socket.gethostname())
    models = {s.labels["modelName"] for s in fam["DCGM_FI_DEV_GPU_UTIL"].samples}
    assert models == {"Simulated NVIDIA H100 80GB HBM3"}
    # The simulated colleague's job: its memory is there, whose it is is not.
    procs = fam["gpu_widgets_process_gpu_memory_bytes"].samples
    assert "simulated-colleague" not in {p.labels["user"] for p in procs}
    assert any(p.labels["user"] == "" and p.value > 0 for p in procs)


@pytest.mark.parametrize("gw_config", [{"backend": "simulated", "interval_s": 0.1, "show_other_users_processes": True}])
async def test_other_users_are_named_only_when_configured(jp_fetch, gw_config):
    _, fam = await scrape_until(jp_fetch, has_a_colleague, timeout=40.0)
    assert "simulated-colleague" in {p.labels["user"] for p in fam["gpu_widgets_process_gpu_memory_bytes"].samples}


async def test_without_a_token_it_is_a_json_403(jp_fetch):
    for headers in ({"Authorization": ""}, {"Authorization": "token wrong"}):
        with pytest.raises(HTTPClientError) as info:
            await jp_fetch("gpu-widgets", "metrics", headers=headers)
        assert info.value.code == 403
        body = json.loads(info.value.response.body)
        assert body["code"] == "forbidden" and "token" in body["message"]


@pytest.mark.parametrize("gw_config", [{"backend": "simulated", "interval_s": 0.1, "metrics_allow_unauthenticated": True}])
async def test_the_setting_opens_it_without_a_token(jp_fetch, gw_config):
    _, fam = await scrape(jp_fetch, headers={"Authorization": ""})
    assert "gpu_widgets_up" in fam
    with pytest.raises(HTTPClientError) as info:  # the rest of the API stays closed
        await jp_fetch("gpu-widgets", "api", "v1", "status", headers={"Authorization": ""})
    assert info.value.code == 403


async def test_an_unknown_parameter_is_a_json_400(jp_fetch):
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch("gpu-widgets", "metrics", params={"format": "json"})
    assert info.value.code == 400
    assert "format: unknown parameter" in json.loads(info.value.response.body)["message"]


@pytest.mark.parametrize("gw_config,fake_nvml_config", [(NVML_SERVER, {"gpus": [{"util_gpu": 10}]})])
async def test_a_kernels_process_carries_its_kernel_and_notebook(in_process_fake_nvml, jp_fetch, jp_serverapp):
    async with notebook_kernel(jp_fetch, jp_serverapp) as (kernel_id, pid):
        in_process_fake_nvml({"gpus": [{"util_gpu": 10, "procs": [(pid, 3 * GIB)]}]})
        _, fam = await scrape_until(jp_fetch, lambda f: "gpu_widgets_process_gpu_memory_bytes" in f)
        (proc,) = fam["gpu_widgets_process_gpu_memory_bytes"].samples
        assert proc.labels["pid"] == str(pid) and proc.value == 3 * GIB
        assert (proc.labels["kernel_id"], proc.labels["notebook_path"]) == (kernel_id, "experiments/train.ipynb")
