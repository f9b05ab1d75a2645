"""The sidebar's Cluster view in a real JupyterLab (auth on), read from Debian's real Prometheus.

Two ``jupyter lab`` servers with simulated GPUs are two hosts, node-a (2 GPUs) and node-b (3 GPUs);
Prometheus scrapes each one's ``/gpu-widgets/metrics`` every second with its token, and node-a's
``c.GpuWidgets.prometheus_url`` points at it. One page of node-a in a 1366x768 window, for all checks
in order: the "This machine | Cluster" switch; both hosts with their GPU counts, node-a marked as
this server and both marked SIMULATED; every host open at a glance (two hosts) with a line and a
sparkline per GPU; a click closes and reopens a host; nothing overflows the panel and text reads
against its background in light and dark; node-b stopped -> greyed "no data for N s"; Prometheus
stopped -> the reason in words while "This machine" still shows node-a's GPUs. Last, a cluster of 150
made-up hosts (a synthetic target): the server sends a page of 100, and a host past it is found by
typing part of its name, and opened.

Screenshots go to build/screenshots/ (ignored by git).
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from .browser_fixtures import LOW_CONTRAST_JS, panel, shoot, sidebar_page, switch_theme
from .browser_fixtures import browser, jp_asyncio_loop, jp_server_cleanup  # noqa: F401 (fixtures)
from .prometheus_fixture import (Prometheus, SyntheticTarget, gpu_host, jupyter_scrape_config, require_prometheus,
                                 static_scrape_config, synthetic_hostname)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect

GPUS = {"node-a": 2, "node-b": 3}
SCRAPE_S = 1.0
# Deadlines with wide margins (a loaded 2-core machine): the view refreshes every 5 s, the server
# asks Prometheus every second, a stopped host is stale within two scrape intervals.
DEADLINE_MS = 45_000

# Elements of the Cluster view that leave the panel sideways, or whose text is cut (ellipsis).
OVERFLOW_JS = """panel => {
  const r = panel.getBoundingClientRect();
  const out = [];
  for (const el of panel.querySelectorAll('*')) {
    const e = el.getBoundingClientRect();
    if (!e.width || !e.height || el.closest('[hidden], .jp-GpuWidgets-tooltip')) continue;
    if (e.left < r.left - 1 || e.right > r.right + 1) out.push(`${el.className || el.tagName} leaves the panel`);
    const text = [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
    if (text && el.scrollWidth > el.clientWidth + 1 && getComputedStyle(el).display !== 'inline') {
      out.push(`${el.className || el.tagName} "${el.textContent.trim().slice(0, 30)}" is cut`);
    }
  }
  return out;
}"""


class Cluster:
    def __init__(self) -> None:
        require_prometheus()
        self.prom = Prometheus()
        self.a = gpu_host("node-a", gpus=GPUS["node-a"], seed=1, prometheus_url=self.prom.url)
        self.b = gpu_host("node-b", gpus=GPUS["node-b"], seed=2, prometheus_url=self.prom.url)
        for name, server in (("node-a", self.a), ("node-b", self.b)):
            self.prom.add(jupyter_scrape_config(name, server, SCRAPE_S))


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = Cluster()
    try:
        c.a.start()
        c.b.start()
        c.prom.start()
        c.prom.wait_for_series('DCGM_FI_DEV_GPU_UTIL{Hostname=~"node-a|node-b"}', count=sum(GPUS.values()))
        yield c
    finally:
        c.prom.__exit__(None, None, None)
        c.a.stop()
        c.b.stop()


@pytest.fixture(scope="module")
def page(browser: Any, cluster: Cluster) -> Iterator[Any]:
    with sidebar_page(browser, cluster.a.lab_url()) as p:
        yield p


def host_rows(page: Any) -> Any:
    return panel(page).get_by_role("grid", name="Hosts").locator(".jp-GpuWidgets-hostRow")


def host(page: Any, name: str) -> Any:
    return panel(page).get_by_role("row", name=name, exact=True)


def test_the_switch_opens_the_cluster_view_with_both_hosts(page: Any) -> None:
    tabs = panel(page).get_by_role("tablist", name="GPUs of")
    expect(tabs.get_by_role("tab", name="This machine")).to_have_attribute("aria-selected", "true", timeout=60_000)
    tabs.get_by_role("tab", name="Cluster").click()
    expect(tabs.get_by_role("tab", name="Cluster")).to_have_attribute("aria-selected", "true")
    expect(host_rows(page)).to_have_count(2, timeout=DEADLINE_MS)
    assert host_rows(page).evaluate_all("rs => rs.map(r => r.dataset.host)") == ["node-a", "node-b"]
    for name, gpus in GPUS.items():
        expect(host(page, name).locator(".jp-GpuWidgets-h-gpus")).to_have_text(str(gpus))
        expect(host(page, name).locator(".jp-GpuWidgets-h-utilization")).to_have_text(re.compile(r"^\d+ %$"))
    expect(host(page, "node-a").locator(".jp-GpuWidgets-thisServer")).to_have_text("this server")
    expect(host(page, "node-b").locator(".jp-GpuWidgets-thisServer")).to_have_count(0)
    # Both hosts' GPUs are simulated: said on each row, as the local sidebar says it, and in the totals
    for name in GPUS:
        badge = host(page, name).locator(".jp-GpuWidgets-badge")
        expect(badge).to_have_text("SIMULATED")
        expect(badge).to_be_visible()
        assert "made-up readings" in (badge.get_attribute("title") or "")
    expect(panel(page).get_by_role("status", name="Cluster totals")).to_have_text(
        re.compile(r"^2 hosts · 5 GPUs · \d+ busy · \d+ free · 2 simulated$"))


def test_two_hosts_are_open_at_a_glance_with_a_line_and_a_sparkline_per_gpu(page: Any) -> None:
    for name, gpus in GPUS.items():
        expect(host(page, name)).to_have_attribute("aria-expanded", "true")
        detail = panel(page).get_by_role("region", name=f"GPUs of {name}")
        lines = detail.get_by_role("listitem")
        expect(lines).to_have_count(gpus, timeout=DEADLINE_MS)
        for i in range(gpus):
            line = detail.get_by_role("listitem", name=f"GPU {i} of {name}")
            expect(line).to_contain_text(re.compile(r"\d+ %.*GiB.*°C.*W"))
            expect(line).to_contain_text("Simulated H100")  # the model, as Prometheus labels it, marked simulated
    # History builds up at Prometheus's step: a sparkline shows once two points exist.
    expect(panel(page).get_by_role("img", name=re.compile(r"^GPU 0 utilization")).first).to_be_attached(timeout=DEADLINE_MS)
    # A click closes a host, another opens it again.
    host(page, "node-b").click()
    expect(host(page, "node-b")).to_have_attribute("aria-expanded", "false")
    expect(panel(page).get_by_role("region", name="GPUs of node-b")).to_have_count(0)
    host(page, "node-b").click()
    expect(panel(page).get_by_role("region", name="GPUs of node-b").get_by_role("listitem")).to_have_count(GPUS["node-b"])


def test_nothing_overflows_and_text_reads_in_light_and_dark(page: Any) -> None:
    page.mouse.move(0, 0)
    view = panel(page)
    shoot(page, "cluster-2hosts-light")
    for theme in ("JupyterLab Light", "JupyterLab Dark"):
        switch_theme(page, theme)
        expect(view.get_by_role("region", name="GPU cluster")).to_be_visible()
        out = view.evaluate(OVERFLOW_JS)
        assert out == [], f"{theme}:\n" + "\n".join(out)
        low = view.evaluate(LOW_CONTRAST_JS, 4.5)
        assert low == [], f"{theme}:\n" + "\n".join(low)
    shoot(page, "cluster-2hosts-dark")
    switch_theme(page, "JupyterLab Light")


def test_a_stopped_host_is_greyed_with_how_long_it_has_been_silent(page: Any, cluster: Cluster) -> None:
    cluster.b.stop()
    stale = host(page, "node-b")
    expect(stale).to_have_attribute("data-stale", "true", timeout=DEADLINE_MS)
    expect(stale).to_have_class(re.compile(r"\bjp-mod-stale\b"))
    expect(stale.locator(".jp-GpuWidgets-staleNote")).to_have_text(re.compile(r"^no data for \d+ (s|min)$"))
    expect(stale.locator(".jp-GpuWidgets-h-gpus")).to_have_text(str(GPUS["node-b"]))
    expect(host(page, "node-a")).to_have_attribute("data-stale", "false")
    expect(panel(page).get_by_role("status", name="Cluster totals")).to_contain_text("1 stale")
    # Greyed: the stale row's text is lighter than a live row's.
    colours = [host(page, n).evaluate("r => getComputedStyle(r).color") for n in ("node-a", "node-b")]
    assert colours[0] != colours[1], colours
    shoot(page, "cluster-stale-host")


def test_prometheus_stopped_is_said_in_words_and_this_machine_keeps_working(page: Any, cluster: Cluster) -> None:
    cluster.prom.stop()
    alert = panel(page).get_by_role("alert", name="The cluster cannot be shown")
    expect(alert).to_contain_text(re.compile(rf"Prometheus at {re.escape(cluster.prom.url)} cannot be reached"),
                                  timeout=DEADLINE_MS)
    shoot(page, "cluster-prometheus-down")
    panel(page).get_by_role("tab", name="This machine").click()
    cards = panel(page).get_by_role("region", name=re.compile(r"^GPU \d+: "))
    expect(cards).to_have_count(GPUS["node-a"], timeout=DEADLINE_MS)
    expect(panel(page).get_by_role("alert")).to_have_count(0)


MANY_HOSTS = 150


@pytest.fixture()
def big_cluster() -> Iterator[Any]:
    """A Jupyter server whose Prometheus scrapes MANY_HOSTS made-up hosts of 8 GPUs."""
    require_prometheus()
    with SyntheticTarget(MANY_HOSTS) as target, Prometheus([static_scrape_config("many", target.port, 2.0)]) as prom:
        prom.wait_for_series(f"count(DCGM_FI_DEV_GPU_UTIL) >= {MANY_HOSTS * 8}", count=1, timeout_s=120)
        server = gpu_host("head", gpus=1, prometheus_url=prom.url)
        server.start()
        try:
            yield server
        finally:
            server.stop()


def test_a_host_past_the_first_page_is_found_by_its_name_and_opened(browser: Any, big_cluster: Any) -> None:
    with sidebar_page(browser, big_cluster.lab_url()) as p:
        panel(p).get_by_role("tab", name="Cluster").click(timeout=60_000)
        # Given 150 hosts, the server sends the first page of 100, and the totals count every host
        expect(host_rows(p)).to_have_count(100, timeout=DEADLINE_MS)
        expect(panel(p).get_by_role("status", name="Cluster totals")).to_contain_text(f"{MANY_HOSTS} hosts · 1200 GPUs")
        expect(panel(p).get_by_role("status", name="Hosts shown")).to_have_text(f"Hosts 1–100 of {MANY_HOSTS}")
        last = synthetic_hostname(MANY_HOSTS - 1)
        expect(host(p, last)).to_have_count(0)
        # when part of its name is typed (another case), the server filters every host
        panel(p).get_by_role("searchbox", name="Filter hosts by name").fill(last.upper()[-6:])
        expect(host_rows(p)).to_have_count(1, timeout=DEADLINE_MS)
        # then it is listed, and a click opens its GPUs
        host(p, last).click()
        expect(host(p, last)).to_have_attribute("aria-expanded", "true")
        gpus = panel(p).get_by_role("region", name=f"GPUs of {last}").get_by_role("listitem")
        expect(gpus).to_have_count(8, timeout=DEADLINE_MS)
        shoot(p, "cluster-filtered-past-first-page")
        # and, the filter cleared, the next page holds the rest
        panel(p).get_by_role("searchbox", name="Filter hosts by name").fill("")
        expect(host_rows(p)).to_have_count(100, timeout=DEADLINE_MS)
        panel(p).get_by_role("button", name="Next 50 (50 more hosts)").click()
        expect(panel(p).get_by_role("status", name="Hosts shown")).to_have_text(
            f"Hosts 101–{MANY_HOSTS} of {MANY_HOSTS}", timeout=DEADLINE_MS)
        expect(host_rows(p)).to_have_count(MANY_HOSTS - 100)
        expect(host(p, last)).to_be_visible()
