"""The widgets' charts: cards with the legend outside the plot, fixed axes from the catalogue, time
axes that span the data, shaded regions and bands, the theme sent once, redraws within budget."""
from __future__ import annotations

import json
import re
import time
from typing import Any

import numpy as np
import pytest

from gpu_widgets import GpuDashboard, TrainingMonitor
from gpu_widgets.magic.magics import CellDashboard
from gpu_widgets.metrics.catalogue import DASHBOARD, MONITOR, shown_in
from gpu_widgets.widgets import theme
from gpu_widgets.monitor.monitor_charts import CHART_NAMES
from gpu_widgets.widgets.view import ChartsView

from .widget_helpers import fixed_sampler, run_dir, simulated_sampler  # noqa: F401

REDRAW_BUDGET = 32 * 1024


def keys(chart: Any) -> list[str]:
    """The legend row's entries as read: "GPU 0 92 %"."""
    return [re.sub(r"<[^>]+>", "", k) for k in re.findall(r'<span>(.*?)</span>', chart.head.value.split('class="gpuw-legend">')[1])]


def classes(widget: Any) -> tuple[str, ...]:
    return tuple(widget._dom_classes)


# -- legends outside the plot ------------------------------------------------------------------
def test_dashboard_with_8_gpus_names_every_line_above_the_plot_with_its_latest_value():
    sampler = simulated_sampler(n_gpus=8)
    for _ in range(3):
        sampler.tick()
    dash = GpuDashboard(sampler=sampler, start=False, display=False, gpus="all")
    dash.refresh()
    latest = sampler.latest["devices"]
    for m in shown_in(DASHBOARD):
        if all(d[m.field] is None for d in latest):  # SM active while nobody asked for GPM: no empty chart
            assert m.id not in dash._view.charts, m.id
            continue
        chart = dash._view.charts[m.id]
        assert not any(mark.display_legend for mark in chart.lines.values()), m.id  # no box over the data
        assert "gpuw-chart" in classes(chart.card) and "gpuw-head" in classes(chart.head)
        assert chart.card.children == (chart.head, chart.figure)
        assert f'<div class="gpuw-title">{m.title}</div>' in chart.head.value
        assert chart.figure.title_style == {"display": "none"}  # the HTML title only, not a big heading
        expected = [f"GPU {d['index']} {m.value(d[m.field]):.{m.decimals}f} {m.unit}" for d in latest]
        assert keys(chart) == expected, m.id


def test_monitor_charts_have_no_legend_box_and_a_legend_row_per_chart():
    sampler = simulated_sampler(n_gpus=2)
    mon = TrainingMonitor("t", display=False, run_log=False, sampler=sampler)
    try:
        for step in range(6):
            sampler.tick()
            mon.log(step=step, loss=1.0 / (step + 1), val_loss=2.0 / (step + 1))
        mon.refresh()
        charts = mon.parts.view.charts
        assert not any(mark.display_legend for c in charts.values() for mark in c.lines.values())
        assert keys(charts["loss"]) == ["loss 0.1667", "val_loss 0.3333"]
        assert all(re.fullmatch(r"GPU [01] \d+ %", k) for k in keys(charts[CHART_NAMES["utilization"]]))
        # The margin above the plot is small: the title and legend are above the figure, not in it;
        # it holds half a tick label (a fixed top's label sits on the plot's edge).
        assert all(c.figure.fig_margin["top"] <= 12 for c in charts.values())
    finally:
        mon.finish()


def test_legend_row_is_sent_only_when_its_text_changes():
    view = ChartsView()
    view.define_chart("busy", title="GPU busy (%)", x_label="s", y_label="%", y_min=0.0, y_max=100.0, decimals=0)
    view.update(None, [("busy", "GPU 0", "#1f77b4", "solid", [0.0, 1.0], [10.0, 92.0])])
    head = view.charts["busy"].head
    sent: list[str] = []
    head.observe(lambda change: sent.append(change["new"]), "value")
    view.update(None, [("busy", "GPU 0", "#1f77b4", "solid", [0.0, 1.0, 2.0], [10.0, 92.0, 92.2])])
    assert sent == []  # still "92 %"
    view.update(None, [("busy", "GPU 0", "#1f77b4", "solid", [0.0, 1.0, 2.0], [10.0, 92.0, np.nan])])
    assert sent == [] and keys(view.charts["busy"]) == ["GPU 0 92 %"]  # a gap keeps the last known value
    view.update(None, [("busy", "GPU 0", "#1f77b4", "solid", [3.0], [7.0])])
    assert len(sent) == 1 and keys(view.charts["busy"]) == ["GPU 0 7 %"]


