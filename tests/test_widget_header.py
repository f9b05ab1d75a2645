"""The widgets' text (header cards in the sidebar's look) and many GPUs shown as one summary.

The summary is chosen exactly when ``gpus="auto"`` falls back to all GPUs because this process
uses none, and there are at least SUMMARY_FROM of them; its numbers are checked against a hand
computation on a made-up trace; the header HTML is checked for its classes and its escaping.
"""
from __future__ import annotations

import html
import re

import numpy as np
import pytest

from gpu_widgets import GpuDashboard, TrainingMonitor
from gpu_widgets.metrics.catalogue import MONITOR, shown_in
from gpu_widgets.metrics.throttle import mask_from_names
from gpu_widgets.runs.gpu_trace import GpuTrace
from gpu_widgets.widgets import gpu_summary
from gpu_widgets.widgets.gpu_summary import SUMMARY_FROM, aggregate, merged, region, summarised, why
from gpu_widgets.monitor.monitor_text import MonitorText, render_monitor
from gpu_widgets.widgets.header import render_dashboard
from gpu_widgets.widgets.header_css import HEADER_CSS
from gpu_widgets.monitor.monitor_charts import SUMMARY_THROTTLED, MonitorCharts, gpu_charts
from gpu_widgets.widgets.torch_probe import TorchDevice, TorchState
from gpu_widgets.widgets.view import ChartsView

from .widget_helpers import simulated_sampler

GIB = 2**30


