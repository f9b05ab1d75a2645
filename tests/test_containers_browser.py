"""The sidebar of a JupyterLab in a container (a pid namespace of its own, the fake NVML listing host
pids): the one-line note with the deployment fix, a kernel's row found by its device file with the
driver's memory and how it was matched on hover, another container's entry by its host pid. Light
and dark; screenshots in build/screenshots/."""
from __future__ import annotations

from typing import Any

import pytest

from .browser_fixtures import browser, jp_asyncio_loop, jp_server_cleanup  # noqa: F401 (fixtures)
from .container_fixtures import contained_server, hold, needs_namespace, run_in_kernel, stand_in_dev
from .fake_nvml import write_config
from .test_sidebar_browser import expect, new_page

pytestmark = [pytest.mark.browser, pytest.mark.slow]

GIB = 1 << 30


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_the_sidebar_says_once_that_pids_are_the_hosts_and_names_each_process(
        browser: Any, fake_nvml_lib, tmp_path, theme: str) -> None:
    needs_namespace()
    dev = stand_in_dev(tmp_path, 2)
    conf = tmp_path / "nvml.conf"
    with contained_server(tmp_path / "lab", fake_nvml_lib, conf, dev, {"gpus": [{}, {}]}, app="lab") as lab:
        session, outer = lab.start_notebook_kernel("train.ipynb")
        inner = int(run_in_kernel(lab, session["kernel"]["id"], hold(dev, "nvidia-uvm", "nvidia0")))
        write_config(conf, {"gpus": [{"util_gpu": 90, "procs": [(outer, 3 * GIB)]},
                                     {"util_gpu": 40, "procs": [(999_999, 5 * GIB)]}]})
        with new_page(browser, lab) as page:
            if theme == "dark":
                page.dark_theme()
            page.open_panel_from_icon()
            expect(page.cards()).to_have_count(2, timeout=30_000)
            note = page.panel.get_by_role("note", name="GPU processes in a container")
            expect(note).to_have_count(1, timeout=30_000)
            # One line until asked; a click opens what works, what does not and the fix
            summary = note.locator("summary")
            expect(summary).to_have_text("In a container: GPU processes are found by the device files they hold")
            assert note.bounding_box()["height"] < 50, note.bounding_box()  # two lines of small type at most
            body = note.locator(".jp-GpuWidgets-messageBody")
            expect(body).to_be_hidden()
            if theme == "dark":
                summary.click()
                expect(body).to_be_visible()
                expect(body).to_contain_text("the NVIDIA driver reports host pids")
                expect(body).to_contain_text("--pid=host")
                expect(body).to_contain_text("hostPID: true")
            row = page.card(0).get_by_role("listitem", name=f"Process {inner}")
            expect(row).to_contain_text("3 GiB", timeout=30_000)
            expect(row).to_contain_text("train.ipynb")
            title = row.locator(".jp-GpuWidgets-pid").get_attribute("title") or ""
            assert "found by the GPU device file it holds" in title and f"driver's pid: {outer}" in title, title
            other = page.card(1).get_by_role("listitem", name="Process host 999999")
            expect(other).to_contain_text("5 GiB", timeout=30_000)
            page.screenshot(f"sidebar-container-{theme}")
            if theme == "light":
                summary.click()
                expect(body).to_contain_text("--pid=host")
                expect(note).to_have_attribute("title", body.inner_text())
            other_title = other.locator(".jp-GpuWidgets-pid").get_attribute("title") or ""
            assert "No process of this container: the driver's pid 999999" in other_title, other_title
            assert not page.errors()
