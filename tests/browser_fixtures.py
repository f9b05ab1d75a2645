"""Fixtures shared by the browser tests (import them into a test module to use them)."""
from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from .lab_server import chromium_available, launch_chromium

# Screenshots of the browser tests (ignored by git).
SCREENSHOTS = Path(__file__).resolve().parent.parent / "build" / "screenshots"
SIDEBAR_TAB = '.jp-SideBar .lm-TabBar-tab[data-id="gpu-widgets-sidebar"]'

# Elements (in the panel) whose box lies outside the card or overview that holds them.
OUTSIDE_JS = """panel => {
  const out = [];
  for (const box of panel.querySelectorAll('.jp-GpuWidgets-card, .jp-GpuWidgets-overview, .jp-GpuWidgets-simulatedNote')) {
    const r = box.getBoundingClientRect();
    for (const el of box.querySelectorAll('*')) {
      const e = el.getBoundingClientRect();
      if (!e.width || !e.height || el.closest('[hidden]') || el.closest('.jp-GpuWidgets-overviewRows') && !el.matches('[role=row], [role=row] > *')) continue;
      if (e.left < r.left - 1 || e.right > r.right + 1 || e.top < r.top - 1 || e.bottom > r.bottom + 1) {
        out.push(`${el.className || el.tagName} "${(el.textContent || '').slice(0, 30)}" in ${box.className}`);
      }
    }
  }
  return out;
}"""

# WCAG contrast of every text node's element against the first opaque background behind it.
LOW_CONTRAST_JS = """(panel, minRatio) => {
  const rgba = s => (s.match(/[\\d.]+/g) || []).map(Number);
  const lum = ([r, g, b]) => {
    const f = c => { c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
  };
  const mix = (fg, bg) => { const a = fg.length > 3 ? fg[3] : 1; return [0, 1, 2].map(i => fg[i] * a + bg[i] * (1 - a)); };
  const background = el => {
    for (let e = el; e; e = e.parentElement) {
      const c = rgba(getComputedStyle(e).backgroundColor);
      if (c.length && (c.length < 4 || c[3] > 0.5)) return c.slice(0, 3);
    }
    return [255, 255, 255];
  };
  const low = [];
  const walker = document.createTreeWalker(panel, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const el = n.parentElement;
    if (!n.textContent.trim() || !el.getClientRects().length || el.closest('[hidden], .jp-GpuWidgets-tooltip')) continue;
    const st = getComputedStyle(el);
    const bg = background(el);
    const fg = mix(rgba(st.color), bg);
    const [a, b] = [lum(fg), lum(bg)].sort((x, y) => y - x);
    const ratio = (a + 0.05) / (b + 0.05);
    if (ratio < minRatio) low.push(`${el.className || el.tagName} "${n.textContent.trim().slice(0, 24)}" ${ratio.toFixed(2)}`);
  }
  return low;
}"""

# Count the drawn chart lines: bqplot draws each Lines mark as an SVG path with class "line".
DRAWN_LINES_JS = """() => [...document.querySelectorAll('.bqplot path.line')]
    .filter(p => (p.getAttribute('d') || '').split(/[ML]/).length > 3).length"""
# Finished widgets' outputs: their pictures (final_output), loaded and laid out.
PICTURES_JS = """() => [...document.querySelectorAll('.jp-OutputArea-output img.gpuw-png')]
  .filter(img => img.complete && img.naturalWidth > 100 && img.getBoundingClientRect().width > 100).length"""
# Code cells, and those that ran (prompt "[n]:"); the same markup in JupyterLab and Notebook 7.
PROMPTS_JS = """() => {
  const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')].map(p => p.textContent.trim());
  return {cells: prompts.length, done: prompts.filter(p => /^\\[\\d+\\]:$/.test(p)).length,
          running: prompts.filter(p => p.includes('*')).length};
}"""


# pytest-jupyter's autouse fixtures (conftest loads the plugin for the in-process server tests)
# close "the" asyncio loop after every test; in a browser module that would be the loop
# Playwright's sync API keeps running for the module-wide browser. Browser tests start JupyterLab
# as a subprocess and need neither fixture, so these overrides do nothing.
@pytest.fixture(autouse=True)
def jp_asyncio_loop() -> Iterator[None]:
    yield None


