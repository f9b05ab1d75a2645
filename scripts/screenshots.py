"""Refresh the README's sidebar screenshots: docs/screenshots/sidebar-{light,dark}.png.

Starts JupyterLab with two simulated GPUs (a power-cap episode on GPU 0 and a short lost
stretch on GPU 1, so the charts show what they can mark), opens the GPU sidebar with a
one-minute history window, waits for the charts to fill, and shoots the sidebar in the light
theme and, after switching themes from the Settings menu, in the dark one.

    .venv/bin/python scripts/screenshots.py [--out docs/screenshots]   (or: make screenshots)
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpu_widgets.metrics.catalogue import metric  # noqa: E402  (the chart's name is the catalogue's label)
from tests.lab_server import LabServer, chromium_available, launch_chromium  # noqa: E402

WINDOW_S = 60
FILL_S = 62  # the one-minute window is full a little after this
SIDEBAR_WIDTH_PX = 360
VIEWPORT = {"width": 1280, "height": 1200}
ENV = {
    "GPU_WIDGETS_BACKEND": "simulated",
    "GPU_WIDGETS_SIMULATED_GPUS": "2",
    # Seconds after the server starts: GPU 0 at its power cap, GPU 1 briefly not answering.
    "GPU_WIDGETS_SIMULATED_FAULTS": "throttle:0@14-30:sw_power_cap; lost:1@36-42",
}
SETTINGS = {"gpu-widgets:plugin": {"historyWindowS": WINDOW_S, "refreshIntervalMs": 500}}
TAB = '.jp-SideBar .lm-TabBar-tab[data-id="gpu-widgets-sidebar"]'


def log(msg: str) -> None:
    print(f"[screenshots] {msg}", flush=True)


def widen_sidebar(page, width: int) -> None:
    """Drag the handle between the left sidebar and the main area."""
    panel = page.locator("#gpu-widgets-sidebar")
    box = panel.bounding_box()
    handle = page.locator("#jp-main-split-panel > .lm-SplitPanel-handle").first
    hbox = handle.bounding_box()
    x, y = hbox["x"] + hbox["width"] / 2, hbox["y"] + 300
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x + (box["x"] + width - x), y, steps=8)
    page.mouse.up()


def shoot(page, path: Path) -> None:
    box = page.locator("#gpu-widgets-sidebar").bounding_box()
    status = page.locator("#jp-main-statusbar").bounding_box()
    top = box["y"]  # below the menu bar
    page.screenshot(
        path=str(path),
        clip={"x": 0, "y": top, "width": box["x"] + box["width"] + 1, "height": status["y"] + status["height"] - top},
    )
    log(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


def hover_band(page, lab: LabServer) -> None:
    """Rest the cursor on GPU 0's utilization chart inside the power-cap band (its tooltip shows)."""
    hist = lab.api("samples", max_points=5000)
    first, last = hist["timestamps"][0], hist["timestamps"][-1]
    t = first + 22  # inside the episode, which the sampler dates from its own start
    chart = page.get_by_role("region", name="GPU 0: Simulated NVIDIA H100 80GB HBM3").get_by_role(
        "img", name=f"{metric('utilization').label} over the last 60 s")
    box = chart.bounding_box()
    frac = (t - (last - WINDOW_S)) / WINDOW_S
    page.mouse.move(box["x"] + box["width"] * min(max(frac, 0.05), 0.95), box["y"] + box["height"] / 2)
    page.wait_for_timeout(300)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    parser.add_argument("--gpus", type=int, default=2, choices=range(1, 65), metavar="1-64",
                        help="simulated GPUs (2 for the docs; 8 to look at a full node)")
    args = parser.parse_args()
    ENV["GPU_WIDGETS_SIMULATED_GPUS"] = str(args.gpus)
    if not chromium_available():
        print("chromium is missing: run scripts/ensure-chromium.sh", file=sys.stderr)
        return 1
    from playwright.sync_api import expect, sync_playwright

    args.out.mkdir(parents=True, exist_ok=True)
    log("starting JupyterLab with simulated GPUs")
    with LabServer(env=ENV, args=["--GpuWidgets.interval_s=0.5"], settings=SETTINGS) as lab, sync_playwright() as pw:
        started = time.monotonic()
        browser = launch_chromium(pw)
        try:
            page = browser.new_page(viewport=VIEWPORT, device_scale_factor=2)
            page.goto(lab.lab_url(), timeout=60_000)
            page.locator(TAB).click(timeout=60_000)
            panel = page.get_by_role("region", name="GPU Dashboard", exact=True)
            expect(panel).to_be_visible()
            widen_sidebar(page, SIDEBAR_WIDTH_PX)
            wait = FILL_S - (time.monotonic() - started)
            if wait > 0:
                log(f"letting the charts fill for {wait:.0f} s")
                page.wait_for_timeout(wait * 1000)
            expect(panel.get_by_role("list", name="Chart markers").first).to_contain_text("power cap")
            hover_band(page, lab)
            shoot(page, args.out / "sidebar-light.png")

            # The theme changes live (IThemeManager.themeChanged): the charts re-read their colours.
            page.get_by_role("menuitem", name="Settings").click()
            page.locator(".lm-Menu-item[data-type=\"submenu\"]", has_text=re.compile(r"^Theme$")).click()
            page.get_by_role("menuitem", name="JupyterLab Dark", exact=True).click()
            expect(page.locator("body")).to_have_attribute("data-jp-theme-light", "false", timeout=30_000)
            page.wait_for_timeout(1500)  # the theme's CSS, then the charts' redraw
            hover_band(page, lab)
            shoot(page, args.out / "sidebar-dark.png")
        finally:
            browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
