"""Saved and logged values come back exact, CSV text cannot run as a spreadsheet formula, and a
damaged file is one clear error naming the file and the line (or, torn at its end, loads what is good)."""
from __future__ import annotations

import csv
import json
import re
import math
import sys
from array import array

import pytest

from gpu_widgets import RunFileError, TrainingMonitor
from gpu_widgets.runs.run_files import write_rows

from .widget_helpers import run_dir, same_rows, simulated_sampler  # noqa: F401

BIG = [2**53 + 1, 2**63, -2**63 - 1, 10**30, 2**63 - 1, -2**63]


def make(**kw) -> TrainingMonitor:
    kw.setdefault("display", False)
    kw.setdefault("sampler", simulated_sampler())
    return TrainingMonitor("exact", **kw)


# -- item 5: no logged value is ever rounded -------------------------------------------------------
def exact_run(mon: TrainingMonitor) -> dict[str, list]:
    """Each key mixes big ints with what used to round them; returns what was logged, per key."""
    logged = {
        "n": [2**53 + 1, 2**63, -2**63 - 1, 10**30, 5],  # ints beyond float and beyond int64
        "then_float": [2**53 + 1, 0.5, float("nan")],  # a float after an int a float cannot hold
        "float_first": [0.25, 2**53 + 1, float("inf"), -(2**53) - 3],  # big ints after floats
        "small": [1, 2.5, 3],  # the common kind: an int column that becomes floats
        "tokens": [2**60, 2**60 + 1],  # int64, stays an int column
    }
    for i in range(5):
        mon.log(**{k: v[i] for k, v in logged.items() if i < len(v)})
    return logged


def same_values(got: list, want: list) -> bool:
    return len(got) == len(want) and all(
        type(g) is type(w) and (g == w or (isinstance(w, float) and math.isnan(w) and math.isnan(g)))
        for g, w in zip(got, want)
    )


def test_big_ints_stay_exact_in_memory_in_the_run_log_in_files_and_after_load(run_dir, tmp_path):  # noqa: F811
    mon = make(flush_s=0.5)
    logged = exact_run(mon)
    mon.refresh()  # the charts take these values too (rounded for drawing only)
    logged["small"] = [1.0, 2.5, 3.0]  # small ints among floats: equal floats, as documented
    for key, want in logged.items():
        steps, values = mon.series(key)
        assert same_values(values, want), (key, values)
    mon.finish()
    rows = mon.rows()
    run_log_rows = [json.loads(line) for line in (mon.run_dir / "steps.jsonl").read_text().splitlines()]
    assert same_rows(run_log_rows, rows)
    assert '"n":9007199254740993' in (mon.run_dir / "steps.jsonl").read_text()
    for source in (mon.run_dir, mon.save(tmp_path / "run.jsonl"), mon.save(tmp_path / "run.csv")):
        back = TrainingMonitor.load(source)
        assert same_rows(back.rows(), rows), source
        for key, want in logged.items():
            assert same_values(back.series(key)[1], want), (source, key)
    assert "9223372036854775808" in (tmp_path / "run.csv").read_text()


def test_columns_that_fit_stay_compact_arrays():
    mon = make(run_log=False)
    for i in range(10):
        mon.log(loss=1.0 / (i + 1), step_count=i * 2**40, small_then_float=i if i < 5 else i + 0.5)
    kinds = {k: s.values.typecode for k, s in mon.parts.records.series.items() if isinstance(s.values, array)}
    assert kinds == {"loss": "d", "step_count": "q", "small_then_float": "d"}
    mon.finish()


def test_an_int_beyond_a_float_is_refused_naming_the_key_and_nothing_else_changes():
    mon = make(run_log=False)
    mon.log(n=2**53 + 1)
    with pytest.raises(ValueError, match=r"log\(n=\.\.\.\): an int of 1329 bits is beyond what can be plotted"):
        mon.log(n=10**400, other=1)
    assert mon.rows() == [{"step": 0, "time": mon.rows()[0]["time"], "n": 2**53 + 1}]
    assert mon.keys == ("n",)
    mon.finish()


