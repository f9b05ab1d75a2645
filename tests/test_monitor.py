"""TrainingMonitor in-process: what the widget holds after logging, bounds, failures, GPUs, torch."""
from __future__ import annotations

import re
import base64
import gc
import json
import math
import random
import statistics
import sys
import time
import types

import numpy as np
import pytest

from gpu_widgets import TrainingMonitor
from gpu_widgets.monitor import advice
from gpu_widgets.store.decimator import Decimator

from .widget_helpers import (  # noqa: F401
    GIB,
    HangingBackend,
    fixed_sampler,
    marks,
    monitor_threads,
    no_gpu_sampler,
    run_dir,
    simulated_sampler,
    wait_until,
)


def make(**kw) -> TrainingMonitor:
    kw.setdefault("display", False)
    kw.setdefault("sampler", simulated_sampler())
    return TrainingMonitor(kw.pop("title", "t"), **kw)


def header(mon: TrainingMonitor) -> str:
    """The header's words as read: the HTML without its tags (label and value are separate elements)."""
    return re.sub(r"<[^>]+>", "", mon.widget.children[0].value)


# -- bad input ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"batch_size": -1}, ValueError, "batch_size must be a positive whole number"),
        ({"batch_size": True}, ValueError, "batch_size"),
        ({"batch_size": 3.5}, ValueError, "batch_size"),
        ({"total_steps": 0}, ValueError, "total_steps"),
        ({"gpus": "first"}, ValueError, "gpus must be 'auto', 'all' or a list"),
        ({"gpus": [0, -1]}, ValueError, "gpus must be"),
        ({"plot": "loss"}, TypeError, "plot must be None"),
        ({"plot": [["loss"], 3]}, TypeError, "plot must be None"),
        ({"redraw_hz": 10}, ValueError, "redraw_hz must be a number in (0, 4]"),
        ({"flush_s": 9}, ValueError, "flush_s must be a number in (0, 5]"),
        ({"gpu_window_s": 0}, ValueError, "gpu_window_s must be a number in (0, inf]"),
        ({"gpu_window_s": "1h"}, ValueError, "gpu_window_s must be a number"),
        ({"max_points": 2}, ValueError, "max_points must be a whole number"),
        ({"run_log": 3}, TypeError, "run_log must be True, False or a directory"),
        ({"sampler": "nvml"}, TypeError, "sampler must be a gpu_widgets.sampling.sampler.Sampler"),
    ],
)
def test_bad_arguments_say_what_is_wrong(kwargs, error, words):
    with pytest.raises(error) as info:
        TrainingMonitor("t", display=False, **kwargs)
    assert words in str(info.value)


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (lambda m: m.log(loss="abc"), TypeError, "log(loss='abc'): values must be numbers"),
        (lambda m: m.log(loss=None), TypeError, "None is not a number"),
        (lambda m: m.log(loss=[1.0, 2.0]), TypeError, "values must be numbers"),
        (lambda m: m.log(loss=np.ones(3)), TypeError, "array of shape (3,)"),
        (lambda m: m.log(loss=1 + 2j), TypeError, "values must be numbers"),
        (lambda m: m.log(step=-1, loss=1.0), ValueError, "steps start at 0"),
        (lambda m: m.log(step=1.5, loss=1.0), TypeError, "log(step=...) must be a whole number"),
        (lambda m: m.log(step="3", loss=1.0), TypeError, "must be a whole number"),
        (lambda m: m.log(time=3.0), ValueError, "'time' is reserved"),
    ],
)
def test_bad_values_are_refused_and_leave_no_half_row(call, error, words):
    mon = make(run_log=False)
    mon.log(loss=0.5, acc=1)
    with pytest.raises(error) as info:
        call(mon)
    assert words in str(info.value)
    # A call that mixes good and bad values adds nothing at all.
    with pytest.raises(TypeError):
        mon.log(acc=2, newkey=3.0, loss="bad")
    assert mon.rows() == [{"step": 0, "time": mon.rows()[0]["time"], "loss": 0.5, "acc": 1}]
    assert mon.keys == ("loss", "acc")
    mon.log(loss=0.25)  # and the run goes on normally
    assert [r["step"] for r in mon.rows()] == [0, 1]
    mon.finish()


