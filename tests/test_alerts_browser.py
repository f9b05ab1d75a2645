"""Alerts and kernel actions in a real JupyterLab and chromium (issue 16's proof).

1. A scripted fault (GPU 1 lost for a few seconds) shows as one notification with its "Show GPU"
   button, which stays one notification when the episode ends, and the button opens its card.
2. A kernel started by the test (a real notebook session) holds memory on a fake-driver GPU; its
   process row offers the kernel actions, "Shut down kernel" asks first (naming the notebook and
   the memory), the kernel goes, and once the driver no longer lists it its memory leaves the panel.
3. An orphaned GPU holder (issue 28): a real kernel's child, listed by the fake NVML with 1 GiB,
   outlives its kernel; its row says whose orphan it is and offers Kill (light and dark screenshots
   in build/screenshots/); Kill asks first, naming the notebook and the memory, ends the process
   through the server's API (token and XSRF as the page sends them) and says so.
"""
from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

from .browser_fixtures import SIDEBAR_TAB, shoot, switch_theme
from .browser_fixtures import browser, jp_asyncio_loop, jp_server_cleanup, wide_page  # noqa: F401 (fixtures)
from .lab_server import LabServer, fake_nvml_lab, simulated_lab

pytestmark = [pytest.mark.browser, pytest.mark.slow]

sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect

GIB = 1 << 30
TOAST = ".Toastify__toast"


@pytest.fixture
def page(wide_page: Any) -> Any:
    return wide_page


def test_a_lost_gpu_is_one_notification_with_its_action(page: Any, tmp_path: Any) -> None:
    with simulated_lab(tmp_path / "lab", 2, "lost:1@8-14", interval_s=0.2) as lab:
        page.goto(lab.lab_url(), timeout=60_000)
        page.locator(SIDEBAR_TAB).wait_for(timeout=60_000)
        # The sidebar stays closed: the alert comes all the same.
        lost = page.locator(TOAST, has_text=re.compile(r"GPU 1 .*lost"))
        expect(lost).to_have_count(1, timeout=40_000)
        expect(lost.get_by_role("button", name="Show GPU")).to_be_visible()
        # It ends (GPU 1 answers again after 14 s, plus the 3 s hold): the same notification says so.
        ended = page.locator(TOAST, has_text=re.compile(r"GPU 1 "))
        deadline = time.monotonic() + 40
        while not any("lost" in t and "stopped answering" not in t for t in ended.all_inner_texts()):
            bodies = lab.api("alerts")["episodes"]
            if bodies and bodies[0]["end"] is not None:
                break
            assert time.monotonic() < deadline, f"the episode never ended: {bodies}"
            time.sleep(0.5)
        page.wait_for_timeout(7000)  # more polls of the alerts: none may add a second notification
        assert ended.count() <= 1, ended.all_inner_texts()
        bell = page.evaluate("() => document.querySelector('.jp-Notification-Status')?.textContent ?? ''")
        assert bell.strip() in ("", "1"), f"one notification in the bell, got {bell!r}"
        # "Show GPU" opens the sidebar on GPU 1's card (the toast may have closed: reload shows none again)
        if ended.count():
            ended.get_by_role("button", name="Show GPU").click()
            panel = page.get_by_role("region", name="GPU Dashboard", exact=True)
            expect(panel.get_by_role("region", name=re.compile(r"^GPU 1: "))).to_be_visible(timeout=20_000)
        page.reload()
        page.locator(SIDEBAR_TAB).wait_for(timeout=60_000)
        page.wait_for_timeout(7000)
        assert page.locator(TOAST, has_text=re.compile(r"GPU 1 ")).count() == 0, "never twice in a tab, reload or not"


def test_a_kernel_is_shut_down_from_its_process_row(page: Any, fake_driver: Any, tmp_path: Any) -> None:
    fake_driver.write({"gpus": [{"util_gpu": 0}]})
    with fake_nvml_lab(tmp_path / "lab", fake_driver) as lab:
        session, pid = lab.start_notebook_kernel("train.ipynb")
        kernel_id = session["kernel"]["id"]
        fake_driver.write({"gpus": [{"util_gpu": 0, "procs": [(pid, 2 * GIB)]}]})

        page.goto(lab.lab_url(), timeout=60_000)
        page.locator(SIDEBAR_TAB).click(timeout=60_000)
        panel = page.get_by_role("region", name="GPU Dashboard", exact=True)
        row = panel.locator(f'[aria-label="Process {pid}"]')
        expect(row).to_be_visible(timeout=40_000)
        for label in ("Interrupt", "Restart", "Shut down kernel"):
            expect(row.get_by_role("button", name=label, exact=True)).to_be_visible()
        row.get_by_role("button", name="Shut down kernel", exact=True).click()
        dialog = page.locator(".jp-Dialog")
        expect(dialog).to_contain_text("train.ipynb", timeout=10_000)
        expect(dialog).to_contain_text("2 GiB")
        dialog.get_by_role("button", name="Shut down").click()

        deadline = time.monotonic() + 30
        while any(k["id"] == kernel_id for k in lab.get_json("api/kernels")):
            assert time.monotonic() < deadline, "the kernel was not shut down"
            time.sleep(0.3)
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        fake_driver.write({"gpus": [{"util_gpu": 0}]})  # as the driver would, once the process is gone
        expect(row).to_have_count(0, timeout=20_000)
        expect(panel).to_contain_text("No processes on this GPU.")


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
    with fake_nvml_lab(tmp_path / "lab", fake_driver) as lab:
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
