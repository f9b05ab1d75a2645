"""TrainingMonitor's public hooks for integrations: fail(), interrupt(), note_batch(), set_epoch(),
total_steps set later; and its states as an Enum that still reads as the old strings."""
from __future__ import annotations

import re
import json
import os
import time
import warnings

import numpy as np
import pytest

from gpu_widgets import TrainingMonitor
from gpu_widgets.monitor.run_state import State

from .kernel_session import running_kernel
from .widget_helpers import monitor_threads, run_dir, simulated_sampler  # noqa: F401


def make(**kw) -> TrainingMonitor:
    kw.setdefault("display", False)
    kw.setdefault("sampler", simulated_sampler())
    return TrainingMonitor(kw.pop("title", "hooks"), **kw)


def header(mon: TrainingMonitor) -> str:
    """The header's words as read: the HTML without its tags (label and value are separate elements)."""
    return re.sub(r"<[^>]+>", "", mon.widget.children[0].value)


def run_json(mon: TrainingMonitor) -> dict:
    return json.loads((mon.run_dir / "run.json").read_text())


# -- states -------------------------------------------------------------------------------------
def test_status_is_a_state_that_reads_as_the_old_strings():
    mon = make(run_log=False)
    assert mon.status is State.READY and mon.status == "ready" and isinstance(mon.status, str)
    mon.log(loss=1.0)
    assert mon.status == "running" and f"{mon.status}" == str(mon.status) == "running"
    assert "'hooks': running" in repr(mon) and {"running": 1}[mon.status] == 1
    mon.finish()
    assert mon.status == State.FINISHED == "finished"
    assert [s.value for s in State][:6] == ["ready", "running", "idle", "finished", "failed", "interrupted"]


# -- fail() and interrupt() ---------------------------------------------------------------------
def test_fail_ends_the_run_as_failed_and_says_why(run_dir):
    mon = make()
    for i in range(5):
        mon.log(loss=1.0 / (i + 1))
    boom = ValueError("loss diverged at step 4")
    mon.fail(boom)
    assert mon.status == "failed" and mon.error is boom
    assert not monitor_threads()
    assert "failed" in header(mon) and "ValueError: loss diverged at step 4" in header(mon)
    meta = run_json(mon)
    assert meta["status"] == "failed" and meta["error"] == "ValueError: loss diverged at step 4"
    assert len((mon.run_dir / "steps.jsonl").read_text().splitlines()) == 5
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second fail() is silent and changes nothing
        mon.fail(RuntimeError("later"))
    assert mon.error is boom
    with pytest.warns(RuntimeWarning, match=r"interrupt\(\) changes nothing: this monitor already ended as failed"):
        mon.interrupt()
    assert mon.status == "failed"
    mon.log(loss=0.1)  # as after a failed cell, logging again resumes the same run
    assert mon.status == "running" and mon.error is None
    mon.finish()
    assert run_json(mon)["status"] == "finished" and mon.step == 5


def test_fail_without_an_exception_and_on_an_idle_run(run_dir):
    mon = make()
    mon.log(loss=1.0)
    mon.parts.stop(State.IDLE)  # what the end of a notebook cell does
    assert run_json(mon)["status"] == "idle"
    mon.fail()
    assert mon.status == "failed" and "fail() was called" in header(mon)
    assert run_json(mon)["status"] == "failed" and "fail() was called" in run_json(mon)["error"]
    with pytest.raises(TypeError, match="fail\\(exc\\) takes an exception or None, got str 'oops'"):
        mon.fail("oops")


def test_interrupt_ends_the_run_as_interrupted(run_dir):
    mon = make()
    mon.log(loss=1.0)
    mon.interrupt()
    assert mon.status == "interrupted" and mon.error is None and not monitor_threads()
    assert "interrupted" in header(mon) and run_json(mon)["status"] == "interrupted"
    mon.interrupt()  # idempotent
    with pytest.warns(RuntimeWarning, match=r"fail\(\) changes nothing: this monitor already ended as interrupted"):
        mon.fail(ValueError("x"))
    assert mon.status == "interrupted"


