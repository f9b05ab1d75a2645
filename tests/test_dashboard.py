"""GpuDashboard: charts from the sampler's history, bounded, labelled, and threads that end."""
from __future__ import annotations

import re
import gc
import threading
import time

import pytest

from gpu_widgets import GpuDashboard
from gpu_widgets.metrics.catalogue import metric
from gpu_widgets.widgets import leases as sampling

from .widget_helpers import (  # noqa: F401
    HangingBackend,
    marks,
    no_gpu_sampler,
    shared_simulated,
    simulated_sampler,
    wait_until,
)


def dashboard_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "gpu-widgets-dashboard" and t.is_alive()]


def header(dash: GpuDashboard) -> str:
    """The header's words as read: the HTML without its tags (label and value are separate elements)."""
    return re.sub(r"<[^>]+>", "", dash.widget.children[0].value)


def test_four_charts_one_line_per_gpu_bounded():
    sampler = simulated_sampler(n_gpus=3)
    # gpus="all": each GPU its own line (auto would summarise 3 GPUs this process does not use)
    dash = GpuDashboard(sampler=sampler, start=False, display=False, window_s=3600, max_points=100, gpus="all")
    sampler._read_slow()  # the slow fields (the slowdown temperature) as the slow thread would read them
    for _ in range(1500):
        sampler.tick()
    dash.refresh()
    assert set(dash._view.charts) == {"utilization", "memory", "temperature", "power"}
    for name, chart in dash._view.charts.items():
        assert set(chart.lines) == {"GPU 0", "GPU 1", "GPU 2"}, name
        for line in chart.lines.values():
            assert 0 < len(line.x) <= 100 and len(line.y) == len(line.x)
            assert line.x[-1] == 0.0  # the newest sample is "now"
    util = dash._view.charts["utilization"].lines["GPU 0"].y
    assert all(0 <= v <= 100 for v in util)
    # Titles, units and ranges are the catalogue's, as in every view (were "busy (%)" and
    # "memory used (%)"): memory is drawn in GiB against the largest memory total.
    charts = dash._view.charts
    assert [charts[n].figure.title for n in ("utilization", "memory", "temperature", "power")] == [
        "GPU busy (%)", "GPU memory (GiB)", "GPU temperature (°C)", "GPU power (W)"]
    assert charts["memory"].y_axis.label == "GiB"
    latest = sampler.latest["devices"]
    total_gib = max(d["memory_total_bytes"] for d in latest) / 2**30
    assert (charts["memory"].y_scale.min, charts["memory"].y_scale.max) == (0.0, total_gib)
    used = charts["memory"].lines["GPU 0"].y
    assert 0 < used[-1] <= total_gib and abs(used[-1] - latest[0]["memory_used_bytes"] / 2**30) < 1e-9
    assert (charts["utilization"].y_scale.min, charts["utilization"].y_scale.max) == (0.0, 100.0)
    assert charts["power"].y_scale.max == max(d["power_limit_w"] for d in latest)
    # Temperature from the catalogue's floor to the GPUs' slowdown limit (when the GPUs report one).
    temp = metric("temperature")
    assert charts["temperature"].y_scale.min == temp.y_min
    assert [d[temp.y_max_field] for d in latest] == [87, 87, 87]  # the simulated H100's slowdown
    assert charts["temperature"].y_scale.max == 87.0
    text = header(dash)
    assert "SIMULATED GPUs" in text and "Simulated H100" in text and "busy" in text


def test_chosen_gpus_and_missing_ones():
    sampler = simulated_sampler()
    sampler.tick()
    dash = GpuDashboard(sampler=sampler, start=False, display=False, gpus=[1, 5])
    dash.refresh()
    assert set(marks(dash._view.charts, "utilization")) == {"GPU 1"}
    assert "no GPU with index 5 here" in header(dash)
    with pytest.raises(ValueError, match="gpus must be 'auto', 'all' or a list"):
        GpuDashboard(gpus="one", display=False, start=False)
    with pytest.raises(ValueError, match="window_s must be a number of seconds from 10 to 3600"):
        GpuDashboard(window_s=1, display=False, start=False)
    with pytest.raises(ValueError, match="refresh_s"):
        GpuDashboard(refresh_s=0, display=False, start=False)


