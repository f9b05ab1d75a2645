"""Any finite value can be charted (live, in the PNG, in compare()), exactly kept in the run log;
titles of any length are cut for display and kept whole in the data."""
from __future__ import annotations

import json
import math
import re
import time

import numpy as np
import pytest

from gpu_widgets import GpuDashboard, TrainingMonitor
from gpu_widgets.widgets.drawable import DRAW_MAX, TITLE_CHARS
from gpu_widgets.monitor.static_image import draw_figure
from gpu_widgets.widgets.ticks import nice_ticks

from .widget_helpers import fixed_sampler, run_dir, simulated_sampler  # noqa: F401

EXTREMES = [1.0, 1e308, -1e308, 0.5, 3e38, 4e38, -5e38, 2.0, 1e308]
F32_MAX = float(np.finfo(np.float32).max)
assert DRAW_MAX == F32_MAX


def logged(title: str, values, sampler=None, **kw) -> TrainingMonitor:
    """A monitor that logged ``values`` as loss and lr, a GPU sample every third step."""
    sampler = sampler or simulated_sampler(n_gpus=1)
    mon = TrainingMonitor(title, display=False, sampler=sampler, **kw)
    for i, v in enumerate(values):
        if i % 3 == 0:
            sampler.tick()
            mon.parts.tick()
        mon.log(i, loss=v, lr=v)
    mon.parts.shown = True  # displayed: redraws happen
    mon.refresh()
    return mon


def drawable(chart) -> None:
    """What bqplot gets can be drawn: finite in float32 (NaN aside), with finite round ticks."""
    for name, mark in chart.lines.items():
        y = np.asarray(mark.y, float)
        assert not np.isinf(y).any() and np.nanmax(np.abs(y), initial=0) <= F32_MAX, name
        with np.errstate(over="raise"):
            np.asarray(mark.y).astype(np.float32)  # the cast the browser's arrays make: no overflow
        mark.get_state()  # the state is serialisable as sent
    ticks = np.asarray(chart.y_axis.tick_values, float)
    assert ticks.size and np.isfinite(ticks).all() and np.abs(ticks).max() <= F32_MAX
    lo, hi = chart.y_range()
    assert -F32_MAX <= lo <= hi <= F32_MAX


def text(html: str) -> str:
    return re.sub(r"<[^>]+>", " ", html)


# -- finite extremes ------------------------------------------------------------------------------
def test_finite_extremes_draw_live_and_stay_exact_in_the_run_log(tmp_path):
    mon = logged("extremes", EXTREMES, run_log=tmp_path / "log")
    try:
        assert mon.errors == [], "drawing failed"
        chart = mon.parts.view.charts["loss"]
        drawable(chart)
        drawable(mon.parts.view.charts["lr"])
        y = np.asarray(chart.lines["loss"].y)
        assert y.max() == F32_MAX and y.min() == -F32_MAX, "drawn clipped to float32's range"
        assert "1e+308" in text(chart.head.value), "the legend shows the exact latest value"
        assert "1e+308" in text(mon.parts.view.header.value)
    finally:
        mon.finish()
    assert mon.errors == []
    # The run log, rows() and load() keep every value exactly
    rows = [json.loads(line) for line in (mon.run_dir / "steps.jsonl").read_text().splitlines()]
    assert [r["loss"] for r in rows] == EXTREMES
    assert mon.series("loss")[1] == EXTREMES
    assert TrainingMonitor.load(mon.run_dir, display=False).series("loss")[1] == EXTREMES


def test_finite_extremes_draw_in_the_png():
    mon = logged("extremes", EXTREMES, run_log=False)
    mon.finish()
    png = mon.to_png()
    assert png.startswith(b"\x89PNG") and mon.errors == []
    r = mon.parts
    fig = draw_figure(mon.title, r.records, r.charts.plan, r.trace, r.gpus.shown())
    loss_ax = next(ax for ax in fig.axes if ax.get_legend() and ax.get_legend().get_title().get_text() == "LOSS")
    low, high = loss_ax.get_ylim()
    assert math.isfinite(low) and math.isfinite(high) and high >= 3e38
    labels = [t.get_text() for t in loss_ax.get_legend().get_texts()]
    assert labels == ["loss 1e+308"], "the legend's value is the exact one"


def test_compare_draws_finite_extremes_and_keeps_final_values_exact(tmp_path):
    a = logged("wild", EXTREMES, run_log=tmp_path / "a")
    b = logged("calm", [1.0, 0.5, 0.25], run_log=tmp_path / "b")
    a.finish(), b.finish()
    cmp = TrainingMonitor.compare(a.run_dir, b.run_dir, display=False)
    for name in ("loss", "lr"):
        drawable(cmp._view.charts[name])
    assert cmp.summary[0]["final"]["loss"] == 1e308
    assert "1e+308" in text(cmp._view.header.value)
    assert cmp.to_png().startswith(b"\x89PNG") and cmp.problems == []
    for by_time in (TrainingMonitor.compare(a, b, x_axis="time", display=False),):
        drawable(by_time._view.charts["loss"])