def test_a_tensor_value_read_later_lands_in_the_column_after_it_changes_kind(monkeypatch):
    from .test_monitor import _fake_torch

    sampler = simulated_sampler()
    torch = _fake_torch(sampler.backend.device_info()[1]["uuid"], [])
    monkeypatch.setitem(sys.modules, "torch", torch)
    mon = make(run_log=False, sampler=sampler)
    mon.log(x=torch.Tensor(0.5))  # read on the monitor's thread, after the next log()
    mon.log(x=2**53 + 1)  # the column becomes exact Python numbers
    mon.refresh()
    assert same_values(mon.series("x")[1], [0.5, 2**53 + 1])
    mon.finish()


# -- item 9: CSV text cells are never formulas -------------------------------------------------------
FORMULA_KEYS = ["=HYPERLINK(\"http://x\")", "+1", "-2", "@SUM(A1)", "\tx", "\rx", "'quoted", "plain", "a-b"]


def test_csv_text_cells_cannot_run_as_formulas_and_load_back_exact(tmp_path):
    mon = make(run_log=False)
    for i in range(3):
        mon.log(**{k: -0.5 * (i + j + 1) for j, k in enumerate(FORMULA_KEYS)})
    mon._sampler_arg.tick()
    mon.finish()
    path = mon.save(tmp_path / "run.jsonl")
    # A GPU whose name would be a formula: written by a run log as it was reported.
    gpu_path = tmp_path / "run.gpu.jsonl"
    gpu = [json.loads(line) for line in gpu_path.read_text().splitlines()]
    gpu[0]["name"] = "=cmd|' /C calc'!A0"
    for row in gpu:
        if "backend" in row:
            row["backend"] = "-simulated"
    gpu_path.write_text("".join(json.dumps(r) + "\n" for r in gpu))
    named = TrainingMonitor.load(path)
    saved = named.save(tmp_path / "run.csv")

    header, *cells = list(csv.reader(saved.open(newline="")))
    for text in header:
        assert not text.startswith(("=", "+", "-", "@", "\t", "\r")), text
    assert header[2:] == [k if k[0] not in "=+-@\t\r'" else "'" + k for k in FORMULA_KEYS]
    for row in cells:  # numbers stay numbers, negative ones included
        assert all(float(c) < 0 for c in row[2:])
        assert row[2].startswith("-")
    g_header, *g_rows = list(csv.reader((tmp_path / "run.gpu.csv").open(newline="")))
    first = dict(zip(g_header, g_rows[0]))
    assert first["name"] == "'=cmd|' /C calc'!A0" and first["backend"] == "'-simulated"

    back = TrainingMonitor.load(saved)
    assert back.keys == tuple(FORMULA_KEYS)
    assert same_rows(back.rows(), named.rows())
    assert back.gpu_rows()[0]["name"] == "=cmd|' /C calc'!A0"
    assert back.gpu_rows()[0]["backend"] == "-simulated"
    assert json.loads((tmp_path / "run.jsonl").read_text().splitlines()[0]).keys() >= set(FORMULA_KEYS)  # JSONL: as is


def test_a_save_that_fails_leaves_the_old_file_and_no_temporary_one(tmp_path):
    path = tmp_path / "run.csv"
    write_rows(path, [{"step": 0, "time": 1.0, "loss": 0.5}], ["step", "time", "loss"])
    before = path.read_bytes()

    def rows():
        yield {"step": 0, "time": 1.0, "loss": 0.25}
        raise RuntimeError("disk went away")

    with pytest.raises(RuntimeError, match="disk went away"):
        write_rows(path, rows(), ["step", "time", "loss"])
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.csv"]


# -- item 10: a damaged file is one documented error naming the file and line ----------------------
GOOD = b'{"step":0,"time":1.5,"loss":0.5}\n'
GOOD2 = b'{"step":1,"time":2.5,"loss":0.25}\n'
CSV_ROW = b"0,1.5,0.5\r\n"
CSV_GOOD = b"step,time,loss\r\n" + CSV_ROW