def test_accepted_value_types():
    mon = make(run_log=False)
    mon.log(a=np.float32(0.5), b=np.int64(7), c=True, d=np.array(2.5), e=3)
    mon.log(np.int64(10), a=1.5)  # a NumPy step
    mon.log({"a": 2.5, "b": 8})  # a mapping reads as values
    rows = mon.rows()
    assert [r["step"] for r in rows] == [0, 10, 11]
    assert rows[0]["a"] == 0.5 and rows[0]["b"] == 7 and type(rows[0]["b"]) is int
    assert rows[0]["c"] == 1 and rows[0]["d"] == 2.5 and rows[0]["e"] == 3
    assert rows[2] == {"step": 11, "time": rows[2]["time"], "a": 2.5, "b": 8}
    mon.finish()


# -- what the widget shows ----------------------------------------------------------------------
def test_marks_hold_the_logged_curves():
    mon = make(run_log=False, plot=[["loss", "val_loss"], ["lr"]], x_axis="step")
    for i in range(50):
        mon.log(loss=1.0 / (i + 1), lr=0.1)
        if i % 10 == 9:
            mon.log(step=mon.step, val_loss=2.0 / (i + 1))  # added to the current step
    mon.refresh()
    lines = marks(mon.parts.view.charts)
    assert set(mon.parts.view.charts) == {"loss · val_loss", "lr"}
    assert list(lines["loss"].x) == list(range(50))
    assert list(lines["loss"].y) == pytest.approx([1.0 / (i + 1) for i in range(50)])
    assert list(lines["val_loss"].x) == [9, 19, 29, 39, 49]
    assert list(lines["lr"].y) == [0.1] * 50
    text = header(mon)
    assert "step 50" in text and "loss 0.02 lr" in text and "val_loss 0.04" in text
    mon.finish()


def test_plotted_data_stay_bounded_after_100k_logs_and_keep_the_peak():
    mon = make(run_log=False, max_points=500, x_axis="step")
    for i in range(100_000):
        mon.log(loss=1.0 + math.sin(i / 500.0) * 0.1, lr=1e-3)
    mon.log(loss=50.0)  # one spike among 100 001 points
    for i in range(1000):
        mon.log(loss=1.0)
    mon.refresh()
    lines = marks(mon.parts.view.charts)
    assert set(lines) >= {"loss", "lr"}
    for name, mark in lines.items():
        assert 0 < len(mark.x) <= 500 and len(mark.y) == len(mark.x), name
    assert max(lines["loss"].y) == 50.0  # the peak survives decimation
    assert min(lines["loss"].y) == pytest.approx(0.9, abs=1e-3)
    assert lines["loss"].x[-1] == 101_000  # and the newest point is there
    mon.finish()


def test_bytes_held_by_the_marks_stay_under_32_kb_after_100k_logs_with_2_gpus():
    # What a redraw can send is bounded by what the marks hold: max_points is a budget for all
    # lines together, x (and GPU y) are float32.
    sampler = simulated_sampler(n_gpus=2)
    mon = make(run_log=False, sampler=sampler)
    for i in range(100_000):
        mon.log(loss=1.0 / (1 + i) + 0.01 * (i % 7), accuracy=min(1.0, i / 1e5), lr=3e-4)
        if i % 100 == 99:
            sampler.tick()
        if i % 10_000 == 9_999:
            mon.refresh()
    mon.refresh()
    lines = [m for c in mon.parts.view.charts.values() for m in c.lines.values()]
    assert len(lines) >= 3 + 2 * 4  # loss, accuracy, lr; per GPU: util, memory, temperature, power
    held = sum(m.x.nbytes + m.y.nbytes for m in lines)
    assert held <= 32 * 1024, held
    assert sum(len(m.x) for m in lines) <= mon.max_points
    assert marks(mon.parts.view.charts, "loss")["loss"].x.dtype == np.float32
    mon.finish()


def test_decimator_is_bounded_and_keeps_extremes():
    dec = Decimator(100)
    xs = list(range(1_000_000))
    ys = [0.0] * len(xs)
    ys[123_457] = -7.0
    ys[999_000] = 9.0
    ys[500] = float("nan")
    for lo in range(0, len(xs), 99_991):  # arrives in uneven pieces
        dec.extend(xs[lo:lo + 99_991], ys[lo:lo + 99_991])
    px, py = dec.points()
    assert len(px) <= 100 and min(py) == -7.0 and max(py) == 9.0
    assert dec.first_nonfinite[0] == 500 and math.isnan(dec.first_nonfinite[1])
    assert dec.nonfinite == 1 and dec.count == 999_999


