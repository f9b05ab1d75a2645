"""Issue 23, what a new user met: SM activity empty in short views, "n/a ... nobody is looking"
while looking, eight tall cards in a %%gpuwatch summary, float noise in its data, "GPU 1, GPU 6
stays idle", and a stopped dashboard's axis that still said "0 = now"."""
from __future__ import annotations

import re
import threading
import time

from IPython.lib.pretty import pretty
from IPython.testing.globalipapp import get_ipython

from gpu_widgets import GpuDashboard
from gpu_widgets.backends.base import GPM_OFF, GPM_PENDING
from gpu_widgets.backends.nvml.backend import NvmlBackend
from gpu_widgets.cli.render import READING, render_snapshot
from gpu_widgets.magic.summary import summarize, summary_html
from gpu_widgets.metrics.catalogue import DASHBOARD, shown_in
from gpu_widgets.metrics.fields import GPM_FIELDS
from gpu_widgets.runs.gpu_trace import GpuTrace
from gpu_widgets.sampling import sampler as sampler_module
from gpu_widgets.sampling.sampler import Sampler
from gpu_widgets.monitor.advice import cpu_advice, cpu_build_advice, gpu_list

from .test_gpm import BUSY_GPU, reset_calls
from .widget_helpers import FixedBackend, shared_simulated, simulated_sampler  # noqa: F401

GIB = 1 << 30
ip = get_ipython()
ip.run_line_magic("load_ext", "gpu_widgets")


def reasons(dev: dict) -> set:
    return {dev["unavailable"].get(f) for f in GPM_FIELDS}


def sm_row(text: str) -> str:
    """The SM act cell of GPU 0 in a rendered table."""
    head, row = [line for line in text.splitlines() if line.startswith(("GPU ", "0 "))][:2]
    return row[head.index("SM act"):head.index("Tensor")].strip()


# -- the first SM-activity figure ------------------------------------------------------------------
def test_the_first_gpm_figure_comes_in_the_first_tick_after_asking(in_process_fake_nvml):
    in_process_fake_nvml({"gpus": [BUSY_GPU]})
    reset_calls()
    sampler = Sampler(NvmlBackend(), interval_s=1.0, slow_interval_s=2.0)  # the defaults
    seen: list[tuple[int, float | None]] = []
    done = threading.Event()

    def note(snap) -> None:
        seen.append((sampler.ticks, snap["devices"][0]["sm_active_percent"]))
        if seen[-1][1] is not None:
            done.set()

    sampler.subscribe(note)
    with sampler:
        deadline = time.monotonic() + 20
        while not seen:
            assert time.monotonic() < deadline, "the sampler did not tick"
            time.sleep(0.02)
        asked_at = sampler.ticks  # right after a tick: the next one is about a second away
        sampler.want_gpm("test", lease_s=None)
        assert done.wait(20), seen
    first = next(tick for tick, sm in seen if sm is not None)
    # Before: the two GPM samples waited for two slow reads 2 s apart, 3 or 4 ticks later.
    assert first <= asked_at + 2, (asked_at, seen)
    assert next(sm for _, sm in seen if sm is not None) == 87.0


def test_until_then_it_says_reading_not_nobody_is_looking(in_process_fake_nvml):
    in_process_fake_nvml({"gpus": [BUSY_GPU]})
    backend = NvmlBackend()
    backend.open()
    sampler = Sampler(backend)  # driven by hand: _read_slow is what its slow thread does
    try:
        sampler._read_slow()
        assert reasons(sampler.tick()["devices"][0]) == {GPM_OFF}  # nobody looks: said so
        sampler.want_gpm("test", lease_s=None)
        snap = sampler.tick()  # asked since the last slow read
        assert reasons(snap["devices"][0]) == {GPM_PENDING}
        assert sm_row(render_snapshot(snap, "x")) == READING == "reading…"
        assert sampler._read_slow() is True  # the first of the two samples: the next follows soon
        snap = sampler.tick()
        assert reasons(snap["devices"][0]) == {GPM_PENDING} and sm_row(render_snapshot(snap, "x")) == READING
        assert sampler._read_slow() is False
        snap = sampler.tick()
        assert snap["devices"][0]["sm_active_percent"] == 87.0 and sm_row(render_snapshot(snap, "x")) == "87%"
        assert "nobody is looking" not in render_snapshot(snap, "x")
    finally:
        backend.close()


def test_terminal_gpuwatch_looks_and_prints_sm_activity(shared_simulated, capsys):
    result = ip.run_cell("%gpuwatch", store_history=False)
    out = capsys.readouterr().out
    assert result.success
    assert "nobody is looking" not in out and READING not in out, out
    assert re.fullmatch(r"\d+%", sm_row(out)), out
    assert not sampler_module._shared.gpm_wanted  # returned after printing