def test_no_gpu_says_why():
    sampler = no_gpu_sampler("NVML Shared Library Not Found")
    sampler.tick()
    dash = GpuDashboard(sampler=sampler, start=False, display=False)
    dash.refresh()
    assert "No GPU: NVML Shared Library Not Found" in header(dash)
    assert dash._view.charts == {}


def test_live_updates_and_threads_that_end(shared_simulated):
    dash = GpuDashboard(display=False, refresh_s=0.25)
    assert dash.running and len(dashboard_threads()) == 1 and sampling.holders() == 1
    deadline = time.monotonic() + 5
    # The dashboard's thread adds charts one by one: wait for the one we check, not just the first.
    charts = dash._view.charts
    while not ("power" in charts and "GPU 0" in charts["power"].lines) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "GPU 0" in marks(dash._view.charts, "power")  # drawn by its own thread
    assert "live" in header(dash)
    dash.stop()
    assert not dash.running and not dashboard_threads() and sampling.holders() == 0
    assert "stopped" in header(dash)
    # A dashboard nobody holds any more stops and gives its lease back.
    dropped = GpuDashboard(display=False, refresh_s=0.25)
    assert sampling.holders() == 1
    del dropped
    gc.collect()
    deadline = time.monotonic() + 3
    while dashboard_threads() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not dashboard_threads() and sampling.holders() == 0


def test_a_stuck_sampler_is_shown_as_stale_with_the_call_it_waits_on():
    from gpu_widgets.sampling.sampler import Sampler

    backend = HangingBackend({})
    backend.hang.set()  # the very first read hangs: no sample at all
    sampler = Sampler(backend, interval_s=0.1).start()
    dash = GpuDashboard(sampler=sampler, display=False, refresh_s=0.25)
    try:
        assert "waiting for the first sample" in header(dash)
        # no sample yet: stale after the 5 s start-up grace
        text = wait_until(lambda: "STALE" in header(dash) and header(dash))
        assert "GPU readings are stale: no sample yet: " in text and "HangingBackend.read_fast" in text
        backend.hang.clear()
        backend.release.set()
        wait_until(lambda: "STALE" not in header(dash) and "GPU 0" in header(dash))
    finally:
        backend.release.set()
        dash.stop()
        sampler.stop()


def test_throttled_and_lost_stretches_are_shaded_and_wiped_when_they_leave_the_window():
    from gpu_widgets.metrics.throttle import mask_from_names
    from gpu_widgets.sampling.clock import Clock
    from gpu_widgets.sampling.sampler import Sampler
    from .widget_helpers import FixedBackend

    class Seconds(Clock):  # one second per tick, whatever the machine's speed
        t = 1_000_000.0

        def wall(self) -> float:
            self.t += 1.0
            return self.t

        def monotonic(self) -> float:
            return self.t

    sampler = Sampler(FixedBackend({"utilization_gpu_percent": 90}, {"utilization_gpu_percent": 80}), clock=Seconds())
    dash = GpuDashboard(sampler=sampler, start=False, display=False, window_s=3600, gpus="all")
    gpu0, gpu1 = sampler.backend.devices
    for i in range(12):
        gpu0["throttle_reasons"] = mask_from_names(["sw_power_cap"]) if 3 <= i < 6 else 0
        gpu1["status"] = "lost" if 7 <= i < 9 else "ok"
        sampler.tick()
    dash.refresh()
    charts = dash._view.charts
    busy = charts["utilization"]
    assert busy.keys["GPU 0 throttled"].shown and busy.keys["GPU 0 throttled"].style == "region"
    assert "GPU 1 throttled" not in busy.lines  # GPU 1 never throttled
    for name in ("utilization", "memory", "temperature", "power"):
        assert charts[name].keys["GPU 1 lost"].shown, name  # lost: shaded on each of its charts
    assert "lost" in busy.head.value and "throttled" in busy.head.value
    # The window slides past both episodes: their shading goes, it does not stay where it was.
    dash.window_s = 10.0
    for dev in (gpu0, gpu1):
        dev["throttle_reasons"], dev["status"] = 0, "ok"
    for _ in range(12):
        sampler.tick()
    assert sampler.latest["timestamp"] - dash.window_s > sampler.history.since(0)["timestamps"][8]  # both gone by
    dash.refresh()
    assert len(busy.lines["GPU 0 throttled"].x) == 0 and not busy.keys["GPU 0 throttled"].shown
    assert len(charts["power"].lines["GPU 1 lost"].x) == 0
