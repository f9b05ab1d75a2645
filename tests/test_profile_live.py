"""TrainingMonitor.profile(): live torch.profiler runs on the CPU, in this process, each with a tiny
loop: an input-bound loader, a launch-bound step of thousands of tiny ops, the same work as one
matmul (compute-bound); the loop's results unchanged; its exceptions going on; bad input; the
trace kept or not; the widget; a real kernel; a Lightning fit's callback monitor."""
from __future__ import annotations

import json
import os
import re
import tempfile
import time

import pytest

torch = pytest.importorskip("torch")

from gpu_widgets import TrainingMonitor  # noqa: E402
from gpu_widgets.profiling import Profile, ProfileError  # noqa: E402
from gpu_widgets.profiling.live import ProfileSession  # noqa: E402

from .widget_helpers import run_dir, simulated_sampler  # noqa: E402,F401

TINY = 16  # elements of the tensors a launch-bound step works on


def make(**kw) -> TrainingMonitor:
    kw.setdefault("display", False)
    kw.setdefault("sampler", simulated_sampler())
    kw.setdefault("run_log", False)
    return TrainingMonitor(kw.pop("title", "profile"), **kw)


def profiler_running() -> bool:
    return torch.autograd.profiler._is_profiler_enabled


class Sleepy(torch.utils.data.Dataset):
    """A loader that takes 40 ms a batch (decoding files, say)."""

    def __len__(self) -> int:
        return 12

    def __getitem__(self, i: int):
        time.sleep(0.04)
        return torch.full((4, 8), float(i))


def sleepy_loader():
    return torch.utils.data.DataLoader(Sleepy(), batch_size=None)


def tiny_ops(x):
    for _ in range(2500):  # 5,000 element-wise ops on 16 numbers
        x = (x * 1.0001).add_(1e-4)
    return x


def one_matmul(a, b):
    return a @ b  # the same kind of work, as one large op


@pytest.mark.integration
def test_an_input_bound_loop_is_named_and_announced(capfd):
    mon = make()
    w = torch.nn.Linear(8, 8)
    profile = mon.profile(steps=5, warmup=1)
    assert isinstance(profile, Profile) and profile.status == "waiting" and not profile.done
    assert mon.last_profile is None
    with mon:
        for batch in mon.track(sleepy_loader()):  # track() and log(): each batch one step, not two
            loss = w(batch).square().mean()
            loss.backward()
            mon.log(loss=loss.detach())
    assert profile.wait(30), profile
    assert profile.status == "done" and profile.verdict == "input-bound", profile
    assert profile.steps == 5 and profile.evidence["step_ms"] >= 38  # 40 ms a batch: one step each
    assert profile.breakdown["data_wait"] >= 0.8
    assert abs(sum(profile.breakdown.values()) - 1) < 1e-6
    assert mon.last_profile is profile and profile.trace_path is None
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("gpu-widgets: profile")]
    assert lines == [f"gpu-widgets: profile of 5 steps: input-bound: {profile.sentence}"]
    assert not profiler_running()


def _launch_loop(mon: TrainingMonitor, n: int, profile_from: int | None = None, **kw) -> list[float]:
    """A loop of launch-bound steps, log() the only step boundary; each step's seconds."""
    x = torch.zeros(TINY)
    times = []
    for i in range(n):
        if i == profile_from:
            mon.profile(**kw)
        t = time.perf_counter()
        x = tiny_ops(x)
        mon.log(value=float(x[0]))
        times.append(time.perf_counter() - t)
    return times


