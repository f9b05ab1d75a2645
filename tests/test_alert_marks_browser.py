"""A TrainingMonitor's alert marks and y ticks in a real JupyterLab (Debian chromium), light and dark.

A notebook runs a monitor on 2 simulated GPUs whose GPU 0 is 97 % full of memory (a subclass of
the simulated backend: the fault spec has no memory item), so a "memory full" episode opens. On
the page, in both themes:

- the episode is a bar along the top of the GPU memory chart only: no other chart (GPU busy,
  temperature, power, loss) holds a shape in the alert's colour, and no legend names it;
- the bar's colour is the theme's: the deep purple on white, the light one on the dark theme,
  each far from the card's background (contrast >= 3);
- every chart's top tick label lies inside its card, and the loss chart has a "0" tick.

Screenshots go to build/screenshots/alerts-{light,dark}.png (ignored by git).
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import json

import nbformat
import pytest

from gpu_widgets.monitor.monitor_alerts import KIND_COLORS
from gpu_widgets.widgets.theme import DARK_VARIANTS

from .browser_fixtures import SCREENSHOTS, browser, jp_asyncio_loop, jp_server_cleanup  # noqa: F401 (fixtures)
from .browser_fixtures import contrast, open_notebook, run_all_cells, switch_theme
from .lab_server import LabServer

pytestmark = [pytest.mark.browser, pytest.mark.slow]

sync_api = pytest.importorskip("playwright.sync_api")

THEMES = {"light": "JupyterLab Light", "dark": "JupyterLab Dark"}
NOTEBOOK = "alerts.ipynb"
CELLS = [
    """import math, time
from gpu_widgets import TrainingMonitor
from gpu_widgets.backends import SimulatedBackend
from gpu_widgets.sampling.sampler import Sampler

class FullMemory(SimulatedBackend):
    def _values(self, gpu, k, elapsed):  # GPU 0 97 % full from its first second on
        v = super()._values(gpu, k, elapsed)
        if gpu == 0 and elapsed >= 1:
            v = {**v, "memory_used_bytes": int(0.97 * v["memory_total_bytes"])}
        return v

backend = FullMemory(n_gpus=2)
backend.open()
sampler = Sampler(backend, interval_s=0.25).start()""",
    """mon = TrainingMonitor("alert marks", gpus="all", sampler=sampler, static_image=False, run_log=False)
with mon:
    for step in range(120):
        mon.log(loss=2.0 * math.exp(-step / 30) + 0.05, lr=1e-3 * (1 - step / 120) + 1e-4)
        time.sleep(0.04)
