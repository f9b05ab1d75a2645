"""A long run's GPU samples: memory keeps the last gpu_window_s, the run log keeps them all, and
gpu_rows()/save() give every sample back, identical to a monitor that kept them in memory."""
from __future__ import annotations

import shutil

from gpu_widgets import TrainingMonitor
from gpu_widgets.backends import SimulatedBackend, parse_faults
from gpu_widgets.runs.run_files import read_rows
from gpu_widgets.sampling.sampler import Sampler

from .widget_helpers import run_dir, same_rows  # noqa: F401

GPUS = 2
SECONDS = 1500


class FastForward:
    """The sampler's clock, moved by hand: 1500 samples in no time."""

    t = 0.0

    def monotonic(self) -> float:
        return self.t

    def wall(self) -> float:
        return 1.7e9 + self.t

    def wait(self, event, timeout):
        return event.is_set()


def long_run(**kw) -> TrainingMonitor:
    clock = FastForward()
    backend = SimulatedBackend(n_gpus=GPUS, seed=3, t0=1.7e9, faults=parse_faults("throttle:0@100-150; lost:1@200-220"))
    backend.open()
    sampler = Sampler(backend, interval_s=1.0, clock=clock)
    mon = TrainingMonitor("long", display=False, sampler=sampler, **kw)
    for i in range(SECONDS):
        mon.log(loss=1.0 / (i + 1))  # first: the run (and its subscription) starts with the first log()
        clock.t += 1.0
        sampler.tick()
        if i % 50 == 49:
            mon.refresh()  # drains the samples, writes and flushes the run log
    mon.refresh()
    return mon


def test_memory_keeps_the_window_and_every_sample_comes_back(run_dir):
    mon = long_run(gpu_window_s=60)
    ref = long_run(run_log=False)  # the same samples, all in memory
    trace = mon.parts.trace
    assert len(trace) == len(ref.parts.trace) == GPUS * SECONDS
    assert trace.dropped > 0 and trace.kept <= GPUS * 60 + 256 + GPUS, (trace.dropped, trace.kept)
    assert ref.parts.trace.dropped == 0
    rows = mon.gpu_rows()
    assert len(rows) == GPUS * SECONDS
    assert same_rows(rows, ref.gpu_rows())
    # From the file: the throttle episode at 100 s and the lost GPU at 200 s.
    assert any(r["throttle_reasons"] and "hw_thermal_slowdown" in r["throttle_reasons"] for r in rows[:400])
    assert any(r.get("lost") for r in rows[:500])
    # The totals were never affected by the drop.
    assert mon.parts.trace.devices[0].samples == ref.parts.trace.devices[0].samples == SECONDS
    # save() writes all of them, labelled as the files are (name and backend where they change).
    path = mon.save(run_dir.parent / "out.jsonl")
    saved, _ = read_rows(path.with_name("out.gpu.jsonl"))
    ref_path = ref.save(run_dir.parent / "ref.jsonl")
    ref_saved, _ = read_rows(ref_path.with_name("ref.gpu.jsonl"))
    assert len(saved) == GPUS * SECONDS and same_rows(saved, ref_saved)
    assert mon.errors == []
    mon.finish()
    ref.finish()


def test_without_the_run_log_the_oldest_samples_are_reported_missing(run_dir):
    mon = long_run(gpu_window_s=60)
    kept = mon.parts.trace.kept
    shutil.rmtree(mon.run_dir)  # e.g. removed by hand while the notebook stays open
    rows = mon.gpu_rows()
    assert len(rows) == kept
    assert any("could not be read back from the run log" in e for e in mon.errors)
    mon.finish()


def test_none_or_no_run_log_keeps_every_sample(run_dir):
    for kw in ({"gpu_window_s": None}, {"gpu_window_s": 60, "run_log": False}):
        mon = long_run(**kw)
        assert mon.parts.trace.dropped == 0 and mon.parts.trace.kept == GPUS * SECONDS
        mon.finish()
