"""The TrainingMonitor raises the server's alert episodes on its own timeline and in its header.

Simulated GPUs with scripted faults (GPU 1 lost from 20 s to 40 s, GPU 0 throttled by heat from
10 s to 60 s) on a sampler clock moved by hand, so a run of 80 samples takes no time: the episodes
show as marks on the GPU charts and as short header lines while they last, end, are written to the
run log's alerts.jsonl, and come back with load(), follow() and the PNG. The monitor adds no
driver call: every read of the backend is one of the sampler's ticks.
"""
from __future__ import annotations

import json
import re

import pytest

from gpu_widgets import TrainingMonitor
from gpu_widgets.backends import SimulatedBackend, parse_faults
from gpu_widgets.backends.simulated import STEP_S
from gpu_widgets.sampling.sampler import Sampler
from gpu_widgets.monitor import monitor_run
from gpu_widgets.monitor.monitor_alerts import MAX_MARKS, MonitorAlerts

from .widget_helpers import GIB, run_dir, wait_until  # noqa: F401

FAULTS = "throttle:0@10-60; lost:1@20-40"
THROTTLE_S = 30  # the rule's default: throttled for more than 30 s


class HandClock:
    """The sampler's clock, moved by hand from the real time now (snapshots and the run's own
    clock agree to within milliseconds, so the marks sit at the fault's seconds)."""

    def __init__(self, base: float) -> None:
        self.base, self.t = base, 0.0

    def monotonic(self) -> float:
        return self.t

    def wall(self) -> float:
        return self.base + self.t

    def wait(self, event, timeout):
        return event.is_set()