sampler.stop()""",
]

# Per chart of the monitor: its title, the shapes (SVG paths with a fill) whose computed fill is
# one of the alert colours, the card's background, the legend text, and the tick labels' boxes.
MEASURE_JS = r"""(colours) => {
  const box = e => { const r = e.getBoundingClientRect(); return {x0: r.left, y0: r.top, x1: r.right, y1: r.bottom}; };
  const rgb = s => (s.match(/\d+(\.\d+)?/g) || []).slice(0, 3).map(Number);
  const want = colours.map(rgb);
  const same = (a, b) => a.length === 3 && a.every((v, i) => Math.abs(v - b[i]) <= 2);
  return [...document.querySelectorAll('.gpuw-chart')].map(card => {
    const plot = card.querySelector('rect.plotarea_background, rect.plotarea_events');
    const shapes = [...card.querySelectorAll('svg path')].filter(p => {
      const s = getComputedStyle(p), fill = rgb(s.fill);
      const r = p.getBoundingClientRect();
      return r.width > 0 && r.height > 0 && s.fill !== 'none' && want.some(w => same(fill, w))
        && Number(s.fillOpacity) * Number(s.opacity) > 0.5;  // the bar, not the faint shade
    }).map(p => ({box: box(p), fill: getComputedStyle(p).fill}));
    const ticks = [...card.querySelectorAll('.axis .tick text')].filter(t => t.textContent.trim())
      .map(t => ({text: t.textContent.trim(), box: box(t), y: t.closest('.axis').getAttribute('class')}));
    return {title: (card.querySelector('.gpuw-title') || {}).textContent || '',
            legend: (card.querySelector('.gpuw-legend') || {}).textContent || '',
            background: getComputedStyle(card).backgroundColor,
            card: box(card), plot: plot ? box(plot) : null, shapes, ticks};
  });
}"""


def numbers(css: str) -> list[float]:
    import re

    return [float(v) for v in re.findall(r"\d+(?:\.\d+)?", css)[:3]]


def hex_rgb(colour: str) -> str:
    return "rgb({}, {}, {})".format(*(int(colour[i:i + 2], 16) for i in (1, 3, 5)))


@pytest.fixture(scope="module")
def measured(browser: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:  # noqa: F811
    workdir = tmp_path_factory.mktemp("alerts-lab")
    env = {"GPU_WIDGETS_BACKEND": "simulated", "GPU_WIDGETS_RUN_DIR": str(workdir / "runs")}
    settings = {"@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"}}
    colours = [hex_rgb(c) for c in KIND_COLORS.values()] + [hex_rgb(DARK_VARIANTS[c]) for c in KIND_COLORS.values()]
    with LabServer(workdir, env=env, settings=settings) as lab:
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
        nbformat.write(nb, lab.root / NOTEBOOK)
        context = browser.new_context(viewport={"width": 1280, "height": 2600})
        page = context.new_page()
        try:
            open_notebook(page, lab.base_url, lab.token, NOTEBOOK)
            run_all_cells(page, NOTEBOOK, timeout_s=90)
            errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.error']")
            assert errors.count() == 0, errors.first.inner_text()
            page.wait_for_timeout(1000)  # the last redraw reaches the page
            result = {}
            for theme, name in THEMES.items():
                switch_theme(page, name)
                page.wait_for_timeout(300)
                result[theme] = page.evaluate(MEASURE_JS, colours)
                SCREENSHOTS.mkdir(parents=True, exist_ok=True)  # a fresh clone has no build/ yet
                (SCREENSHOTS / f"alerts-{theme}.json").write_text(json.dumps(result[theme], indent=1))
                page.locator(".jp-OutputArea-output").last.screenshot(path=str(SCREENSHOTS / f"alerts-{theme}.png"))
            yield result
        finally:
            context.close()


@pytest.mark.parametrize("theme", THEMES)
def test_the_memory_alert_is_a_bar_on_the_memory_chart_only_in_the_themes_colour(measured, theme):
    charts = {c["title"]: c for c in measured[theme]}
    assert "GPU memory (GiB)" in charts and "GPU busy (%)" in charts and "loss" in charts, list(charts)
    memory = charts.pop("GPU memory (GiB)")
    assert memory["shapes"], "no alert bar on the memory chart"
    others = {title: c["shapes"] for title, c in charts.items() if c["shapes"]}
    assert not others, f"alert shapes on other charts: {others}"
    plot = memory["plot"]
    height = plot["y1"] - plot["y0"]
    for shape in memory["shapes"]:
        b = shape["box"]
        assert abs(b["y0"] - plot["y0"]) <= 2 and b["y1"] - b["y0"] <= 0.1 * height, (b, plot)  # along the top
        expected = KIND_COLORS["memory"] if theme == "light" else DARK_VARIANTS[KIND_COLORS["memory"]]
        assert numbers(shape["fill"]) == numbers(hex_rgb(expected)), shape["fill"]
        assert contrast(numbers(shape["fill"]), numbers(memory["background"])) >= 3.0, (shape, memory["background"])
    assert all("alert" not in c["legend"] and "memory full" not in c["legend"] for c in measured[theme])


@pytest.mark.parametrize("theme", THEMES)
def test_tick_labels_sit_inside_their_cards_and_the_loss_axis_has_a_zero(measured, theme):
    for chart in measured[theme]:
        for tick in chart["ticks"]:
            assert tick["box"]["y0"] >= chart["card"]["y0"] + 2, (chart["title"], tick)
        y_ticks = [t for t in chart["ticks"] if abs(t["box"]["x1"] - chart["plot"]["x0"]) < 20]
        if chart["title"] in ("loss", "lr") and y_ticks:
            top = min(y_ticks, key=lambda t: t["box"]["y0"])
            assert top["box"]["y0"] >= chart["plot"]["y0"], (chart["title"], top)  # inside the plot's frame
    loss = next(c for c in measured[theme] if c["title"] == "loss")
    assert "0" in [t["text"] for t in loss["ticks"]], loss["ticks"]