def test_hooks_on_a_finished_or_loaded_run_change_nothing_and_say_so(run_dir):
    mon = make()
    mon.log(loss=1.0)
    mon.finish()
    with pytest.warns(RuntimeWarning, match="already ended as finished"):
        mon.fail(ValueError("too late"))
    with pytest.warns(RuntimeWarning, match="already ended as finished"):
        mon.interrupt()
    assert mon.status == "finished" and run_json(mon)["status"] == "finished"
    back = TrainingMonitor.load(mon.run_dir)
    assert back.status == "finished"
    with pytest.warns(RuntimeWarning, match=r"fail\(\) changes nothing: this monitor shows a loaded run"):
        back.fail()
    assert back.status == "finished"


def test_fail_before_the_first_step():
    mon = make()
    mon.fail(MemoryError("no room for the model"))
    assert mon.status == "failed" and "MemoryError: no room for the model" in header(mon)
    assert mon.run_dir is None and not monitor_threads()  # nothing ran, nothing was written


# -- note_batch() -------------------------------------------------------------------------------
def test_note_batch_feeds_samples_per_second_and_the_batch_advice():
    sampler = simulated_sampler(n_gpus=1)
    mon = make(run_log=False, sampler=sampler, gpus="all")
    for i in range(20):
        mon.note_batch(np.int64(32) if i % 2 else 32)
        mon.log(loss=1.0 / (i + 1))
        sampler.tick()
        time.sleep(0.002)
    mon.refresh()
    assert mon.parts.samples.total == 640 and mon.parts.samples.first_batch == 32
    assert "samples/s" in header(mon)
    assert "with batch size 32" in header(mon)  # the advice uses the batch size it was told
    mon.finish()


@pytest.mark.parametrize(
    ("samples", "error", "words"),
    [
        (-1, ValueError, "a step cannot have fewer than 0 samples"),
        (2.5, TypeError, "note_batch(samples) takes a whole number of samples, got float 2.5"),
        (True, TypeError, "got bool True"),
        ("32", TypeError, "got str '32'"),
        (None, TypeError, "got NoneType None"),
    ],
)
def test_note_batch_refuses_what_is_not_a_sample_count(samples, error, words):
    mon = make(run_log=False)
    with pytest.raises(error) as info:
        mon.note_batch(samples)
    assert words in str(info.value)
    assert mon.parts.samples.total == 0


# -- set_epoch() and total_steps ----------------------------------------------------------------
def test_set_epoch_shows_in_the_header():
    mon = make(run_log=False)
    mon.set_epoch(3, 10)
    mon.log(loss=1.0)
    mon.refresh()
    assert "epoch 3/10" in header(mon)
    mon.set_epoch(4)  # the total stays
    mon.refresh()
    assert "epoch 4/10" in header(mon)
    mon.finish()
    other = make(run_log=False)
    other.set_epoch(2)
    other.log(loss=1.0)
    other.refresh()
    assert "epoch 2 " in header(other) or "epoch 2<" in header(other)
    other.finish()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ((-1,), "epoch must be a whole number, 0 or more, got -1"),
        ((1.5,), "epoch must be a whole number, 0 or more, got 1.5"),
        ((True,), "got True"),
        ((1, 0), "epochs must be a positive whole number (or None), got 0"),
        ((1, 2.0), "epochs must be a positive whole number"),
        ((11, 10), "set_epoch(11, epochs=10): the epoch is past the last one"),
    ],
)
def test_set_epoch_refuses_bad_input(args, words):
    mon = make(run_log=False)
    with pytest.raises(ValueError) as info:
        mon.set_epoch(*args)
    assert words in str(info.value)