# -- fixed axes ---------------------------------------------------------------------------------
def test_gpu_axes_are_fixed_from_the_catalogue_in_the_dashboard_and_the_monitor():
    sampler = simulated_sampler(n_gpus=2)
    for _ in range(4):
        sampler.tick()
    latest = sampler.latest["devices"]
    dash = GpuDashboard(sampler=sampler, start=False, display=False, gpus="all")
    dash.refresh()
    mon = TrainingMonitor("t", display=False, run_log=False, sampler=sampler)
    try:
        mon.log(loss=1.0)
        sampler.tick()
        mon.refresh()
        monitor = {c.metric.id: mon.parts.view.charts[c.name] for c in mon.parts.charts.gpu if c.name in mon.parts.view.charts}
        for view, metrics in ((dash._view.charts, shown_in(DASHBOARD)), (monitor, shown_in(MONITOR))):
            for m in metrics:
                if all(d[m.field] is None for d in latest):  # GPM not asked for here: not drawn
                    assert m.id not in view, m.id
                    continue
                chart = view[m.id]
                top = m.top(d.get(m.y_max_field) for d in latest) if m.y_max_field else m.y_max
                if top is None:  # no limit known: fitted, with room above the data for the top tick
                    assert chart.y_scale.min == m.y_min and chart.y_scale.max > chart.data_y_range()[1], m.id
                    continue
                assert (chart.y_scale.min, chart.y_scale.max) == (m.y_min, top), m.id
        assert dash._view.charts["utilization"].y_scale.max == 100.0
        assert dash._view.charts["memory"].y_scale.max and dash._view.charts["power"].y_scale.max
        loss = mon.parts.view.charts["loss"]  # fitted to its one value, with room on both sides
        assert loss.y_scale.min < 1.0 < loss.y_scale.max
    finally:
        mon.finish()


def test_data_past_a_fixed_end_widens_the_axis_instead_of_being_cut():
    view = ChartsView()
    view.define_chart("temp", title="GPU temperature (°C)", x_label="s", y_label="°C", y_min=20.0, y_max=87.0)
    view.update(None, [("temp", "GPU 0", "#1f77b4", "solid", [0.0, 1.0], [60.0, 70.0])])
    scale = view.charts["temp"].y_scale
    assert (scale.min, scale.max) == (20.0, 87.0)
    view.update(None, [("temp", "GPU 0", "#1f77b4", "solid", [0.0, 1.0], [60.0, 91.0])])
    assert (scale.min, scale.max) == (20.0, 91.0)  # above the slowdown limit: shown, not clipped
    view.set_y_max("temp", 95.0)
    assert scale.max == 95.0


# -- time axes ----------------------------------------------------------------------------------
def test_time_axis_spans_the_data_until_the_window_is_full_then_the_window():
    view = ChartsView(time_window=120.0)
    view.define_chart("*", shared_x=True, x_label="seconds (0 = now)")
    scale = view.time_scale
    assert (scale.min, scale.max) == (-120.0, 0.0)  # nothing yet: the whole window
    view.update(None, [("a", "GPU 0", "#1f77b4", "solid", np.arange(-30.0, 1.0), np.ones(31))])
    assert (scale.min, scale.max) == (-30.0, 0.0)
    ticks = [float(t) for t in view.charts["a"].x_axis.tick_values]
    assert ticks[0] >= -30.0 and ticks[-1] == 0.0
    view.update(None, [("a", "GPU 0", "#1f77b4", "solid", np.arange(-119.0, 1.0), np.ones(120))])
    assert (scale.min, scale.max) == (-120.0, 0.0)  # full: the window
    view.update(None, [("a", "GPU 0", "#1f77b4", "solid", [0.0], [1.0])])
    assert (scale.min, scale.max) == (-2.0, 0.0)  # one sample: the last 2 s, not a zero-width axis


def test_dashboard_time_axis_starts_at_its_oldest_sample():
    sampler = simulated_sampler()
    for _ in range(3):
        sampler.tick()
    dash = GpuDashboard(sampler=sampler, start=False, display=False, window_s=120)
    dash.refresh()
    assert dash._view.time_scale.max == 0.0 and -3.0 < dash._view.time_scale.min < 0.0
    with pytest.raises(ValueError, match="time_window must be a positive number of seconds"):
        ChartsView(time_window=0)


def test_cell_dashboard_shows_only_the_cell_on_an_axis_as_long_as_the_cell():
    sampler = simulated_sampler()
    for _ in range(4):
        sampler.tick()  # history from before the cell
    time.sleep(0.3)
    started = time.time()
    time.sleep(0.05)
    sampler.tick()
    sampler.tick()
    dash = CellDashboard(started=started, window_s=300, sampler=sampler, display=False, refresh_s=60)
    try:
        dash.refresh()
        assert dash.window_s < 2.0 and dash._full_window_s == 300.0
        busy = dash._view.charts["utilization"].lines["GPU 0"]
        assert len(busy.x) == 2  # the cell's samples only
        assert -2.5 < dash._view.time_scale.min < 0.0  # a short cell: not a 300 s axis
    finally:
        dash.stop()