DAMAGED = {
    "deep nesting": ("run.jsonl", GOOD + b'{"step":1,"loss":' + b"[" * 100_000 + b"]" * 100_000 + b"}\n" + GOOD,
                     "line 2 is not a run's row"),
    "int of 5000 digits": ("run.jsonl", GOOD + b'{"step":1,"x":1' + b"0" * 5000 + b"}\n", "line 2 holds a number of more"),
    "int beyond a float": ("run.jsonl", GOOD + b'{"step":1,"x":1' + b"0" * 400 + b"}\n", "line 2: 'x' is an int of 1329 bits"),
    "time beyond a float": ("run.jsonl", GOOD + b'{"step":1,"time":1' + b"0" * 400 + b"}\n", "line 2: 'time' is an int"),
    "step beyond int64": ("run.jsonl", GOOD + b'{"step":' + str(2**63).encode() + b"}\n", "line 2: 'step' must be a whole"),
    "negative step": ("run.jsonl", b'\n\n{"step":-1,"loss":1}\n', "line 3: 'step' must be a whole"),
    "bad UTF-8": ("run.jsonl", GOOD + b'{"step":1,"l\xff":1}\n' + GOOD, "line 2 is not UTF-8 text"),
    "not JSON": ("run.jsonl", GOOD + b"not json\n" + GOOD, "line 2 is not JSON"),
    "not an object": ("run.jsonl", GOOD + b"[1, 2]\n", "line 2 is not a JSON object"),
    "text value": ("run.jsonl", GOOD + b'{"step":1,"loss":"low"}\n', "line 2: 'loss' must be a number"),
    "bool value": ("run.jsonl", GOOD + b'{"step":1,"loss":true}\n', "line 2: 'loss' must be a number"),
    "CSV bad UTF-8": ("run.csv", CSV_GOOD + b"1,2.5,0\xff\r\n" + CSV_ROW, "line 3 is not UTF-8 text"),
    "CSV field over the limit": ("run.csv", CSV_GOOD + b'1,2.5,"' + b"9" * 200_000 + b'"\r\n', "line 3 is not CSV"),
    "CSV text value": ("run.csv", CSV_GOOD + b"1,2.5,abc\r\n", "line 3, column 'loss': 'abc' is not a number"),
    "CSV extra cell": ("run.csv", CSV_GOOD + b"1,2.5,0.1,7\r\n" + CSV_ROW, "line 3 has 4 cells, the header 3"),
    "CSV header twice": ("run.csv", b"step,time,loss,loss\r\n0,1,2,3\r\n", "line 1: the header names ['loss']"),
    "CSV float step": ("run.csv", CSV_GOOD + b"1.5,2.5,0.1\r\n", "line 3: 'step' must be a whole number"),
}


@pytest.mark.parametrize("kind", DAMAGED)
def test_a_damaged_file_is_a_run_file_error_naming_the_file_and_line(tmp_path, kind):
    name, data, words = DAMAGED[kind]
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(RunFileError) as info:
        TrainingMonitor.load(path)
    message = str(info.value)
    assert isinstance(info.value, ValueError)
    assert message.startswith(f"{path}: line "), message
    assert words in message, message
    assert len(message) < 300  # a megabyte cell is not pasted into the message


GPU_GOOD = b'{"time":1.0,"gpu":0,"name":"A100","utilization_gpu_percent":50,"throttle_reasons":[]}\n'
GPU_DAMAGED = {
    "gpu as text": (b'{"time":1.0,"gpu":"0"}\n', "line 2: 'gpu' must be a GPU index"),
    "field as text": (b'{"time":1.0,"gpu":0,"power_w":"high"}\n', "line 2: 'power_w' must be a number"),
    "name as a number": (b'{"time":1.0,"gpu":0,"name":7}\n', "line 2: 'name' must be text"),
    "reasons as text": (b'{"time":1.0,"gpu":0,"throttle_reasons":"hot"}\n', "line 2: 'throttle_reasons' must be a list"),
    "no time": (b'{"gpu":0}\n', "line 2: 'time' must be a number"),
}


@pytest.mark.parametrize("kind", GPU_DAMAGED)
def test_a_damaged_gpu_line_is_named_and_skipped_and_the_rest_loads(tmp_path, kind):
    data, words = GPU_DAMAGED[kind]
    (tmp_path / "run.jsonl").write_bytes(GOOD)
    (tmp_path / "run.gpu.jsonl").write_bytes(GPU_GOOD + data + GPU_GOOD)
    with pytest.warns(RuntimeWarning, match=f"{re.escape(str(tmp_path / 'run.gpu.jsonl'))}: {words}.*: skipped$"):
        back = TrainingMonitor.load(tmp_path / "run.jsonl")
    assert len(back.gpu_rows()) == 2 and back.rows()[0]["loss"] == 0.5


