"""What each rank measures: the model's forward time (``TrainingMonitor(model=...)``, into the
data-wait bins' ``forward_s``) and the rank's heartbeat (``heartbeat.json``, multi-rank runs only).

Real tiny torch models on the CPU, real run logs; the heartbeat under a real 2-rank torchrun with
DDP, one rank stuck in its dataset. The CUDA path (events read later on the monitor's thread) runs
with a fake event class, since no GPU is here."""
from __future__ import annotations

import gc
import json
import textwrap
import time
import weakref
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from gpu_widgets import TrainingMonitor  # noqa: E402
from gpu_widgets.parallel import forward_timer  # noqa: E402
from gpu_widgets.parallel.forward_timer import ForwardTimer  # noqa: E402
from gpu_widgets.parallel.heartbeat import Heartbeat, HeartbeatWriter  # noqa: E402
from gpu_widgets.runs.file_reads import RunFileError  # noqa: E402
from gpu_widgets.runs.launch_dir import read_heartbeat  # noqa: E402
from gpu_widgets.runs.saved_run import data_wait_row, read_run  # noqa: E402

from .torchrun import torchrun  # noqa: E402
from .widget_helpers import no_gpu_sampler  # noqa: E402

FORWARD_S = 0.02


class Slow(torch.nn.Module):
    """A forward of a known length (a sleep), the rest of the step short."""

    def __init__(self, sleep_s: float = FORWARD_S) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 2)
        self.sleep_s = sleep_s

    def forward(self, x):
        time.sleep(self.sleep_s)
        return self.lin(x)


@pytest.fixture(autouse=True)
def one_process(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)


def train(tmp_path: Path, model=None, steps: int = 30, eval_every: int = 0) -> TrainingMonitor:
    net = model if model is not None else Slow()
    mon = TrainingMonitor("t", model=model, run_log=tmp_path / "runs", display=False, sampler=no_gpu_sampler())
    batches = [torch.randn(3, 4) for _ in range(steps)]
    for i, x in enumerate(mon.track(batches)):
        net(x).sum().backward()
        time.sleep(0.004)  # the rest of the step: backward, optimizer
        if eval_every and i % eval_every == 0:
            net.eval()
            with torch.no_grad():
                net(x)  # a validation forward: not a training step's
            net.train()
    mon.finish()
    return mon


def bins(mon: TrainingMonitor) -> list[dict]:
    return [json.loads(line) for line in (mon.run_dir / "data_wait.jsonl").read_text().splitlines()]


# -- forward time into the data-wait bins ------------------------------------------------------------
def test_bins_carry_the_forward_seconds_of_their_steps_and_load_reads_them(tmp_path):
    model = Slow()
    began = time.perf_counter()
    mon = train(tmp_path, model, eval_every=5)  # eval forwards sleep too, and must not count
    took = time.perf_counter() - began
    rows = bins(mon)
    steps = sum(r["steps"] for r in rows)
    assert steps == 29  # the first batch is the loader starting: not counted
    per_step = sum(r["forward_s"] for r in rows) / steps
    assert FORWARD_S * 0.9 < per_step < FORWARD_S * 2.5, rows
    assert all(0 <= r["forward_s"] <= r["step_s"] for r in rows), rows  # CPU: each forward in its own step
    assert sum(r["step_s"] for r in rows) < took
    assert mon.errors == []
    loaded = read_run(mon.run_dir)
    assert [r["forward_s"] for r in loaded.data_wait_rows] == pytest.approx([r["forward_s"] for r in rows])


def test_without_a_model_bins_have_no_forward_field(tmp_path):
    rows = bins(train(tmp_path, None, steps=12))
    assert rows and not any("forward_s" in r for r in rows)


def test_a_model_whose_forward_never_runs_gives_no_forward_field(tmp_path):
    silent = torch.nn.Linear(4, 2)  # watched, but the loop calls another module
    mon = TrainingMonitor("t", model=silent, run_log=tmp_path / "runs", display=False, sampler=no_gpu_sampler())
    other = Slow(0.0)
    for x in mon.track([torch.randn(3, 4) for _ in range(12)]):
        other(x)
    mon.finish()
    assert bins(mon) and not any("forward_s" in r for r in bins(mon))  # unknown, not 0


