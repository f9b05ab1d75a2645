"""The monitor's side of issue 27: an out-of-memory error leaving a monitored loop (with a block
and without one, in an IPython shell) gets its post-mortem once, with the batch that would have
fit, and ``mon.oom``; the error goes on unchanged and the run is failed. ``record_memory()``
without CUDA says so and the loop runs on; with CUDA (PyTorch's recording functions stood in for)
it records the next steps only, stops by itself, keeps the snapshot in the run directory."""
from __future__ import annotations

import pytest
from IPython.testing.globalipapp import get_ipython

torch = pytest.importorskip("torch")

from gpu_widgets import TrainingMonitor  # noqa: E402

from .memory_snapshots import GIB, three_sites  # noqa: E402
from .widget_helpers import run_dir, simulated_sampler  # noqa: E402,F401

ip = get_ipython()  # at import, as every test module does: the first call starts the shared shell
MESSAGE = ("CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which "
           "1.00 GiB is free. Of the allocated memory 74.00 GiB is allocated by PyTorch, and 1.00 GiB is reserved "
           "by PyTorch but unallocated.")


def test_an_oom_leaving_a_with_block_is_told_once_with_the_batch_that_fits(capsys):
    mon = TrainingMonitor("oom", display=False, run_log=False, sampler=simulated_sampler(), batch_size=64)
    err = torch.OutOfMemoryError(MESSAGE)
    with pytest.raises(torch.OutOfMemoryError) as raised:
        with mon:
            for step in range(3):
                mon.log(loss=1.0 / (step + 1))
            raise err
    assert raised.value is err and mon.status == "failed"
    out = capsys.readouterr().err
    assert out.count("gpu-widgets: out of memory —") == 1, out
    # no PyTorch figures in this run: all of what the step needed grows with the batch. 74 + 4 GiB
    # for 64 samples, into 74 + 1 + 1 GiB less a 10 % margin of 79.19 GiB: 55 samples
    assert "the batch that fits is about 55 (it was 64)" in out
    assert mon.oom["requested_bytes"] == 4 * GIB and mon.oom["allocated_bytes"] == 74 * GIB and mon.oom["gpu"] == 0
    # the simulated GPU 0 hosts a simulated job of ours: another process on that GPU
    assert isinstance(mon.oom["others"], list)


def test_another_error_is_no_oom(capsys):
    mon = TrainingMonitor("not oom", display=False, run_log=False)
    with pytest.raises(ValueError):
        with mon:
            mon.log(loss=1.0)
            raise ValueError("diverged")
    assert mon.oom is None and "out of memory" not in capsys.readouterr().err


def test_a_loop_without_with_ends_in_its_cell_and_the_cell_hook_does_not_tell_it_again(capsys):
    ip.run_line_magic("load_ext", "gpu_widgets")
    ip.user_ns["MESSAGE"] = MESSAGE
    ip.run_cell("import torch\nfrom gpu_widgets import TrainingMonitor\n"
                "mon = TrainingMonitor('cell oom', display=False, run_log=False, batch_size=32)\n"
                "for i in range(3):\n    mon.log(loss=1.0)\nraise torch.OutOfMemoryError(MESSAGE)", store_history=False)
    err = capsys.readouterr().err
    assert ip.user_ns["mon"].status == "failed" and ip.user_ns["mon"].oom["requested_bytes"] == 4 * GIB
    assert err.count("gpu-widgets: out of memory —") == 1, err


@pytest.fixture
def fake_cuda(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history",
                        lambda enabled="all", *a, **kw: calls.append(("record", enabled)), raising=False)
    monkeypatch.setattr(torch.cuda.memory, "_snapshot", lambda *a, **kw: calls.append(("snapshot",)) or three_sites(),
                        raising=False)
    return calls


def test_record_memory_without_cuda_says_so_and_the_loop_runs_on(run_dir, capsys):  # noqa: F811
    mon = TrainingMonitor("no cuda", display=False, sampler=simulated_sampler())
    assert mon.record_memory(steps=3) is None
    with mon:
        for i in range(5):
            mon.log(loss=float(i))
    assert mon.status == "finished" and mon.last_memory is None
    assert "gpu-widgets: record_memory: no CUDA allocator to record" in capsys.readouterr().err


def test_record_memory_records_the_next_steps_and_keeps_the_snapshot(run_dir, fake_cuda, capsys):  # noqa: F811
    mon = TrainingMonitor("recorded", display=False, sampler=simulated_sampler())
    with mon:
        mon.log(loss=0.0)
        mon.record_memory(steps=3)
        with pytest.raises(RuntimeError, match="already running"):
            mon.record_memory(steps=3)
        for i in range(6):
            mon.log(loss=float(i))
            if i == 2:  # the third step after the call: the recording stopped by itself
                assert [c[0] for c in fake_cuda] == ["record", "snapshot", "record"]
    assert len(fake_cuda) == 3  # nothing recorded after
    view = mon.last_memory
    assert view.peak_bytes == 7 * GIB and view.sites_at_peak[0]["site"] == "/home/me/loss.py:12"
    saved = sorted(p.name for p in mon.run_dir.glob("memory-1-*"))
    assert [n.rsplit(".", 1)[1] for n in saved] == ["pickle", "png"], saved
    assert "gpu-widgets: record_memory:" in capsys.readouterr().err


def test_a_recording_the_run_ends_first_keeps_what_it_has(run_dir, fake_cuda):  # noqa: F811
    mon = TrainingMonitor("short", display=False, sampler=simulated_sampler())
    with mon:
        mon.record_memory(steps=100)
        mon.log(loss=1.0)
    assert [c[0] for c in fake_cuda] == ["record", "snapshot", "record"] and mon.last_memory.peak_bytes == 7 * GIB


@pytest.mark.parametrize("steps,error", [(0, ValueError), (-2, ValueError), (1.5, TypeError), ("3", TypeError),
                                         (True, TypeError), (10_001, ValueError)])
def test_bad_steps_are_refused(steps, error):
    with pytest.raises(error, match=r"record_memory\(steps="):
        TrainingMonitor("bad", display=False, run_log=False).record_memory(steps=steps)
