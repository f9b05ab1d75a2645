"""Idle-GPU culling turned on the way an admin does it: the option on a plain ``jupyter server``'s
command line, the kernel's own process in the (fake) driver's process list, no test hook.

A kernel that no client ever talked to stays "starting" in jupyter_server; it used to be spared
for good (the report: still running 33 s after an 8 s threshold). Culling off must never shut a
kernel down. docs/jupyterhub.md states the bound checked here: window + 10 s + slow_interval_s.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from .fake_nvml import fake_nvml_env, write_config
from .lab_server import LabServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # a server, kernels and a culling wait: ~25 s

GIB = 1 << 30
WINDOW_S = 3.0
SLOW_S = 0.5
ROUND_S = 5.0  # gpu_activity.TICK_S: not lowered here (another process)
BOUND_S = WINDOW_S + 2 * ROUND_S + SLOW_S  # docs/jupyterhub.md
MARGIN_S = 25.0  # a loaded 2-core CI machine


def plain_server(workdir: Path, lib_dir: Path, config: Path, *options: str) -> LabServer:
    write_config(config, {"gpus": [{"util_gpu": 0}, {"util_gpu": 0}]})
    env = {**fake_nvml_env(lib_dir, config), "GPU_WIDGETS_BACKEND": "nvml"}
    return LabServer(workdir, env=env, app="server",
                     args=["--GpuWidgets.interval_s=0.2", f"--GpuWidgets.slow_interval_s={SLOW_S}", *options])


def kernel_ids(server: LabServer) -> set[str]:
    return {k["id"] for k in server.get_json("api/kernels")}


def test_a_kernel_holding_an_idle_gpu_is_culled_and_with_culling_off_none_is(fake_nvml_lib, tmp_path):
    on = plain_server(tmp_path / "on", fake_nvml_lib, tmp_path / "on.conf",
                      f"--GpuWidgets.cull_idle_gpu_kernels_after_s={WINDOW_S:g}")
    off = plain_server(tmp_path / "off", fake_nvml_lib, tmp_path / "off.conf")
    with on, off:
        # Given a notebook's kernel on each server, never talked to (as when its tab was closed),
        # whose own process holds 2 GiB of GPU 0 at 0 % in the driver's process list
        (on_session, on_pid), (off_session, off_pid) = on.start_notebook_kernel("idle.ipynb"), \
            off.start_notebook_kernel("idle.ipynb")
        on_id, off_id = on_session["kernel"]["id"], off_session["kernel"]["id"]
        write_config(tmp_path / "on.conf", {"gpus": [{"util_gpu": 0, "procs": [(on_pid, 2 * GIB)]}, {"util_gpu": 0}]})
        write_config(tmp_path / "off.conf", {"gpus": [{"util_gpu": 0, "procs": [(off_pid, 2 * GIB)]}, {"util_gpu": 0}]})
        held_since = time.monotonic()

        # When the window passes, then the kernel with culling on is shut down, within the bound
        while on_id in kernel_ids(on):
            waited = time.monotonic() - held_since
            assert waited < BOUND_S + MARGIN_S, f"not culled after {waited:.1f} s:\n{on.log_tail()}"
            time.sleep(0.2)
        took = time.monotonic() - held_since
        assert took >= WINDOW_S, f"culled after {took:.1f} s, before the {WINDOW_S} s window"
        events = on.api("kernels/events")["events"]
        (culled,) = [e for e in events if e["kernel_id"] == on_id]
        assert culled["kind"] == "culled" and culled["notebook_path"] == "idle.ipynb", culled
        assert culled["reason"].startswith("shut down after 3 s holding 2 GiB of GPU 0 unused"), culled
        assert f"gpu-widgets: kernel {on_id} (idle.ipynb) shut down after 3 s" in on.log_tail(20000)

        # And the kernel of the server without the option lives on, past the bound too
        while time.monotonic() - held_since < BOUND_S + ROUND_S:
            time.sleep(0.5)
        assert off_id in kernel_ids(off), off.log_tail()
        assert off.api("kernels/events")["events"] == []
        assert off.api("samples/latest")["devices"][0]["processes"][0]["pid"] == off_pid  # it was seen