# -- shaded regions and bands -------------------------------------------------------------------
def test_regions_are_shaded_boxes_named_once_and_never_move_the_y_axis():
    view = ChartsView()
    view.define_chart("busy", title="GPU busy (%)", x_label="s", y_label="%", y_min=0.0, y_max=100.0, decimals=0)
    view.update(None, [
        ("busy", "GPU 0", "#1f77b4", "solid", [0.0, 10.0], [50.0, 60.0]),
        ("busy", "GPU 0 throttled", "#ef6c00", "region", [2.0, 2.0, 4.0, 4.0, 6.0, 6.0, 8.0, 8.0],
         [0.0, 100.0, 100.0, 0.0, 0.0, 100.0, 100.0, 0.0]),
        ("busy", "GPU 1 throttled", "#ef6c00", "region", [1.0, 3.0, 3.0], [100.0, 100.0, np.nan]),
    ])
    chart = view.charts["busy"]
    region = chart.lines["GPU 0 throttled"]
    assert region.fill == "bottom" and region.fill_opacities == [0.2] and region.opacities == [0.0]
    assert region.scales["y"] is chart.area_scale and (chart.area_scale.min, chart.area_scale.max) == (0.0, 1.0)
    assert list(region.x) == [2.0, 2.0, 4.0, 4.0, 6.0, 6.0, 8.0, 8.0] and list(region.y) == [0, 1, 1, 0] * 2
    # Segments with NaN between them (the old form) become one box each too.
    assert list(chart.lines["GPU 1 throttled"].x) == [1.0, 1.0, 3.0, 3.0]
    assert keys(chart) == ["GPU 0 60 %", "throttled"]  # one key for every GPU's episodes
    assert chart.marks_in_order()[-1] is chart.lines["GPU 0"]  # lines over the shading
    assert (chart.y_scale.min, chart.y_scale.max) == (0.0, 100.0)
    view.update(None, [("busy", "GPU 0 throttled", "#ef6c00", "region", [0.0, 1.0], [0.0, 0.0]),
                       ("busy", "GPU 1 throttled", "#ef6c00", "region", [], [])])
    assert keys(chart) == ["GPU 0 60 %"]  # no episode drawn: no key


def test_range_is_a_band_between_two_rows():
    view = ChartsView()
    view.define_chart("busy", title="GPU busy (%)", x_label="s", y_label="%", y_min=0.0, decimals=0)
    low, high = [10.0, 20.0, 30.0], [50.0, 130.0, 90.0]
    view.update(None, [("busy", "min–max", "#888888", "range", [0.0, 1.0, 2.0], np.array([low, high])),
                       ("busy", "mean", "#1f77b4", "solid", [0.0, 1.0, 2.0], [30.0, 70.0, 60.0])])
    chart = view.charts["busy"]
    band = chart.lines["min–max"]
    assert band.fill == "between" and band.y.shape == (2, 3) and band.fill_opacities == [0.18]
    assert chart.y_range() == (0.0, 130.0)
    assert keys(chart) == ["min–max 30–90 %", "mean 60 %"]
    with pytest.raises(ValueError, match=r"needs ys of shape \(2, 3\) \(low row, high row\), got \(3,\)"):
        view.update(None, [("busy", "min–max", "#888888", "range", [0.0, 1.0, 2.0], low)])


# -- the theme, once, and the redraw budget ---------------------------------------------------
def test_theme_css_fixes_bqplots_dark_orange_with_the_themes_font_colours():
    css = theme.css()
    assert "--bq-mainheading-fill: var(--jp-ui-font-color1" in css
    assert "--bq-axislabel-fill: var(--jp-ui-font-color2" in css
    assert "--bq-axis-tick-text-fill: var(--jp-ui-font-color2" in css
    assert ".gpuw-chart .bqplot" in css and "orange" not in css
    assert all(re.search(r"var\(--jp-[a-z0-9-]+,", v) for v in re.findall(r"var\(--jp-[^)]*\)", css)), \
        "every theme variable needs a fallback for front ends without JupyterLab's"


