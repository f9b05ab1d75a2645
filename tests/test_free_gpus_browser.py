"""The header's "Copy CUDA_VISIBLE_DEVICES=..." button in a real JupyterLab (Debian chromium), issue 23.

A server with 2 simulated GPUs watched in the light theme, then one with 8 in the dark theme (each
GPU count and each theme once, to keep the wait short). The simulated GPUs run a 240 s busy cycle on
the wall clock, a few seconds of it idle (free: busy under 10 % and under 10 % of memory used); the
seed is chosen when the server starts so that the free set changes while the test watches. At every poll:
- the button reads "Copy CUDA_VISIBLE_DEVICES=<list>" ("No free GPU" when none is), the list being
  the GPUs that GET samples/latest says are free then (the sidebar may lag one poll behind, so a
  mismatch must clear within a few seconds);
- the button's and the header's boxes stay where they were: a label that changes never moves the
  header (the button has a fixed width).
A click puts exactly the shell prefix in the clipboard. Screenshots go to build/screenshots/.
"""
from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from gpu_widgets.backends.simulated import SimulatedBackend

from .browser_fixtures import SCREENSHOTS, panel, sidebar_page, switch_theme
from .browser_fixtures import browser, jp_asyncio_loop, jp_server_cleanup  # noqa: F401 (fixtures)
from .lab_server import LabServer

pytestmark = [pytest.mark.browser, pytest.mark.slow]

sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect

THEMES = {"light": "JupyterLab Light", "dark": "JupyterLab Dark"}
# Seconds after the server is asked to start: the page is up well before WATCH_S; the seed puts a
# change of the free set inside the watched stretch, and a free GPU for the click after it.
WATCH_S, END_S = 35.0, 57.0
CASES = {"2gpu-light": (2, "light"), "8gpu-dark": (8, "dark")}
SETTINGS = {"gpu-widgets:plugin": {"refreshIntervalMs": 500}}
LAG_S = 5.0  # how long the button may show an older answer than the API's
BUTTON = ".jp-GpuWidgets-copyFree"
HEADER = "header.jp-GpuWidgets-header"
# The GPU list, when shown, lies whole inside the button (the words before it may end in "…").
LIST_SHOWN_JS = """(button) => {
  const b = document.querySelector(button), l = b.querySelector('.jp-GpuWidgets-copyFreeList');
  if (!l) return true;
  const br = b.getBoundingClientRect(), lr = l.getBoundingClientRect();
  return lr.width > 0 && lr.left >= br.left - 0.5 && lr.right <= br.right + 0.5 && l.scrollWidth <= l.clientWidth + 1;
}"""
BOXES_JS = """([button, header]) => [button, header, header + ' .jp-GpuWidgets-title'].map(sel => {
  const r = document.querySelector(sel).getBoundingClientRect();
  return [r.x, r.y, r.width, r.height].map(v => Math.round(v * 10) / 10);
})"""


def free_set(gpus: list[dict[str, Any]]) -> tuple[int, ...]:
    """The free GPUs by the sidebar's rule (labextension/src/cards/freeGpus.tsx) from a sample's devices."""
    return tuple(
        g["index"] for g in gpus
        if g["status"] != "lost" and isinstance(g["utilization_gpu_percent"], (int, float))
        and isinstance(g["memory_used_bytes"], int) and g["memory_total_bytes"]
        and g["utilization_gpu_percent"] < 10 and g["memory_used_bytes"] < 0.1 * g["memory_total_bytes"]
    )


def label(free: tuple[int, ...]) -> str:
    return f"Copy CUDA_VISIBLE_DEVICES={','.join(map(str, free))}" if free else "No free GPU"


def changes(n_gpus: int, seed: int, start: float, a: float, b: float) -> int:
    """How often the free set changes between ``start + a`` and ``start + b`` (the backend's own readings)."""
    sim = SimulatedBackend(n_gpus, seed=seed, t0=start)
    sim.open()
    sets = [free_set(sim.read_fast(start + s)) for s in range(int(a), int(b) + 1)]
    return sum(x != y for x, y in zip(sets, sets[1:]))


def pick_seed(n_gpus: int, start: float) -> int:
    """A seed whose free set changes at least once while the page is watched (leaving 8 s at its end)."""
    def score(seed: int) -> tuple[int, bool]:
        sim = SimulatedBackend(n_gpus, seed=seed, t0=start)
        sim.open()
        free_after = bool(free_set(sim.read_fast(start + END_S + 15)))  # for the click, after the watch
        return min(changes(n_gpus, seed, start, WATCH_S, END_S - 8), 3), free_after
    return max(range(240), key=score)  # the cycle repeats every 240 seeds


@pytest.fixture(scope="module")
def labs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[LabServer, float, str]]]:
    """Both servers, started one after the other and then watched together (each case's wait is
    real time on the simulated GPUs' clock: side by side they cost one wait, not two)."""
    started: dict[str, tuple[LabServer, float, str]] = {}
    try:
        for case, (gpus, theme) in CASES.items():
            start = time.time()
            env = {"GPU_WIDGETS_BACKEND": "simulated", "GPU_WIDGETS_SIMULATED_GPUS": str(gpus),
                   "GPU_WIDGETS_SIMULATED_SEED": str(pick_seed(gpus, start))}
            server = LabServer(tmp_path_factory.mktemp(f"free-{gpus}"), env=env, args=["--GpuWidgets.interval_s=0.5"],
                               settings=SETTINGS)
            started[case] = (server.start(), start, theme)
        yield started
    finally:
        for server, _, _ in started.values():
            server.stop()


