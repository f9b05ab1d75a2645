"""Why is my GPU not busy? The data-wait share measured by track() and by each framework callback,
the input-bound / CPU-bound diagnosis in the header, the "data wait (%)" chart, and the sharper
"training runs on the CPU" warnings (a PyTorch built without CUDA; a GPU busy with others' work).

Timing tests sleep long enough (40-50 ms a batch) to be read within ±10 points on a loaded machine,
and compare with the time the test itself measured, not with a constant."""
from __future__ import annotations

import math
import os
import re
import time

import pytest

from gpu_widgets import TrainingMonitor
from gpu_widgets.monitor import data_wait
from gpu_widgets.monitor.data_wait import StepTimes, diagnose

from .widget_helpers import fixed_sampler, marks, no_gpu_sampler, run_dir, simulated_sampler  # noqa: F401


def make(**kw) -> TrainingMonitor:
    kw.setdefault("sampler", no_gpu_sampler())
    return TrainingMonitor("t", display=False, run_log=False, **kw)


def header(mon: TrainingMonitor) -> str:
    return re.sub(r"<[^>]+>", "", mon.widget.children[0].value)


def wait_chart(mon: TrainingMonitor):
    return marks(mon.parts.view.charts, data_wait.CHART)[data_wait.LINE]


# -- the measure and the words, without a clock -----------------------------------------------------
def test_the_share_is_waiting_over_whole_steps_over_the_last_steps_and_none_before_eight():
    times = StepTimes()
    for _ in range(data_wait.MIN_STEPS - 1):
        times.add(0.05, 0.06, 0.0)
    assert times.share() is None
    times.add(0.05, 0.06, 0.0)
    assert times.share() == pytest.approx(5 / 6)
    for _ in range(data_wait.WINDOW_STEPS):  # the old steps leave the window
        times.add(0.0, 0.01, 0.0)
    assert times.share() == 0.0


@pytest.mark.parametrize(("share", "busy", "kind"), [
    (0.83, None, "input-bound"),  # no GPU known: the wait alone says it
    (0.40, 30.0, "input-bound"),
    (0.40, 95.0, None),  # the GPU keeps busy meanwhile: the wait costs nothing
    (0.03, 20.0, "cpu-bound"),  # data ready, GPU idle between kernels
    (0.03, 97.0, None),  # compute-bound: healthy, no advice
    (0.03, None, None),
    (0.15, 20.0, None),  # in between: no claim
    (None, 5.0, None),  # too few steps
])
def test_diagnosis_rules(share, busy, kind):
    found = diagnose(share, busy)
    assert (found and found.kind) == kind
    if kind == "input-bound":
        assert found.text.startswith("Input-bound: the loop spent")
        assert all(w in found.text for w in ("num_workers", "pin_memory=True", "prefetch", "faster data format"))
    if kind == "cpu-bound":
        assert found.text.startswith("CPU-bound:") and "idles between kernels" in found.text


@pytest.mark.parametrize(("wait", "step", "error", "words"), [
    ("0.1", 1.0, TypeError, "takes seconds as a number, got str"),
    (True, 1.0, TypeError, "got bool"),
    (-0.1, 1.0, ValueError, "finite and 0 or more"),
    (math.nan, 1.0, ValueError, "finite and 0 or more"),
    (2.0, 1.0, ValueError, "cannot be longer than the step"),
])
def test_note_data_wait_refuses_bad_input_clearly(wait, step, error, words):
    mon = make()
    with pytest.raises(error, match=words):
        mon.note_data_wait(wait, step)
    mon.finish()


# -- track(): the test --------------------------------------------------------------------
def sleeping_loader(n: int, sleep_s: float, spent: list[float]):
    for i in range(n):
        began = time.perf_counter()
        time.sleep(sleep_s)
        spent.append(time.perf_counter() - began)
        yield [i] * 4


def test_a_loader_sleeping_50ms_before_10ms_of_compute_is_input_bound_within_10_points():
    mon = make()
    assert mon.data_wait_share is None
    loading: list[float] = []
    compute: list[float] = []
    for _ in mon.track(sleeping_loader(21, 0.05, loading)):
        began = time.perf_counter()
        time.sleep(0.01)
        compute.append(time.perf_counter() - began)
    mon.refresh()
    # The truth as measured here; the first batch is the loader starting up (not counted).
    truth = sum(loading[1:]) / (sum(loading[1:]) + sum(compute[:-1]))
    share = mon.data_wait_share
    assert share is not None and abs(share - truth) <= 0.10, (share, truth)
    assert abs(share - 5 / 6) <= 0.15  # ~83 % on a quiet machine
    text = header(mon)
    assert f"data wait {100 * share:.0f} % last 50 steps" in text
    assert "Input-bound: the loop spent" in text and "num_workers" in text
    line = wait_chart(mon)
    assert len(line.y) >= 1 and all(abs(y - 100 * truth) <= 15 for y in line.y)
    assert 0 <= min(line.x) and max(line.x) <= mon.parts.run.elapsed() + 0.5  # seconds since the start
    mon.finish()


