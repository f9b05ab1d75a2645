"""SM activity in the GPU sidebar, in a real JupyterLab (auth on) with simulated GPUs.

GPU 0 runs the scripted ``small_kernels`` episode: busy near 100 % while its SMs are ~6 %
active, the case "busy" hides. One server and one page for all checks: the card shows busy high
and SM active low side by side, with the difference explained on hover; each process shows its SM
share beside its memory; GPM is asked for only while a card is on screen; no text leaves its card;
text reads against its background in light and dark.

Screenshots go to build/screenshots/ (ignored by git).
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from gpu_widgets.metrics.catalogue import SIDEBAR, metric, shown_in

from .browser_fixtures import LOW_CONTRAST_JS, OUTSIDE_JS, SIDEBAR_TAB, panel, shoot, sidebar_page, switch_theme
from .browser_fixtures import browser, jp_asyncio_loop, jp_server_cleanup  # noqa: F401 (fixtures)
from .lab_server import LabServer, simulated_lab

pytestmark = [pytest.mark.browser, pytest.mark.slow]

sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect

FILES_TAB = '.jp-SideBar .lm-TabBar-tab[data-id="filebrowser"]'
GPM_REQUEST = re.compile(r"/gpu-widgets/api/v1/samples/latest\?(.*&)?gpm=1")
NUMBER = re.compile(r"^\d+(\.\d+)?$")
GPM_SENT: list[str] = []  # every samples/latest?gpm=1 the page sent


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    # From the start to long past the test: GPU 0 busy ~98 %, its SMs ~6 % active.
    with simulated_lab(tmp_path_factory.mktemp("gpm-lab"), 2, "small_kernels:0@0-3600") as server:
        yield server


@pytest.fixture(scope="module")
def page(browser: Any, lab: LabServer) -> Iterator[Any]:
    with sidebar_page(browser, lab.lab_url(),
                      on_request=lambda r: GPM_SENT.append(r.url) if GPM_REQUEST.search(r.url) else None) as p:
        expect(card(p, 0)).to_be_visible(timeout=60_000)
        yield p


def card(page: Any, index: int) -> Any:
    return panel(page).get_by_role("region", name=re.compile(rf"^GPU {index}: "))


def meter_value(meter: Any) -> float:
    """The meter's number, once it has one (GPM needs two samples a slow interval apart)."""
    expect(meter).to_have_attribute("aria-valuenow", NUMBER, timeout=30_000)
    return float(meter.get_attribute("aria-valuenow"))


def test_busy_is_high_while_sm_active_is_low_and_the_hover_says_why(page: Any) -> None:
    gpu0 = card(page, 0)
    busy = gpu0.get_by_role("meter", name=metric("utilization").label, exact=True)
    sm = gpu0.get_by_role("meter", name=metric("sm_active").label, exact=True)
    tensor = gpu0.get_by_role("meter", name=metric("tensor_active").label, exact=True)
    assert meter_value(sm) <= 15
    assert meter_value(busy) >= 90
    assert meter_value(tensor) <= 15
    # Side by side: SM active and tensor active come right after busy.
    order = gpu0.locator(".jp-GpuWidgets-metric").evaluate_all("ms => ms.map(m => m.dataset.metric)")
    assert order[:3] == ["utilization", "sm_active", "tensor_active"], order
    # The catalogue offers them to the sidebar: each has its history chart.
    if "sm_active" in [m.id for m in shown_in(SIDEBAR)]:
        expect(gpu0.get_by_role("img", name=re.compile(r"^SM active over the last"))).to_have_count(1)
    label = gpu0.locator('[data-metric="sm_active"] .jp-GpuWidgets-metricLabel')
    label.hover()
    assert "streaming multiprocessors" in label.get_attribute("title")
    assert "one tiny kernel makes it 100 %" in label.get_attribute("title")
    busy_label = gpu0.locator('[data-metric="utilization"] .jp-GpuWidgets-metricLabel')
    assert "some kernel ran" in busy_label.get_attribute("title")
    assert "SM active says how much" in busy_label.get_attribute("title")
    # Nothing scary while the figures arrive, nor after: no reason line under SM active.
    expect(gpu0.locator('[data-metric="sm_active"] .jp-GpuWidgets-metricReason')).to_have_count(0)
    page.mouse.move(0, 0)


