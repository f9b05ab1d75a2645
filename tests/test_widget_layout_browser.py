"""The notebook widgets' layout, measured in a real JupyterLab (Debian chromium through Playwright).

One server; for 2 and for 8 simulated GPUs, one notebook runs a short TrainingMonitor loop
(loss and val_loss, ``gpus="all"``) and a GpuDashboard, and the page's real geometry is measured
in the light theme, in the dark one, and in the dark one in a narrow (760 px) window (issue 12):

- a legend (bqplot's ``g.g_legend`` or the HTML ``.gpuw-legend``) covers no point of a drawn line:
  points are sampled along every ``path.line`` and mapped to the screen;
- no text runs out of its card or container, and no chart title is clipped;
- a chart's title sits above its plot area, so a line at the chart's maximum cannot run into it,
  and no axis label lies on the plot area;
- chart titles and axis labels are not orange and stand out from the background (contrast >= 3),
  and so does the text above the charts.

Each GPU count sets ``GPU_WIDGETS_SIMULATED_GPUS`` in its own kernel before the first widget
samples. Screenshots of what was measured go to build/screenshots/layout-*.png (ignored by git).
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest

from .browser_fixtures import browser, jp_asyncio_loop, jp_server_cleanup  # noqa: F401 (fixtures)
from .browser_fixtures import contrast, open_notebook, run_all_cells, switch_theme
from .lab_server import LabServer

pytestmark = [pytest.mark.browser, pytest.mark.slow]

sync_api = pytest.importorskip("playwright.sync_api")

ROOT = Path(__file__).resolve().parent.parent
SCREENSHOTS = ROOT / "build" / "screenshots"
THEMES = {"light": "JupyterLab Light", "dark": "JupyterLab Dark"}
NARROW = {"width": 760, "height": 1000}  # a notebook beside a file browser on a laptop: one chart per row
LAYOUTS = [*THEMES, "narrow"]  # "narrow": the dark theme in the NARROW window
MIN_CONTRAST = 3.0  # WCAG's floor for large text and chart elements

CELLS = [
    """import os
os.environ["GPU_WIDGETS_SIMULATED_GPUS"] = "{gpus}"  # before the first widget samples""",
    """import math, time
from gpu_widgets import GpuDashboard, TrainingMonitor
# static_image=False: the widgets stay widgets when they stop, to be measured (not their pictures)
mon = TrainingMonitor("layout check", total_steps=150, gpus="all", static_image=False)
with mon:
    for step in range(150):
        loss = 2.0 * math.exp(-step / 40) + 0.05
        mon.log(loss=loss)
        if step % 30 == 29:
            mon.log(step=mon.step, val_loss=1.1 * loss)
        time.sleep(0.02)""",
    "dash = GpuDashboard(window_s=60, gpus=\"all\", static_image=False)",
    "time.sleep(3)\ndash.stop()",
]