@pytest.mark.integration
def test_thousands_of_tiny_ops_are_launch_bound_and_the_cost_is_back_after():
    mon = make()
    steps, warmup = 4, 1
    times = _launch_loop(mon, 24, profile_from=8, steps=steps, warmup=warmup)
    profile = mon.last_profile or mon.parts.steps.session.profile
    assert profile.wait(60), profile
    mon.finish()
    assert profile.verdict == "launch-bound", profile
    assert profile.evidence["ops_per_step"] >= 1000 and profile.steps == steps
    assert "torch.compile" in profile.sentence
    assert profile.top_ops and profile.top_ops[0]["count_per_step"] >= 1000
    # profile() at step 8: the boundaries 8.. are its warm-up, its own warm-up step, then `steps`
    # steps (log() ends a step, so step k's time is before boundary k+1)
    before, profiled, after = times[2:8], times[8 + warmup + 1:8 + warmup + 1 + steps], times[-6:]
    med = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
    print(f"\nlaunch-bound step: unprofiled {med(before) * 1e3:.1f} ms, profiled {med(profiled) * 1e3:.1f} ms "
          f"(x{med(profiled) / med(before):.2f}), after {med(after) * 1e3:.1f} ms (x{med(after) / med(before):.2f})")
    assert not profiler_running()


@pytest.mark.integration
def test_the_same_work_as_one_matmul_is_compute_bound():
    mon = make()
    a, b = torch.randn(384, 384), torch.randn(384, 384)
    profile = mon.profile(steps=3, warmup=0)
    for _ in range(6):
        c = one_matmul(a, b)
        mon.log(value=float(c[0, 0]))
    assert profile.wait(30), profile
    mon.finish()
    assert profile.verdict == "compute-bound", profile
    assert "on the CPU" in profile.sentence and profile.evidence["ops_per_step"] < 50


def _train(profile: bool) -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.ReLU(), torch.nn.Linear(12, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 6), torch.randn(64, 1)),
                                       batch_size=4, shuffle=True)
    mon = make()
    p = mon.profile(steps=4, warmup=1) if profile else None
    with mon:
        for x, y in mon.track(data):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            mon.log(loss=loss.detach())
    if p is not None:
        assert p.wait(30) and p.status == "done", p
    return [t.detach().clone() for t in model.parameters()]


@pytest.mark.integration
def test_a_profile_never_changes_what_the_loop_computes():
    plain, profiled = _train(False), _train(True)
    assert all(torch.equal(a, b) for a, b in zip(plain, profiled))


def test_an_exception_in_a_profiled_step_goes_on_unchanged_and_the_profile_fails():
    mon = make()
    boom = ValueError("bad batch")
    profile = mon.profile(steps=10, warmup=0)
    with pytest.raises(ValueError) as caught:
        with mon:
            for i in range(20):
                mon.log(value=i)
                if i == 4:
                    raise boom
    assert caught.value is boom
    assert profile.wait(5) and profile.status == "failed"
    assert re.search(r"the run ended after \d of 10 profiled steps", profile.error), profile.error
    assert mon.last_profile is profile and mon.status == "failed"
    assert not profiler_running()
    assert "failed" in repr(profile) and "Profile failed" in profile.html()


def test_a_run_ending_before_its_steps_fails_the_profile_and_stops_the_profiler():
    mon = make()
    profile = mon.profile(steps=50, warmup=1)
    for i in range(6):
        mon.log(value=i)
    assert profiler_running()
    mon.finish()
    assert profile.status == "failed" and profile.error == "the run ended after 3 of 50 profiled steps"
    assert not profiler_running()
    with pytest.raises(RuntimeError, match="finished"):
        mon.profile(steps=3)


@pytest.mark.parametrize("steps, error, words", [
    (0, ValueError, "between 1 and 1000"), (-1, ValueError, "between 1 and 1000"),
    (1001, ValueError, "between 1 and 1000"), (1.5, TypeError, "whole number"),
    ("3", TypeError, "whole number"), (True, TypeError, "whole number"),
])
def test_bad_steps_get_a_clear_error(steps, error, words):
    mon = make()
    with pytest.raises(error, match=words):
        mon.profile(steps=steps)
    with pytest.raises(ValueError, match="0 or more"):
        mon.profile(steps=3, warmup=-1)
    assert mon.parts.steps.session is None


