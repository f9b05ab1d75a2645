"""Retake docs/screenshots/: the sidebar and each example, light and dark, 2 and 8 simulated GPUs.

For each GPU count one JupyterLab starts with simulated GPUs (a power-cap episode on GPU 0 and a
short lost stretch on GPU 1, so the charts show what they can mark). The sidebar is opened with a
one-minute history window and shot once the window is full (2 GPUs: the cards, 1280 px wide;
8 GPUs: the overview, in a 1366x768 window). Then each example notebook is run with Run All and
its first widget output is shot. Every picture is taken in the light theme, then again after
switching to the dark one from the Settings menu. Names: ``<what>-<gpus>gpu-<theme>.png``, e.g.
``sidebar-8gpu-dark.png``, ``example-quickstart-2gpu-light.png``.

``--only cluster`` shoots the Cluster view instead (``cluster-2hosts-light.png`` / ``-dark.png``): two
JupyterLabs with simulated GPUs as hosts node-a (2 GPUs) and node-b (3), scraped by Debian's real
``prometheus`` (tests/prometheus_fixture.py), seen from node-a's sidebar.

    .venv/bin/python scripts/screenshots.py [--out docs/screenshots] [--gpus N] [--only sidebar|examples|cluster]
                                            [--example STEM ...]
    (or: make screenshots; about 6 minutes for everything on two cores)
"""
from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpu_widgets.metrics.catalogue import metric  # noqa: E402  (the chart's name is the catalogue's label)
from tests.browser_fixtures import open_notebook, run_all_cells, switch_theme  # noqa: E402
from tests.lab_server import LabServer, chromium_available, launch_chromium  # noqa: E402

WINDOW_S = 60
FILL_S = 62  # the one-minute window is full a little after this
SIDEBAR_WIDTH_PX = 360
GPU_COUNTS = (2, 8)
# Past two GPUs the sidebar leads with its overview: shown in a common laptop window.
CARDS_VIEWPORT = {"width": 1280, "height": 1200}
OVERVIEW_VIEWPORT = {"width": 1366, "height": 768}
# Tall enough that a whole widget output (8 GPUs' cards over the charts) fits on the page.
NOTEBOOK_VIEWPORT = {"width": 1280, "height": 2200}
EXAMPLES = ROOT / "examples"
# The training examples (PyTorch and the three framework callbacks) are shot with 2 GPUs (or fewer)
# only: the PyTorch one trains for about a minute on two cores.
EXAMPLES_FEW = ("quickstart", "gpuwatch_magic", "train_torch", "lightning", "huggingface", "keras", "distributed",
                "profile", "memory")
EXAMPLES_MANY = ("quickstart", "gpuwatch_magic")
THEMES = {"light": "JupyterLab Light", "dark": "JupyterLab Dark"}
# memory.ipynb fails one cell on purpose (an out-of-memory step: Run All stops there) and shoots its
# post-mortem beside the snapshot view
EXPECTED_ERRORS = {"memory": "OutOfMemoryError"}
EXTRA_SHOTS = {"memory": {"oom": ".gpuw-oom"}}
FAULTS = "throttle:0@14-30:sw_power_cap; lost:1@36-42"  # seconds after the server starts
SETTINGS = {
    "gpu-widgets:plugin": {"historyWindowS": WINDOW_S, "refreshIntervalMs": 500},
    # Lay out every cell, on screen or not (a picture of an off-screen output is otherwise blank).
    "@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"},
}
TAB = '.jp-SideBar .lm-TabBar-tab[data-id="gpu-widgets-sidebar"]'
PICTURES_LOADED_JS = "() => [...document.querySelectorAll('img.gpuw-png')].every(img => img.complete)"


def log(msg: str) -> None:
    print(f"[screenshots] {msg}", flush=True)


def shown(path: Path) -> str:
    return str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)


def widen_sidebar(page: Any, width: int) -> None:
    """Drag the handle between the left sidebar and the main area."""
    box = page.locator("#gpu-widgets-sidebar").bounding_box()
    hbox = page.locator("#jp-main-split-panel > .lm-SplitPanel-handle").first.bounding_box()
    x, y = hbox["x"] + hbox["width"] / 2, hbox["y"] + 300
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(box["x"] + width, y, steps=8)
    page.mouse.up()