@pytest.mark.parametrize("bad", ["model", 3, [torch.nn.Linear(1, 1)], torch.nn.Linear])
def test_a_bad_model_is_refused_with_a_clear_type_error(bad):
    with pytest.raises(TypeError, match=r"TrainingMonitor\(model=...\) takes a torch.nn.Module"):
        TrainingMonitor(model=bad, run_log=False, display=False, sampler=no_gpu_sampler())
    mon = TrainingMonitor(run_log=False, display=False, sampler=no_gpu_sampler())
    with pytest.raises(TypeError, match=r"watch_model\(model\) takes a torch.nn.Module"):
        mon.watch_model(bad)


def test_hooks_are_on_the_model_only_while_the_run_runs_and_the_model_is_not_kept_alive(tmp_path):
    model = Slow(0.0)
    mon = TrainingMonitor("t", model=model, run_log=False, display=False, sampler=no_gpu_sampler())
    assert not model._forward_hooks and not model._forward_pre_hooks  # not before the run starts
    mon.log(loss=1.0)
    assert len(model._forward_hooks) == 1 and len(model._forward_pre_hooks) == 1
    mon.finish()
    assert not model._forward_hooks and not model._forward_pre_hooks
    # a failed run unhooks too, and the monitor holds the model weakly
    model2 = Slow(0.0)
    mon2 = TrainingMonitor("t", run_log=False, display=False, sampler=no_gpu_sampler())
    mon2.watch_model(model2)
    with pytest.raises(ValueError), mon2:
        model2(torch.randn(2, 4))
        raise ValueError("boom")
    assert mon2.status == "failed" and not model2._forward_hooks and not model2._forward_pre_hooks
    ref = weakref.ref(model2)
    del model2
    gc.collect()
    assert ref() is None


def test_a_forward_that_raises_leaves_the_timer_right_for_the_next_ones():
    class Flaky(Slow):
        def forward(self, x):
            if x.shape[0] == 1:
                raise RuntimeError("bad input")
            return super().forward(x)

    model = Flaky(0.005)
    timer = ForwardTimer(model)
    with pytest.raises(RuntimeError, match="bad input"):
        model(torch.randn(1, 4))
    model(torch.randn(2, 4))
    taken = timer.take()
    assert len(taken) == 2 and taken[1][1] >= 0.004  # the time of the failed one was spent too
    model(torch.randn(2, 4))
    assert len(timer.take()) == 1  # the depth of nested forwards came back to 0
    assert timer.beat.state[0] == "after_forward"
    timer.remove()
    assert not model._forward_hooks


# -- the CUDA path, with events that complete when the test says -------------------------------------
class FakeEvent:
    clock_ms = 0.0  # the "GPU" time the events record
    made = 0

    def __init__(self) -> None:
        FakeEvent.made += 1
        self.at: float | None = None
        self.complete = False

    def record(self, stream=None) -> None:
        self.at, self.complete = FakeEvent.clock_ms, False

    def query(self) -> bool:
        return self.complete

    def elapsed_time(self, end: "FakeEvent") -> float:
        if not (self.complete and end.complete):
            raise RuntimeError("event not complete")  # as CUDA says; take() must never ask early
        return end.at - self.at


def test_cuda_events_are_read_once_complete_in_order_and_reused(monkeypatch):
    model = torch.nn.Linear(4, 2)
    made: list[FakeEvent] = []

    def factory() -> FakeEvent:
        made.append(FakeEvent())
        return made[-1]

    timer = ForwardTimer(model, events=factory)
    for length_ms in (5.0, 7.0, 9.0):
        model(torch.randn(2, 4))  # records (start, end) around it; the "GPU" is behind
        FakeEvent.clock_ms += length_ms
        made[-1].at = FakeEvent.clock_ms  # the end event's time: after the forward's kernels
    assert timer.take() == [] and len(timer.pending) == 3  # nothing complete: nothing read, no wait
    for e in made[:2]:
        e.complete = True  # the first forward done on the GPU
    first = timer.take()
    assert [s for _, s in first] == pytest.approx([0.005])
    for e in made[2:]:
        e.complete = True
    assert [s for _, s in timer.take()] == pytest.approx([0.007, 0.009])
    before = len(made)
    model(torch.randn(2, 4))
    assert len(made) == before  # read events are reused, not made anew
    timer.remove()