def test_each_process_shows_its_sm_share_beside_its_memory(page: Any) -> None:
    proc = card(page, 0).get_by_role("listitem", name=re.compile(r"^Process \d+$")).first
    sm = proc.locator(".jp-GpuWidgets-procSm")
    expect(sm).to_have_text(re.compile(r"^SM \d+ %$"), timeout=30_000)
    assert int(re.search(r"\d+", sm.text_content()).group()) <= 15  # its share of ~6 % SM activity
    expect(proc.locator(".jp-GpuWidgets-procBw")).to_have_text(re.compile(r"^BW \d+ %$"))
    assert "share of the GPU's SM time" in sm.get_attribute("title")
    # Beside the memory: after it on its line, or (a narrow panel) right under it, above the command.
    sm_box, mem_box, cmd_box = (proc.locator(s).bounding_box() for s in (
        ".jp-GpuWidgets-procSm", ".jp-GpuWidgets-procMem", ".jp-GpuWidgets-procCommand"))
    same_line = abs(sm_box["y"] - mem_box["y"]) < 4 and sm_box["x"] > mem_box["x"]
    under = 0 < sm_box["y"] - mem_box["y"] < 2 * mem_box["height"] and sm_box["y"] < cmd_box["y"]
    assert same_line or under, (sm_box, mem_box, cmd_box)
    expect(proc.locator(".jp-GpuWidgets-user")).not_to_have_text("")
    assert proc.locator(".jp-GpuWidgets-user").bounding_box()["width"] > 20  # the user still shows
    shoot(card(page, 0).locator(".jp-GpuWidgets-processes"), "sidebar-gpm-processes")


def test_gpm_is_asked_for_only_while_a_card_is_on_screen(page: Any) -> None:
    assert GPM_SENT, "the open card never asked for GPM figures"
    page.locator(FILES_TAB).click()
    expect(panel(page)).to_be_hidden()
    page.wait_for_timeout(1000)  # a request already in flight may still go out
    hidden_at = len(GPM_SENT)
    page.wait_for_timeout(4000)  # 8 sampler intervals, 4 sidebar refreshes
    assert len(GPM_SENT) == hidden_at, GPM_SENT[hidden_at:]
    page.locator(SIDEBAR_TAB).click()
    expect(card(page, 0)).to_be_visible()
    deadline_ms = 10_000
    while len(GPM_SENT) == hidden_at and deadline_ms > 0:
        page.wait_for_timeout(250)
        deadline_ms -= 250
    assert len(GPM_SENT) > hidden_at, "the card shown again did not ask for GPM figures"


def test_no_text_leaves_its_card_and_text_reads_in_light_and_dark(page: Any) -> None:
    """Last in the module: it switches the theme."""
    gpu0 = card(page, 0)
    meter_value(gpu0.get_by_role("meter", name=metric("sm_active").label, exact=True))
    expect(gpu0.locator(".jp-GpuWidgets-procSm").first).to_have_text(re.compile(r"\d+ %"), timeout=30_000)
    page.mouse.move(0, 0)
    for theme in ("JupyterLab Light", "JupyterLab Dark"):
        switch_theme(page, theme)
        shoot(page.locator("#gpu-widgets-sidebar"), f"sidebar-gpm-{'light' if theme.endswith('Light') else 'dark'}")
        outside = panel(page).evaluate(OUTSIDE_JS)
        assert outside == [], "\n".join(outside)
        low = panel(page).evaluate(LOW_CONTRAST_JS, 4.5)
        assert low == [], f"{theme}:\n" + "\n".join(low)