# Everything the assertions need, measured in one pass over the page. Per widget output: its charts
# (plot area, title box, figure box, legend boxes, the screen points of each drawn line inside the
# plot area, title/axis text colours with the background behind them), and every piece of text
# outside the charts with the box of the card or container that holds it.
MEASURE_JS = r"""() => {
  const box = e => { const r = e.getBoundingClientRect();
                     return {x0: r.left, y0: r.top, x1: r.right, y1: r.bottom, w: r.width, h: r.height}; };
  const rgba = s => { const m = (s || '').match(/rgba?\(([^)]+)\)/); if (!m) return null;
                      const v = m[1].split(/[ ,/]+/).filter(Boolean).map(Number);
                      return [v[0], v[1], v[2], v.length > 3 ? v[3] : 1]; };
  const over = (top, under) => { const a = top[3];
    return [0, 1, 2].map(i => top[i] * a + under[i] * (1 - a)).concat([1]); };
  const background = e => {  // the opaque colour behind e: its ancestors' backgrounds, composed
    const layers = [];
    for (let n = e; n && n.nodeType === 1; n = n.parentElement) {
      const c = rgba(getComputedStyle(n).backgroundColor);
      if (c && c[3] > 0) { layers.push(c); if (c[3] >= 1) break; }
    }
    let c = [255, 255, 255, 1];
    for (const layer of layers.reverse()) c = over(layer, c);
    return c;
  };
  const visible = e => { const s = getComputedStyle(e);
                         return s.display !== 'none' && s.visibility !== 'hidden' && e.getClientRects().length > 0; };
  const colour = (e, prop) => { const bg = background(e); const fg = rgba(getComputedStyle(e)[prop]);
    return {fg: fg ? over(fg, bg) : null, bg, raw: getComputedStyle(e)[prop]}; };
  const outputs = [...document.querySelectorAll('.jp-OutputArea-output')]
    .filter(o => o.querySelector('.widget-vbox, .bqplot'));
  // Cut off: wider than its box, which hides the rest (a scroller lets one reach it: not cut off).
  const clipped = e => { const s = getComputedStyle(e);
    return e.clientWidth > 0 && e.scrollWidth > e.clientWidth + 1 && ['hidden', 'clip'].includes(s.overflowX); };
  const scroller = (e, top) => {  // the element between e and top that scrolls sideways, if any
    for (let n = e; n && n !== top; n = n.parentElement)
      if (['auto', 'scroll'].includes(getComputedStyle(n).overflowX)) return n;
    return null;
  };
  return outputs.map((out, index) => {
    const charts = [...out.querySelectorAll('.bqplot.figure')].map(fig => {
      const card = fig.closest('.gpuw-chart') || fig;
      const plotRect = fig.querySelector('rect.plotarea_background, rect.plotarea_events');
      // The title: bqplot's own (SVG) when drawn, else the card's HTML one.
      const title = [...fig.querySelectorAll('text.mainheading'), ...card.querySelectorAll('.gpuw-title')]
        .find(t => visible(t) && t.textContent.trim());
      const lines = [...fig.querySelectorAll('svg.svg-figure g.curve path.line')].filter(visible).map(p => {
        const ctm = p.getScreenCTM(), length = p.getTotalLength(), n = Math.min(400, Math.ceil(length / 2));
        const points = [];
        for (let i = 0; i <= n && length > 0; i++) {
          const q = p.getPointAtLength(length * i / n);
          const s = new DOMPoint(q.x, q.y).matrixTransform(ctm);
          points.push([s.x, s.y]);
        }
        const label = p.parentElement.querySelector('text.curve_label');
        return {name: label ? label.textContent : '?', points};
      });
      const svgTexts = [...fig.querySelectorAll('text.mainheading, text.axislabel, .axis .tick text')]
        .filter(t => visible(t) && t.textContent.trim())
        .map(t => ({kind: t.classList.contains('mainheading') ? 'title'
                          : t.classList.contains('axislabel') ? 'axis label' : 'tick label',
                    text: t.textContent.trim(), box: box(t), ...colour(t, 'fill')}));
      const htmlTitle = title && !(title instanceof SVGElement)
        ? [{kind: 'title', text: title.textContent.trim(), box: box(title), ...colour(title, 'color')}] : [];
      return {title: title ? {text: title.textContent.trim(), box: box(title), clipped: clipped(title)} : null,
              figure: box(card), plot: plotRect ? box(plotRect) : null, lines, texts: [...htmlTitle, ...svgTexts]};
    });
    const legends = [...out.querySelectorAll('g.g_legend, .gpuw-legend')]
      .filter(l => visible(l) && l.textContent.trim())
      .map(l => ({text: l.textContent.trim().slice(0, 80), box: box(l)}));
    const words = [];
    const walker = document.createTreeWalker(out, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const el = node.parentElement;
      if (!node.textContent.trim() || !el || el.closest('svg, .bqplot, button, style') || !visible(el)) continue;
      const range = document.createRange(); range.selectNodeContents(node);
      // Cut short with an ellipsis on purpose (a long GPU name): the element's box, not the text's.
      const ellipsis = getComputedStyle(el).textOverflow === 'ellipsis';
      const holder = el.closest('.gpuw-chart, [class*="card"], .widget-html-content, .widget-label, '
                                + '.jp-OutputArea-output');
      // In a sideways scroller the scroller is what must fit.
      const scrolls = scroller(el, holder);
      words.push({text: node.textContent.trim().slice(0, 60),
                  box: scrolls ? box(scrolls) : ellipsis ? box(el) : box(range),
                  clipped: !ellipsis && !scrolls && clipped(el), holder: box(holder), holderClass: holder.className,
                  ...colour(el, 'color')});
    }
    return {index, output: box(out), charts, legends, words};
  });
}"""