def words(text: str) -> str:
    """What a reader sees: the HTML without tags, entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", "", text))


def snap(n: int, t: float = 100.0, visible: list[int] | None = None, **per_gpu) -> dict:
    """A sampler snapshot of ``n`` GPUs; ``per_gpu`` gives each field as a list (one per GPU)."""
    devices = []
    for i in range(n):
        dev = {"index": i, "name": "Test GPU", "uuid": f"GPU-{i}", "utilization_gpu_percent": 10 * (i + 1),
               "memory_used_bytes": (i + 1) * GIB, "memory_total_bytes": 80 * GIB, "temperature_c": 40 + i,
               "power_w": 100.0 + i, "power_limit_w": 700.0, "throttle_reasons": 0}
        dev.update({k: v[i] for k, v in per_gpu.items()})
        devices.append(dev)
    return {"timestamp": t, "backend": "nvml", "status": "ok", "reason": None,
            "cuda_visible_devices": visible, "devices": devices}


# -- when the summary is chosen ------------------------------------------------------------------
def torch_on(*indices: int) -> TorchState:
    return TorchState(version="2.13", cuda_initialized=True,
                      devices=[TorchDevice(ordinal=k, nvml_index=i, name="Test GPU", allocated_bytes=1, reserved_bytes=1,
                                           peak_allocated_bytes=1, peak_reserved_bytes=1, total_bytes=None)
                               for k, i in enumerate(indices)])


@pytest.mark.parametrize(
    ("choice", "n", "visible", "torch", "expected"),
    [
        ("auto", 8, None, None, True),  # a CPU-only process on an 8-GPU machine
        ("auto", SUMMARY_FROM, None, None, True),
        ("auto", SUMMARY_FROM - 1, None, None, False),  # two GPUs: each drawn
        ("all", 8, None, None, False),  # asked for each GPU
        (frozenset({0, 1, 2, 3}), 8, None, None, False),  # asked for these
        ("auto", 8, [2, 3, 4], None, False),  # CUDA_VISIBLE_DEVICES says which
        ("auto", 8, None, "torch", False),  # PyTorch uses GPU 5
    ],
)
def test_the_summary_is_chosen_only_for_auto_with_no_gpu_used_and_many_gpus(choice, n, visible, torch, expected):
    state = torch_on(5) if torch else None
    assert summarised(choice, snap(n, visible=visible), state) is expected
    assert summarised(choice, None, state) is False  # no sample yet: nothing to summarise


# -- the aggregate ------------------------------------------------------------------------------
def test_aggregate_of_aligned_curves_is_the_mean_min_and_max_at_each_point():
    xs = np.arange(5.0)
    ys = [np.array([10, 20, 30, 40, 50.0]), np.array([0, 0, 90, 0, 0.0]), np.array([5, 5, 5, 5, 5.0])]
    out_x, mean, band = aggregate([(xs, y) for y in ys], points=100)
    assert list(out_x) == list(xs)
    assert list(mean) == pytest.approx([5, 25 / 3, 125 / 3, 15, 55 / 3])
    assert band.shape == (2, 5)
    assert list(band[0]) == [0, 0, 5, 0, 0] and list(band[1]) == [10, 20, 90, 40, 50]


def test_aggregate_of_unaligned_curves_interpolates_and_leaves_out_a_gpu_outside_its_span():
    a = (np.array([0.0, 2.0, 4.0]), np.array([0.0, 20.0, 40.0]))
    b = (np.array([1.0, 3.0]), np.array([100.0, 100.0]))  # starts late, ends early
    out_x, mean, band = aggregate([a, b], points=100)
    assert list(out_x) == [0, 1, 2, 3, 4]
    # x=0 and x=4: only a; x=1..3: a interpolated (10, 20, 30) and b (100)
    assert list(mean) == pytest.approx([0, 55, 60, 65, 40])
    assert list(band[0]) == pytest.approx([0, 10, 20, 30, 40])
    assert list(band[1]) == pytest.approx([0, 100, 100, 100, 40])
    assert aggregate([], 10) is None and aggregate([(np.zeros(0), np.zeros(0))], 10) is None


def test_aggregate_bounded_keeps_every_gpus_peak_and_dip_and_the_newest_point():
    xs = np.arange(1000.0)
    rng = np.random.default_rng(3)
    ys = [rng.uniform(20, 80, 1000) for _ in range(4)]
    ys[2][517] = 99.0
    ys[1][203] = 1.0
    out_x, mean, band = aggregate([(xs, y) for y in ys], points=50)
    assert len(out_x) <= 50 and band.shape == (2, len(out_x))
    assert band[1].max() == 99.0 and band[0].min() == 1.0
    assert out_x[-1] == 999.0 and mean[-1] == pytest.approx(np.mean([y[-1] for y in ys]))
    assert np.all(band[0] <= mean) and np.all(mean <= band[1])


def test_throttle_episodes_merge_and_become_a_region_from_the_floor_to_the_top():
    assert merged([[5, 8], [0, 2], [7, 12], [20, 20]]) == [[0, 2], [5, 12], [20, 20]]
    xs, ys = region([[0, 2], [5, 12], [20, 20]], 0.0, 100.0)
    assert list(xs) == [0, 0, 2, 2, 5, 5, 12, 12, 20, 20, 20.5, 20.5]  # a one-sample episode: 0.5 s
    assert list(ys) == [0, 100, 100, 0] * 3


# -- the monitor's summary lines on a made-up trace ------------------------------------------------
def fake_trace(n: int = 4, steps: int = 6) -> tuple[GpuTrace, list[list[float]]]:
    """n GPUs over ``steps`` samples a second apart; GPU i busy 10*(i+1) + step; GPU 1 throttled
    at steps 2-3. Returns the trace and the busy values per step (a row per step)."""
    trace = GpuTrace(t0=100.0)
    busy = []
    for k in range(steps):
        util = [10 * (i + 1) + k for i in range(n)]
        reasons = [mask_from_names(["sw_power_cap"]) if (i == 1 and k in (2, 3)) else 0 for i in range(n)]
        trace.add_snapshot(snap(n, t=100.0 + k, utilization_gpu_percent=util, throttle_reasons=reasons))
        busy.append(util)
    return trace, busy


def test_monitor_summary_lines_are_the_hand_computed_mean_min_and_max():
    trace, busy = fake_trace()
    charts = MonitorCharts(ChartsView(), None, "time", 2000, gpu_charts(trace.curve_specs))
    devices = [trace.devices[i] for i in sorted(trace.devices)]
    lines = {(c, name): (style, xs, ys) for c, name, _, style, xs, ys in charts.summary_lines(devices, 500)}
    style, xs, mean = lines[("gpu_util", "mean of 4 GPUs")]
    assert style == "solid" and list(xs) == [0, 1, 2, 3, 4, 5]
    assert list(mean) == pytest.approx([sum(row) / 4 for row in busy])
    style, _, band = lines[("gpu_util", "min–max")]
    assert style == "range" and band.shape == (2, 6)
    assert list(band[0]) == [min(row) for row in busy] and list(band[1]) == [max(row) for row in busy]
    _, _, memory = lines[("gpu_memory", "mean of 4 GPUs")]
    assert list(memory) == pytest.approx([2.5] * 6)  # 1, 2, 3, 4 GiB
    style, xs, ys = lines[("gpu_util", SUMMARY_THROTTLED)]
    assert style == "region" and list(xs) == [2, 2, 3, 3] and list(ys) == [0, 100, 100, 0]
    # Each chart: a mean and a band, no per-GPU line.
    assert {name for _, name in lines} == {"mean of 4 GPUs", "min–max", SUMMARY_THROTTLED}


def test_monitor_without_summary_draws_each_gpu_and_a_throttle_region_per_gpu():
    trace, _ = fake_trace()
    charts = MonitorCharts(ChartsView(), None, "time", 2000, gpu_charts(trace.curve_specs))
    out = charts.gpu_lines(trace.devices[1])
    names = {name: (style, list(ys)) for c, name, _, style, _, ys in out if c == "gpu_util"}
    assert names["GPU 1"][0] == "solid"
    assert names["GPU 1 throttled"] == ("region", [0, 100, 100, 0])


def cpu_only_monitor(n_gpus: int, **kw) -> TrainingMonitor:
    sampler = simulated_sampler(n_gpus)
    mon = TrainingMonitor("cpu", display=False, run_log=False, sampler=sampler, **kw)
    for i in range(5):
        sampler.tick()
        mon.log(loss=1.0 / (i + 1))
    mon.refresh()
    return mon


def test_a_cpu_only_monitor_on_many_gpus_shows_a_summary_and_gpus_all_each_gpu():
    mon = cpu_only_monitor(8)
    try:
        util = mon.parts.view.charts["gpu_util"].lines
        assert "mean of 8 GPUs" in util and "min–max" in util and "GPU 0" not in util
        head = mon.widget.children[0].value
        assert head.count('<span class="gpuw-tile') == 8 and 'class="gpuw-card gpuw-wide"' in head
        assert why(8) in words(head) and "8 GPUs" in words(head)
        assert "<b>GPU 0</b>" not in head  # no per-GPU cards
        rows = mon.parts.trace.devices
        latest = [rows[i].latest["utilization_gpu_percent"] for i in range(8)]
        mean = np.asarray(util["mean of 8 GPUs"].y)
        assert mean[-1] == pytest.approx(sum(latest) / 8, abs=1e-3)
        assert f"busy {min(latest)}–{max(latest)} %" in words(head)
    finally:
        mon.finish()
    each = cpu_only_monitor(8, gpus="all")
    try:
        util = each.parts.view.charts["gpu_util"].lines
        assert {f"GPU {i}" for i in range(8)} <= set(util) and "mean of 8 GPUs" not in util
        assert why(8) not in words(each.widget.children[0].value)
    finally:
        each.finish()
    two = cpu_only_monitor(2)
    try:
        assert {"GPU 0", "GPU 1"} <= set(two.parts.view.charts["gpu_util"].lines)
    finally:
        two.finish()


def test_summary_redraw_is_smaller_than_drawing_each_gpu():
    def sent(mon: TrainingMonitor) -> int:
        return sum(np.asarray(m.x).nbytes + np.asarray(m.y).nbytes for c in mon.parts.view.charts.values()
                   for m in c.lines.values()) + len(mon.widget.children[0].value)
    summary, each = cpu_only_monitor(8), cpu_only_monitor(8, gpus="all")
    try:
        assert sent(summary) < sent(each) and sent(summary) < 32_000
    finally:
        summary.finish()
        each.finish()


# -- header HTML ---------------------------------------------------------------------------------
def test_header_cards_use_classes_defined_in_the_css_and_escape_names():
    trace = GpuTrace(t0=0.0)
    trace.add_snapshot(snap(2, name=["<script>x</script>", "B"],
                            throttle_reasons=[mask_from_names(["hw_thermal_slowdown"]), 0]))
    trace.backend = "simulated"
    out = render_monitor(MonitorText(title="<i>run</i>", status="running", steps_done=300, total_steps=300,
                                      latest={"loss": 0.5}, backend="simulated",
                                      devices=list(trace.devices.values())))
    assert "<script>" not in out and "&lt;script&gt;" in out and "&lt;i&gt;run&lt;/i&gt;" in out
    text = words(out)
    assert "step 300 / 300 (100%)" in text and "loss 0.5" in text
    assert "SIMULATED GPUs: these are not real devices" in text
    assert "(GPU_WIDGETS_BACKEND=simulated)" in out and "<code>" not in out  # no padded inline code: "( ... )"
    assert "throttled now: thermal (hardware)" in text and "busy 10 %" in text and "memory 1.0 / 80.0 GiB" in text
    assert "style=" not in out  # the look is the CSS's, sent once; redraws send words and classes
    used = set(re.findall(r'class="([^"]+)"', out))
    for cls in {c for group in used for c in group.split()} - {"gpu-widgets-monitor"}:
        assert f".{cls}" in HEADER_CSS, f"class {cls} has no rule in header_css"
    assert "var(--jp-warn-color1" in HEADER_CSS and "var(--jp-layout-color1" in HEADER_CSS


def test_summary_header_for_many_gpus_is_compact_and_says_why():
    trace = GpuTrace(t0=0.0)
    n = 64
    trace.add_snapshot(snap(n, utilization_gpu_percent=[i % 100 for i in range(n)],
                            throttle_reasons=[mask_from_names(["sw_power_cap"]) if i == 3 else 0 for i in range(n)],
                            status=["lost" if i == 5 else "ok" for i in range(n)]))
    out = render_monitor(MonitorText(title="t", status="running", devices=list(trace.devices.values()), summary=True))
    text = words(out)
    assert f"{n} GPUs" in text and why(n) in text
    assert "throttled now: GPU 3 (power cap)" in text and "lost (not answering): GPU 5" in text
    assert out.count('<span class="gpuw-tile') == n and 'gpuw-tile gpuw-error' in out and 'gpuw-tile gpuw-warn' in out
    assert len(out) < 12_000  # 64 GPUs in a few KB


def test_dashboard_summarises_many_gpus_with_auto_and_draws_each_with_all():
    sampler = simulated_sampler(n_gpus=4)
    for _ in range(30):
        sampler.tick()
    dash = GpuDashboard(sampler=sampler, start=False, display=False)
    dash.refresh()
    util = dash._view.charts["utilization"].lines
    assert set(util) == {"mean of 4 GPUs", "min–max"}
    hist = sampler.history.since(0.0)
    rows = np.array([d["utilization_gpu_percent"] for d in hist["devices"]], dtype=float)
    assert np.asarray(util["mean of 4 GPUs"].y) == pytest.approx(rows.mean(axis=0))
    band = np.asarray(util["min–max"].y)
    assert band[0] == pytest.approx(rows.min(axis=0)) and band[1] == pytest.approx(rows.max(axis=0))
    text = words(dash.widget.children[0].value)
    assert "4 GPUs" in text and why(4) in text
    each = GpuDashboard(sampler=sampler, start=False, display=False, gpus="all")
    each.refresh()
    assert set(each._view.charts["utilization"].lines) == {f"GPU {i}" for i in range(4)}
    assert why(4) not in words(each.widget.children[0].value)


def test_dashboard_header_cards_show_throttled_and_lost_in_words():
    s = snap(2, throttle_reasons=[mask_from_names(["sw_power_cap"]), 0], status=["ok", "lost"])
    out = render_dashboard(s, None, 300.0, True)
    text = words(out)
    assert "throttled: power cap" in text and "lost (not answering)" in text
    assert 'class="gpuw-card gpuw-lost"' in out and "gpuw-warn" in out


def test_summary_cells_follow_the_catalogue():
    readings = [gpu_summary.from_snapshot(d) for d in snap(3)["devices"]]
    text = words(gpu_summary.summary_html(readings, shown_in(MONITOR)))
    assert "busy 10–30 %" in text and "mean 20 %" in text
    assert "memory 1.0–3.0 GiB" in text and "of 80.0 GiB" in text
    assert "power 100–102 W" in text and "of 700 W" in text


# -- the %%gpuwatch cell summary in the same look --------------------------------------------------
def test_cell_summary_html_has_a_card_per_gpu_with_the_texts_figures():
    from gpu_widgets.magic.summary import summarize, summary_html

    trace, busy = fake_trace(n=2)
    trace.backend = "simulated"
    trace.devices[0].name = "<b>odd</b>"
    text, data = summarize(trace, 5.0, 1.0)
    out = summary_html(text, data)
    seen = words(out.split("</style>", 1)[1])
    assert seen.startswith("%%gpuwatch: cell ran 5.0 s · 6 samples (every 1 s) SIMULATED")
    assert "&lt;b&gt;odd&lt;/b&gt;" in out and "<b>odd</b>" not in out
    assert out.count("<b>GPU ") == 2  # a card per GPU
    mean0 = sum(row[0] for row in busy) / len(busy)
    assert f"busy mean {mean0:.0f} %" in seen and f"peak {max(r[0] for r in busy)} %" in seen
    assert "throttled: power cap" in seen and "no throttling" in seen  # GPU 1 throttled, GPU 0 not
    assert out.startswith(f"<style>{HEADER_CSS}</style>")  # styled even with no widget on the page


def test_a_lost_gpu_is_shaded_as_lost_on_each_of_its_charts():
    trace = GpuTrace(t0=100.0)
    for k in range(8):
        trace.add_snapshot(snap(2, t=100.0 + k, status=["ok", "lost" if k in (2, 3, 6) else "ok"]))
    charts = MonitorCharts(ChartsView(), None, "time", 2000, gpu_charts(trace.curve_specs))
    charts.t0 = 100.0
    lost = [(c, style, list(xs)) for c, name, _, style, xs, _ in charts.gpu_lines(trace.devices[1]) if name == "GPU 1 lost"]
    # Every chart the GPU has a line in; SM and tensor active (no GPM in these samples) are not made for a shade.
    assert {c for c, _, _ in lost} == {chart.name for chart in charts.gpu} - {"gpu_sm_active", "gpu_tensor_active"}
    assert all(style == "lost" and xs == [2, 2, 3, 3, 6, 6, 6.5, 6.5] for _, style, xs in lost)
    assert not [name for _, name, *_ in charts.gpu_lines(trace.devices[0]) if "lost" in name]


def test_more_than_two_gpus_drawn_each_get_a_row_each_not_a_card():
    """Eight cards stacked four deep above the charts: a row per GPU keeps them in sight and the
    header re-sent on a redraw small; one or two GPUs keep their cards."""
    def header_of(n: int) -> str:
        trace = GpuTrace(t0=0.0)
        trace.add_snapshot(snap(n, utilization_gpu_percent=[10 * i for i in range(n)],
                                throttle_reasons=[mask_from_names(["sw_power_cap"]) if i == 2 else 0 for i in range(n)],
                                status=["lost" if i == 1 else "ok" for i in range(n)]))
        return render_monitor(MonitorText(title="t", status="running", devices=list(trace.devices.values())))
    eight = header_of(8)
    rows = re.findall(r"<tr[ >].*?</tr>", eight.split("<tbody>")[1])
    assert len(rows) == 8 and 'class="gpuw-card' not in eight
    assert [re.search(r"<b>GPU (\d+)</b>", r).group(1) for r in rows] == [str(i) for i in range(8)]
    assert "30 %" in words(rows[3]) and "lost" in words(rows[1]) and "throttled: power cap" in words(rows[2])
    assert "<th>busy</th>" in eight and "<th>memory</th>" in eight
    used = set(re.findall(r'class="?([\w -]+)"?', eight))
    for cls in {c for group in used for c in group.split()} - {"gpu-widgets-monitor"}:
        assert f".{cls}" in HEADER_CSS or f"tr.{cls}" in HEADER_CSS, f"class {cls} has no rule in header_css"
    two = header_of(2)
    assert "gpuw-table" not in two and len(re.findall(r'class="gpuw-card( gpuw-lost)?"', two)) == 2
    assert len(eight) < 5_000  # the card version was ~6.4 KB for 8 GPUs


def test_the_static_picture_draws_the_summary_as_the_widget_does():
    from gpu_widgets.monitor.static_image import draw_figure

    def legend_words(mon: TrainingMonitor) -> list[str]:
        r = mon.parts
        r.records.resolve_deferred()
        fig = draw_figure(mon.title, r.records, r.charts.plan, r.trace, r.gpus.shown(), r.run.t0,
                          summary=r.gpus.summarised())
        return [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]

    summary, each = cpu_only_monitor(8), cpu_only_monitor(8, gpus="all")
    try:
        words_summary, words_each = legend_words(summary), legend_words(each)
        assert sum(w.startswith("mean of 8 GPUs") for w in words_summary) == 4  # one per GPU chart
        assert sum(w.startswith("min–max") for w in words_summary) == 4
        assert not any(w.startswith("GPU 3") for w in words_summary)
        assert sum(w.startswith("GPU 3") for w in words_each) >= 4 and not any("mean of" in w for w in words_each)
        assert summary.to_png()[:8] == b"\x89PNG\r\n\x1a\n"
    finally:
        summary.finish()
        each.finish()