def test_cuda_pending_events_are_bounded_and_an_event_error_stops_timing_without_raising(monkeypatch):
    monkeypatch.setattr(forward_timer, "MAX_PENDING", 4)
    model = torch.nn.Linear(4, 2)
    timer = ForwardTimer(model, events=FakeEvent)
    for _ in range(10):
        model(torch.randn(2, 4))
    assert len(timer.pending) == 4 and timer.dropped == 6

    def broken(self, end):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    for _, start, end in timer.pending:
        start.complete = end.complete = True
    monkeypatch.setattr(FakeEvent, "elapsed_time", broken)
    assert timer.take() == []  # never raises into the monitor's pass
    assert "illegal memory access" in timer.problem
    model(torch.randn(2, 4))  # the forward goes on, untimed
    assert not timer.pending
    timer.remove()


# -- the heartbeat -----------------------------------------------------------------------------------
def test_the_heartbeat_file_is_written_at_most_once_a_second_and_reads_back(tmp_path):
    beat = Heartbeat()
    writer = HeartbeatWriter(beat, lambda: 7, lambda: None)
    began = time.monotonic()
    while time.monotonic() - began < 1.5:
        beat.state = ("forward", time.perf_counter())
        writer.write(tmp_path)
        time.sleep(0.01)
    assert writer.writes == 2  # at 0 s and at 1 s, not 150 times
    read = read_heartbeat(tmp_path)
    assert read is not None and read["step"] == 7 and read["phase"] == "forward" and read["step_started"] is None
    assert abs(read["time"] - time.time()) < 1.0 and read["phase_since"] <= read["time"]
    beat.step_started = time.perf_counter() - 2.0
    writer.write(tmp_path, force=True)
    assert time.time() - read_heartbeat(tmp_path)["step_started"] == pytest.approx(2.0, abs=0.2)


def test_a_single_process_run_writes_no_heartbeat(tmp_path):
    mon = train(tmp_path, Slow(0.0), steps=10)
    assert mon.run_dir is not None and not (mon.run_dir / "heartbeat.json").exists()
    assert mon.parts.timing.writer.writes == 0


RANKS_SCRIPT = """
import json, os, sys, threading, time
from pathlib import Path
import torch
import torch.distributed as dist
from gpu_widgets import TrainingMonitor

rank = int(os.environ["RANK"])
STUCK_AT, STUCK_S = 12, 3.5

class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 24
    def __getitem__(self, i):
        if rank == 1 and i == STUCK_AT:
            time.sleep(STUCK_S)  # this rank's input pipeline hangs; the other waits in the all-reduce
        return torch.full((4,), float(i))

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
    def forward(self, x):
        time.sleep(0.01)
        return self.lin(x)

mon = TrainingMonitor("ranks", display=False)  # made before the process group: still a rank
dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(Net())
mon.watch_model(model)
seen, stop = [], threading.Event()

def watch():  # what another process reading this rank's heartbeat sees, 5 times a second
    while not stop.wait(0.2):
        d = mon.run_dir
        if d is not None and (d / "heartbeat.json").exists():
            seen.append([time.time(), json.loads((d / "heartbeat.json").read_text())])

threading.Thread(target=watch, daemon=True).start()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
began = time.monotonic()
loader = torch.utils.data.DataLoader(Data(), batch_size=1)
for x in mon.track(loader):
    opt.zero_grad()
    model(x).sum().backward()
    opt.step()
    mon.log(loss=0.5)
took = time.monotonic() - began
mon.finish()
stop.set()
dist.barrier()
out = {"rank": rank, "seen": seen, "writes": mon.parts.timing.writer.writes, "took": took,
       "run_dir": str(mon.run_dir), "errors": mon.errors}
Path(sys.argv[1], f"rank{rank}.json").write_text(json.dumps(out))
dist.destroy_process_group()
"""