TORN = {
    "mid-row": ("run.jsonl", GOOD + GOOD2 + b'{"step":2,"ti', "line 3: is not JSON"),
    "mid-character": ("run.jsonl", GOOD + GOOD2 + b'{"step":2,"l\xc3', "line 3: is not UTF-8 text"),
    "CSV mid-row": ("run.csv", CSV_GOOD + b"1,2.5,0.1\r\n2,3.", "line 4: has 2 cells, the header 3"),
    "CSV mid-character": ("run.csv", CSV_GOOD + b"1,2.5,0.1\r\n2,3.5,\xe2\x82", "line 4: is not UTF-8 text"),
    "CSV mid-number": ("run.csv", CSV_GOOD + b"1,2.5,0.1\r\n2,3.5,1e", "line 4: column 'loss': '1e' is not a number"),
}


@pytest.mark.parametrize("kind", TORN)
def test_a_torn_last_line_loads_every_good_row_and_says_which_line_was_skipped(tmp_path, kind):
    name, data, words = TORN[kind]
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.warns(RuntimeWarning, match="the last line was cut off") as caught:
        back = TrainingMonitor.load(path)
    assert [r["step"] for r in back.rows()] == [0, 1]
    assert words in str(caught[0].message)
    assert any(words in note for note in back.parts.run.notes)
    assert "the last line was cut off" in back.widget.children[0].value
    # The same damage before the end is not a torn line: it is named.
    path.write_bytes(data + b"\n" + (CSV_ROW if name.endswith("csv") else GOOD))
    with pytest.raises(RunFileError, match=f"^{path}: line "):
        TrainingMonitor.load(path)


def test_a_torn_gpu_file_keeps_its_good_samples(tmp_path):
    (tmp_path / "run.jsonl").write_bytes(GOOD)
    (tmp_path / "run.gpu.jsonl").write_bytes(GPU_GOOD * 2 + b'{"time":2.0,"gp')
    with pytest.warns(RuntimeWarning, match=r"run.gpu.jsonl: the last line was cut off \(line 3"):
        back = TrainingMonitor.load(tmp_path / "run.jsonl")
    assert len(back.gpu_rows()) == 2


def test_a_damaged_run_json_still_loads_the_steps_and_says_so(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "steps.jsonl").write_bytes(GOOD)
    (run / "run.json").write_bytes(b'{"title": "x", "status": "fini')
    with pytest.warns(RuntimeWarning, match="run.json could not be read"):
        back = TrainingMonitor.load(run)
    assert back.rows()[0]["loss"] == 0.5
    (run / "run.json").write_text(json.dumps({"title": "t", "batch_size": "big", "started": 10**400}))
    with pytest.warns(RuntimeWarning) as caught:
        back = TrainingMonitor.load(run)
    assert sorted(str(w.message).split(": ")[2].split(" ")[0] for w in caught) == ["'batch_size'", "'started'"]
    assert back.title == "t" and back.batch_size is None


def test_a_csv_saved_by_excel_with_a_byte_order_mark_loads_with_its_first_key_intact(tmp_path):
    path = tmp_path / "run.csv"
    path.write_bytes(b"\xef\xbb\xbf" + CSV_GOOD + b"1,2.5,0.25\r\n")
    back = TrainingMonitor.load(path)
    assert [r["step"] for r in back.rows()] == [0, 1]
    assert not any(k.startswith("\ufeff") for k in back.rows()[0])


def test_a_step_beyond_64_bits_is_refused_with_a_clear_error_and_nothing_changes():
    mon = make()
    mon.log(loss=1.0)
    with pytest.raises(ValueError, match=r"log\(step=18446744073709551616\): steps are stored as 64-bit ints"):
        mon.log(2**64, loss=2.0)
    mon.log(2**63 - 1, loss=3.0)  # the largest step still fits
    assert [(r["step"], r["loss"]) for r in mon.rows()] == [(0, 1.0), (2**63 - 1, 3.0)]
    mon.finish()
