"""The memory snapshot view (issue 27, "Where the memory went"): real pickles in PyTorch's format
(tests/memory_snapshots.py), the restricted reader, the analysis, the widget, its PNG, its payload.
"""
from __future__ import annotations

import json
import os
import pickle
import re
import socket
import time

import numpy as np
import pytest
from ipywidgets.widgets.widget import _instances, _remove_buffers

from gpu_widgets.memory import snapshot as analysis_module
from gpu_widgets.memory.snapshot_file import MAX_ENTRIES, MAX_FILE_BYTES, SnapshotError, load_plain, read_snapshot
from gpu_widgets.memory.snapshot_view import MemorySnapshot, show_memory_snapshot
from tests.memory_snapshots import GIB, MIB, SnapshotBuilder, large, three_sites, write

PAYLOAD_BUDGET = 5_000_000  # the bound on what the widget sends


def widget_payload_bytes(root) -> int:
    """What the front end receives for ``root`` and every widget it refers to: each one's state
    as JSON plus its binary buffers (as ipywidgets serialises them)."""
    seen, todo, total = set(), [root.model_id], 0
    while todo:
        model_id = todo.pop()
        if model_id in seen:
            continue
        seen.add(model_id)
        state, _, buffers = _remove_buffers(_instances[model_id].get_state())
        text = json.dumps(state, default=str)
        total += len(text.encode()) + sum(memoryview(b).nbytes for b in buffers)
        todo += re.findall(r"IPY_MODEL_([0-9a-f]+)", text)
    return total


def test_three_sites_are_listed_largest_first_with_file_and_line_and_a_7_gib_peak(tmp_path):
    path = write(three_sites(), tmp_path / "snap.pickle")
    result = show_memory_snapshot(path, display=False)
    try:
        assert isinstance(result, MemorySnapshot) and result.peak_bytes == 7 * GIB
        assert [(s["site"], s["function"], s["bytes"], s["count"]) for s in result.sites_at_peak] == [
            ("/home/me/loss.py:12", "logits", 4 * GIB, 2),
            ("/home/me/model.py:57", "attention", 2 * GIB, 1),
            ("/home/me/model.py:41", "embed", 1 * GIB, 1),
        ]  # the 3 GiB warm-up was freed before the peak: not listed
        # the peak is the 6th entry (3 GiB freed, then 1 + 2 + 2 + 2 GiB), 1 ms apart
        assert result.peak_time_s == pytest.approx(0.006)
        assert result.device == 0
        table = result.widget.children[2].value
        assert table.index("loss.py:12") < table.index("model.py:57") < table.index("model.py:41")
        assert "7.0 GiB" in result.widget.children[0].value
        labels = [m for m in result.widget.children[1].children[1].marks if type(m).__name__ == "Label"]
        assert len(labels) == 1 and labels[0].text[0].startswith("peak")
        assert labels[0].y[0] == pytest.approx(7.0)  # at the peak, in GiB
    finally:
        result.close()


def test_the_site_is_the_innermost_frame_outside_torch_and_python(tmp_path):
    b = SnapshotBuilder()
    b.alloc(GIB, "/home/me/model.py", 41, "embed", inside_torch=True)
    snap = b.snapshot()
    frames = snap["device_traces"][0][0]["frames"]
    assert "/torch/" in frames[0]["filename"]  # innermost first: PyTorch's frames come before ours
    frames.insert(0, {"filename": "/usr/lib/python3.11/contextlib.py", "line": 81, "name": "inner"})
    frames.insert(0, {"filename": "??", "line": 0, "name": "c10::cuda::CUDACachingAllocator::malloc"})
    result = show_memory_snapshot(snap, display=False)
    assert [(s["site"], s["function"]) for s in result.sites_at_peak] == [("/home/me/model.py:41", "embed")]
    assert analysis_module.is_internal("/opt/conda/lib/python3.10/site-packages/torch/nn/functional.py")
    assert not analysis_module.is_internal("/opt/conda/lib/python3.10/site-packages/transformers/x.py")
    assert not analysis_module.is_internal("/tmp/ipykernel_123/4567.py")
    result.close()


