"""Round tick values for the charts, and what the monitor's axes receive."""
from __future__ import annotations

import math
import random

import pytest

from gpu_widgets.widgets.ticks import END_PAD, axis_plan, nice_ticks

from .test_monitor import make
from .widget_helpers import marks, simulated_sampler


@pytest.mark.parametrize(
    ("lo", "hi", "count", "expected"),
    [
        (0, 8, 6, (0, 2, 4, 6, 8)),  # bqplot's num_ticks gave 0, 1.6, 3.2 … labelled "0 2 3 5 6 8"
        (0, 62.6, 5, (0, 20, 40, 60)),
        (0.000468, 0.859, 5, (0.2, 0.4, 0.6, 0.8)),
        (0, 100, 5, (0, 25, 50, 75, 100)),
        (-300, 0, 6, (-300, -200, -100, 0)),
        (0, 0.3, 6, (0, 0.1, 0.2, 0.3)),
        (0.19, 0.21, 5, (0.19, 0.195, 0.2, 0.205, 0.21)),
        (8, 0, 6, (0, 2, 4, 6, 8)),  # either order
        (2.5, 2.5000001, 5, (2.5,)),  # a flat line: one tick, not rounding noise
        (0, 0, 5, (0,)),
        (0, math.nan, 5, ()),
        (-math.inf, 1, 5, ()),
    ],
)
def test_nice_ticks_examples(lo, hi, count, expected):
    assert nice_ticks(lo, hi, count) == pytest.approx(expected)


def test_nice_ticks_are_round_evenly_spaced_and_inside_the_range():
    rng = random.Random(7)
    for _ in range(2000):
        lo = rng.uniform(-1, 1) * 10 ** rng.randint(-6, 7)
        hi = lo + rng.uniform(0.01, 1) * 10 ** rng.randint(-6, 7)
        count = rng.randint(4, 8)
        ticks = nice_ticks(lo, hi, count)
        if hi - lo <= 1e-6 * max(abs(lo), abs(hi)):
            assert len(ticks) == 1  # flat at this scale
            continue
        assert 2 <= len(ticks) <= count, (lo, hi, count, ticks)
        step = ticks[1] - ticks[0]
        eps = step * 1e-6
        assert lo - eps <= ticks[0] and ticks[-1] <= hi + eps
        # the step is 1, 2, 2.5 or 5 times a power of ten, every tick a multiple of it
        power = 10 ** math.floor(math.log10(step))
        mantissa = min((1, 2, 2.5, 5, 10), key=lambda m: abs(step / power - m))
        assert step / power == pytest.approx(mantissa, rel=1e-6), (step, ticks)
        step = mantissa * power
        for a, b in zip(ticks, ticks[1:]):
            assert b - a == pytest.approx(step, rel=1e-6)
        for t in ticks:
            assert t / step == pytest.approx(round(t / step), rel=1e-9, abs=1e-9)
            assert len(f"{t:g}") <= 12  # printed short: no 0.30000000000000004


def test_monitor_axes_get_round_ticks_and_one_line_charts_no_legend():
    sampler = simulated_sampler()
    mon = make(run_log=False, sampler=sampler)
    for i in range(40):
        mon.log(loss=0.86 * 0.9**i, acc=0.5 + i / 100)
        if i % 8 == 0:
            sampler.tick()
    mon.log(step=mon.step, val_loss=0.3)
    mon.refresh()
    charts = mon.parts.view.charts
    loss = charts["loss"]
    loss_y = tuple(float(v) for v in loss.y_axis.tick_values)
    ys = [float(v) for line in marks(charts, "loss").values() for v in line.y]
    # The loss starts near 0 (0.0136 of 0.86): its axis starts at 0, labelled, and its top tick
    # has room above it inside the plot.
    assert loss_y == nice_ticks(0.0, max(ys), 5) and len(loss_y) >= 2 and loss_y[0] == 0.0
    assert loss.y_scale.min == 0.0 and loss.y_scale.max >= max(ys) + END_PAD * max(ys) * 0.99
    assert loss.y_axis.tick_format == "~g"  # the values as they are, not rounded again by d3
    # The run's time axis starts at 0 and every chart on it shows the same x ticks.
    assert mon.parts.view.time_scale.min == 0.0
    x_ticks = {tuple(float(v) for v in c.x_axis.tick_values) for c in charts.values()}
    assert len(x_ticks) == 1 and next(iter(x_ticks))[0] == 0.0
    # The GPU memory chart keeps its fixed floor of 0 among its ticks.
    assert float(charts["gpu_memory"].y_axis.tick_values[0]) == 0.0
    # No legend box over the data: the lines are named in the legend row above the plot.
    assert not any(m.display_legend for m in marks(charts).values())
    assert "loss <b>" in charts["loss"].head.value and "val_loss <b>" in charts["loss"].head.value
    mon.finish()