def test_a_compute_bound_loop_gets_no_warning():
    mon = make()
    for _ in mon.track([[1, 2]] * 12):
        time.sleep(0.01)
    mon.refresh()
    assert mon.data_wait_share < 0.10
    text = header(mon)
    assert "data wait" in text and "Input-bound" not in text and "CPU-bound" not in text
    mon.finish()


def test_a_first_batch_of_each_epoch_is_not_counted_and_a_user_loop_is_not_timed_without_track():
    mon = make()
    for i in range(30):
        mon.log(loss=1.0 / (i + 1))
    assert mon.data_wait_share is None  # log() alone measures nothing
    mon.finish()
    mon = make()
    list(mon.track([[1]] * 5, epochs=2))
    assert mon.parts.charts.waits.counted == 8  # 2 x (5 - 1)
    mon.finish()


# -- diagnosis from the GPU's busy share (note_data_wait: no clock) ------------------------------
def noted(sampler, wait: float, gpus="auto") -> TrainingMonitor:
    mon = make(sampler=sampler, gpus=gpus)
    for _ in range(12):
        sampler.tick()
        mon.note_data_wait(wait, 0.05)
        mon.log(loss=1.0)
    mon.refresh()
    return mon


def test_a_gpu_idle_between_kernels_with_the_data_ready_is_called_cpu_bound():
    mon = noted(fixed_sampler({"utilization_gpu_percent": 20}), 0.001, gpus=[0])  # gpus=: the run's own
    text = header(mon)
    assert "CPU-bound: the data is ready (2 % of each step waiting for it), yet the GPU was busy only 20 %" in text
    assert "The GPU was busy 20% of the time on average" not in text  # the vaguer tip gives way
    mon.finish()
    # A GPU not known to be the run's (no CUDA tensor, no gpus=): a CPU loop beside it is not CPU-bound.
    mon = noted(fixed_sampler({"utilization_gpu_percent": 20}), 0.001)
    assert "CPU-bound" not in header(mon)
    mon.finish()


def test_a_busy_gpu_is_healthy_and_waiting_with_a_busy_gpu_costs_nothing():
    for wait in (0.001, 0.03):
        mon = noted(fixed_sampler({"utilization_gpu_percent": 97}), wait, gpus=[0])
        text = header(mon)
        assert "Input-bound" not in text and "CPU-bound" not in text and "Tip" not in text
        mon.finish()
    mon = noted(fixed_sampler({"utilization_gpu_percent": 30}), 0.03, gpus=[0])
    assert "Input-bound: the loop spent 60 % of each step waiting for its data while the GPU was busy only 30 %" in header(mon)
    mon.finish()


# -- the sharper CPU warning ----------------------------------------------------------------------
def cpu_run(sampler, torch) -> TrainingMonitor:
    mon = make(sampler=sampler)
    for batch in mon.track([torch.zeros(8, 3)] * 4):
        sampler.tick()
        mon.log(loss=batch.sum())
    mon.refresh()
    return mon


def test_a_pytorch_without_cuda_on_a_machine_with_nvidia_gpus_is_a_loud_warning_with_the_fix(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.version, "cuda", None)  # as in a "+cpu" build
    monkeypatch.setattr(torch, "__version__", "2.5.1+cpu")
    mon = cpu_run(fixed_sampler({"utilization_gpu_percent": 60}, {"utilization_gpu_percent": 0}), torch)
    html = mon.widget.children[0].value
    assert '<div class="gpuw-error"><b>Warning:</b> PyTorch cannot use the GPU: this PyTorch (2.5.1+cpu)' in html
    text = header(mon)
    assert "built without CUDA (torch.version.cuda is None), and NVML sees 2 NVIDIA GPUs here (GPUs 0 and 1)" in text
    assert "pip install --force-reinstall torch --index-url https://download.pytorch.org/whl/cu" in text
    assert "model.to('cuda')" not in text  # that advice cannot work with this build
    mon.finish()
    # Simulated GPUs are no reason to reinstall PyTorch.
    mon = cpu_run(simulated_sampler(), torch)
    assert "PyTorch cannot use the GPU" not in header(mon)
    mon.finish()


def test_the_wheel_index_follows_the_drivers_cuda():
    from gpu_widgets.monitor.advice import wheel_index

    assert [wheel_index(v) for v in ("13.0", "12.6", "12.4", "12.2", "11.8", None)] == \
        ["cu128", "cu126", "cu124", "cu121", "cu118", "cu126"]


def test_training_on_the_cpu_is_said_even_when_others_keep_the_gpu_busy(monkeypatch):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_initialized():
        pytest.skip("this process uses CUDA")
    monkeypatch.setattr(torch.version, "cuda", "12.4")  # a CUDA build
    mon = cpu_run(fixed_sampler({"utilization_gpu_percent": 95}, {"utilization_gpu_percent": 2}), torch)
    assert ("Training runs on the CPU: the tensors this monitor sees are on the CPU while GPU 1 stays idle and "
            "GPU 0 could run it too (busy with other work, which it can share)") in header(mon)
    mon.finish()
    # A GPU whose memory others filled is not usable.
    full = {"utilization_gpu_percent": 95, "memory_used_bytes": 79 * (1 << 30)}
    mon = cpu_run(fixed_sampler(full), torch)
    assert "Training runs on the CPU" not in header(mon)
    mon.finish()


