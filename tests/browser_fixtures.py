"""Fixtures shared by the browser tests (import them into a test module to use them)."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .lab_server import chromium_available, launch_chromium

# Count the drawn chart lines: bqplot draws each Lines mark as an SVG path with class "line".
DRAWN_LINES_JS = """() => [...document.querySelectorAll('.bqplot path.line')]
    .filter(p => (p.getAttribute('d') || '').split(/[ML]/).length > 3).length"""
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
