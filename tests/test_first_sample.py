"""Before its first sample the server says ``starting``, never ``ok``: through real HTTP with auth on,
a first read that hangs in the (fake) driver is ``starting`` everywhere the server reports a status
until the stall rule makes it ``stale`` naming the call; when the call returns it is ``ok`` with a
sample."""
from __future__ import annotations

import asyncio
import time

import pytest

from gpu_widgets.service.service import FIRST_SAMPLE

from .test_prometheus_export import scrape, series
from .test_server_api import get_json

NVML_SERVER = {"backend": "nvml", "interval_s": 0.2}
HANG_MS = 3_600_000  # the fake's longest delay: the call returns only when the config lets it
GPUS = [{"util_gpu": 5}, {"util_gpu": 6}]
# nvmlDeviceGetPowerUsage is a fast read only (not a spec card field): the backend opens, the first
# sample hangs.
HUNG = {"gpus": [GPUS[0], {**GPUS[1], "delay_ms": {"nvmlDeviceGetPowerUsage": HANG_MS}}]}
HUNG_CALL = "nvmlDeviceGetPowerUsage on GPU 1 has not returned"


async def statuses(jp_fetch) -> dict:
    """Every status the server reports now: the API's routes and the /metrics family."""
    out = {route: await get_json(jp_fetch, *route.split("/")) for route in ("status", "samples/latest", "samples", "devices")}
    _, families = await scrape(jp_fetch)
    out["metrics"] = {"status": series(families, "gpu_widgets_status")[""][0]["status"],
                      "up": series(families, "gpu_widgets_up")[""][1]}
    return out


@pytest.mark.parametrize("gw_config,fake_nvml_config", [(NVML_SERVER, HUNG)])
async def test_a_first_sample_that_hangs_is_starting_then_stale_never_ok(in_process_fake_nvml, jp_fetch):
    seen_waiting = seen_metric_starting = False
    deadline = time.monotonic() + 30
    while True:
        now = await statuses(jp_fetch)
        reported = {route: answer["status"] for route, answer in now.items()}
        assert set(reported.values()) <= {"starting", "stale"}, f"no sample exists yet: {now}"
        assert now["metrics"]["up"] == 0 and now["samples/latest"]["devices"] == []
        seen_waiting |= now["status"]["status"] == "starting" and now["status"]["reason"] == FIRST_SAMPLE
        seen_metric_starting |= reported["metrics"] == "starting"
        if now["status"]["status"] == "stale":
            break
        assert time.monotonic() < deadline, f"never stale; last: {now}"
        await asyncio.sleep(0.05)
    # The backend had opened (the spec cards were read): the wait was for the first sample.
    assert seen_waiting and seen_metric_starting
    status = now["status"]
    assert (status["reason"], status["sample_age_s"], status["device_count"]) == (HUNG_CALL, None, 2)
    latest = await get_json(jp_fetch, "samples", "latest")
    assert (latest["status"], latest["reason"], latest["devices"]) == ("stale", HUNG_CALL, [])

    in_process_fake_nvml({"gpus": GPUS})  # the call returns
    deadline = time.monotonic() + 30
    while (status := await get_json(jp_fetch, "status"))["status"] != "ok":
        assert status["status"] in ("starting", "stale") and time.monotonic() < deadline, status
        await asyncio.sleep(0.05)
    assert status["reason"] is None and status["sample_age_s"] is not None
    latest = await get_json(jp_fetch, "samples", "latest")  # ok means a sample exists
    assert latest["status"] == "ok" and [d["utilization_gpu_percent"] for d in latest["devices"]] == [5, 6]
    _, families = await scrape(jp_fetch)
    assert series(families, "gpu_widgets_status")[""][0]["status"] == "ok"


@pytest.mark.parametrize("gw_config", [{"backend": "simulated", "interval_s": 0.1}])
async def test_whenever_the_status_says_ok_a_sample_is_there(jp_fetch):
    deadline = time.monotonic() + 20
    while (status := await get_json(jp_fetch, "status"))["status"] != "ok":
        assert status["status"] == "starting" and time.monotonic() < deadline, status
        await asyncio.sleep(0.01)
    latest = await get_json(jp_fetch, "samples", "latest")
    assert status["sample_age_s"] is not None and len(latest["devices"]) == status["device_count"] > 0