LAYOUT_NOTEBOOK = "layout-{gpus}gpu.ipynb"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    workdir = tmp_path_factory.mktemp("layout-lab")
    env = {"GPU_WIDGETS_BACKEND": "simulated", "GPU_WIDGETS_RUN_DIR": str(workdir / "runs")}
    # Every cell laid out, on screen or not (JupyterLab skips the layout of off-screen cells).
    settings = {"@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"}}
    with LabServer(workdir, env=env, settings=settings) as server:
        yield server


@pytest.fixture(scope="module", params=[2, 8], ids=lambda n: f"{n}gpu")
def measured(request: pytest.FixtureRequest, browser: Any, lab: LabServer) -> dict[str, Any]:  # noqa: F811
    """The widgets' geometry and colours for one GPU count, in both themes."""
    gpus = request.param
    name = LAYOUT_NOTEBOOK.format(gpus=gpus)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c.replace("{gpus}", str(gpus))) for c in CELLS])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nbformat.write(nb, lab.root / name)
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    page = context.new_page()
    try:
        open_notebook(page, lab.base_url, lab.token, name)
        run_all_cells(page, name, timeout_s=90)
        errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.error']")
        assert errors.count() == 0, errors.first.inner_text()
        page.wait_for_timeout(1000)  # the last redraw reaches the page
        result = {"gpus": gpus}
        for theme, theme_name in THEMES.items():
            switch_theme(page, theme_name)
            result[theme] = page.evaluate(MEASURE_JS)
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            page.locator(".jp-Notebook").screenshot(path=str(SCREENSHOTS / f"layout-{gpus}gpu-{theme}.png"))
        page.set_viewport_size(NARROW)
        page.wait_for_timeout(1000)  # the figures follow their new width
        result["narrow"] = page.evaluate(MEASURE_JS)
        page.locator(".jp-Notebook").screenshot(path=str(SCREENSHOTS / f"layout-{gpus}gpu-narrow.png"))
        return result
    finally:
        context.close()


def charts_of(measured: dict[str, Any], theme: str) -> list[tuple[int, dict[str, Any]]]:
    charts = [(out["index"], chart) for out in measured[theme] for chart in out["charts"]]
    # 2 widgets: the monitor's loss and 4 GPU charts, the dashboard's 4 GPU charts.
    assert len(charts) >= 8, f"{measured['gpus']} GPUs, {theme}: only {len(charts)} charts on the page"
    return charts


def chart_name(chart: dict[str, Any]) -> str:
    return chart["title"]["text"] if chart["title"] else "(untitled chart)"


def inside(box: dict[str, float], x: float, y: float, margin: float = 0.5) -> bool:
    return box["x0"] + margin < x < box["x1"] - margin and box["y0"] + margin < y < box["y1"] - margin


@pytest.mark.parametrize("theme", LAYOUTS)
def test_legends_cover_no_line(measured: dict[str, Any], theme: str) -> None:
    covered, lines_seen = [], 0
    for out in measured[theme]:
        for chart in out["charts"]:
            plot = chart["plot"]
            assert plot is not None, f"{chart_name(chart)}: no plot area found"
            for line in chart["lines"]:
                points = [p for p in line["points"] if inside(plot, *p, margin=-0.5)]
                lines_seen += bool(points)
                for legend in out["legends"]:
                    hits = [p for p in points if inside(legend["box"], *p)]
                    if hits:
                        covered.append(f"{chart_name(chart)}: the legend ({legend['text']!r}) covers "
                                       f"{len(hits)} of {len(points)} points of line {line['name']!r}")
    assert lines_seen >= 2 + 4 * measured["gpus"], f"too few drawn lines measured: {lines_seen}"
    assert not covered, f"{measured['gpus']} GPUs, {theme}:\n" + "\n".join(covered)


def overlap(a: dict[str, float], b: dict[str, float]) -> float:
    """The area two boxes share, in square pixels."""
    width = min(a["x1"], b["x1"]) - max(a["x0"], b["x0"])
    height = min(a["y1"], b["y1"]) - max(a["y0"], b["y0"])
    return max(0.0, width) * max(0.0, height)


