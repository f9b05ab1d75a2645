"""What a saved run keeps (issue 23): the batch size track() read, step counts that agree with
`gpu-widgets runs`, the GPUs the run used (so load() and compare() show the live layout and count
only its own GPUs' energy), and alert episodes through save("x.csv")/load. Real run directories,
real files, and the real `gpu-widgets runs` process."""
from __future__ import annotations

import json
import re
import warnings

import pytest

from gpu_widgets import TrainingMonitor
from gpu_widgets.runs.run_meta import read_meta
from gpu_widgets.sampling.sampler import Sampler

from .conftest import run_cli
from .widget_helpers import GIB, FixedBackend, run_dir  # noqa: F401


@pytest.fixture(autouse=True)
def no_visible_devices(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)  # "auto" falls back to every GPU


def words(mon: TrainingMonitor) -> str:
    mon.refresh()
    return " ".join(re.sub(r"<[^>]+>", " ", mon.widget.children[0].value).split())


def eight_gpus(**first) -> FixedBackend:
    """8 GPUs of another user at work; ``first`` changes GPU 3."""
    return FixedBackend(*({"utilization_gpu_percent": 90, "name": "NVIDIA H100 80GB HBM3",
                           **(first if i == 3 else {})} for i in range(8)))


def cpu_run(root, backend: FixedBackend, title: str = "cpu", steps: int = 12, **kw) -> TrainingMonitor:
    """A loop that uses no GPU, driven by track() over batches of 4 samples, on ``backend``."""
    sampler = Sampler(backend)
    mon = TrainingMonitor(title, display=False, run_log=root, sampler=sampler, **kw)
    for i, batch in enumerate(mon.track([[0.0] * 4 for _ in range(steps)])):
        for d in backend.devices:
            d["energy_j"] = 1000.0 + 500.0 * i
        sampler.tick()
        mon.log(loss=1.0 / (i + 1))
    return mon


def meta_of(mon: TrainingMonitor) -> dict:
    return json.loads((mon.run_dir / "run.json").read_text())


# -- the batch size track() read --------------------------------------------------------------------
def test_the_batch_size_track_reads_is_in_run_json_while_running_and_after(run_dir):  # noqa: F811
    mon = cpu_run(run_dir, FixedBackend({}), gpus=[0])
    mon.refresh()  # one writer pass: a kernel killed now leaves this run.json
    assert meta_of(mon)["batch_size"] == 4
    mon.finish()
    assert meta_of(mon)["batch_size"] == 4
    loaded = TrainingMonitor.load(mon.run_dir)
    assert loaded.batch_size == 4 and "samples/s" in words(loaded)
    other = cpu_run(run_dir, FixedBackend({}), title="other", gpus=[0])
    other.finish()
    for row in TrainingMonitor.compare(mon.run_dir, other.run_dir).summary:
        assert row["samples_per_s"] == pytest.approx(4 * row["steps_per_s"])
    live = TrainingMonitor.compare(mon, other)  # monitors too: the batch size they read
    assert all(row["samples_per_s"] for row in live.summary)


def test_a_batch_size_given_wins_over_the_one_read():
    mon = TrainingMonitor("given", display=False, batch_size=32)
    for _ in mon.track([[0.0] * 4] * 3):
        pass
    mon.finish()
    assert meta_of(mon)["batch_size"] == 32


# -- steps counted the same everywhere --------------------------------------------------------------
@pytest.mark.integration
def test_run_json_steps_agree_with_gpu_widgets_runs_and_log_calls_are_named(run_dir):  # noqa: F811
    mon = TrainingMonitor("evals", display=False)
    for i in range(60):
        mon.log(loss=1.0)
        if i % 20 == 19:
            mon.log(step=mon.step, val_loss=2.0)  # a second row at the same step: 63 log() calls
    mon.finish()
    meta = meta_of(mon)
    assert (meta["steps"], meta["log_calls"]) == (60, 63)
    out = run_cli("runs", "--json", "--dir", str(run_dir))
    assert out.returncode == 0, out.stderr
    assert [r["steps"] for r in json.loads(out.stdout)] == [60]
    assert "step 60" in words(TrainingMonitor.load(mon.run_dir))


# -- the live layout, loaded ------------------------------------------------------------------------
def layout(text: str) -> dict:
    return {"summary": "8 GPUs" in text and "showing all 8 as a summary" in text,
            "table": "GPU 7" in text, "energy": re.search(r"energy (no GPU used|[\d.,]+ k?J)", text).group(1)}


