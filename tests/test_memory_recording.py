"""Recording PyTorch's allocator (%%gpuwatch --memory, MemoryRecording): without CUDA it says so
in one line and the cell runs on; with CUDA (its recording functions stood in for by fakes that
keep PyTorch's signatures, since this machine has none) it records only while asked, turns the
recording off, draws where the memory went and keeps the snapshot and its PNG."""
from __future__ import annotations

import pytest
from IPython.testing.globalipapp import get_ipython

torch = pytest.importorskip("torch")

from gpu_widgets.memory.recording import MemoryRecording, why_not_recordable  # noqa: E402
from gpu_widgets.memory.snapshot_file import read_snapshot  # noqa: E402

from .memory_snapshots import GIB, three_sites  # noqa: E402
from .widget_helpers import shared_simulated  # noqa: E402,F401

ip = get_ipython()
ip.run_line_magic("load_ext", "gpu_widgets")


@pytest.fixture
def fake_cuda(monkeypatch):
    """torch.cuda as a GPU machine has it, for the recording's calls: each call is logged."""
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history",
                        lambda enabled="all", *a, **kw: calls.append(("record", enabled, kw)), raising=False)
    monkeypatch.setattr(torch.cuda.memory, "_snapshot", lambda *a, **kw: calls.append(("snapshot",)) or three_sites(),
                        raising=False)
    return calls


def test_without_cuda_the_cell_runs_and_one_line_says_why(shared_simulated, capsys):
    assert not torch.cuda.is_available()  # this machine: a CPU build
    result = ip.run_cell("%%gpuwatch --quiet --memory\n6 * 7", store_history=False)
    assert result.success and result.result == 42
    err = capsys.readouterr().err
    assert "gpuwatch: --memory: no CUDA allocator to record: a CPU build of PyTorch" in err
    assert "nothing was recorded" in err and why_not_recordable() is not None


def test_with_cuda_the_cell_is_recorded_then_drawn(shared_simulated, fake_cuda, capsys):
    ip.user_ns.pop("_gpuwatch_memory", None)
    result = ip.run_cell("%%gpuwatch --quiet --memory\n'ran'", store_history=False)
    assert result.success and result.result == "ran"
    # recording on with a bound, read once, then off (nothing recorded after the cell)
    assert [c[0] for c in fake_cuda] == ["record", "snapshot", "record"]
    assert fake_cuda[0][2] == {"max_entries": 200_000} and fake_cuda[2][1] is None
    view = ip.user_ns["_gpuwatch_memory"]
    assert view.peak_bytes == 7 * GIB and view.sites_at_peak[0]["site"] == "/home/me/loss.py:12"
    assert view.summary and view.summary in capsys.readouterr().out  # printed outside a notebook


def test_a_monitor_style_recording_keeps_the_snapshot_and_its_picture(fake_cuda, tmp_path):
    rec = MemoryRecording(tmp_path / "run", name="memory-1")
    assert rec.start() is None and rec.running
    view = rec.stop()
    assert rec.stop() is None and not rec.running  # idempotent: nothing recorded twice
    assert rec.path is not None and rec.path.parent == tmp_path / "run"
    assert read_snapshot(rec.path)[0]["device_traces"] == three_sites()["device_traces"]  # plain data, readable
    assert rec.path.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert view.peak_bytes == 7 * GIB