@pytest.mark.parametrize("layout", ["light", "narrow"])
def test_chart_titles_and_axis_labels_sit_outside_the_plot(measured: dict[str, Any], layout: str) -> None:
    problems = []
    for _, chart in charts_of(measured, layout):
        title, plot, figure = chart["title"], chart["plot"], chart["figure"]
        for text in chart["texts"]:
            if text["kind"] == "axis label" and overlap(text["box"], plot) > 1:
                problems.append(f"{chart_name(chart)}: axis label {text['text']!r} lies on the plot area")
        if title is None:
            problems.append("a chart without a title")
            continue
        t = title["box"]
        if t["y1"] > plot["y0"] + 0.5:
            problems.append(f"{title['text']!r}: title bottom {t['y1']:.1f} is below the plot's top {plot['y0']:.1f}")
        if title["clipped"]:
            problems.append(f"{title['text']!r}: the title is cut short")
        if t["x0"] < figure["x0"] - 0.5 or t["x1"] > figure["x1"] + 0.5 or t["y0"] < figure["y0"] - 0.5:
            problems.append(f"{title['text']!r}: title clipped by its chart ({t} outside {figure})")
        tops = [p for line in chart["lines"] for p in line["points"] if inside(t, *p)]
        if tops:
            problems.append(f"{title['text']!r}: {len(tops)} line points run into the title")
    assert not problems, f"{measured['gpus']} GPUs, {layout}:\n" + "\n".join(problems)


@pytest.mark.parametrize("theme", LAYOUTS)
def test_no_text_overflows_its_container(measured: dict[str, Any], theme: str) -> None:
    overflows, words = [], 0
    for out in measured[theme]:
        for word in out["words"]:
            words += 1
            b, h = word["box"], word["holder"]
            if word["clipped"]:
                overflows.append(f"{word['text']!r} is cut off by its box (no ellipsis)")
            elif b["x0"] < h["x0"] - 1 or b["x1"] > h["x1"] + 1:
                overflows.append(f"{word['text']!r} ({b['x0']:.0f}-{b['x1']:.0f} px) runs out of "
                                 f"its {word['holderClass']!r} ({h['x0']:.0f}-{h['x1']:.0f} px)")
            elif b["x1"] > out["output"]["x1"] + 1:
                overflows.append(f"{word['text']!r} runs past the output area's right edge "
                                 f"({b['x1']:.0f} > {out['output']['x1']:.0f} px: the output scrolls sideways)")
    assert words >= 5, f"only {words} pieces of text found outside the charts' SVG"
    assert not overflows, f"{measured['gpus']} GPUs, {theme}:\n" + "\n".join(overflows)


def is_orange(rgb: list[float]) -> bool:
    r, g, b = rgb[:3]
    hi, lo = max(r, g, b), min(r, g, b)
    if hi - lo < 60 or hi != r:
        return False  # grey-ish, or red is not the strongest channel
    hue = 60 * (g - b) / (hi - lo)
    return 15 <= hue <= 50


@pytest.mark.parametrize("theme", THEMES)
def test_chart_and_header_text_is_readable(measured: dict[str, Any], theme: str) -> None:
    bad, checked = [], 0
    for _, chart in charts_of(measured, theme):
        for text in chart["texts"]:
            checked += 1
            where = f"{chart_name(chart)}: {text['kind']} {text['text']!r} (fill {text['raw']})"
            if text["fg"] is None:
                bad.append(f"{where}: no fill colour")
            elif is_orange(text["fg"]):
                bad.append(f"{where} is orange")
            elif contrast(text["fg"], text["bg"]) < MIN_CONTRAST:
                bad.append(f"{where}: contrast {contrast(text['fg'], text['bg']):.2f} against the background")
    for out in measured[theme]:
        for word in out["words"]:
            checked += 1
            if word["fg"] is not None and contrast(word["fg"], word["bg"]) < MIN_CONTRAST:
                bad.append(f"text {word['text']!r} (colour {word['raw']}): contrast "
                           f"{contrast(word['fg'], word['bg']):.2f} against the background")
    assert checked >= 20, f"only {checked} texts measured"
    assert not bad, f"{measured['gpus']} GPUs, {theme}:\n" + "\n".join(bad)