@pytest.mark.integration
def test_one_profile_at_a_time_and_then_another():
    mon = make()
    first = mon.profile(steps=2, warmup=0)
    with pytest.raises(RuntimeError, match="already pending.*one at a time"):
        mon.profile(steps=2)
    for i in range(5):
        mon.log(value=i)
    assert first.wait(30) and first.status == "done"
    second = mon.profile(steps=2, warmup=0)
    for i in range(5):
        mon.log(value=i)
    assert second.wait(30) and second.status == "done" and mon.last_profile is second
    mon.finish()


def test_loaded_monitors_and_no_torch_are_refused(run_dir, monkeypatch):
    mon = TrainingMonitor("saved", display=False, sampler=simulated_sampler())
    mon.log(loss=1.0)
    mon.finish()
    loaded = TrainingMonitor.load(mon.run_dir)
    with pytest.raises(RuntimeError, match="loaded or followed"):
        loaded.profile(steps=3)
    monkeypatch.setitem(__import__("sys").modules, "torch.profiler", None)
    with pytest.raises(ProfileError, match="needs PyTorch"):
        make().profile(steps=3)


@pytest.mark.integration
def test_keep_trace_leaves_the_trace_in_the_run_directory_and_otherwise_nothing(run_dir, monkeypatch, tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    kept = make(run_log=True)
    p = kept.profile(steps=2, warmup=0, keep_trace=True)
    x = torch.ones(4)
    for i in range(4):
        # log() ends a step: boundary 0 starts the profiler, step 1 is its warm-up (discarded),
        # boundaries 1 to 3 bound the 2 profiled steps, 2 and 3
        (torch.digamma if i in (2, 3) else torch.lgamma)(x)
        kept.log(value=i)
    torch.lgamma(x)  # after the profile: not in it
    assert p.wait(30) and p.status == "done", p
    kept.finish()
    names = [e["name"] for e in json.loads(open(p.trace_path).read())["traceEvents"] if e.get("ph") == "X"]
    assert sum(n.startswith("ProfilerStep#") for n in names) == 2
    assert names.count("aten::digamma") == 2 and "aten::lgamma" not in names
    assert re.fullmatch(r"profile-\d+\.pt\.trace\.json", os.path.basename(p.trace_path))
    assert os.path.isfile(p.trace_path) and os.path.dirname(p.trace_path) == str(kept.run_dir)
    assert '"traceEvents"' in open(p.trace_path).read(4096)
    plain = make(run_log=True)
    q = plain.profile(steps=2, warmup=0)
    for i in range(4):
        plain.log(value=i)
    assert q.wait(30) and q.status == "done" and q.trace_path is None
    plain.finish()
    assert not list(plain.run_dir.glob("profile-*")) and not list(tmp.glob("gpu-widgets-profile-*"))
    # no run log: the kept trace goes to a temp directory, and trace_path says where
    no_log = make()
    r = no_log.profile(steps=2, warmup=0, keep_trace=True)
    for i in range(4):
        no_log.log(value=i)
    assert r.wait(30) and r.trace_path is not None and r.trace_path.startswith(str(tmp))
    assert os.path.isfile(r.trace_path)


@pytest.mark.integration
def test_the_widget_shows_the_profile_under_the_header_and_nvml_rows_reach_it():
    sampler = simulated_sampler()
    mon = make(sampler=sampler)
    children = mon.widget.children
    profile = mon.profile(steps=3, warmup=0)
    box = mon.widget.children
    assert len(box) == len(children) + 1 and box[0] is children[0] and box[2:] == children[1:]
    assert "Profile: waiting" in box[1].value
    for batch in mon.track(sleepy_loader()):
        sampler.tick()  # a GPU sample each step: the window has NVML rows
        mon.log(value=float(batch.sum()))
    assert profile.wait(30) and profile.status == "done"
    mon.finish()
    assert "Profile: input-bound" in box[1].value and "top op" in box[1].value
    assert box[1].value == profile.html()
    pytest.importorskip("matplotlib")
    assert "Profile: input-bound" in mon._repr_mimebundle_()["text/html"]  # the stopped run's picture too
    assert profile.evidence["nvml_samples"] >= 1 and profile.evidence["utilization_percent"] is not None


@pytest.mark.integration
def test_a_session_outside_a_monitor_profiles_its_own_boundaries():
    done = []
    session = ProfileSession(2, warmup=0, on_done=done.append)
    x = torch.zeros(TINY)
    for _ in range(4):
        x = x + 1
        session.step()
    assert session.profile.wait(30) and done == [session.profile] and session.profile.steps == 2
    session.cancel()  # done already: changes nothing
    assert session.profile.status == "done"


KERNEL_CODE = r"""
import time, torch
from gpu_widgets import TrainingMonitor
class Sleepy(torch.utils.data.Dataset):
    def __len__(self): return 10
    def __getitem__(self, i):
        time.sleep(0.04)
        return torch.ones(4)
mon = TrainingMonitor("kernel-profile", run_log=False)
p = mon.profile(steps=5, warmup=1)
for b in mon.track(torch.utils.data.DataLoader(Sleepy(), batch_size=None)):
    mon.log(loss=float(b.sum()))
print("waited:", mon.last_profile.wait(60) if mon.last_profile else p.wait(60))
print("verdict:", mon.last_profile.verdict, mon.last_profile.steps, mon.last_profile is p)
"""


@pytest.mark.integration
def test_a_profile_in_a_real_kernel(tmp_path):
    from .kernel_session import running_kernel
    from .test_monitor_hooks import _execute

    env = {**os.environ, "GPU_WIDGETS_BACKEND": "simulated", "OMP_NUM_THREADS": "1"}
    with running_kernel(env, tmp_path) as (_, kc):
        out = _execute(kc, KERNEL_CODE, timeout=90)
    assert "waited: True" in out and "verdict: input-bound 5 True" in out, out
    assert "gpu-widgets: profile" not in out  # a notebook shows it in the widget, not on stderr


@pytest.mark.integration
def test_a_lightning_callbacks_monitor_profiles_its_batches():
    pl = pytest.importorskip("lightning.pytorch")
    from .test_integrations_lightning import Tiny, callback, loader, trainer

    cb = callback(title="lightning-profile")
    profile = cb.monitor.profile(steps=3, warmup=1)
    trainer(cb).fit(Tiny(), loader(), loader(8))
    assert isinstance(cb.monitor, TrainingMonitor) and pl is not None
    assert profile.wait(30) and profile.status == "done", profile
    assert profile.steps == 3 and profile.verdict in ("compute-bound", "launch-bound", "input-bound")
    assert cb.monitor.last_profile is profile and cb.monitor.parts.steps.batch_loops == 0


def test_a_profiler_already_running_fails_the_profile_and_is_left_alone():
    mon = make()
    profile = mon.profile(steps=2, warmup=0)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as theirs:
        for i in range(5):
            mon.log(value=torch.ones(2).sum())
        assert profiler_running()  # the user's own profiler still runs
    mon.finish()
    assert profile.status == "failed" and "another torch.profiler runs" in profile.error, profile
    assert any(e.name == "aten::ones" for e in theirs.events())


@pytest.mark.integration
def test_a_hugging_face_trainers_monitor_profiles_its_steps(tmp_path):
    pytest.importorskip("transformers")
    from .test_integrations_transformers import callback as hf_callback, trainer as hf_trainer

    cb = hf_callback(title="hf-profile")
    profile = cb.monitor.profile(steps=3, warmup=1)
    hf_trainer([cb], tmp_path).train()  # 10 steps
    assert profile.wait(30) and profile.status == "done" and profile.steps == 3, profile
    assert cb.monitor.last_profile is profile and cb.monitor.parts.steps.batch_loops == 0
