"""The run's energy in the TrainingMonitor's header: only the GPUs the run uses count; a run that
uses none says so with no figure (8 GPUs' energy is other people's work); a run too short for the
energy counters to move is "n/a", never "0 J"."""
from __future__ import annotations

import re

import pytest

from gpu_widgets import TrainingMonitor
from gpu_widgets.sampling.sampler import Sampler

from .widget_helpers import FixedBackend, run_dir  # noqa: F401


def header(mon: TrainingMonitor) -> str:
    mon.refresh()
    return re.sub(r"<[^>]+>", "", mon.widget.children[0].value)


def energy_stat(text: str) -> str:
    found = re.search(r"energy (\S+(?: \S+)?)", text)
    return found.group(1) if found else ""


def run(backend: FixedBackend, ticks: int, joules_per_tick: float, **kw) -> TrainingMonitor:
    sampler = Sampler(backend)
    mon = TrainingMonitor("run", display=False, run_log=False, sampler=sampler, **kw)
    for step in range(ticks):
        for d in backend.devices:
            d["energy_j"] = 1000.0 + step * joules_per_tick * (d["index"] + 1)
        sampler.tick()
        mon.log(step, loss=1.0)
    return mon


def test_a_cpu_only_run_on_eight_gpus_shows_no_energy_figure():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_initialized():
        pytest.skip("this process uses CUDA")
    mon = run(FixedBackend(*({"utilization_gpu_percent": 90} for _ in range(8))), 4, 700.0)
    text = header(mon)
    assert "energy no GPU used" in text
    assert not re.search(r"energy [\d.]+ (k?J|kWh)", text)  # no figure: the 8 GPUs' energy is others'
    mon.finish()


def test_only_the_gpus_the_run_uses_count():
    mon = run(FixedBackend({}, {}, {}), 4, 100.0, gpus=[1])  # GPU 1's counter: +200 J a tick
    assert energy_stat(header(mon)) == "600 J"  # 3 ticks of GPU 1 only, not 3 × (100 + 200 + 300)
    mon.finish()


def test_a_run_too_short_for_the_counter_to_move_is_na_not_zero():
    mon = run(FixedBackend({}), 1, 100.0, gpus=[0])  # one sample: first == last
    text = header(mon)
    assert "energy n/a too short to measure" in text and "0 J" not in text
    mon.finish()