def shoot_sidebar(page: Any, path: Path) -> None:
    box = page.locator("#gpu-widgets-sidebar").bounding_box()
    status = page.locator("#jp-main-statusbar").bounding_box()
    top = box["y"]  # below the menu bar
    page.screenshot(
        path=str(path),
        clip={"x": 0, "y": top, "width": box["x"] + box["width"] + 1, "height": status["y"] + status["height"] - top},
    )
    log(f"wrote {shown(path)}")


def hover_band(page: Any, lab: LabServer) -> None:
    """Rest the cursor on GPU 0's utilization chart inside the power-cap band (its tooltip shows)."""
    hist = lab.api("samples", max_points=5000)
    first, last = hist["timestamps"][0], hist["timestamps"][-1]
    t = first + 22  # inside the episode, which the sampler dates from its own start
    card = page.get_by_role("region", name="GPU 0: Simulated NVIDIA H100 80GB HBM3")
    chart = card.get_by_role("img", name=f"{metric('utilization').label} over the last 60 s")
    if not chart.count():
        log("GPU 0's utilization chart is not shown: no tooltip in this picture")
        return
    box = chart.bounding_box()
    frac = (t - (last - WINDOW_S)) / WINDOW_S
    page.mouse.move(box["x"] + box["width"] * min(max(frac, 0.05), 0.95), box["y"] + box["height"] / 2)
    page.wait_for_timeout(300)


def sidebar(browser: Any, lab: LabServer, gpus: int, out: Path, started: float) -> None:
    from playwright.sync_api import expect

    page = browser.new_page(viewport=CARDS_VIEWPORT if gpus <= 2 else OVERVIEW_VIEWPORT, device_scale_factor=2)
    try:
        page.goto(lab.lab_url(), timeout=60_000)
        page.locator(TAB).click(timeout=60_000)
        panel = page.get_by_role("region", name="GPU Dashboard", exact=True)
        expect(panel).to_be_visible()
        widen_sidebar(page, SIDEBAR_WIDTH_PX)
        wait = FILL_S - (time.monotonic() - started)
        if wait > 0:
            log(f"letting the sidebar's charts fill for {wait:.0f} s")
            page.wait_for_timeout(wait * 1000)
        expect(panel.get_by_role("list", name="Chart markers").first).to_contain_text("power cap")
        for theme, name in THEMES.items():
            # The theme changes live (IThemeManager.themeChanged): the charts re-read their colours.
            switch_theme(page, name)
            hover_band(page, lab)
            shoot_sidebar(page, out / f"sidebar-{gpus}gpu-{theme}.png")
    finally:
        page.close()


def cluster(out: Path) -> None:
    """The Cluster view of node-a, with node-b beside it, both read back from a real Prometheus."""
    from playwright.sync_api import expect, sync_playwright

    from tests.prometheus_fixture import (INSTALL_HINT, Prometheus, gpu_host, jupyter_scrape_config,
                                          prometheus_available)

    if not prometheus_available():
        raise SystemExit(f"prometheus is missing: {INSTALL_HINT}")
    prom = Prometheus()
    a = gpu_host("node-a", gpus=2, seed=1, prometheus_url=prom.url, settings=SETTINGS)
    b = gpu_host("node-b", gpus=3, seed=2, prometheus_url=prom.url)
    for name, server in (("node-a", a), ("node-b", b)):
        prom.add(jupyter_scrape_config(name, server))
    log("starting two JupyterLabs (node-a, node-b) and Prometheus")
    with a, b, prom, sync_playwright() as pw:
        started = time.monotonic()
        browser = launch_chromium(pw)
        try:
            page = browser.new_page(viewport=CARDS_VIEWPORT, device_scale_factor=2)
            page.goto(a.lab_url(), timeout=60_000)
            page.locator(TAB).click(timeout=60_000)
            widen_sidebar(page, SIDEBAR_WIDTH_PX)
            page.get_by_role("tab", name="Cluster").click(timeout=60_000)
            expect(page.locator(".jp-GpuWidgets-hostRow")).to_have_count(2, timeout=60_000)
            # Prometheus keeps a point per 15 s step: a minute gives each sparkline a few.
            wait = FILL_S - (time.monotonic() - started)
            if wait > 0:
                log(f"letting the cluster's history fill for {wait:.0f} s")
                page.wait_for_timeout(wait * 1000)
            for theme, name in THEMES.items():
                switch_theme(page, name)
                page.mouse.move(0, 0)
                shoot_sidebar(page, out / f"cluster-2hosts-{theme}.png")
        finally:
            browser.close()