def test_a_short_cell_has_sm_activity_at_the_default_interval(shared_simulated, capsys):
    result = ip.run_cell("%%gpuwatch --quiet\nimport time\ntime.sleep(1.5)", store_history=False)
    out = capsys.readouterr().out
    assert result.success
    assert re.search(r"GPU 0 .*SM active mean \d+ % \(peak \d+ %\)", out), out


def test_a_two_second_dashboard_draws_sm_active_in_the_catalogue_order(shared_simulated):
    dash = GpuDashboard(display=False, gpus="all")
    try:
        deadline = time.monotonic() + 20
        while "sm_active" not in dash._view.charts:
            assert time.monotonic() < deadline, "no SM active chart"
            time.sleep(0.1)
        assert time.monotonic() < deadline  # (quickstart: a 2 s dashboard; here a wide deadline)
        dash.refresh()
        order = [next(k for k, c in dash._view.charts.items() if c.card is card) for card in dash._view.grid.children]
        assert order == [m.id for m in shown_in(DASHBOARD) if m.id in dash._view.charts], order
        assert order.index("sm_active") == 1  # beside busy, as the catalogue says, though it came last
        assert {c.x_axis.label for c in dash._view.charts.values()} == {"seconds (0 = now)"}
    finally:
        dash.stop()
    newest = dash._sampler.latest["timestamp"]
    label = f"seconds before {time.strftime('%H:%M:%S', time.localtime(newest))} (stopped)"
    assert {c.x_axis.label for c in dash._view.charts.values()} == {label}
    dash.start()  # live again: "0 = now" again
    try:
        assert {c.x_axis.label for c in dash._view.charts.values()} == {"seconds (0 = now)"}
    finally:
        dash.stop()


# -- the %%gpuwatch summary -------------------------------------------------------------------------
def traced(sampler: Sampler, n: int = 4) -> GpuTrace:
    trace = GpuTrace(t0=time.time())
    for _ in range(n):
        sampler._read_slow()
        trace.add_snapshot(sampler.tick())
    return trace


def test_three_gpus_or_more_are_a_table_with_no_throttling_said_once():
    sampler = simulated_sampler(n_gpus=8)
    sampler.want_gpm("test", lease_s=None)
    text, data = summarize(traced(sampler), 4.0, 1.0)
    html = summary_html(text, data)
    assert html.count('<table class="gpuw-table">') == 1 and 'class="gpuw-card-head"' not in html
    assert html.count("<tr>") == 1 + 8  # the head and a row per GPU
    assert text.count("no throttling") == 1 and "no throttling on any of the 8 GPUs" in text
    assert html.count("no throttling") == 1
    heads = re.findall(r"<th>([^<]*)</th>", html)
    assert heads == ["GPU", "busy", "SM active", "tensor active", "memory", "temperature", "power", ""], heads
    assert "busy, SM active, tensor active: mean (peak) over the cell; the others: peak" in html
    assert "(GPU_WIDGETS_BACKEND=simulated)" in html and "<code>" not in html  # no padded inline code

    two = simulated_sampler(n_gpus=2)
    text, data = summarize(traced(two), 4.0, 1.0)
    html = summary_html(text, data)
    assert 'class="gpuw-table"' not in html and html.count('class="gpuw-card-head"') == 2
    assert text.count("no throttling") == 2  # two short lines, each says it


def test_the_data_is_exact_and_shown_rounded():
    used = int(54.6 * GIB)  # whole bytes: 54.599999999... GiB
    sampler = Sampler(FixedBackend({"memory_used_bytes": used, "utilization_gpu_percent": 50}))
    _, data = summarize(traced(sampler), 4.0, 1.0)
    [gpu] = data["gpus"]
    assert gpu["peaks"]["memory"] == used / GIB != 54.6 and gpu["memory_peak_bytes"] == used
    assert "'memory': 54.6," in pretty(data) and "'memory': 54.6," in repr(data)
    assert "54.59999" not in pretty(data) + repr(data)
    assert data["gpus"][0]["peaks"]["memory"] == used / GIB  # showing changed nothing


# -- the advice's words -----------------------------------------------------------------------------
def test_advice_names_gpus_in_a_proper_list():
    assert [gpu_list(x) for x in ([], [3], [1, 6], [0, 2, 5])] == ["no GPU", "GPU 3", "GPUs 1 and 6", "GPUs 0, 2 and 5"]
    assert "while GPUs 1 and 6 stay idle." in cpu_advice([1, 6]).text
    assert "while GPU 1 stays idle." in cpu_advice([1]).text
    both = cpu_advice([1], [0, 2]).text
    assert "GPU 1 stays idle and GPUs 0 and 2 could run it too (busy with other work, which they can share)" in both
    assert "GPU 3 could run it (busy with other work, which it can share)" in cpu_advice([], [3]).text
    assert "NVML sees 2 NVIDIA GPUs here (GPUs 0 and 1)" in cpu_build_advice("2.5.1+cpu", [0, 1], "12.4").text