def test_total_steps_set_later_drives_the_progress_and_the_eta(run_dir):
    mon = make()
    for _ in range(10):
        mon.log(loss=0.5)
        time.sleep(0.002)
    mon.total_steps = 100
    mon.refresh()
    assert "step 10 / 100 (10%)" in header(mon) and "ETA" in header(mon)
    mon.total_steps = 20
    mon.refresh()
    assert "step 10 / 20 (50%)" in header(mon)
    mon.total_steps = None
    mon.refresh()
    assert "step 10 steps/s" in header(mon) and "ETA" not in header(mon)
    for bad in (0, -5, 2.5, True, "100"):
        with pytest.raises(ValueError, match="total_steps must be a positive whole number"):
            mon.total_steps = bad
    mon.total_steps = 40
    mon.finish()
    assert run_json(mon)["total_steps"] == 40


# -- through a real kernel ----------------------------------------------------------------------
HOOKS_CODE = """
from gpu_widgets import TrainingMonitor
a = TrainingMonitor("hooks-fail", total_steps=50)
a.set_epoch(1, 3)
for i in range(5):
    a.note_batch(16)
    a.log(loss=1.0 / (i + 1))
a.fail(ValueError("diverged"))
b = TrainingMonitor("hooks-interrupt")
b.log(loss=1.0)
b.interrupt()
print("states:", a.status, b.status, repr(a.error))
"""


def _execute(kc, code: str, timeout: float = 60.0) -> str:
    msg_id = kc.execute(code)
    out = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = kc.get_iopub_msg(timeout=timeout)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream":
            out.append(content["text"])
        elif kind == "error":
            raise AssertionError("\n".join(content["traceback"]))
        elif kind == "status" and content["execution_state"] == "idle":
            return "".join(out)
    raise AssertionError(f"the kernel did not finish {code!r}")


@pytest.mark.integration
def test_hooks_in_a_kernel_end_runs_without_a_with_block(run_dir, tmp_path):
    env = {**os.environ, "GPU_WIDGETS_RUN_DIR": str(run_dir), "GPU_WIDGETS_BACKEND": "simulated"}
    with running_kernel(env, tmp_path) as (_, kc):
        out = _execute(kc, HOOKS_CODE)
        # The cell ended cleanly after fail(): the cell hook must not turn the run "idle".
        later = _execute(kc, "print('after:', a.status, b.status)")
    assert "states: failed interrupted ValueError('diverged')" in out
    assert "after: failed interrupted" in later
    metas = {m["title"]: m for m in (json.loads(p.read_text()) for p in run_dir.glob("*/run.json"))}
    assert metas["hooks-fail"]["status"] == "failed" and metas["hooks-fail"]["error"] == "ValueError: diverged"
    assert metas["hooks-fail"]["steps"] == 5 and metas["hooks-fail"]["total_steps"] == 50
    assert metas["hooks-interrupt"]["status"] == "interrupted"


def test_note_device_feeds_the_devices_the_cpu_tip_reads_and_checks_its_argument():
    mon = TrainingMonitor("devices", display=False, run_log=False)
    mon.note_device(None)
    mon.note_device("meta")  # weights not materialised yet: nothing to tell
    assert mon.parts.records.tensor_devices == set()
    mon.note_device("cuda")
    assert mon.parts.records.tensor_devices == {"cuda"}
    with pytest.raises(TypeError, match=r"note_device\(kind\) takes a device type such as 'cuda', got int 3"):
        mon.note_device(3)


def test_recorders_are_the_runs_own_unchecked_recorders():
    mon = TrainingMonitor("recorders", display=False, run_log=False)
    hooks = mon.recorders()
    for _ in range(10):
        hooks.data_wait(0.5, 1.0, 0.0)
        hooks.batch(8, 0.0)
    assert mon.data_wait_share == pytest.approx(0.5)
    assert mon.parts.samples.total == 80 and mon.parts.samples.first_batch == 8