def shoot_output(page: Any, output: Any, out: Path, stem: str) -> None:
    """One output, in each theme: ``<stem>-light.png``, ``<stem>-dark.png``."""
    for theme, name in THEMES.items():
        switch_theme(page, name)
        output.scroll_into_view_if_needed()
        path = out / f"{stem}-{theme}.png"
        output.screenshot(path=str(path))
        log(f"wrote {shown(path)}")


def example(browser: Any, lab: LabServer, gpus: int, stem: str, out: Path) -> None:
    page = browser.new_page(viewport=NOTEBOOK_VIEWPORT, device_scale_factor=1)
    try:
        open_notebook(page, lab.base_url, lab.token, f"{stem}.ipynb")
        switch_theme(page, THEMES["light"])  # the theme is a user setting: the last page chose it
        started = time.monotonic()
        run_all_cells(page, f"{stem}.ipynb", timeout_s=420)
        log(f"{stem}: ran in {time.monotonic() - started:.0f} s")
        errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.error']")
        unexpected = [e for e in errors.all() if EXPECTED_ERRORS.get(stem, "\0") not in e.inner_text()]
        if unexpected:
            raise RuntimeError(f"{stem}.ipynb raised: {unexpected[0].inner_text()}")
        page.wait_for_timeout(1000)  # the last redraw
        for part, selector in EXTRA_SHOTS.get(stem, {}).items():  # a second picture of the same run
            shoot_output(page, page.locator(".jp-OutputArea-output", has=page.locator(selector)).first,
                         out, f"example-{stem}-{part}-{gpus}gpu")
        # A live widget, or the picture a finished monitor or stopped dashboard leaves (final_output).
        output = page.locator(".jp-OutputArea-output", has=page.locator(".widget-vbox, .gpuw-static")).first
        page.wait_for_function(PICTURES_LOADED_JS)
        shoot_output(page, output, out, f"example-{stem}-{gpus}gpu")
    finally:
        page.close()
        for session in lab.get_json("api/sessions"):  # its kernel would keep sampling beside the next one
            lab.request_json("DELETE", f"api/sessions/{session['id']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    parser.add_argument("--gpus", type=int, choices=range(1, 65), metavar="1-64",
                        help=f"only this many simulated GPUs (default: each of {', '.join(map(str, GPU_COUNTS))})")
    parser.add_argument("--only", choices=("sidebar", "examples", "cluster"),
                        help="only the sidebar, only the examples, or only the Cluster view")
    parser.add_argument("--example", action="append", choices=EXAMPLES_FEW, metavar="STEM",
                        help="only this example notebook (repeatable; e.g. --example keras)")
    args = parser.parse_args()
    if not chromium_available():
        print("chromium is missing: run scripts/ensure-chromium.sh", file=sys.stderr)
        return 1
    from playwright.sync_api import sync_playwright

    args.out.mkdir(parents=True, exist_ok=True)
    if args.only == "cluster":
        cluster(args.out)
        return 0
    for gpus in (args.gpus,) if args.gpus else GPU_COUNTS:
        env = {"GPU_WIDGETS_BACKEND": "simulated", "GPU_WIDGETS_SIMULATED_GPUS": str(gpus),
               "GPU_WIDGETS_SIMULATED_FAULTS": FAULTS if gpus >= 2 else FAULTS.split(";")[0]}
        log(f"starting JupyterLab with {gpus} simulated GPUs")
        lab = LabServer(env=env, args=["--GpuWidgets.interval_s=0.5"], settings=SETTINGS)
        lab.extra_env["GPU_WIDGETS_RUN_DIR"] = str(lab.workdir / "runs")  # the examples' run logs: thrown away
        with lab, sync_playwright() as pw:
            started = time.monotonic()
            browser = launch_chromium(pw)
            try:
                if args.only != "examples":
                    sidebar(browser, lab, gpus, args.out, started)
                if args.only != "sidebar":
                    for stem in EXAMPLES_FEW if gpus <= 2 else EXAMPLES_MANY:
                        if args.example and stem not in args.example:
                            continue
                        shutil.copy(EXAMPLES / f"{stem}.ipynb", lab.root / f"{stem}.ipynb")
                        for script in EXAMPLES.glob(f"{stem}_*.*"):  # a script it launches, data it reads
                            shutil.copy(script, lab.root / script.name)
                        example(browser, lab, gpus, stem, args.out)
            finally:
                browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
