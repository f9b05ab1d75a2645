"""GPU work is activity: a real server and kernel on the fake NVML, /api/status read with no other client.

The once-a-minute rate and the round's period are module constants of gpu_widgets/server/gpu_activity.py,
lowered here (monkeypatched before the server starts).
"""
from __future__ import annotations

import asyncio
import json
import os
import time
from datetime import datetime

import psutil
import pytest

from gpu_widgets.server import gpu_activity

from .kernel_children import kernel_with_child
from .test_process_identity import others_process  # noqa: F401  (a fixture: a process of another uid)

GIB = 1 << 30
NVML_SERVER = {"backend": "nvml", "interval_s": 0.1, "slow_interval_s": 0.1}
EVERY_S = 0.5


@pytest.fixture
def fast_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_activity, "TICK_S", 0.1)
    monkeypatch.setattr(gpu_activity, "ACTIVITY_EVERY_S", EVERY_S)


async def last_activity(jp_fetch) -> datetime:
    body = json.loads((await jp_fetch("api", "status")).body)
    return datetime.fromisoformat(body["last_activity"].replace("Z", "+00:00"))


async def settle(jp_serverapp, util: int) -> None:
    """Until a sample shows ``util`` and a few rounds have read it (what was in flight has landed)."""
    service = jp_serverapp.web_app.settings["gpu_widgets_service"]
    deadline = time.monotonic() + 20
    while True:
        snap = service.latest()
        if snap and snap["devices"] and snap["devices"][0].get("utilization_gpu_percent") == util \
                and snap["devices"][0].get("processes"):
            break
        assert time.monotonic() < deadline, snap
        await asyncio.sleep(0.05)
    await asyncio.sleep(4 * gpu_activity.TICK_S)


@pytest.mark.parametrize("gw_config,fake_nvml_config", [(NVML_SERVER, {"gpus": [{"util_gpu": 0}]})])
async def test_a_busy_kernel_child_keeps_the_server_active_and_others_do_not(
        fast_rounds, others_process, in_process_fake_nvml, jp_fetch, jp_serverapp, tmp_path):  # noqa: F811
    _, kernel_id, child = await kernel_with_child(jp_fetch, jp_serverapp, tmp_path)
    kernel = jp_serverapp.kernel_manager.get_kernel(kernel_id)
    other_pid, _ = others_process
    try:
        # Given the kernel's child busy on the GPU, and no client talking to the server
        in_process_fake_nvml({"gpus": [{"util_gpu": 60, "procs": [(child, GIB)]}]})
        await settle(jp_serverapp, 60)
        first, kernel_first = await last_activity(jp_fetch), kernel.last_activity
        await asyncio.sleep(4 * EVERY_S)
        # Then the server's last activity and the kernel's advance
        assert await last_activity(jp_fetch) > first
        assert kernel.last_activity > kernel_first

        # When the GPU goes to 0 %: it stops advancing
        in_process_fake_nvml({"gpus": [{"util_gpu": 0, "procs": [(child, GIB)]}]})
        await settle(jp_serverapp, 0)
        idle = await last_activity(jp_fetch)
        await asyncio.sleep(4 * EVERY_S)
        assert await last_activity(jp_fetch) == idle

        # When only another user's process keeps the GPU busy: nothing moves either
        assert psutil.Process(other_pid).uids().real != os.getuid()
        in_process_fake_nvml({"gpus": [{"util_gpu": 90, "procs": [(other_pid, GIB)]}]})
        await settle(jp_serverapp, 90)
        still = await last_activity(jp_fetch)
        await asyncio.sleep(4 * EVERY_S)
        assert await last_activity(jp_fetch) == still
    finally:
        psutil.Process(child).kill()
        await jp_fetch("api", "kernels", kernel_id, method="DELETE")


@pytest.mark.parametrize("gw_config,fake_nvml_config", [({**NVML_SERVER, "gpu_activity": False},
                                                         {"gpus": [{"util_gpu": 0}]})])
async def test_with_gpu_activity_off_a_busy_kernel_does_not_move_last_activity(
        fast_rounds, in_process_fake_nvml, jp_fetch, jp_serverapp, tmp_path):
    _, kernel_id, child = await kernel_with_child(jp_fetch, jp_serverapp, tmp_path)
    try:
        in_process_fake_nvml({"gpus": [{"util_gpu": 60, "procs": [(child, GIB)]}]})
        await settle(jp_serverapp, 60)
        before = await last_activity(jp_fetch)
        await asyncio.sleep(4 * EVERY_S)
        assert await last_activity(jp_fetch) == before
    finally:
        psutil.Process(child).kill()
        await jp_fetch("api", "kernels", kernel_id, method="DELETE")


@pytest.mark.parametrize("value", [-1, 0.5, 101, "x"])
def test_bad_activity_settings_are_refused_in_words(value):
    from gpu_widgets.server.app import GpuWidgets

    app = GpuWidgets()
    with pytest.raises(Exception, match="GpuWidgets"):
        if value == 101:
            app.activity_busy_percent = value
        else:
            app.cull_idle_gpu_kernels_after_s = value