@pytest.mark.integration
def test_each_rank_beats_its_phase_and_a_rank_stuck_in_its_loader_shows_data_since_long(tmp_path):
    script = tmp_path / "ranks.py"
    script.write_text(textwrap.dedent(RANKS_SCRIPT))
    out = tmp_path / "out"
    out.mkdir()
    done = torchrun(script, tmp_path / "runs", str(out), nproc=2, timeout_s=120)
    assert done.returncode == 0, done.output[-3000:]
    ranks = {r: json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)}
    for r, got in ranks.items():
        assert got["errors"] == [], got["errors"]
        run_dir = Path(got["run_dir"])
        assert run_dir.name == f"rank-{r}"
        final = read_heartbeat(run_dir)
        assert final is not None and final["phase"] == "idle" and final["step"] == 24  # ended, not stuck
        # about once a second (the run took `took` seconds; a final one at the end), not 4 a second
        assert 1 <= got["writes"] <= got["took"] + 3, got
        bins = [json.loads(line) for line in (run_dir / "data_wait.jsonl").read_text().splitlines()]
        assert all("forward_s" in b for b in bins) and sum(b["forward_s"] for b in bins) > 0.005 * 23
        phases = {beat["phase"] for _, beat in got["seen"]}
        assert phases & {"data", "forward", "after_forward"}, got["seen"]
    # rank 1, stuck in its dataset: phase "data" since long ago, while its heartbeat stays fresh
    stuck = [(at, b) for at, b in ranks[1]["seen"] if b["phase"] == "data" and b["time"] - b["phase_since"] > 2.0]
    assert stuck, ranks[1]["seen"]
    assert all(at - b["time"] < 2.0 for at, b in stuck)  # written at most a second (and a pass) ago
    # rank 0 meanwhile has done its forward and waits for rank 1 in the all-reduce
    t_stuck = stuck[len(stuck) // 2][0]
    waiting = [b for at, b in ranks[0]["seen"] if abs(at - t_stuck) < 0.5]
    assert waiting and all(b["phase"] == "after_forward" and b["time"] - b["phase_since"] > 1.0
                           for b in waiting), waiting


# -- the files' readers --------------------------------------------------------------------------------
def test_a_bin_with_forward_s_is_checked_and_old_bins_without_it_stay_valid():
    old = {"time": 1.0, "wait_s": 0.1, "step_s": 0.5, "steps": 3}
    assert data_wait_row(dict(old), "f:1") == {**old, "time": 1.0}
    assert data_wait_row({**old, "forward_s": 0.2}, "f:1")["forward_s"] == 0.2
    for bad, why in (("0.2", "'forward_s' must be a number"), (None, "'forward_s' must be a number"),
                     (-0.1, "'forward_s' must be a finite number of seconds, 0 or more"),
                     (float("inf"), "'forward_s' must be a finite number"), (True, "must be a number")):
        with pytest.raises(RunFileError, match=why):
            data_wait_row({**old, "forward_s": bad}, "f:1")


# -- the framework callbacks pass their model ------------------------------------------------------
def test_the_lightning_callback_times_the_modules_forward_and_unhooks_it_after_fit(tmp_path):
    pl = pytest.importorskip("lightning.pytorch")
    from gpu_widgets.integrations.lightning import GpuWidgetsCallback

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 1)

        def forward(self, x):
            time.sleep(FORWARD_S)
            return self.lin(x)

        def training_step(self, batch, batch_idx):
            return self(batch).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    module = Module()
    cb = GpuWidgetsCallback(display=False, sampler=no_gpu_sampler(), run_log=tmp_path / "runs")
    loader = torch.utils.data.DataLoader(torch.randn(30, 4), batch_size=1)
    pl.Trainer(accelerator="cpu", devices=1, max_epochs=1, callbacks=[cb], logger=False, enable_checkpointing=False,
               enable_progress_bar=False, enable_model_summary=False).fit(module, loader)
    rows = bins(cb.monitor)
    per_step = sum(r["forward_s"] for r in rows) / sum(r["steps"] for r in rows)
    assert FORWARD_S * 0.9 < per_step < FORWARD_S * 2.5, rows
    assert not module._forward_hooks and not module._forward_pre_hooks