@pytest.mark.parametrize("protocol", [0, 2, pickle.DEFAULT_PROTOCOL])
def test_a_pickle_that_would_run_a_command_is_refused_and_nothing_runs(tmp_path, protocol):
    marker = tmp_path / "ran"

    class Exploit:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    path = tmp_path / "evil.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [[Exploit()]]}, protocol=protocol))
    with pytest.raises(SnapshotError, match=r"evil\.pickle was refused: it names .*system") as err:
        show_memory_snapshot(path, display=False)
    assert "nothing in it was run" in str(err.value)
    assert not marker.exists()
    assert pickle.loads(path.read_bytes()) == {"segments": [], "device_traces": [[0]]}  # it does run with pickle
    assert marker.exists()


@pytest.mark.parametrize("case, message", [
    ("list", r"list\.pickle is not a PyTorch memory snapshot: it holds a list"),
    ("other_dict", r"other_dict\.pickle is not a PyTorch memory snapshot: it has no 'device_traces'"),
    ("truncated", r"truncated\.pickle is truncated"),
    ("text", r"text\.pickle is not a readable pickle"),
    ("empty_trace", r"empty_trace\.pickle has an empty trace"),
    ("empty_file", r"empty_file\.pickle is empty"),
])
def test_bad_files_get_a_clear_error_naming_the_file(tmp_path, case, message):
    path = tmp_path / f"{case}.pickle"
    whole = pickle.dumps(three_sites())
    path.write_bytes({
        "list": pickle.dumps([1, 2, 3]),
        "other_dict": pickle.dumps({"model": "weights"}),
        "truncated": whole[: len(whole) // 2],
        "text": b"hello, this is not a pickle\n",
        "empty_trace": pickle.dumps({"segments": [], "device_traces": [[], []]}),
        "empty_file": b"",
    }[case])
    with pytest.raises(SnapshotError, match=message):
        show_memory_snapshot(path, display=False)
    with pytest.raises(SnapshotError, match="no-such.pickle: cannot read it"):
        read_snapshot(tmp_path / "no-such.pickle")
    assert issubclass(SnapshotError, ValueError) and MAX_FILE_BYTES == 2 << 30


def test_a_small_pickle_that_repeats_one_entry_past_the_bound_is_refused(tmp_path):
    # pickle stores a repeated object once: 2 bytes per further copy, so the count needs its own bound
    entry = {"action": "alloc", "addr": 1, "size": 1, "frames": []}
    path = tmp_path / "bomb.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [[entry] * (MAX_ENTRIES + 1)]}))
    assert path.stat().st_size < 30 * MIB
    with pytest.raises(SnapshotError, match=r"bomb\.pickle has 10,000,001 trace entries on one device"):
        read_snapshot(path)


def test_the_dict_form_reads_as_the_file_form(tmp_path):
    snap = three_sites()
    from_file = show_memory_snapshot(write(snap, tmp_path / "s.pickle"), display=False)
    from_dict = show_memory_snapshot(snap, display=False)
    assert from_dict.sites_at_peak == from_file.sites_at_peak and from_dict.peak_bytes == from_file.peak_bytes
    assert load_plain(pickle.dumps(snap)) == snap  # plain data: tuples (pool ids) and all
    for r in (from_file, from_dict):
        r.close()


def test_memory_from_before_the_recording_and_the_device_with_the_largest_peak():
    b = SnapshotBuilder(devices=2)
    b.free_unknown(0x1000, 512 * MIB)  # allocated before the recording, freed at its start
    kept = b.allocated_before(256 * MIB)  # allocated before and still allocated at the end
    a = b.alloc(GIB, "/home/me/model.py", 41, "embed")
    b.alloc(3 * GIB, "/home/me/big.py", 5, "other_device", device=1)
    b.oom(8 * GIB, 100 * MIB)
    result = show_memory_snapshot(b.snapshot(), display=False)
    assert result.device == 1 and result.peak_bytes == 3 * GIB  # largest peak by default
    result.close()
    zero = show_memory_snapshot(b.snapshot(), device=0, display=False)
    # at the start 768 MiB were held; the free drops it to 256 MiB, then 1 GiB joins them
    assert zero.peak_bytes == GIB + 256 * MIB, kept
    assert [s["site"] for s in zero.sites_at_peak] == ["/home/me/model.py:41", "(allocated before the recording)"]
    assert zero.sites_at_peak[1]["bytes"] == 256 * MIB and zero.sites_at_peak[1]["count"] == 1
    header = zero.widget.children[0].value
    assert "out of memory" in header and "8.0 GiB" in header and "before the recording" in header
    zero.close()
    b.free(a)
    with pytest.raises(ValueError, match="device 5 has no trace entries"):
        show_memory_snapshot(b.snapshot(), device=5, display=False)


def test_it_renders_with_sockets_blocked_and_makes_a_png(monkeypatch, tmp_path):
    def no_network(*args, **kwargs):
        raise AssertionError("the snapshot view tried to open a socket")

    monkeypatch.setattr(socket, "socket", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    result = show_memory_snapshot(write(three_sites(), tmp_path / "s.pickle"), display=False)
    bundle = result._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert "loss.py:12" in bundle["text/plain"] and "7.0 GiB" in bundle["text/plain"]
    png = result.to_png(tmp_path / "s.png")
    assert png.startswith(b"\x89PNG") and (tmp_path / "s.png").read_bytes() == png
    assert bundle["image/png"] and not result.problems
    html = result.widget.children[0].value + result.widget.children[2].value
    assert "http" not in html and "<script" not in html  # nothing fetched, nothing run by the page
    result.close()


def test_a_million_trace_entries_render_within_the_payload_budget():
    snap = large(1_000_000)
    started = time.perf_counter()
    result = show_memory_snapshot(snap, display=False)
    seconds = time.perf_counter() - started
    payload = widget_payload_bytes(result.widget)
    print(f"\n10^6 entries: rendered in {seconds:.1f} s, widget payload {payload / 1e3:.0f} kB")
    assert payload <= PAYLOAD_BUDGET, payload
    assert seconds < 60  # the bound on one laptop core; here a few seconds
    bands = [m for m in result.widget.children[1].children[1].marks if type(m).__name__ == "Lines"]
    assert all(np.asarray(m.x).size <= 2 * 1300 for m in bands)  # steps: two points a moment
    # the drawn total at the peak equals the peak: decimation kept it
    top = sum(np.asarray(m.y)[1] - np.asarray(m.y)[0] for m in bands[:-1])
    assert float(top.max()) == pytest.approx(result.peak_bytes / GIB, rel=1e-5)
    result.close()


JUNK = [None, "x", -5, 1 << 70, 3.5, [1], {"a": 1}, (1, 2), b"\x00", True, float("nan")]


def test_damaged_entries_are_skipped_never_a_crash():
    rng = np.random.default_rng(27)
    for _ in range(200):
        snap = three_sites()
        entries = snap["device_traces"][0]
        for _ in range(4):  # damage a few values, keys and entries
            entry = entries[int(rng.integers(len(entries)))]
            key = ["action", "addr", "size", "time_us", "frames", "stream"][int(rng.integers(6))]
            entry[key] = JUNK[int(rng.integers(len(JUNK)))]
        entries.insert(int(rng.integers(len(entries))), JUNK[int(rng.integers(len(JUNK)))])
        snap["segments"].append({"device": 0, "address": JUNK[int(rng.integers(len(JUNK)))],
                                 "blocks": [{"size": JUNK[int(rng.integers(len(JUNK)))], "state": "active_allocated"}]})
        result = show_memory_snapshot(snap, display=False)
        assert 0 <= result.peak_bytes <= 10 * GIB and result.widget is not None
        assert sum(s["bytes"] for s in result.sites_at_peak) == result.peak_bytes
        result.close()


def test_a_trace_without_times_is_drawn_by_entry():
    snap = three_sites()
    for entry in snap["device_traces"][0]:
        del entry["time_us"]  # snapshots from before PyTorch 2.1
    result = show_memory_snapshot(snap, display=False)
    assert result.peak_time_s is None and result.peak_bytes == 7 * GIB
    assert "at entry 6" in result.summary
    axes = result.widget.children[1].children[1].axes
    assert axes[0].label == "trace entry"
    result.close()
    with pytest.raises(TypeError, match="device must be a device index"):
        show_memory_snapshot(snap, device=True, display=False)
