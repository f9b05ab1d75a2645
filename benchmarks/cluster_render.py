"""The sidebar's Cluster view in Chromium: how long its host table takes to render.

``measure_render(base_url, token)`` opens JupyterLab at ``base_url`` (a server whose
``c.GpuWidgets.prometheus_url`` is set, with the jupyterlab extension loaded) in the Debian chromium,
opens the GPU panel, switches to the Cluster view and reads the timings the view records itself
(``performance.measure`` entries, labextension/src/cluster/clusterView.tsx):

- ``gpu-widgets:cluster-render``: from the start of the view's render to its layout effect (React's
  render and commit of the table);
- ``gpu-widgets:cluster-paint``: from the same start to the frame after (style, layout and paint too).

Reported: the first render with data, the re-renders on the next refreshes (every ~5 s), the time
from the click on "Cluster" to the first host row on screen, and a render with every host shown
("Show more" until none is left; null since the server pages the hosts, 100 at most). Used by benchmarks/cluster.py (500 hosts x 8 GPUs); on its own:

    python -m benchmarks.cluster_render http://127.0.0.1:8888/ TOKEN
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SIDEBAR_TAB = '.jp-SideBar .lm-TabBar-tab[data-id="gpu-widgets-sidebar"]'
RENDER = "gpu-widgets:cluster-render"
PAINT = "gpu-widgets:cluster-paint"
ENTRIES_JS = """names => names.map(name => performance.getEntriesByName(name).map(e => ({
  ms: e.duration, rows: e.detail && e.detail.rows, hosts: e.detail && e.detail.hosts,
  queried_at: e.detail && e.detail.queriedAt })))"""


def _stats(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0, "median": None, "max": None}
    return {"n": len(values), "median": round(statistics.median(values), 2), "max": round(max(values), 2)}


def measure_render(base_url: str, token: str, refreshes: int = 2, timeout_s: float = 120) -> dict[str, Any]:
    """Timings of the Cluster view's host table in Chromium, in milliseconds (see the module's doc)."""
    sys.path.insert(0, str(REPO))
    try:
        from playwright.sync_api import sync_playwright

        from tests.lab_server import launch_chromium
    finally:
        sys.path.pop(0)
    base = base_url if base_url.endswith("/") else base_url + "/"
    timeout_ms = timeout_s * 1000
    with sync_playwright() as pw:
        browser = launch_chromium(pw)
        try:
            page = browser.new_context(viewport={"width": 1366, "height": 768}).new_page()
            response = page.goto(f"{base}lab?reset&token={token}", timeout=timeout_ms)
            if response is None or response.status != 200:
                status = response.status if response else "no answer"
                raise RuntimeError(f"{base}lab answered {status}: is the jupyterlab extension loaded on that server?")
            page.locator(SIDEBAR_TAB).click(timeout=timeout_ms)
            cluster_tab = page.get_by_role("tab", name="Cluster")
            try:
                cluster_tab.wait_for(timeout=timeout_ms)
            except Exception as error:
                raise RuntimeError("the GPU panel offers no Cluster view: is c.GpuWidgets.prometheus_url set "
                                   "on that server, and the labextension built?") from error
            t0 = time.perf_counter()
            cluster_tab.click()
            page.locator(".jp-GpuWidgets-hostRow").first.wait_for(timeout=timeout_ms)
            click_to_rows_ms = (time.perf_counter() - t0) * 1e3

            # Wait for `refreshes` new answers (a new query time each) after the first one.
            deadline = time.monotonic() + timeout_s
            while True:
                renders, paints = page.evaluate(ENTRIES_JS, [RENDER, PAINT])
                seen = list(dict.fromkeys(r["queried_at"] for r in renders))
                if len(seen) > refreshes or time.monotonic() > deadline:
                    break
                page.wait_for_timeout(250)
            first_at = renders[0]["queried_at"]
            later = [r["ms"] for r in renders if r["queried_at"] != first_at]
            later_paint = [p["ms"] for p in paints if p["queried_at"] != first_at]

            # Then every host at once: "Show more" until the list is whole.
            more = page.locator(".jp-GpuWidgets-showMore")
            while more.count():
                more.click()
            page.wait_for_timeout(500)  # the paint entry lands a frame later
            all_renders, all_paints = page.evaluate(ENTRIES_JS, [RENDER, PAINT])
            whole = [r for r in all_renders if r["rows"] == r["hosts"]]
            whole_paint = [p for p in all_paints if p["rows"] == p["hosts"]]
            return {
                "hosts": renders[0]["hosts"],
                "rows_drawn": renders[0]["rows"],
                "click_to_rows_ms": round(click_to_rows_ms, 1),
                "first_render_ms": round(renders[0]["ms"], 2),
                "first_paint_ms": round(paints[0]["ms"], 2) if paints else None,
                "refresh_render_ms": _stats(later),
                "refresh_paint_ms": _stats(later_paint),
                "refreshes_seen": len(seen) - 1,
                "all_rows_render_ms": round(whole[-1]["ms"], 2) if whole else None,
                "all_rows_paint_ms": round(whole_paint[-1]["ms"], 2) if whole_paint else None,
            }
        finally:
            browser.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Time the sidebar's Cluster view in Chromium.")
    parser.add_argument("base_url", help="the Jupyter server, e.g. http://127.0.0.1:8888/")
    parser.add_argument("token", help="its token")
    parser.add_argument("--refreshes", type=int, default=2, help="refreshes to wait for (default 2)")
    args = parser.parse_args(argv)
    if args.refreshes < 0:
        parser.error("--refreshes must be 0 or more")
    print(json.dumps(measure_render(args.base_url, args.token, args.refreshes), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