@pytest.fixture(autouse=True)
def jp_server_cleanup() -> Iterator[None]:
    yield


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's chromium driven by Playwright, one per test module."""
    sync_api = pytest.importorskip("playwright.sync_api")
    if not chromium_available():
        pytest.skip(
            "chromium not found at /usr/bin/chromium: install it with "
            "`apt-get update && apt-get install -y chromium` (make test does this as root)"
        )
    with sync_api.sync_playwright() as pw:
        b = launch_chromium(pw)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def wide_page(browser: Any) -> Iterator[Any]:
    """A page 1400x900 in a context of its own (notifications stack at the bottom right)."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        yield context.new_page()
    finally:
        context.close()


# -- the GPU sidebar ---------------------------------------------------------------------------

@contextmanager
def sidebar_page(browser: Any, url: str, on_request: Callable[[Any], None] | None = None) -> Iterator[Any]:
    """A 1366x768 page (a laptop screen) of JupyterLab at ``url`` with the GPU sidebar opened from
    its icon; ``on_request`` sees every request from the start. Its context is closed afterwards."""
    context = browser.new_context(viewport={"width": 1366, "height": 768})
    try:
        page = context.new_page()
        if on_request is not None:
            page.on("request", on_request)
        page.goto(url, timeout=60_000)
        page.locator(SIDEBAR_TAB).click(timeout=60_000)
        yield page
    finally:
        context.close()


def panel(page: Any) -> Any:
    """The GPU sidebar, found by its accessible name."""
    return page.get_by_role("region", name="GPU Dashboard", exact=True)


def shoot(target: Any, name: str) -> None:
    """Save a screenshot of ``target`` (a page or a locator) as SCREENSHOTS/``name``.png."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    target.screenshot(path=str(SCREENSHOTS / f"{name}.png"))


# -- driving a notebook (the widget layout tests and scripts/screenshots.py) -------------------

def open_notebook(page: Any, base_url: str, token: str, name: str) -> None:
    """Open ``name`` (under the server's root) in a fresh workspace and wait for its kernel."""
    page.goto(f"{base_url}/lab/tree/{name}?reset&token={token}", timeout=60_000)
    page.locator(".jp-Notebook .jp-CodeCell").first.wait_for(timeout=60_000)
    # The kernel is up when the status bar says so (the toolbar's indicator says idle earlier).
    page.locator(".jp-StatusBar-Widget").get_by_text("Python 3 (ipykernel) | Idle").wait_for(timeout=60_000)


def run_all_cells(page: Any, name: str, timeout_s: float = 120) -> dict[str, int]:
    """Run All from the Run menu (as a person would) and wait until every code cell has run."""
    page.locator(".jp-Notebook .jp-CodeCell").first.click()  # the notebook is the current widget
    page.locator(".lm-MenuBar-itemLabel").get_by_text("Run", exact=True).click()
    page.locator(".lm-Menu-itemLabel").get_by_text("Run All Cells", exact=True).click()
    deadline = time.monotonic() + timeout_s
    state = page.evaluate(PROMPTS_JS)
    while time.monotonic() < deadline:
        state = page.evaluate(PROMPTS_JS)
        if state["cells"] and state["done"] == state["cells"] and not state["running"]:
            return state
        time.sleep(0.5)
    raise AssertionError(f"{name}: not every cell ran in {timeout_s} s: {state}")


def switch_theme(page: Any, theme: str) -> None:
    """Pick ``theme`` ("JupyterLab Dark", "JupyterLab Light") in Settings > Theme; wait until it applies."""
    if theme not in ("JupyterLab Dark", "JupyterLab Light"):
        raise ValueError(f"theme must be 'JupyterLab Dark' or 'JupyterLab Light', got {theme!r}")
    if page.get_attribute("body", "data-jp-theme-name") == theme:
        return  # the theme is a user setting: a page opened later starts in the last one chosen
    page.get_by_role("menuitem", name="Settings").click()
    page.locator('.lm-Menu-item[data-type="submenu"]', has_text=re.compile(r"^Theme$")).click()
    # The current theme's item is a checked one (another role): find it by its label.
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{re.escape(theme)}$")).click()
    light = "true" if theme == "JupyterLab Light" else "false"
    page.wait_for_selector(f'body[data-jp-theme-light="{light}"]', state="attached", timeout=30_000)
    page.wait_for_timeout(1000)  # the theme's CSS, then whatever redraws on themeChanged


def luminance(rgb: list[float]) -> float:
    """WCAG relative luminance of an sRGB colour given as 0-255 channels."""
    def channel(c: float) -> float:
        c /= 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4
    r, g, b = (channel(c) for c in rgb[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(fg: list[float], bg: list[float]) -> float:
    """WCAG contrast ratio of two colours (1 to 21)."""
    hi, lo = sorted((luminance(fg), luminance(bg)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)