class CountingBackend(SimulatedBackend):
    """Counts the reads: each one stands for the NVML calls of one sample. The simulated load
    cycle starts with the run: on the wall clock's phase some runs would end in its hot stretch,
    and raise a heat alert the faults did not script."""

    fast = slow = 0

    def _values(self, gpu, k, elapsed):
        return super()._values(gpu, int(elapsed // STEP_S), elapsed)

    def read_fast(self, t):
        self.fast += 1
        return super().read_fast(t)

    def read_slow(self, t):
        self.slow += 1
        return super().read_slow(t)


class HeavyBackend(CountingBackend):
    """GPU 0's memory 97 % full from 10 s to 30 s: a reading the fault spec has no item for."""

    def _values(self, gpu, k, elapsed):
        v = super()._values(gpu, k, elapsed)
        if gpu == 0 and 10 <= elapsed < 30:
            v = {**v, "memory_used_bytes": int(0.97 * v["memory_total_bytes"])}
        return v


def faulty_run(root, faults: str = FAULTS, seconds: int = 80, looks: dict | None = None, backend_class=None,
               gpus="all"):
    """A monitor over 2 simulated GPUs with ``faults``, one sample per second for ``seconds``;
    ``looks``: {second: callback(monitor)} called after that second's sample, drawn."""
    import time

    clock = HandClock(time.time())
    backend = (backend_class or CountingBackend)(n_gpus=2, seed=3, t0=clock.base, faults=parse_faults(faults))
    backend.open()
    sampler = Sampler(backend, interval_s=1.0, clock=clock)
    mon = TrainingMonitor("alerts", display=False, sampler=sampler, gpus=gpus, run_log=root)
    for second in range(1, seconds + 1):
        mon.log(loss=1.0 / second)
        if second == 1:  # the run's clock starts here: samples and faults count from the same instant
            clock.base = backend.t0 = mon.parts.run.t0  # (on a loaded machine, making the monitor takes a while)
        clock.t = float(second)
        sampler.tick()
        if looks and second in looks:
            mon.refresh()
            looks[second](mon)
    mon.finish()
    return mon, backend, sampler


def words(mon: TrainingMonitor) -> str:
    return re.sub(r"<[^>]+>", " ", mon.parts.view.header.value)


def alert_lines(mon: TrainingMonitor) -> list[str]:
    return [re.sub(r"<[^>]+>", "", m) for m in re.findall(r'<div class="gpuw-alert [^"]*">.*?</div>', mon.parts.view.header.value)]


def mark(mon: TrainingMonitor, chart: str, name: str) -> list[list[float]]:
    """A mark's episodes as [start, end] pairs (seconds since the run's start), from its path:
    a box per episode, four points each (start, start, end, end)."""
    line = mon.parts.view.charts[chart].lines[name]
    xs = [float(x) for x in line.x]
    return [[xs[i], xs[i + 2]] for i in range(0, len(xs), 4)]


def alert_marks(mon: TrainingMonitor) -> dict[str, set[str]]:
    """Per chart, the alert marks that hold an episode."""
    return {name: {n for n, m in chart.lines.items() if n.startswith("alert:") and len(m.x)}
            for name, chart in mon.parts.view.charts.items()}


def episodes(mon: TrainingMonitor) -> list[tuple]:
    return sorted((e["kind"], e["gpu"], e["start"], e["end"]) for e in mon.parts.gpus.alerts.episodes.values())


def test_a_lost_gpu_and_a_throttle_episode_show_as_marks_and_header_lines_then_end(run_dir):
    seen = {}

    def during_loss(mon):
        seen["loss"] = alert_lines(mon)
        seen["loss_mark"] = mark(mon, "gpu_util", "alert: lost")

    def during_throttle(mon):
        seen["throttle"] = alert_lines(mon)
        seen["throttle_words"] = words(mon)

    mon, _, _ = faulty_run(run_dir, looks={30: during_loss, 45: during_throttle})
    # Second 30: GPU 1 lost since 20 s, one short line in the error colour; a rule at 20 s whose
    # bar runs to the latest sample. Throttled for 20 s only: no alert yet (the line is 30 s).
    assert len(seen["loss"]) == 1 and re.fullmatch(r"GPU 1 lost since \d\d:\d\d:\d\d \S+", seen["loss"][0])
    [(start, end)] = seen["loss_mark"]
    assert 19.5 < start < 20.5 and 29.5 < end < 30.5
    # Second 45: the loss ended (one ended alert), the throttle episode is open since 10 s.
    assert any(re.fullmatch(r"GPU 0 slowed down by thermal \(hardware\) since \d\d:\d\d:\d\d \S+", line)
               for line in seen["throttle"]), seen["throttle"]
    assert not any("lost" in line for line in seen["throttle"])
    assert "1 alert ended this run" in seen["throttle_words"]
    # The end: every episode ended, none listed as open; the marks keep them: the lost GPU's on
    # every GPU chart, the throttle episode on GPU busy only (where throttling is shaded).
    assert alert_lines(mon) == [] and re.search(r"\d alerts ended this run", words(mon))
    found = {(kind, gpu): (start, end) for kind, gpu, start, end in episodes(mon)}
    t0 = mon.parts.run.t0
    lost, throttled = found[("lost", 1)], found[("throttle", 0)]
    assert abs(lost[0] - t0 - 20) < 0.5 and abs(lost[1] - t0 - 40) < 0.5  # end: when it first cleared
    assert abs(throttled[0] - t0 - 10) < 0.5 and abs(throttled[1] - t0 - 60) < 0.5  # start: when throttling began
    for chart in ("gpu_util", "gpu_memory", "gpu_temperature", "gpu_power"):
        lines = mon.parts.view.charts[chart].lines
        assert [[round(x) for x in pair] for pair in mark(mon, chart, "alert: lost")] == [[20, 40]]
        assert lines["alert: lost"].scales["y"] is mon.parts.view.charts[chart].area_scale  # never moves the y axis
        assert ("alert: throttled" in lines) == (chart == "gpu_util")
        assert "alert" not in mon.parts.view.charts[chart].head.value  # not in the legend
        assert not any(m.display_legend for m in lines.values())
    assert [[round(x) for x in pair] for pair in mark(mon, "gpu_util", "alert: throttled")] == [[10, 60]]
    assert "idle_kernel" not in {kind for kind, *_ in episodes(mon)}


def test_the_monitor_adds_no_driver_call(run_dir):
    mon, backend, sampler = faulty_run(run_dir, seconds=50)
    assert any(kind == "lost" for kind, *_ in episodes(mon))  # the rules did run
    assert backend.fast == sampler.ticks == 50  # each read is one of the sampler's ticks
    assert backend.slow == 0  # slow reads belong to the sampler's own thread, not started here


def test_episodes_are_saved_and_come_back_with_load_follow_and_the_png(run_dir, monkeypatch):
    mon, _, _ = faulty_run(run_dir)
    lines = [json.loads(x) for x in (mon.run_dir / "alerts.jsonl").read_text().splitlines()]
    # A line when an episode opens (end null) and one when it ends.
    assert [x["end"] is None for x in lines if x["kind"] == "lost"] == [True, False]
    assert {x["id"] for x in lines} == {e[0] for e in mon.parts.gpus.alerts.episodes.items()}

    loaded = TrainingMonitor.load(mon.run_dir)
    assert episodes(loaded) == episodes(mon)
    assert re.search(r"\d alerts ended this run", words(loaded)) and alert_lines(loaded) == []
    assert mark(loaded, "gpu_power", "alert: lost") == mark(mon, "gpu_power", "alert: lost")

    followed = TrainingMonitor.follow(mon.run_dir, display=False, poll_s=0.05)
    wait_until(lambda: followed.parts.follower.done.is_set())
    assert episodes(followed) == episodes(mon) and followed.status == "finished"
    assert mark(followed, "gpu_util", "alert: throttled") == mark(mon, "gpu_util", "alert: throttled")

    labels, bars = [], []
    draw = monitor_run.render_png

    def render_png(*args, **kw):
        from gpu_widgets.monitor import static_image

        fig = static_image.draw_figure(*args, **kw)
        labels.extend(t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts())
        # The bar along the top of a chart: an axes-height span reaching the top, one per GPU chart for a lost GPU.
        bars.extend(ax for ax in fig.axes for p in ax.patches
                    if abs(p.get_bbox().y1 - 1.0) < 1e-6 and p.get_bbox().y0 > 0.5 and ax.get_visible())
        return draw(*args, **kw)

    monkeypatch.setattr(monitor_run, "render_png", render_png)
    with_marks = loaded.to_png()
    assert not [t for t in labels if t.startswith("alert")], labels  # never in a legend: not a series
    assert len(set(bars)) == 4  # a lost GPU: a bar on each GPU chart
    (mon.run_dir / "alerts.jsonl").unlink()
    assert TrainingMonitor.load(mon.run_dir).to_png() != with_marks


def test_an_episode_open_when_the_run_ends_stays_open_in_the_saved_run(run_dir):
    seen = []
    mon, _, _ = faulty_run(run_dir, faults="lost:1@20", seconds=30, looks={29: lambda m: seen.extend(alert_lines(m))})
    assert [line.startswith("GPU 1 lost since") for line in seen] == [True]
    loaded = TrainingMonitor.load(mon.run_dir)
    [line] = alert_lines(loaded)
    assert re.fullmatch(r"GPU 1 lost from \d\d:\d\d:\d\d \S+ to the end of the run", line)
    assert alert_lines(mon) == [line]  # the finished live monitor says the same
    [(start, end)] = mark(loaded, "gpu_util", "alert: lost")
    assert round(start) == 20 and round(end) == 30  # the bar runs to the last sample


def test_a_damaged_alerts_file_is_named_by_load(run_dir):
    mon, _, _ = faulty_run(run_dir, seconds=30)
    path = mon.run_dir / "alerts.jsonl"
    path.write_text(path.read_text() + json.dumps({"id": "x", "kind": "lost", "gpu": 0, "start": 5.0, "end": 1.0}) + "\n")
    with pytest.warns(RuntimeWarning, match=r"alerts\.jsonl: line \d+: 'start' and 'end' must be finite times.*skipped"):
        back = TrainingMonitor.load(mon.run_dir)  # the bad line is left out, the episodes before it load
    assert alert_lines(back) == alert_lines(mon)


def snapshot(t: float, **dev) -> dict:
    return {"timestamp": t, "devices": [{"index": 0, "uuid": "GPU-0", "name": "G", "status": "ok", **dev}]}


def test_the_idle_kernel_rule_does_not_apply_to_a_training_run():
    # A process holds 20 GiB on an idle GPU for 15 minutes: the sidebar would tell its kernel's
    # owner; inside a training run that process is the loop itself, so nothing is raised.
    alerts = MonitorAlerts()
    for i in range(0, 15 * 60, 5):
        alerts.feed(snapshot(1000.0 + i, utilization_gpu_percent=0, memory_used_bytes=20 * GIB,
                             memory_total_bytes=80 * GIB, temperature_c=40,
                             processes=[{"pid": 4242, "used_memory_bytes": 20 * GIB}]), None)
    assert alerts.episodes == {} and alerts.problem is None
    # The same GPU nearly full does raise the memory alert: the rules ran.
    alerts.feed(snapshot(2000.0, utilization_gpu_percent=0, memory_used_bytes=79 * GIB, memory_total_bytes=80 * GIB), None)
    assert [e["kind"] for e in alerts.episodes.values()] == ["memory"]


def test_only_the_gpus_shown_are_watched_and_the_marks_are_bounded():
    alerts = MonitorAlerts()
    alerts.feed({"timestamp": 10.0, "devices": [{"index": 0, "status": "lost"}, {"index": 1, "status": "lost"}]}, {1})
    assert [e["gpu"] for e in alerts.episodes.values()] == [1]
    many = MonitorAlerts()
    many.add_saved({"id": f"lost/0/{i}", "kind": "lost", "gpu": 0, "start": float(i), "end": i + 0.5} for i in range(300))
    assert many.ended == 300 and len(many.episodes) == 300

    class Gpu:
        index, last_t, curves = 0, 400.0, {}

    starts = [start for start, _ in many.intervals([Gpu()], 0.0)["lost"]]
    assert len(starts) == MAX_MARKS and starts[0] == 300 - MAX_MARKS  # the latest ones


def test_each_alert_is_a_bar_on_the_chart_of_its_metric_only_and_never_in_the_legend(run_dir):
    from gpu_widgets.monitor.monitor_alerts import BAR, KIND_COLORS
    from gpu_widgets.widgets.theme import DARK_VARIANTS, css

    mon, _, _ = faulty_run(run_dir, faults="throttle:1@5-45:sw_power_cap", seconds=45, backend_class=HeavyBackend)
    assert {(kind, gpu) for kind, gpu, *_ in episodes(mon)} == {("memory", 0), ("throttle", 1)}
    drawn = alert_marks(mon)
    assert drawn.pop("gpu_memory") == {"alert: memory full", "alert: memory full (shade)"}
    assert drawn.pop("gpu_util") == {"alert: throttled", "alert: throttled (shade)"}  # where throttling is shaded
    assert not any(drawn.values()), drawn  # not on temperature, power, the loss, the data wait
    assert [[round(x) for x in pair] for pair in mark(mon, "gpu_memory", "alert: memory full")] == [[10, 30]]
    chart = mon.parts.view.charts["gpu_memory"]
    bar, shade = chart.lines["alert: memory full"], chart.lines["alert: memory full (shade)"]
    # A box along the top 6 % of the plot, on a 0-1 scale of its own (the GiB axis never moves),
    # under the data lines; the shade spans the whole height, faintly.
    assert bar.fill == "between" and bar.y.shape == (2, 4) and bar.scales["y"] is chart.area_scale
    assert [float(v) for v in bar.y[0]] == pytest.approx([1, 1 - BAR, 1 - BAR, 1]) and set(bar.y[1]) == {1.0}
    assert shade.fill == "bottom" and [float(v) for v in shade.y] == [0, 1, 1, 0] and shade.fill_opacities[0] < 0.2
    assert chart.figure.marks[:2] == [shade, bar] or chart.figure.marks[:2] == [bar, shade]
    assert chart.y_scale.max == pytest.approx(80.0)  # the memory total, as without the alert
    for c in mon.parts.view.charts.values():
        assert "alert" not in c.head.value and not any(m.display_legend for m in c.lines.values())
    # The colour follows the theme: a CSS variable, dark-theme tones set in the widget's style.
    assert bar.fill_colors == [f"var(--gpuw-c-{KIND_COLORS['memory'][1:]}, {KIND_COLORS['memory']})"]
    assert all(colour in DARK_VARIANTS for colour in KIND_COLORS.values())
    assert f"--gpuw-c-{KIND_COLORS['memory'][1:]}: {DARK_VARIANTS[KIND_COLORS['memory']]}" in css()


def test_the_header_lists_only_the_alerts_of_the_gpus_the_run_uses(run_dir):
    seen = {}
    mon, _, _ = faulty_run(run_dir, faults="", seconds=40, backend_class=HeavyBackend, gpus=[0],
                           looks={20: lambda m: seen.update(lines=alert_lines(m))})
    assert [line.startswith("GPU 0 memory 97 % full since") for line in seen["lines"]] == [True]
    assert {(kind, gpu) for kind, gpu, *_ in episodes(mon)} == {("memory", 0)}  # GPU 1 not watched
    assert "1 alert ended this run" in words(mon)
    # Episodes of a GPU the run no longer shows (gpus="auto" before PyTorch picked one) stay out.
    alerts = MonitorAlerts()
    full = {"memory_used_bytes": 79 * GIB, "memory_total_bytes": 80 * GIB}
    alerts.feed(snapshot(10.0, **full) | {"devices": [{"index": i, "uuid": f"GPU-{i}", "status": "ok", **full}
                                                      for i in (0, 1)]}, None)

    class Gpu:
        def __init__(self, index):
            self.index, self.latest = index, {}

    assert [line.split(" since")[0] for _, line in alerts.header_lines([Gpu(1)], True)] == ["GPU 1 memory nearly full"]
    assert alerts.header_lines([], True) == [] and alerts.ended_on([Gpu(0)]) == 0