def test_ticks_are_sent_only_when_they_change():
    mon = make(run_log=False, x_axis="step", plot=["loss"])
    mon.log(loss=1.0)
    mon.log(loss=0.5)
    mon.refresh()
    axis = mon.parts.view.charts["loss"].y_axis
    sent = []
    axis.observe(lambda change: sent.append(tuple(change["new"])), "tick_values")
    mon.log(loss=0.75)  # inside the range: the same ticks
    mon.refresh()
    assert sent == []
    mon.log(loss=3.0)  # a new maximum: new ticks, sent once
    mon.refresh()
    assert len(sent) == 1 and max(sent[0]) > 1.0
    mon.finish()


def test_a_monitor_nobody_displays_records_without_drawing_until_it_is_displayed():
    # A script (or display=False) never shows the charts: the timer records only, the first
    # display draws everything logged before it, and the timer draws from then on.
    mon = make(x_axis="step", plot=["loss"])
    for i in range(5):
        mon.log(loss=1.0 / (i + 1))
    mon.parts.tick()  # a timer pass: due, but nobody looks
    assert mon.parts.view.line_count == 0 and mon.parts.records.size == 5
    mon._repr_mimebundle_()
    assert list(marks(mon.parts.view.charts, "loss")["loss"].x) == [0, 1, 2, 3, 4]
    mon.log(loss=0.1)
    mon.parts.draw_due = 0.0
    mon.parts.tick()
    assert len(marks(mon.parts.view.charts, "loss")["loss"].x) == 6
    mon.finish()


@pytest.mark.parametrize(
    ("lo", "hi", "fixed", "ticks", "bottom", "top"),
    [
        # lr from 1e-4 to 1e-3: from 0, a "0" label, room above the top tick "0.001"
        (1e-4, 1e-3, (False, False), (0, 0.00025, 0.0005, 0.00075, 0.001), 0.0, 0.001 + 0.001 * END_PAD),
        (0.0, 1.0, (False, False), (0, 0.25, 0.5, 0.75, 1), 0.0, 1.0 + END_PAD),  # a loss ending at 1
        (0.5, 0.9, (False, False), (0.5, 0.6, 0.7, 0.8, 0.9), 0.5 - 0.4 * END_PAD, 0.9 + 0.4 * END_PAD),
        (-1.0, -0.1, (False, False), (-1, -0.75, -0.5, -0.25, 0), -1.0 - END_PAD, END_PAD),  # up to 0
        (0.0, 100.0, (True, True), (0, 25, 50, 75, 100), 0.0, 100.0),  # fixed ends stay
        (20.0, 71.0, (True, False), (20, 30, 40, 50, 60, 70), 20.0, 71.0 + 51.0 * END_PAD),
        (3.0, 3.0, (False, False), (3.0,), 3.0 - 0.15 * 2 * END_PAD, 3.0 + 0.15 * 2 * END_PAD),  # flat
    ],
)
def test_axis_plan_starts_near_zero_at_zero_and_leaves_room_above_the_top_tick(lo, hi, fixed, ticks, bottom, top):
    got_ticks, got_bottom, got_top = axis_plan(lo, hi, 6 if fixed == (True, False) else 5, *fixed)
    assert got_ticks == pytest.approx(ticks) and got_bottom == pytest.approx(bottom) and got_top == pytest.approx(top)
    if not fixed[1]:  # the top label is inside the plot, a share of the span below its edge
        assert got_top - got_ticks[-1] >= END_PAD * (got_ticks[-1] - got_ticks[0]) * 0.99 and got_top > got_ticks[-1]


def test_axis_plan_at_the_float32_limits_and_without_data():
    ticks, bottom, top = axis_plan(-3.4e38, 3.4e38, 5)
    assert ticks and -3.5e38 < bottom <= -3.4e38 and 3.4e38 <= top < 3.5e38 and math.isfinite(top - bottom * 0)
    assert axis_plan(math.nan, math.nan, 5)[0] == ()