def watch(pages: dict[str, tuple[Any, LabServer, float]]) -> dict[str, list[dict[str, Any]]]:
    """Poll each page until its own ``until`` (unix s): each poll, the API's free set, the button's
    text and the boxes."""
    seen: dict[str, list[dict[str, Any]]] = {case: [] for case in pages}
    while True:
        active = [case for case, (_, _, until) in pages.items() if time.time() < until]
        if not active:
            return seen
        for case in active:
            page, lab, _ = pages[case]
            button = page.locator(BUTTON)
            expected = label(free_set(lab.api("samples/latest")["devices"]))
            deadline = time.monotonic() + LAG_S
            text = button.text_content()
            while text != expected and time.monotonic() < deadline:
                page.wait_for_timeout(250)
                text = button.text_content()
                if text != expected:  # the API may have moved on meanwhile
                    expected = label(free_set(lab.api("samples/latest")["devices"]))
            seen[case].append({"expected": expected, "text": text, "boxes": page.evaluate(BOXES_JS, [BUTTON, HEADER]),
                               "list_shown": page.evaluate(LIST_SHOWN_JS, BUTTON)})
        time.sleep(0.7 / len(active))


@pytest.fixture(scope="module")
def watched(browser: Any, labs: dict[str, tuple[LabServer, float, str]]) -> Iterator[dict[str, list[dict[str, Any]]]]:
    with contextlib.ExitStack() as stack:
        pages: dict[str, tuple[Any, LabServer, float]] = {}
        for case, (server, start, theme) in labs.items():
            page = stack.enter_context(sidebar_page(browser, server.lab_url()))
            expect(panel(page).locator(BUTTON)).to_be_visible(timeout=60_000)
            switch_theme(page, THEMES[theme])
            pages[case] = (page, server, start + END_S)
        seen = watch(pages)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        for case, (page, server, _) in pages.items():
            n = len(server.api("devices")["devices"])
            panel(page).screenshot(path=str(SCREENSHOTS / f"free-gpus-{n}gpu-{labs[case][2]}.png"))
        yield seen


@pytest.mark.parametrize("case", list(CASES))
def test_the_button_names_the_apis_free_gpus(watched: dict[str, list[dict[str, Any]]], case: str) -> None:
    seen = watched[case]
    wrong = [(s["text"], s["expected"]) for s in seen if s["text"] != s["expected"]]
    assert not wrong, f"the button disagreed with samples/latest for over {LAG_S} s: {wrong[:3]}"
    assert all(re.fullmatch(r"Copy CUDA_VISIBLE_DEVICES=\d+(,\d+)*|No free GPU", s["text"]) for s in seen)
    labels = {s["text"] for s in seen}
    assert len(labels) >= 2, f"the free GPUs never changed while watched ({labels}): nothing to check"
    hidden = [s["text"] for s in seen if not s["list_shown"]]
    assert not hidden, f"the GPU list was cut off in the button: {hidden[:3]}"


@pytest.mark.parametrize("case", list(CASES))
def test_the_header_stays_still_as_the_label_changes(watched: dict[str, list[dict[str, Any]]], case: str) -> None:
    seen = watched[case]
    by_label: dict[str, list[list[float]]] = {}
    for s in seen:
        by_label.setdefault(s["text"], s["boxes"])
    assert len(by_label) >= 2, f"only {set(by_label)} shown: nothing to compare"
    moved = [(s["text"], s["boxes"]) for s in seen if s["boxes"] != seen[0]["boxes"]]
    assert not moved, (f"button, header and title boxes ([x, y, w, h]) were {seen[0]['boxes']} with "
                       f"{seen[0]['text']!r}, then {moved[0][1]} with {moved[0][0]!r}")


def test_a_click_copies_the_shell_prefix(browser: Any, labs: dict[str, tuple[LabServer, float, str]], watched: Any) -> None:
    # At 8 GPUs: two simulated GPUs are free together only ~46 s in each 240 s cycle (waiting for
    # one would cost a minute); eight have one free most of the time.
    server, _, _ = labs["8gpu-dark"]
    assert len(server.api("devices")["devices"]) == 8
    context = browser.new_context(viewport={"width": 1366, "height": 768})
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.base_url)
    try:
        page = context.new_page()
        page.goto(server.lab_url(), timeout=60_000)
        page.locator('.jp-SideBar .lm-TabBar-tab[data-id="gpu-widgets-sidebar"]').click(timeout=60_000)
        button = panel(page).locator(BUTTON)
        deadline = time.monotonic() + 60  # the seed makes one free about now
        while button.text_content().startswith("No free") and time.monotonic() < deadline:
            page.wait_for_timeout(1000)
        text = button.text_content()
        assert text.startswith("Copy CUDA_VISIBLE_DEVICES="), text
        before = page.evaluate(BOXES_JS, [BUTTON, HEADER])
        button.click()
        expect(button).to_have_text("Copied")
        assert page.evaluate(BOXES_JS, [BUTTON, HEADER]) == before, "the header moved for 'Copied'"
        copied = page.evaluate("() => navigator.clipboard.readText()")
        assert copied == "CUDA_DEVICE_ORDER=PCI_BUS_ID " + text.removeprefix("Copy "), copied
    finally:
        context.close()