class Recorder:
    """Every widget message as the kernel would send it: (type, JSON bytes, binary bytes, text)."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, int, int, str]] = []

    def install(self, monkeypatch: Any) -> None:
        import comm
        from comm.base_comm import BaseComm

        recorder = self

        class RecordingComm(BaseComm):
            def publish_msg(self, msg_type: str, data: Any = None, metadata: Any = None, buffers: Any = None,
                            **keys: Any) -> None:
                text = json.dumps(data, default=str, separators=(",", ":"))
                binary = sum(memoryview(b).nbytes for b in (buffers or ()))
                recorder.messages.append((msg_type, len(text.encode()), binary, text))

        monkeypatch.setattr(comm, "create_comm", lambda *a, **kw: RecordingComm(*a, **kw))


def test_style_is_sent_once_and_a_full_redraw_with_8_gpus_stays_in_budget(monkeypatch):
    rec = Recorder()
    rec.install(monkeypatch)
    # GPUs that read the same at every run (simulated ones follow the wall clock): a repeatable size.
    sampler = fixed_sampler(*({"utilization_gpu_percent": 10 * i + 5, "temperature_c": 40 + i} for i in range(8)))
    mon = TrainingMonitor("t", display=False, run_log=False, sampler=sampler, gpus="all")
    try:
        for step in range(3000):
            mon.log(step=step, loss=1.0 / (1 + step), val_loss=1.2 / (1 + step), lr=3e-4)
            if step % 30 == 0:
                sampler.tick()
        mon.refresh()
        assert len(mon.parts.view.charts[CHART_NAMES["utilization"]].lines) >= 8  # every GPU drawn
        mon.parts.charts.drawn_shares = None  # the largest redraw: every line re-sent
        before = len(rec.messages)
        mon.log(step=3000, loss=0.0003, val_loss=0.0004, lr=3e-4)
        for dev in sampler.backend.devices:  # every latest value changes: every legend row is resent
            dev.update(utilization_gpu_percent=dev["utilization_gpu_percent"] + 1, temperature_c=dev["temperature_c"] + 1,
                       power_w=dev["power_w"] + 1, memory_used_bytes=dev["memory_used_bytes"] * 2)
        sampler.tick()
        mon.refresh()
        redraw = [m for m in rec.messages[before:] if m[0] != "comm_open"]
        size = sum(m[1] + m[2] for m in redraw)
        assert redraw and size <= REDRAW_BUDGET, size
        legends = [m[1] for m in redraw if "gpuw-legend" in m[3]]
        assert len(legends) >= 5 and sum(legends) <= 4096, legends  # the legend rows' share: small beside the lines
        assert not any(".gpuw-chart .bqplot" in m[3] for m in redraw)
    finally:
        mon.finish()
    with_style = [m for m in rec.messages if ".gpuw-chart .bqplot" in m[3]]
    assert len(with_style) == 1 and with_style[0][0] == "comm_open"  # the style widget, made once


def test_legend_lists_gpus_by_index_then_the_shaded_areas():
    from gpu_widgets.widgets import legend
    keys = [legend.Key("GPU 0", "#111", "solid", 5.0), legend.Key("GPU 1 lost", "#222", "lost"),
            legend.Key("GPU 2", "#333", "solid", 7.0), legend.Key("GPU 0 throttled", "#444", "region"),
            legend.Key("GPU 1", "#555", "solid", 9.0)]  # GPU 1's line came back after it was lost
    out = legend.render("GPU busy", keys, "%", 0)
    entries = [re.sub(r"<[^>]+>", "", k) for k in re.findall(r"<span>(.*?)</span>", out)]
    assert entries == ["GPU 0 5 %", "GPU 1 9 %", "GPU 2 7 %", "throttled", "lost"]


@pytest.mark.parametrize("style,ys,sent,legend", [
    # a GPU line whose latest samples are gaps (lost, SM activity still being read): cut after the last value
    ("solid", [10.0, 20.0, float("nan"), float("nan")], 2, 20.0),
    ("solid", [float("nan")] * 3, 0, None),
    ("solid", [10.0, float("nan"), 30.0], 3, 30.0),  # a gap inside stays a gap
    # a min-max band: a gap in either row ends it; the legend keeps each row's latest value
    ("range", [[1.0, 2.0, 3.0], [4.0, 5.0, float("nan")]], 2, 3.0),
])
def test_a_line_never_ends_in_a_gap_in_the_browser(style, ys, sent, legend):
    # bqplot puts each line's label at its last point: a NaN there is "translate(332,undefined)", an
    # error in the browser console at every redraw (seen with 8 GPUs in the quickstart).
    from gpu_widgets.widgets.chart_card import Chart

    chart = Chart("GPU busy (%)", "seconds")
    chart.line("GPU 0", "#1976d2", style)
    xs = [0.0, 1.0, 2.0, 3.0][:len(ys[0]) if style == "range" else len(ys)]
    chart.set_data("GPU 0", xs, ys)
    mark = chart.lines["GPU 0"]
    assert len(mark.x) == sent and np.asarray(mark.y).shape[-1] == sent
    if sent:
        assert np.isfinite(np.asarray(mark.y)[..., -1]).all()
    assert chart.keys["GPU 0"].value == legend
