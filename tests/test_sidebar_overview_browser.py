"""The GPU sidebar with 8 simulated GPUs in a 1366×768 window, in a real JupyterLab (auth on).

One server and one page for all checks (they read the same panel): the overview lists all 8
GPUs without scrolling; sorting and filtering change its rows; a click on a row shows that
GPU's card; no text leaves its card; every sparkline shows its y range; the hover tooltip hides
neither the chart's title nor its value; text reads against its background in light and dark.

Screenshots go to build/screenshots/ (ignored by git).
"""
from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from gpu_widgets.metrics.catalogue import SIDEBAR, metric, shown_in

from .browser_fixtures import LOW_CONTRAST_JS, OUTSIDE_JS, panel, shoot, sidebar_page
from .browser_fixtures import browser, jp_asyncio_loop, jp_server_cleanup  # noqa: F401 (fixtures)
from .lab_server import LabServer, simulated_lab

pytestmark = [pytest.mark.browser, pytest.mark.slow]

sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect

N_GPUS = 8


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    with simulated_lab(tmp_path_factory.mktemp("sim8-lab"), N_GPUS, "throttle:0@1-12:sw_power_cap") as server:
        yield server


@pytest.fixture(scope="module")
def page(browser: Any, lab: LabServer) -> Iterator[Any]:
    with sidebar_page(browser, lab.lab_url()) as p:
        rows = p.get_by_role("grid", name="GPUs").get_by_role("row", name=re.compile(r"^GPU \d+$"))
        expect(rows).to_have_count(N_GPUS, timeout=30_000)
        # Wait for the first card's charts to hold data (the range labels are written then).
        expect(p.locator(".jp-GpuWidgets-yMax").first).not_to_have_text("", timeout=30_000)
        yield p


def rows(page: Any) -> Any:
    return panel(page).get_by_role("grid", name="GPUs").get_by_role("row", name=re.compile(r"^GPU \d+$"))


def row_order(page: Any) -> list[int]:
    return [int(i) for i in rows(page).evaluate_all("rs => rs.map(r => r.dataset.gpuIndex)")]


def test_eight_gpus_fit_without_scrolling_and_no_text_leaves_its_card(page: Any) -> None:
    shoot(page, "sidebar-8-gpus-light")
    assert row_order(page) == list(range(N_GPUS))
    for i in range(N_GPUS):
        row = rows(page).nth(i)
        expect(row).to_be_in_viewport(ratio=1)
        expect(row.get_by_role("rowheader")).to_have_text(f"GPU {i}")
        cells = row.get_by_role("gridcell")
        for k, pattern in enumerate((r"\d+ %", r"[\d.]+/80 GiB", r"\d+ °C", r"\d+ W")):
            expect(cells.nth(k)).to_have_text(re.compile(pattern))
    assert panel(page).evaluate("p => p.scrollTop") == 0
    outside = panel(page).evaluate(OUTSIDE_JS)
    assert outside == [], "\n".join(outside)
    # With more than two GPUs only the chosen GPU's card is drawn (the first, until one is chosen).
    expect(panel(page).get_by_role("region", name=re.compile(r"^GPU \d+: "))).to_have_count(1)
    # The simulated banner keeps the variable whole (it may break at the "=" only).
    hint = panel(page).get_by_role("note").locator("code")
    lines = hint.locator("span").evaluate_all(
        "ss => ss.map(s => new Set([...s.getClientRects()].map(r => Math.round(r.top))).size)")
    assert lines == [1, 1], f"lines of each side of the '=': {lines}"


def test_every_sparkline_shows_its_range_from_the_catalogue(page: Any) -> None:
    card = panel(page).get_by_role("region", name=re.compile(r"^GPU 0: "))
    scales = card.locator(".jp-GpuWidgets-metric").evaluate_all(
        "ms => ms.map(m => [m.dataset.metric, m.querySelector('.jp-GpuWidgets-yMin').textContent,"
        " m.querySelector('.jp-GpuWidgets-yMax').textContent])")
    got = {m: (lo, hi) for m, lo, hi in scales}
    assert got["utilization"] == ("0", f"100 {metric('utilization').unit}")
    assert got["memory"] == ("0", f"80 {metric('memory').unit}")  # the simulated H100's 80 GiB
    assert re.fullmatch(r"\d+ W", got["power"][1]) and got["power"][0] == "0"
    assert all(lo and hi for lo, hi in got.values()), got


