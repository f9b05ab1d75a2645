"""Idle GPU memory is given back: real kernels (with notebooks) whose children the fake NVML lists."""
from __future__ import annotations

import asyncio
import json
import re
import time

import psutil
import pytest

from gpu_widgets.server import gpu_activity

from .kernel_children import kernel_with_child
from .test_alerts import get_alerts
from .test_gpu_activity import NVML_SERVER, fast_rounds  # noqa: F401  (a fixture)

GIB = 1 << 30
WINDOW_S = 2.0
CULLING = {**NVML_SERVER, "cull_idle_gpu_kernels_after_s": WINDOW_S, "alert_idle_kernel_memory_gib": 0.5}
TWO_GPUS = {"gpus": [{"util_gpu": 0}, {"util_gpu": 0}]}


def kill(pids) -> None:
    for pid in pids:
        try:
            psutil.Process(pid).kill()
        except psutil.Error:
            pass


@pytest.mark.parametrize("gw_config,fake_nvml_config", [(CULLING, TWO_GPUS)])
async def test_an_idle_holder_is_culled_and_a_busy_one_is_not(fast_rounds, in_process_fake_nvml, jp_fetch,  # noqa: F811
                                                              jp_serverapp, tmp_path):
    km = jp_serverapp.kernel_manager
    _, idle_id, idle_child = await kernel_with_child(jp_fetch, jp_serverapp, tmp_path, "idle.ipynb")
    busy_session, busy_id, busy_child = await kernel_with_child(jp_fetch, jp_serverapp, tmp_path, "train.ipynb")
    try:
        # Given one kernel holding 1 GiB on an idle GPU 0 and another keeping GPU 1 busy
        in_process_fake_nvml({"gpus": [{"util_gpu": 0, "procs": [(idle_child, GIB)]},
                                       {"util_gpu": 70, "procs": [(busy_child, 2 * GIB)]}]})
        seen = time.monotonic()
        # Then the idle one is shut down (the window, then a round: generous for a busy machine)
        while idle_id in km.list_kernel_ids():
            assert time.monotonic() - seen < 30, "the idle kernel was not culled"
            await asyncio.sleep(0.1)
        assert time.monotonic() - seen >= WINDOW_S
        events = jp_serverapp.web_app.settings["gpu_widgets_kernel_events"].events()
        (culled,) = [e for e in events if e["kind"] == "culled"]
        assert culled["kernel_id"] == idle_id and culled["notebook_path"] == "idle.ipynb"
        assert re.fullmatch(r"shut down after 2 s holding 1 GiB of GPU 0 unused "
                            r"\(c\.GpuWidgets\.cull_idle_gpu_kernels_after_s = 2\)", culled["reason"]), culled
        assert culled["details"]["idle_s"] >= WINDOW_S and culled["details"]["memory_bytes"] == GIB
        assert not [e for e in events if e["kind"] == "died" and e["kernel_id"] == idle_id], events
        # And the busy one lives on well past the window
        await asyncio.sleep(2 * WINDOW_S)
        assert busy_id in km.list_kernel_ids()

        # The gauges: the busy kernel on GPU 1, with its notebook
        body = (await jp_fetch("gpu-widgets", "metrics")).body.decode()
        labels = f'{{gpu="1",kernel_id="{busy_id}",notebook_path="train.ipynb"}}'
        memory_line = re.search(r"^gpu_widgets_kernel_gpu_memory_bytes" + re.escape(labels) + r" (\S+)$", body, re.M)
        assert memory_line and float(memory_line.group(1)) == 2 * GIB, body
        idle_line = re.search(r"^gpu_widgets_kernel_gpu_idle_seconds" + re.escape(labels) + r" (\S+)$", body, re.M)
        assert idle_line and float(idle_line.group(1)) < WINDOW_S, body
        assert idle_id not in body
    finally:
        kill((idle_child, busy_child))
        await jp_fetch("api", "sessions", busy_session, method="DELETE")


@pytest.mark.parametrize("gw_config,fake_nvml_config", [({**NVML_SERVER, "alert_idle_minutes": 0.02}, TWO_GPUS)])
async def test_with_the_policy_off_only_the_alert_fires(fast_rounds, in_process_fake_nvml, jp_fetch,  # noqa: F811
                                                        jp_serverapp, tmp_path):
    session, kernel_id, child = await kernel_with_child(jp_fetch, jp_serverapp, tmp_path, "idle.ipynb")
    try:
        in_process_fake_nvml({"gpus": [{"util_gpu": 0, "procs": [(child, 2 * GIB)]}, {"util_gpu": 0}]})
        deadline = time.monotonic() + 30  # the alerts' attribution runs every 5 s
        while not (eps := (await get_alerts(jp_fetch))[1]["episodes"]):
            assert time.monotonic() < deadline, "no idle-kernel alert"
            await asyncio.sleep(0.2)
        assert eps[0]["kind"] == "idle_kernel" and eps[0]["kernel_id"] == kernel_id
        tracker = jp_serverapp.web_app.settings[gpu_activity.TRACKER_KEY]
        assert tracker.culler is None and kernel_id in jp_serverapp.kernel_manager.list_kernel_ids()
        assert not jp_serverapp.web_app.settings["gpu_widgets_kernel_events"].events()
    finally:
        kill((child,))
        await jp_fetch("api", "sessions", session, method="DELETE")