def test_decimator_points_stay_in_order_within_the_cap_and_end_at_the_newest_value():
    rng = random.Random(7)
    for max_points, limit, n in [(4, None, 9_999), (16, 10, 50_000), (100, 3, 12_345), (333, None, 3_000), (100, None, 0)]:
        xs = list(range(n))
        ys = [rng.gauss(0.0, 1.0) for _ in xs]
        dec = Decimator(max_points)
        i = 0
        while i < n:  # pieces of random size, as redraws see them
            k = rng.randint(1, 3_000)
            dec.extend(xs[i:i + k], ys[i:i + k])
            i += k
        px, py = dec.points(limit)
        assert len(px) == len(py) <= (max_points if limit is None else max(4, min(limit, max_points)))
        if n:
            assert min(py) == min(ys) and max(py) == max(ys)
            assert (px[-1], py[-1]) == (xs[-1], ys[-1])
            assert all(a <= b for a, b in zip(px, px[1:]))
        else:
            assert len(px) == 0


def test_non_finite_values_are_kept_and_flagged():
    mon = make(run_log=False)
    mon.log(loss=1.0)
    mon.log(loss=float("nan"))
    mon.log(loss=float("inf"))
    mon.log(loss=0.5)
    mon.refresh()
    values = mon.series("loss")[1]
    assert values[0] == 1.0 and math.isnan(values[1]) and values[2] == math.inf and values[3] == 0.5
    assert "loss was NaN at step 1 (first of 2 non-finite values; not plotted)" in header(mon)
    assert list(marks(mon.parts.view.charts)["loss"].y) == [1.0, 0.5]
    mon.finish()


def test_progress_rate_and_eta():
    mon = make(run_log=False, total_steps=1000, batch_size=32)
    for i in range(100):
        mon.log(loss=1.0)
        time.sleep(0.001)
    mon.refresh()
    text = header(mon)
    assert "step 100 / 1,000 (10%)" in text
    assert "steps/s" in text and "samples/s" in text and "ETA" in text
    mon.finish()
    assert "ETA" not in header(mon)


# -- the loop's own exceptions ------------------------------------------------------------------
def test_exception_in_with_block_propagates_unchanged_and_marks_failed(run_dir):
    boom = ValueError("diverged at step 3")
    mon = make()
    with pytest.raises(ValueError) as info:
        with mon:
            for i in range(10):
                mon.log(loss=float(i))
                if i == 3:
                    raise boom
    assert info.value is boom
    assert mon.status == "failed" and mon.error is boom
    assert "failed" in header(mon) and "ValueError: diverged at step 3" in header(mon)
    meta = json.loads((mon.run_dir / "run.json").read_text())
    assert meta["status"] == "failed" and meta["error"] == "ValueError: diverged at step 3"
    assert len((mon.run_dir / "steps.jsonl").read_text().splitlines()) == 4
    assert not monitor_threads()


def test_keyboard_interrupt_propagates_and_marks_interrupted():
    mon = make(run_log=False)
    stop = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt) as info:
        with mon:
            mon.log(loss=1.0)
            raise stop
    assert info.value is stop
    assert mon.status == "interrupted" and "interrupted" in header(mon)
    # An interrupted run can go on: the next log() resumes it.
    mon.log(loss=0.5)
    assert mon.status == "running" and mon.step == 1
    mon.finish()
    assert mon.status == "finished"
    with pytest.raises(RuntimeError, match="this run has finished"):
        mon.log(loss=0.1)


def test_monitor_problems_never_reach_the_loop(monkeypatch):
    mon = make(run_log=False)

    def broken(*args, **kwargs):
        raise RuntimeError("the front end went away")

    monkeypatch.setattr(mon.parts.view, "update", broken)
    monkeypatch.setattr(mon.parts.trace, "add_snapshot", broken)
    mon._sampler_arg.tick()
    for i in range(100):
        mon.log(loss=1.0 / (i + 1))
    mon.refresh()
    mon.finish()
    assert mon.status == "finished" and mon.step == 99
    assert any("drawing: RuntimeError: the front end went away" in e for e in mon.errors)
    assert any("reading GPU samples" in e for e in mon.errors)


