"""An orphaned GPU holder in a real JupyterLab (chromium): a real kernel's child, listed by the fake
NVML with 1 GiB, outlives its kernel; its process row says whose orphan it is and offers Kill (light
and dark screenshots in build/screenshots/); Kill asks first, naming the notebook and the memory,
ends the process through the server's API (token and XSRF as the page sends them) and says so."""
from __future__ import annotations

import re
import time
from typing import Any

import psutil
import pytest

from .browser_fixtures import SIDEBAR_TAB, shoot, switch_theme
from .browser_fixtures import browser, jp_asyncio_loop, jp_server_cleanup, wide_page  # noqa: F401 (fixtures)
from .fake_nvml import fake_nvml_env
from .lab_server import LabServer

pytestmark = [pytest.mark.browser, pytest.mark.slow]

sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect

GIB = 1 << 30
TOAST = ".Toastify__toast"


@pytest.fixture
def page(wide_page: Any) -> Any:
    return wide_page


def start_child(lab: LabServer, kernel_id: str) -> int:
    """Run a cell in the kernel (through its connection file) that starts a ``sleep`` in a session
    of its own, as a detached job does (a shutdown ends the kernel's process group, not it)."""
    from jupyter_client import BlockingKernelClient

    client = BlockingKernelClient(connection_file=str(lab.workdir / "runtime" / f"kernel-{kernel_id}.json"))
    client.load_connection_file()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        out: list[str] = []
        reply = client.execute_interactive(
            "import subprocess; print(subprocess.Popen(['sleep', '300'], start_new_session=True).pid)",
            timeout=60, output_hook=lambda m: out.append(m["content"].get("text", "")))
        assert reply["content"]["status"] == "ok", reply["content"]
    finally:
        client.stop_channels()
    return int("".join(out).strip())


def test_an_orphan_row_offers_kill_which_asks_and_ends_it(page: Any, fake_driver: Any, tmp_path: Any) -> None:
    fake_driver.write({"gpus": [{"util_gpu": 0}]})
    env = {**fake_nvml_env(fake_driver.lib_dir, fake_driver.config_path), "GPU_WIDGETS_BACKEND": "nvml"}
    with LabServer(tmp_path / "lab", env=env,
                   args=["--GpuWidgets.interval_s=0.2", "--GpuWidgets.slow_interval_s=0.2"]) as lab:
        session, _ = lab.start_notebook_kernel("train.ipynb")
        kernel_id = session["kernel"]["id"]
        child = psutil.Process(start_child(lab, kernel_id))
        try:
            fake_driver.write({"gpus": [{"util_gpu": 0, "procs": [(child.pid, GIB)]}]})
            deadline = time.monotonic() + 30

            def listed() -> dict[str, Any]:
                procs = {p["pid"]: p for d in lab.api("processes")["devices"] for p in d["processes"] or ()}
                return procs.get(child.pid, {})

            while listed().get("kernel_id") != kernel_id:
                assert time.monotonic() < deadline, f"the child never showed as the kernel's: {listed()}"
                time.sleep(0.3)
            time.sleep(3)  # the orphan watch's next round notes it (every 2 s)
            lab.request_json("DELETE", f"api/sessions/{session['id']}")
            while listed().get("orphan_of") is None:
                assert time.monotonic() < deadline, f"never listed as an orphan: {listed()}"
                time.sleep(0.3)

            page.goto(lab.lab_url(), timeout=60_000)
            page.locator(SIDEBAR_TAB).click(timeout=60_000)
            panel = page.get_by_role("region", name="GPU Dashboard", exact=True)
            row = panel.locator(f'[aria-label="Process {child.pid}"]')
            expect(row).to_contain_text(re.compile(r"orphan of train\.ipynb, kernel ended \d\d:\d\d"), timeout=40_000)
            kill = row.get_by_role("button", name="Kill", exact=True)
            expect(kill).to_be_visible()
            # An orphan has no kernel to act on: no kernel buttons on its row.
            expect(row.get_by_role("button", name="Shut down kernel")).to_have_count(0)
            for theme, name in (("JupyterLab Light", "light"), ("JupyterLab Dark", "dark")):
                switch_theme(page, theme)
                expect(row).to_be_visible()
                shoot(row, f"orphan-row-{name}")

            kill.click()
            dialog = page.locator(".jp-Dialog")
            expect(dialog).to_contain_text(f"pid {child.pid}", timeout=10_000)
            expect(dialog).to_contain_text("orphan of train.ipynb")
            expect(dialog).to_contain_text("1 GiB")
            shoot(dialog.locator(".jp-Dialog-content"), "orphan-kill-dialog-dark")
            dialog.get_by_role("button", name="Kill", exact=True).click()
            done = page.locator(TOAST, has_text=f"Process {child.pid} ended")
            expect(done).to_contain_text("1 GiB of GPU memory given back", timeout=20_000)
            assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
            fake_driver.write({"gpus": [{"util_gpu": 0}]})  # as the driver would, once it is gone
            expect(row).to_have_count(0, timeout=20_000)
        finally:
            if child.is_running():
                child.kill()