def test_a_cpu_only_run_on_eight_gpus_loads_as_it_showed_live(run_dir, tmp_path):  # noqa: F811
    full = {"memory_used_bytes": int(79.5 * GIB)}  # GPU 3 nearly full: an alert episode
    mon = cpu_run(run_dir, eight_gpus(**full))
    live = layout(words(mon))
    assert live == {"summary": True, "table": False, "energy": "no GPU used"}
    mon.finish()
    meta = meta_of(mon)
    assert meta["gpus_used"] == [] and meta["gpu_summary"] is True
    live_alerts = [e["kind"] for e in mon.parts.gpus.alerts.episodes.values()]
    assert live_alerts == ["memory"]

    saved = mon.save(tmp_path / "x.csv")
    assert (tmp_path / "x.alerts.csv").is_file() and (tmp_path / "x.meta.json").is_file()
    for source in (mon.run_dir, saved):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # nothing skipped
            loaded = TrainingMonitor.load(source)
        assert layout(words(loaded)) == live, source
        assert [e["kind"] for e in loaded.parts.gpus.alerts.episodes.values()] == live_alerts, source
        assert loaded.parts.charts.gpu and loaded.parts.gpus.summarised()  # the charts: a mean line and a band
        assert loaded.batch_size == 4

    # A save of a run without alerts leaves no stale alerts of the earlier run at that path.
    quiet = cpu_run(run_dir, eight_gpus(), title="quiet")
    quiet.finish()
    quiet.save(tmp_path / "x.csv")
    assert not (tmp_path / "x.alerts.csv").exists()
    assert not TrainingMonitor.load(tmp_path / "x.csv")._r.gpus.alerts.episodes


def test_a_run_on_chosen_gpus_loads_showing_only_them(run_dir, tmp_path):  # noqa: F811
    mon = cpu_run(run_dir, FixedBackend({}, {}, {}), gpus=[1, 2])
    text = words(mon)
    mon.finish()
    assert meta_of(mon)["gpus_used"] == [1, 2] and meta_of(mon)["gpu_summary"] is False
    loaded = words(TrainingMonitor.load(mon.run_dir))
    for shown in (text, loaded):
        assert "GPU 1" in shown and "GPU 2" in shown and "GPU 0" not in shown


# -- energy: the GPUs the run used ------------------------------------------------------------------
def test_compare_and_load_count_only_the_gpus_the_run_used(run_dir):  # noqa: F811
    cpu = cpu_run(run_dir, eight_gpus(), title="cpu")
    cpu.finish()
    one = cpu_run(run_dir, FixedBackend({}, {}, {}), title="one", gpus=[1])
    one.finish()
    cmp = TrainingMonitor.compare(cpu.run_dir, one.run_dir)
    a, b = cmp.summary
    assert (a["energy_j"], a["energy_from"], a["peak_memory_bytes"]) == (None, "no GPU used", None)
    assert b["energy_j"] == pytest.approx(11 * 500.0) and b["energy_from"] == "energy counter"  # GPU 1 only
    table = " ".join(re.sub(r"<[^>]+>", " ", cmp.widget.children[0].value).split())
    assert "no GPU used" in table
    assert layout(words(TrainingMonitor.load(cpu.run_dir)))["energy"] == "no GPU used"


def test_gpu_samples_of_other_gpus_in_the_run_log_are_not_counted(run_dir):  # noqa: F811
    # gpus="auto" before PyTorch picked GPU 1: the run log holds all three GPUs' first samples.
    mon = cpu_run(run_dir, FixedBackend({}, {}, {}), gpus="all")
    mon.finish()
    meta = meta_of(mon)
    assert meta["gpus_used"] == [0, 1, 2]
    meta["gpus_used"] = [1]
    (mon.run_dir / "run.json").write_text(json.dumps(meta))
    other = cpu_run(run_dir, FixedBackend({}), title="other", gpus=[0])
    other.finish()
    row = TrainingMonitor.compare(mon.run_dir, other.run_dir).summary[0]
    assert row["gpus"] == [1] and row["energy_j"] == pytest.approx(11 * 500.0)
    text = words(TrainingMonitor.load(mon.run_dir))
    assert "GPU 1" in text and "GPU 0" not in text and "GPU 2" not in text


# -- run.json is untrusted ----------------------------------------------------------------------------
@pytest.mark.parametrize("key, value", [
    ("gpus_used", "0,1"), ("gpus_used", [-1]), ("gpus_used", [True]), ("gpus_used", [0] * 5000),
    ("gpu_summary", 1), ("gpu_summary", "yes"), ("steps", -3), ("log_calls", 2.5), ("batch_size", True),
])
def test_a_damaged_field_is_left_out_with_a_note(tmp_path, key, value):
    (tmp_path / "run.json").write_text(json.dumps({"title": "t", key: value}))
    meta, notes = read_meta(tmp_path)
    assert key not in meta and meta["title"] == "t"
    assert len(notes) == 1 and f"{key!r} is not what gpu-widgets writes" in notes[0]


def test_a_damaged_meta_file_beside_a_saved_file_still_loads_the_steps(tmp_path):
    mon = TrainingMonitor("t", display=False, run_log=False)
    mon.log(loss=1.0)
    mon.finish()
    path = mon.save(tmp_path / "x.jsonl")
    (tmp_path / "x.meta.json").write_text("[1, 2")
    with pytest.warns(RuntimeWarning, match=r"x.meta.json could not be read"):
        loaded = TrainingMonitor.load(path)
    assert loaded.rows() == mon.rows()