def test_run_log_failure_is_shown_not_raised(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the run directory should go")
    mon = make(run_log=blocker)
    for i in range(10):
        mon.log(loss=float(i))
    mon.refresh()
    assert mon.step == 9 and len(mon.rows()) == 10
    assert any("run log stopped" in e and "monitor.save(path)" in e for e in mon.errors)
    assert "monitor problem: run log stopped" in header(mon)
    mon.finish()


def test_threads_end_with_the_run_and_with_the_monitor():
    mon = make(run_log=False)
    mon.log(loss=1.0)
    assert len(monitor_threads()) == 1
    mon.finish()
    assert not monitor_threads()
    dropped = make(run_log=False)
    dropped.log(loss=1.0)
    assert len(monitor_threads()) == 1
    del dropped
    gc.collect()
    deadline = time.monotonic() + 3
    while monitor_threads() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not monitor_threads()


# -- GPUs ---------------------------------------------------------------------------------------
def test_simulated_gpus_are_labelled_and_charted_on_one_time_axis():
    sampler = simulated_sampler()
    mon = make(run_log=False, sampler=sampler)
    mon.log(loss=1.0)
    for _ in range(5):
        time.sleep(0.01)
        sampler.tick()
        mon.log(loss=0.5)
    mon.refresh()
    text = header(mon)
    assert "SIMULATED GPUs" in text and "GPU 0" in text and "GPU 1" in text and "energy" in text
    charts = mon.parts.view.charts
    assert list(charts) == ["loss", "gpu_util", "gpu_memory", "gpu_temperature", "gpu_power"]
    assert [c.card for c in charts.values()] == list(mon.parts.view.grid.children)  # one card per chart
    # one x scale for all: the loss and the GPUs line up in time
    assert len({id(c.x_scale) for c in charts.values()}) == 1
    util = marks(charts, "gpu_util")["GPU 1"]
    assert len(util.y) == 5 and all(0 <= v <= 100 for v in util.y)
    assert set(marks(charts, "gpu_memory")) == {"GPU 0 used", "GPU 1 used"}  # no PyTorch here
    assert max(marks(charts, "gpu_memory")["GPU 0 used"].y) < 80  # GiB
    loss_x = list(marks(charts, "loss")["loss"].x)
    assert loss_x == sorted(loss_x) and 0 <= loss_x[0] < loss_x[-1] < 5  # seconds since the start
    assert 0 <= util.x[0] <= util.x[-1] <= loss_x[-1] + 1
    assert len(mon.gpu_rows()) == 10
    mon.finish()


def test_throttle_episodes_are_marked():
    from gpu_widgets.backends import SimulatedBackend, parse_faults
    from gpu_widgets.sampling.sampler import Sampler

    backend = SimulatedBackend(n_gpus=1, faults=parse_faults("throttle:0@0:hw_thermal_slowdown"))
    backend.open()
    sampler = Sampler(backend)
    mon = make(run_log=False, sampler=sampler)
    mon.log(loss=1.0)
    for _ in range(4):
        time.sleep(0.01)
        sampler.tick()
    mon.refresh()
    busy = mon.parts.view.charts["gpu_util"]
    band = marks(mon.parts.view.charts, "gpu_util")["GPU 0 throttled"]
    # One episode: a box over the chart's whole height (its own 0-1 scale), shaded, no line.
    assert list(band.y) == [0.0, 1.0, 1.0, 0.0] and band.fill == "bottom" and band.scales["y"] is busy.area_scale
    assert "</i>throttled</span>" in busy.head.value  # named once in the legend row, never over the plot
    assert "throttled now: thermal (hardware)" in header(mon) and "throttled this run" in header(mon)
    mon.finish()


def test_no_gpu_says_why_and_still_plots_losses():
    mon = make(run_log=False, sampler=no_gpu_sampler("NVML Shared Library Not Found"))
    mon._sampler_arg.tick()
    for i in range(20):
        mon.log(loss=1.0 / (i + 1))
    mon.refresh()
    text = header(mon)
    assert "No GPU: NVML Shared Library Not Found" in text and "Metrics still plot" in text
    assert list(mon.parts.view.charts) == ["loss"] and len(marks(mon.parts.view.charts)["loss"].y) == 20
    mon.finish()


def test_cuda_visible_devices_picks_the_gpus(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    sampler = simulated_sampler()
    mon = make(run_log=False, sampler=sampler)
    mon.log(loss=1.0)
    sampler.tick()
    mon.refresh()
    assert "GPU 1" in header(mon) and "GPU 0" not in header(mon)
    assert {r["gpu"] for r in mon.gpu_rows()} == {1}
    mon.finish()


def _fake_torch(uuid_of_gpu1: str, item_calls: list) -> types.ModuleType:
    """A torch with CUDA initialised and memory on cuda:1 only, and a CUDA tensor type."""
    torch = types.ModuleType("torch")
    torch.__version__ = "9.9.9-fake"
    props = types.SimpleNamespace(name="Fake H100", total_memory=80 << 30, uuid=uuid_of_gpu1.removeprefix("GPU-"))
    reserved = {0: 0, 1: 6 << 30}
    torch.cuda = types.SimpleNamespace(
        is_initialized=lambda: True, device_count=lambda: 2, current_device=lambda: 0,
        memory_reserved=lambda i: reserved[i], memory_allocated=lambda i: reserved[i] // 2,
        max_memory_allocated=lambda i: reserved[i], max_memory_reserved=lambda i: reserved[i],
        get_device_properties=lambda i: props,
    )

    class Tensor:
        device = types.SimpleNamespace(type="cuda")
        shape = ()

        def __init__(self, v):
            self.v = v

        def numel(self):
            return 1

        def is_complex(self):
            return False

        def detach(self):
            return self

        def item(self):
            item_calls.append(self.v)
            return self.v

    torch.Tensor = Tensor
    return torch


def test_torch_gpus_win_and_cuda_tensors_are_read_off_the_loop(monkeypatch):
    sampler = simulated_sampler()
    uuid1 = sampler.backend.device_info()[1]["uuid"]
    item_calls: list = []
    torch = _fake_torch(uuid1, item_calls)
    monkeypatch.setitem(sys.modules, "torch", torch)
    mon = make(run_log=False, sampler=sampler)
    for i in range(5):
        mon.log(loss=torch.Tensor(1.0 / (i + 1)))
    assert item_calls == []  # log() never waited for the (fake) GPU
    sampler.tick()
    mon.refresh()
    assert item_calls == [1.0, 0.5, 1 / 3, 0.25, 0.2]
    assert mon.series("loss")[1] == [1.0, 0.5, 1 / 3, 0.25, 0.2]
    text = header(mon)
    assert "GPU 1" in text and "GPU 0" not in text  # torch's GPU, matched by UUID
    assert "PyTorch cuda:1: 3.0 GiB allocated, 6.0 GiB reserved" in text
    mon.finish()


def test_real_torch_on_cpu(monkeypatch):
    torch = pytest.importorskip("torch")
    sampler = simulated_sampler()
    mon = make(run_log=False, sampler=sampler)
    loss = torch.tensor(0.75, requires_grad=True) * 2
    for _ in range(12):
        sampler.tick()
        mon.log(loss=loss, step_count=torch.tensor(3))
    mon.refresh()
    assert mon.series("loss")[1][0] == 1.5 and mon.series("step_count")[1][0] == 3
    text = header(mon)
    if not torch.cuda.is_initialized():
        assert "CUDA not initialised in this process (CPU only)" in text
    # The (simulated) GPUs are busy, but not with this process's work unless torch started CUDA here.
    assert ("Training runs on the CPU" in text) == (not torch.cuda.is_initialized())
    mon.finish()


def test_says_plainly_when_training_stays_on_the_cpu_while_the_gpu_idles(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.version, "cuda", "12.4")  # a CUDA build (+cpu builds: test_data_wait)
    sampler = fixed_sampler({"utilization_gpu_percent": 1})
    mon = make(run_log=False, sampler=sampler)
    for batch in mon.track([torch.zeros(8, 3)] * 4):
        sampler.tick()
        mon.log(loss=batch.sum())
    mon.refresh()
    assert "Training runs on the CPU: the tensors this monitor sees are on the CPU while GPU 0 stays idle" in header(mon)
    mon.finish()
    # The same loop with the GPU busy (someone else's job, say): this process never started CUDA,
    # so the work is not its own, and the GPU could still run it (issue 13).
    sampler = fixed_sampler({"utilization_gpu_percent": 90})
    mon = make(run_log=False, sampler=sampler)
    for batch in mon.track([torch.zeros(8, 3)] * 4):
        sampler.tick()
        mon.log(loss=batch.sum())
    mon.refresh()
    assert ("GPU 0 could run it (busy with other work" in header(mon)) == (not torch.cuda.is_initialized())
    mon.finish()


# -- advice ---------------------------------------------------------------------------------------
def test_advice_rules():
    facts = advice.MemoryFacts(gpu=0, total_bytes=80 * GIB, peak_bytes=10 * GIB, fixed_bytes=2 * GIB,
                               others_bytes=4 * GIB, from_torch=True)
    base = dict(samples=60, util_mean=95.0)
    assert advice.advise(**{**base, "samples": 3}, batch_size=32, memory=facts) == []
    (tip,) = advice.advise(**base, batch_size=64, memory=facts)
    # 8 GiB for 64 samples = 0.125 GiB each; 80 * 0.9 - 4 = 68 GiB usable; (68 - 2) / 0.125 = 528 -> 512
    assert tip.kind == "batch" and tip.text.startswith("Batch size about 512 would fit.")
    assert "2.0 GiB that does not depend on the batch" in tip.text and "0.1 GiB per sample" in tip.text
    assert "80.0 GiB total − 4.0 GiB used by other processes and the CUDA context − a 10% margin = 68.0 GiB usable" in tip.text
    full = advice.MemoryFacts(0, 80 * GIB, 77 * GIB, 2 * GIB, 0.0, True)
    near, smaller = advice.advise(**base, batch_size=64, memory=full)
    assert near.kind == "memory" and "reached 96% of 80.0 GiB: close to out-of-memory" in near.text
    assert smaller.text.startswith("Batch size 64 is more than fits with a margin: about 59 would.")
    too_big = advice.batch_advice(64, advice.MemoryFacts(0, 80 * GIB, 79 * GIB, 0.0, 0.0, False))
    assert too_big.text.startswith("Batch size 64 is more than fits with a margin: about 58 would.")
    assert "PyTorch's figures were not available" in too_big.text
    idle = advice.advise(**{**base, "util_mean": 20.0}, batch_size=None, memory=None)
    assert [a.kind for a in idle] == ["utilization"] and "busy 20%" in idle[0].text
    cpu = advice.advise(**base, batch_size=32, memory=None, cpu_training=True, idle_gpus=[1])
    assert [a.kind for a in cpu] == ["cpu"] and "while GPU 1 stays idle" in cpu[0].text


def test_batch_advice_from_pytorch_memory_on_the_gpu(monkeypatch):
    sampler = fixed_sampler({"utilization_gpu_percent": 97, "memory_used_bytes": 12 * GIB})
    uuid0 = sampler.backend.devices[0]["uuid"]
    torch = _fake_torch(uuid0, [])
    reserved = {0: 10 * GIB, 1: 0}
    torch.cuda.memory_reserved = lambda i: reserved[i]
    allocated = iter([2 * GIB] + [6 * GIB] * 100)
    torch.cuda.memory_allocated = lambda i: next(allocated) if i == 0 else 0
    torch.cuda.max_memory_allocated = lambda i: 10 * GIB if i == 0 else 0
    monkeypatch.setitem(sys.modules, "torch", torch)
    mon = make(run_log=False, sampler=sampler, batch_size=64)
    for _ in range(12):
        sampler.tick()
        mon.log(loss=1.0)
        mon.refresh()
    text = header(mon)
    # fixed 2 GiB (least allocated), 8 GiB / 64 per sample; others: 12 used - 10 reserved = 2 GiB
    assert "Batch size about 512 would fit." in text and "70.0 GiB usable" in text
    assert set(marks(mon.parts.view.charts, "gpu_memory")) == {"GPU 0 used", "GPU 0 PyTorch allocated", "GPU 0 PyTorch reserved"}
    row = mon.gpu_rows()[-1]
    assert row["torch_reserved_bytes"] == 10 * GIB and row["torch_peak_allocated_bytes"] == 10 * GIB
    mon.finish()


# -- track() ------------------------------------------------------------------------------------
def test_track_counts_epochs_steps_and_samples():
    mon = make(run_log=False)
    data = [np.zeros((32, 3))] * 5 + [np.zeros((8, 3))]
    seen = []
    for batch in mon.track(data, epochs=3):
        seen.append(len(batch))
        if len(seen) % 2:
            mon.log(loss=1.0 / len(seen))  # every other batch logs; the others still count
        time.sleep(0.002)
    assert len(seen) == 18 and mon.step == 17 and mon.total_steps == 18
    assert mon.parts.samples.total == 3 * (5 * 32 + 8) and mon.parts.samples.first_batch == 32
    mon.refresh()
    text = header(mon)
    assert "step 18 / 18 (100%)" in text and "epoch 3/3" in text and "samples/s" in text
    mon.finish()
    with pytest.raises(ValueError, match="needs something that can be iterated again"):
        mon2 = make(run_log=False)
        mon2.track((x for x in data), epochs=2)
    with pytest.raises(ValueError, match="epochs must be a positive whole number"):
        mon2.track(data, epochs=0)


def test_track_without_a_length_and_history():
    mon = make(run_log=False)
    for i, batch in enumerate(mon.track(iter(range(10)))):
        mon.log(x=batch)
    assert mon.total_steps is None and mon.step == 9
    history = mon.history
    assert list(history["x"]) == list(range(10))
    assert list(history.columns) == ["step", "elapsed_s", "wall_time", "x", "time"]
    # Readable wall time, and the exact epoch seconds kept as logged
    rows = mon.rows()
    assert list(history["time"]) == [r["time"] for r in rows]
    assert list(history["elapsed_s"]) == [r["time"] - mon.parts.run.t0 for r in rows]
    assert 0 <= history["elapsed_s"].min() <= history["elapsed_s"].max() < 60
    assert str(history["wall_time"].dt.tz) == "UTC"
    assert abs(history["wall_time"].iloc[-1].timestamp() - rows[-1]["time"]) <= 0.0005  # to the millisecond
    assert "e+09" not in history.drop(columns="time").to_string()
    mon.finish()


def test_history_keeps_a_key_named_like_a_derived_column():
    mon = make(run_log=False)
    mon.log(loss=1.0, elapsed_s=7.0)
    history = mon.history
    assert list(history.columns) == ["step", "wall_time", "loss", "elapsed_s", "time"]
    assert list(history["elapsed_s"]) == [7.0]  # the user's value, not the derived one
    mon.finish()


# -- display and pictures -------------------------------------------------------------------------
def test_mimebundle_has_the_widget_and_a_text_fallback():
    mon = make(run_log=False)
    mon.log(loss=1.0)
    bundle = mon._repr_mimebundle_()
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == mon.widget.model_id
    assert bundle["text/plain"] == "<TrainingMonitor 't': running, step 0, keys ['loss']>"
    assert "image/png" not in bundle  # a live run has no final picture yet
    mon.finish()
    if pytest.importorskip("matplotlib"):
        png = base64.b64decode(mon._repr_mimebundle_()["image/png"])
        assert png.startswith(b"\x89PNG")  # where widgets do not render, the charts still show


def test_to_png(tmp_path):
    pytest.importorskip("matplotlib")
    sampler = simulated_sampler()
    mon = make(run_log=False, sampler=sampler)
    for i in range(50):
        mon.log(loss=1.0 / (i + 1))
        sampler.tick() if i % 10 == 0 else None
    mon.finish()
    png = mon.to_png(tmp_path / "run.png")
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and (tmp_path / "run.png").read_bytes() == png


# -- cost ---------------------------------------------------------------------------------------
def test_log_is_cheap():
    # benchmarks/log_cost.py measures ~1 us here; this bound only catches a gross regression
    # (a lock, I/O or a widget message in log()) while tolerating slow CI machines.
    mon = make(run_log=False)
    mon.log(loss=1.0, lr=0.1, acc=0.5)
    samples = []
    for _ in range(30):
        t = time.perf_counter()
        for _ in range(1000):
            mon.log(loss=1.0, lr=0.1, acc=0.5)
        samples.append((time.perf_counter() - t) / 1000)
    mon.finish()
    assert statistics.median(samples) < 10e-6


@pytest.mark.integration
def test_package_import_stays_light_and_widgets_load_on_use():
    code = (
        "import sys, gpu_widgets;"
        "heavy = {'ipywidgets', 'bqplot', 'IPython', 'numpy', 'torch', 'traitlets'};"
        "print(sorted({m.split('.')[0] for m in sys.modules} & heavy));"
        "print(gpu_widgets.TrainingMonitor.__module__, gpu_widgets.GpuDashboard.__module__);"
        "print('TrainingMonitor' in dir(gpu_widgets))"
    )
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ["[]", "gpu_widgets.monitor.monitor gpu_widgets.widgets.dashboard", "True"]
    with pytest.raises(AttributeError, match="has no attribute 'Monitor'"):
        import gpu_widgets

        gpu_widgets.Monitor


def test_a_closed_output_is_harmless():
    mon = make(run_log=False)
    mon.log(loss=1.0)
    mon.refresh()
    mon.widget.close()  # the output was cleared or closed: the loop carries on
    for i in range(100):
        mon.log(loss=1.0 / (i + 1))
    mon.refresh()
    mon.finish()
    assert mon.status == "finished" and mon.step == 100 and mon.errors == []


def test_a_lost_gpu_and_a_missing_field_do_not_disturb_the_run():
    from gpu_widgets.backends import SimulatedBackend
    from gpu_widgets.backends.faults import parse_faults
    from gpu_widgets.sampling.sampler import Sampler

    backend = SimulatedBackend(n_gpus=2, seed=1, faults=parse_faults("lost:1@0-3600; unsupported:0:temperature_c"))
    backend.open()
    sampler = Sampler(backend, interval_s=1.0)
    mon = make(run_log=False, sampler=sampler, gpus="all")
    for i in range(30):
        mon.log(loss=1.0 / (i + 1))
        if i % 10 == 0:
            sampler.tick()
    mon.refresh()
    text = header(mon)
    assert "GPU 1" in text and "lost" in text.lower()
    rows = mon.gpu_rows()
    assert {r["gpu"] for r in rows} >= {0}
    assert all(r.get("temperature_c") is None for r in rows if r["gpu"] == 0)
    assert any(r.get("utilization_gpu_percent") is not None for r in rows if r["gpu"] == 0)
    assert mon.status in ("running", "idle", "ready") and not mon.errors
    assert len(marks(mon.parts.view.charts)["loss"].y) == 30
    mon.finish()
    assert mon.status == "finished"


def test_a_stuck_sampler_shows_as_stale_in_the_header_and_clears_when_it_returns():
    from gpu_widgets.sampling.sampler import Sampler

    backend = HangingBackend({"utilization_gpu_percent": 61})
    sampler = Sampler(backend, interval_s=0.1).start()  # stale after 2 s without a new sample
    mon = make(run_log=False, sampler=sampler)
    try:
        wait_until(lambda: sampler.latest is not None)
        mon.log(loss=1.0)
        mon.refresh()
        assert "STALE" not in header(mon) and "busy 61 %" in header(mon)
        backend.hang.set()
        wait_until(lambda: sampler.staleness()[1])
        mon.log(loss=0.5)  # the loop goes on while the sampler is stuck
        mon.refresh()
        text = header(mon)
        assert "STALE" in text and "GPU readings are stale: no new sample for" in text
        assert "HangingBackend.read_fast" in text and "has not returned" in text
        assert "busy 61 %" in text  # the last values stay, marked as old
        backend.hang.clear()
        backend.release.set()
        wait_until(lambda: sampler.staleness()[1] is None)
        mon.refresh()
        assert "STALE" not in header(mon)
    finally:
        backend.release.set()
        mon.finish()
        sampler.stop()


# -- the metric catalogue -------------------------------------------------------------------------
def test_gpu_charts_come_from_the_catalogue_and_follow_a_new_metric(monkeypatch, tmp_path):
    from gpu_widgets.metrics import catalogue

    mon = make(run_log=False)
    assert mon.gpu_chart_titles == tuple(m.title for m in catalogue.shown_in(catalogue.MONITOR)) == (
        "GPU busy (%)", "SM active (%)", "Tensor active (%)", "GPU memory (GiB)", "GPU temperature (°C)",
        "GPU power (W)")
    fan = catalogue.Metric("fan_test", "fan_percent", "GPU fan", "%", "Fan speed.", y_max=100.0,
                           views=frozenset({catalogue.MONITOR}))
    monkeypatch.setattr(catalogue, "METRICS", (*catalogue.METRICS, fan))
    sampler = fixed_sampler({"utilization_gpu_percent": 50, "fan_percent": 40})
    mon = make(run_log=False, sampler=sampler, gpus="all")
    assert mon.gpu_chart_titles[-1] == "GPU fan (%)"
    mon.log(loss=1.0)
    for _ in range(3):
        sampler.tick()
    mon.refresh()
    chart = mon.parts.view.charts["gpu_fan_test"]
    assert chart.figure.title == "GPU fan (%)" and chart.y_scale.max == 100.0
    assert list(marks(mon.parts.view.charts, "gpu_fan_test")["GPU 0"].y) == [40.0] * 3
    assert mon.gpu_rows()[-1]["fan_percent"] == 40.0  # recorded, so saved and loaded back too
    mon.finish()
    png = mon.to_png(tmp_path / "fan.png")
    assert png.startswith(b"\x89PNG")


def test_memory_and_power_charts_top_out_at_the_gpus_limits():
    # A full memory chart means "no room for a bigger batch": its top is the GPU's memory total
    # (the largest of the GPUs shown), and power's is the power limit, as in the sidebar.
    sampler = fixed_sampler(
        {"memory_used_bytes": 20 << 30, "memory_total_bytes": 80 << 30, "power_w": 300.0, "power_limit_w": 700.0},
        {"memory_used_bytes": 10 << 30, "memory_total_bytes": 40 << 30, "power_w": 100.0, "power_limit_w": 400.0},
    )
    mon = make(run_log=False, sampler=sampler, gpus="all")
    mon.log(loss=1.0)
    for _ in range(2):
        sampler.tick()
    mon.refresh()
    charts = mon.parts.view.charts
    assert charts["gpu_memory"].y_scale.max == 80.0
    assert charts["gpu_power"].y_scale.max == 700.0
    temp = charts["gpu_temperature"]  # no limit field: fits the data, with room above it
    assert temp.y_scale.max > temp.data_y_range()[1]
    mon.finish()