def test_the_tooltip_hides_neither_the_title_nor_the_value(page: Any) -> None:
    card = panel(page).get_by_role("region", name=re.compile(r"^GPU 0: "))
    row = card.locator(".jp-GpuWidgets-metric").first
    chart = row.get_by_role("img")
    for x in (0.95, 0.1):  # cursor near the right edge, then near the left
        box = chart.bounding_box()
        page.mouse.move(box["x"] + box["width"] * x, box["y"] + box["height"] / 2)
        tip = chart.get_by_role("tooltip")
        expect(tip).to_contain_text(re.compile(r"\d\d:\d\d:\d\d · "))
        t = tip.bounding_box()
        head = row.locator(".jp-GpuWidgets-metricHead").bounding_box()
        c = card.bounding_box()
        assert t["y"] >= head["y"] + head["height"], (t, head)  # below the title and value
        assert c["x"] <= t["x"] and t["x"] + t["width"] <= c["x"] + c["width"], (t, c)
        cursor_x = box["x"] + box["width"] * x
        assert not (t["x"] <= cursor_x <= t["x"] + t["width"]), "the tooltip covers the point it explains"
    page.mouse.move(0, 0)


def test_sorting_filtering_and_choosing_a_gpu(page: Any) -> None:
    grid = panel(page).get_by_role("grid", name="GPUs")
    busy = grid.get_by_role("button", name=re.compile(r"^Busy"))
    busy.click()
    expect(grid.get_by_role("columnheader", name=re.compile(r"^Busy"))).to_have_attribute("aria-sort", "descending")
    values = [float(v) for v in rows(page).locator(".jp-GpuWidgets-ov-busy").evaluate_all(
        "cs => cs.map(c => c.textContent.replace(/[^\\d.]/g, ''))")]
    assert values == sorted(values, reverse=True), values
    busy.click()
    expect(grid.get_by_role("columnheader", name=re.compile(r"^Busy"))).to_have_attribute("aria-sort", "ascending")
    grid.get_by_role("button", name=re.compile(r"^GPU")).click()
    expect(rows(page).first).to_have_attribute("data-gpu-index", "0")

    search = panel(page).get_by_role("searchbox", name=re.compile("Filter GPUs"))
    search.fill("5")
    expect(rows(page)).to_have_count(1)
    assert row_order(page) == [5]
    search.fill("")
    expect(rows(page)).to_have_count(N_GPUS)
    activity = panel(page).get_by_role("combobox", name="Show busy or idle GPUs")
    activity.select_option("idle")
    idle = row_order(page)
    activity.select_option("busy")
    busy_rows = row_order(page)
    assert sorted(idle + busy_rows) == list(range(N_GPUS)) and busy_rows, (idle, busy_rows)
    activity.select_option("all")

    # A click on a row shows that GPU's card, in view; Ctrl-click adds a second one.
    rows(page).nth(6).click()
    card6 = panel(page).get_by_role("region", name=re.compile(r"^GPU 6: "))
    expect(card6).to_be_visible()
    expect(card6).to_be_in_viewport()
    expect(rows(page).nth(6)).to_have_attribute("aria-selected", "true")
    expect(panel(page).get_by_role("region", name=re.compile(r"^GPU \d+: "))).to_have_count(1)
    rows(page).nth(2).click(modifiers=["Control"])
    expect(panel(page).get_by_role("region", name=re.compile(r"^GPU \d+: "))).to_have_count(2)
    outside = panel(page).evaluate(OUTSIDE_JS)
    assert outside == [], "\n".join(outside)


# Heights of the card's metric heads, and of each label, with the meter showing ``text``.
HEADS_WITH_JS = """(card, text) => [...card.querySelectorAll('.jp-GpuWidgets-metricHead')].map(h => {
  const v = h.querySelector('[role=meter]'); const was = v.textContent; v.textContent = text;
  const out = [h.parentElement.dataset.metric, h.getBoundingClientRect().height,
               h.querySelector('.jp-GpuWidgets-metricLabel').getBoundingClientRect().height];
  v.textContent = was;
  return out;
})"""