# -- through each real framework --------------------------------------------------------------
class SlowData:
    """A map-style dataset whose items take ``sleep_s`` each to load (10 ms: 40 ms a batch of 4)."""

    def __init__(self, n: int, item, sleep_s: float = 0.01) -> None:
        self.n, self.item, self.sleep_s = n, item, sleep_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if i >= self.n:
            raise IndexError(i)
        time.sleep(self.sleep_s)
        return self.item(i)


def assert_input_bound(mon: TrainingMonitor, least: float = 0.6) -> None:
    mon.refresh()
    share = mon.data_wait_share
    assert share is not None and share >= least, share  # ~0.9: 40 ms of data for a step of a few ms
    assert "Input-bound" in header(mon)
    assert mon.parts.charts.waits.counted >= data_wait.MIN_STEPS


def test_lightning_measures_the_data_wait():
    pl = pytest.importorskip("lightning.pytorch")
    torch = pytest.importorskip("torch")
    from gpu_widgets.integrations.lightning import GpuWidgetsCallback

    from .test_integrations_lightning import Tiny, trainer

    data = SlowData(48, lambda i: (torch.full((3,), float(i)), torch.full((1,), 3.0 * i)))
    cb = GpuWidgetsCallback(display=False, sampler=no_gpu_sampler())
    trainer(cb, max_epochs=1).fit(Tiny(), torch.utils.data.DataLoader(data, batch_size=4))
    assert isinstance(cb.monitor, TrainingMonitor) and pl is not None
    assert_input_bound(cb.monitor)


def test_transformers_measures_the_data_wait(tmp_path):
    pytest.importorskip("accelerate")
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from gpu_widgets.integrations.transformers import GpuWidgetsCallback

    from .test_integrations_transformers import model

    x = torch.randint(0, 64, (40, 8), generator=torch.Generator().manual_seed(0))
    # A Trainer step of this tiny BERT takes 25-150 ms on a quiet CPU and up to ~400 ms on a
    # loaded one: 400 ms of data a batch keeps the true share at 0.5 or more even then (the
    # diagnosis needs 0.25); a callback that measured no wait would give about 0.
    data = SlowData(40, lambda i: {"input_ids": x[i], "labels": int(x[i, 0] % 2)}, sleep_s=0.1)
    cb = GpuWidgetsCallback(display=False, sampler=no_gpu_sampler())
    args = transformers.TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[], save_strategy="no",
                                          num_train_epochs=1, per_device_train_batch_size=4, logging_steps=2,
                                          disable_tqdm=True)
    transformers.Trainer(model=model(), args=args, train_dataset=data, callbacks=[cb]).train()
    assert_input_bound(cb.monitor, least=0.4)


def test_keras_measures_the_data_wait():
    os.environ.setdefault("KERAS_BACKEND", "torch")
    np = pytest.importorskip("numpy")
    keras = pytest.importorskip("keras")
    if keras.backend.backend() != "torch":
        pytest.skip("Keras runs on its torch backend here")
    from gpu_widgets.integrations.keras import GpuWidgetsCallback

    from .test_integrations_keras import model

    class Slow(keras.utils.PyDataset):
        def __len__(self):
            return 12

        def __getitem__(self, i):
            if i >= 12:
                raise IndexError(i)
            time.sleep(0.04)
            x = np.full((4, 3), float(i), "float32")
            return x, x.sum(1, keepdims=True)

    cb = GpuWidgetsCallback(display=False, sampler=no_gpu_sampler())
    model().fit(Slow(), epochs=1, callbacks=[cb], verbose=0)
    assert_input_bound(cb.monitor)


def test_the_two_data_wait_figures_say_which_window_each_covers_with_the_same_spacing():
    # 50 steps waiting 2 % of each, then 10 waiting 60 %: the header's figure is over the last 50
    # steps, the chart's over its latest half second ("now"); both read "N %".
    mon = make()
    for wait in [0.001] * 50 + [0.03] * 10:
        mon.note_data_wait(wait, 0.05)
    mon.log(loss=1.0)
    mon.refresh()
    share = mon.data_wait_share
    assert share == pytest.approx((40 * 0.001 + 10 * 0.03) / (50 * 0.05))
    assert f"data wait {100 * share:.0f} % last 50 steps" in header(mon)
    legend = re.sub(r"<[^>]+>", "", mon.parts.view.charts[data_wait.CHART].head.value)
    now = float(wait_chart(mon).y[-1])
    assert f"now {now:.0f} %" in legend and "data wait (%)" in legend
    assert not re.search(r"\d%", header(mon) + legend)  # "2 %", never "2%"
    mon.finish()