def test_values_past_float32_are_clipped_for_drawing_in_gpu_lines_and_the_dashboard():
    # Given a GPU that reports a power beyond float32's range (a broken driver, a fake library)
    sampler = fixed_sampler({"power_w": 1e39}, {"power_w": 80.0})
    mon = logged("gpu", [1.0, 2.0, 3.0, 4.0], sampler=sampler, run_log=False, gpus="all")
    try:
        power = mon.parts.view.charts["gpu_power"]
        drawable(power)
        assert np.asarray(power.lines["GPU 0"].y).max() == F32_MAX  # not inf
        assert power.y_scale.max == F32_MAX, "data past the power limit widens the axis to what is drawn"
        head = text(power.head.value)
        assert f"{1e39:.0f} W" in head and "inf" not in head, head  # the value read, not what is drawn
    finally:
        mon.finish()
    assert mon.to_png().startswith(b"\x89PNG") and mon.errors == []
    dash = GpuDashboard(sampler=sampler, start=False, display=False, gpus="all")
    try:
        sampler.tick()
        dash.refresh()
        drawable(dash._view.charts["power"])
    finally:
        dash.close()


def test_nan_and_inf_are_still_left_out_of_the_lines():
    values = [1.0, math.nan, math.inf, -math.inf, 2.0, 1e308]
    mon = logged("gaps", values, run_log=False)
    try:
        chart = mon.parts.view.charts["loss"]
        drawable(chart)
        assert np.isfinite(np.asarray(chart.lines["loss"].y)).all()
        assert "loss was NaN at step 1 (first of 3 non-finite values; not plotted)" in text(mon.parts.view.header.value)
    finally:
        mon.finish()
    assert mon.to_png().startswith(b"\x89PNG") and mon.errors == []


@pytest.mark.parametrize("lo,hi", [(-1e308, 1e308), (0.0, 1.7976931348623157e308), (-1.7976931348623157e308, 0.0),
                                   (-F32_MAX, F32_MAX), (1.0, 1e308), (0.0, 1e-320), (5e307, 1e308)])
def test_round_ticks_for_any_finite_range(lo, hi):
    ticks = nice_ticks(lo, hi, 5)
    assert 1 <= len(ticks) <= 5 and all(math.isfinite(t) for t in ticks)
    step = (hi / 4 - lo / 4)
    assert all(lo - step <= t <= hi + step for t in ticks)
    assert list(ticks) == sorted(ticks)


# -- long titles -----------------------------------------------------------------------------------
LONG = "x" * 1_000_000


def test_a_monitors_long_title_is_cut_in_its_header_png_and_repr_but_kept_whole(tmp_path):
    began = time.monotonic()
    mon = logged(LONG, [1.0, 0.5], run_log=tmp_path / "log")
    mon.finish()
    assert mon.title == LONG
    shown = re.search(r'class="gpuw-htitle">([^<]*)<', mon.parts.view.header.value).group(1)
    assert len(shown) == TITLE_CHARS and shown.endswith("…")
    assert len(repr(mon)) < 200
    assert mon.to_png().startswith(b"\x89PNG") and mon.errors == []
    assert json.loads((mon.run_dir / "run.json").read_text())["title"] == LONG, "the run log keeps it whole"
    assert time.monotonic() - began < 60, "a million-character title took minutes before"


def test_compare_cuts_long_titles_for_display_and_keeps_them_in_its_data(tmp_path):
    a = logged(LONG, [1.0, 0.5], run_log=tmp_path / "a")
    b = logged("y" * 500_000, [2.0, 1.0], run_log=tmp_path / "b")
    a.finish(), b.finish()
    began = time.monotonic()
    cmp = TrainingMonitor.compare(a.run_dir, b.run_dir, title=LONG, display=False)
    assert cmp.title == LONG and cmp.summary[0]["title"] == LONG
    header = cmp._view.header.value
    assert len(header) < 10_000, "neither the title nor the runs' names are laid out whole"
    title = re.search(r'class="gpuw-htitle">([^<]*)<', header).group(1)
    assert len(title) == TITLE_CHARS and title.endswith("…")
    assert all(len(label) < TITLE_CHARS + 30 for label in cmp.runs)  # cut title + start time
    assert len(cmp.runs) == len(set(cmp.runs))
    assert len(cmp._view.charts["loss"].head.value) < 2_000
    assert len(repr(cmp)) < 400
    png = cmp.to_png()
    assert png.startswith(b"\x89PNG") and cmp.problems == []
    bundle = cmp._repr_mimebundle_()
    assert "image/png" in bundle and len(bundle["text/plain"]) < 400
    assert time.monotonic() - began < 60, "a million-character title ran past 60 s before"


def test_long_key_names_are_cut_in_legends(tmp_path):
    key = "loss_" + "k" * 100_000
    mon = TrainingMonitor("keys", display=False, sampler=simulated_sampler(n_gpus=1), run_log=False)
    mon.log(0, **{key: 1.0})
    mon.log(1, **{key: 0.5})
    mon.parts.shown = True
    mon.refresh()
    mon.finish()
    assert len(mon.parts.view.charts["loss"].head.value) < 2_000
    assert mon.to_png().startswith(b"\x89PNG") and mon.errors == []
    assert mon.keys == (key,)