def test_one_line_uuid_whole_tooltip_values_steady_rows_and_simulated_owners(page: Any, lab: LabServer) -> None:
    """Issue 23: what wrapped at the default panel width, and simulated processes that read as the login's."""
    page.mouse.move(0, 0)
    panel(page).locator('[role=row][data-gpu-index="0"]').click()  # GPU 0's card alone
    card = panel(page).get_by_role("region", name=re.compile(r"^GPU 0: "))
    expect(panel(page).get_by_role("region", name=re.compile(r"^GPU \d+: "))).to_have_count(1)
    # A label wraps (or not) the same whatever the number beside it: rows never move as values change.
    narrow, wide = card.evaluate(HEADS_WITH_JS, "5 %"), card.evaluate(HEADS_WITH_JS, "100 %")
    assert narrow == wide, f"metric heads with a short and a long value: {narrow} != {wide}"

    # The spec card's UUID stays on one line, cut with an ellipsis; the whole value in its tooltip.
    card.get_by_role("button", name="Specs").click()
    uuid = card.locator(".jp-GpuWidgets-uuidText")
    expected = lab.get_json("gpu-widgets/api/v1/devices")["devices"][0]["uuid"]
    expect(uuid).to_have_attribute("title", expected)
    lines = uuid.evaluate("u => Math.round(u.getBoundingClientRect().height / parseFloat(getComputedStyle(u).lineHeight))")
    assert lines == 1, f"the UUID takes {lines} lines"
    assert uuid.evaluate("u => getComputedStyle(u).textOverflow") == "ellipsis"
    shoot(card, "sidebar-8-gpus-specs-light")
    card.get_by_role("button", name="Specs").click()

    # The tooltip's time and value never break inside ("92 %" on one line), wherever the cursor is.
    chart = card.locator(".jp-GpuWidgets-metric").first.get_by_role("img")
    chart.scroll_into_view_if_needed()
    tip = chart.get_by_role("tooltip")
    for x in (0.05, 0.3, 0.45, 0.55, 0.7, 0.95):
        box = chart.bounding_box()
        page.mouse.move(box["x"] + box["width"] * x, box["y"] + box["height"] / 2)
        expect(tip).to_contain_text(re.compile(r"\d\d:\d\d:\d\d · \d+ %"))
        parts = tip.locator(".jp-GpuWidgets-tipWhole").evaluate_all(
            "ps => ps.map(p => [p.textContent, new Set([...p.getClientRects()].map(r => Math.round(r.top))).size])")
        assert len(parts) == 2 and all(n == 1 for _, n in parts), f"at {x:.0%} of the chart: {parts}"
    page.mouse.move(0, 0)

    # Simulated processes carry the server's login: both the overview and the card say they are simulated.
    owners = rows(page).locator(".jp-GpuWidgets-ovOwner").all_text_contents()
    assert any(o != "—" for o in owners) and all(o == "—" or o.endswith(" (simulated)") for o in owners), owners
    users = card.locator(".jp-GpuWidgets-process .jp-GpuWidgets-user").all_text_contents()
    assert users and all(u.endswith(" (simulated)") or u == "hidden" for u in users), users
    expect(card.locator(".jp-GpuWidgets-user").first).to_have_attribute("title", re.compile("simulated process"))


def test_text_reads_against_its_background_in_light_and_dark(page: Any) -> None:
    page.mouse.move(0, 0)
    low = panel(page).evaluate(LOW_CONTRAST_JS, 4.5)
    assert low == [], "\n".join(low)
    page.get_by_role("menuitem", name="Settings").click()
    page.locator('.lm-Menu-item[data-type="submenu"]', has_text=re.compile(r"^Theme$")).click()
    page.get_by_role("menuitem", name="JupyterLab Dark", exact=True).click()
    expect(page.locator("body")).to_have_attribute("data-jp-theme-light", "false", timeout=30_000)
    expect(page.locator("#jupyterlab-splash")).to_have_count(0, timeout=30_000)
    page.wait_for_timeout(500)
    shoot(page, "sidebar-8-gpus-dark")
    low = panel(page).evaluate(LOW_CONTRAST_JS, 4.5)
    assert low == [], "\n".join(low)
    outside = panel(page).evaluate(OUTSIDE_JS)
    assert outside == [], "\n".join(outside)


def test_the_settings_editor_offers_labelled_metric_checkboxes(page: Any, lab: LabServer) -> None:
    """Last in the module: it changes the `metrics` setting (and puts it back)."""
    page.get_by_role("menuitem", name="Settings").click()
    page.get_by_role("menuitem", name=re.compile(r"^Settings Editor")).click()
    page.get_by_text("GPU Widgets", exact=True).first.click()
    every = page.get_by_role("checkbox", name=re.compile(r"^Every metric the server offers"))
    expect(every).to_be_checked(timeout=30_000)
    power = page.get_by_role("checkbox", name=re.compile(rf"^{re.escape(metric('power').label)} \(power\)"))
    expect(power).to_be_checked()
    power.uncheck()
    expect(every).not_to_be_checked()

    def saved() -> dict[str, Any]:
        raw = lab.get_json("lab/api/settings/gpu-widgets:plugin").get("raw") or "{}"
        return json.loads(re.sub(r"^\s*//.*$", "", raw, flags=re.M) or "{}")

    def wait_saved(has_metrics: bool) -> dict[str, Any]:
        deadline = time.monotonic() + 10
        while ("metrics" in (value := saved())) != has_metrics and time.monotonic() < deadline:
            page.wait_for_timeout(250)
        return value

    # Saved as the same list of ids as before (no migration), in the catalogue's order.
    assert wait_saved(True).get("metrics") == [m.id for m in shown_in(SIDEBAR) if m.id != "power"]
    shoot(page, "settings-editor-metrics")
    every.check()
    assert "metrics" not in wait_saved(False)  # unset again: every metric, new ones too
