"""The straggler verdict end to end: real 2-rank torchrun launches (gloo on loopback) of a tiny DDP
model under ``TrainingMonitor(model=...)`` and ``track()``, each followed live from this process
with ``TrainingMonitor.follow`` on the launch directory, sampling ``straggler`` at every pass, and
by rank 0's own live monitor at every step.

One rank is made slow on purpose: its dataset (input), its forward (compute), or a long stall
before its forward while the other waits in the all-reduce (stalled); and two equal ranks must
get no verdict at any pass. The slow parts are sleeps, so the excess is known."""
from __future__ import annotations

import html
import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

pytest.importorskip("torch")

from gpu_widgets import TrainingMonitor  # noqa: E402

from .torchrun import RankRun, torchrun  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # torchrun launches, 10-30 s each

SLOW_S = 0.05
WORK_S = 0.02  # each step's own work, in the forward (a sleep: steady on a busy machine)

# argv: case, steps. Rank 1 is the odd one; rank 0 is as in the balanced case.
SCRIPT = """
import json, os, sys, time
import torch, torch.distributed as dist
from gpu_widgets import TrainingMonitor

case, steps = sys.argv[1], int(sys.argv[2])
rank = int(os.environ["RANK"])
odd = rank == 1
STALL_AT, STALL_S = 10, 25.0

class Data(torch.utils.data.Dataset):
    def __len__(self):
        return steps
    def __getitem__(self, i):
        if odd and case == "input":
            time.sleep(%(slow)r)  # this rank's input pipeline is slow
        return torch.full((4,), float(i))

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
    def forward(self, x):
        time.sleep(%(work)r + (%(slow)r if odd and case == "compute" else 0.0))
        return self.lin(x)

dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(Net())
mon = TrainingMonitor("verdict " + case, model=model, display=False, flush_s=0.2)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
live = []
for i, x in enumerate(mon.track(torch.utils.data.DataLoader(Data(), batch_size=1))):
    if odd and case == "stalled" and i == STALL_AT:
        time.sleep(STALL_S)  # stuck before its forward: the other rank waits in the all-reduce
    opt.zero_grad()
    model(x).sum().backward()
    opt.step()
    mon.log(loss=0.5)
    if rank == 0 and case != "stalled":  # rank 0's live monitor says it too (it reads the launch once a second)
        s = mon.straggler
        if s is not None:
            live.append([i + 1, s["rank"], s["cause"]])
mon.finish()
if rank == 0:
    print("LIVE " + json.dumps(live), flush=True)
assert mon.errors == [], mon.errors
dist.barrier()
dist.destroy_process_group()
""" % {"slow": SLOW_S, "work": WORK_S}


@dataclass
class Seen:
    """What the follower showed, pass by pass: (rank 0's steps, straggler, header) each time,
    and when (time.monotonic())."""

    passes: list[tuple[int, dict | None, str]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    done: RankRun | None = None
    live: list[list] = field(default_factory=list)  # rank 0's own monitor: [step, rank, cause] when it named one

    def verdicts(self) -> list[tuple[int, dict, str]]:
        return [p for p in self.passes if p[1] is not None]

    def span_s(self, cause: str) -> float:
        """Seconds from the first pass with this verdict to the last."""
        at = [t for t, p in zip(self.times, self.passes) if p[1] is not None and p[1]["cause"] == cause]
        return at[-1] - at[0] if at else 0.0


def launch_and_follow(tmp_path: Path, case: str, steps: int, timeout_s: float = 120) -> Seen:
    script = tmp_path / "ranks.py"
    script.write_text(SCRIPT)
    root = tmp_path / "runs"
    seen = Seen()
    ranks = threading.Thread(target=lambda: setattr(seen, "done", torchrun(
        script, root, case, str(steps), nproc=2, timeout_s=timeout_s)), daemon=True)
    ranks.start()
    mon = None
    deadline = time.monotonic() + timeout_s
    while mon is None and ranks.is_alive() and time.monotonic() < deadline:
        launches = [p for p in root.iterdir() if p.is_dir()] if root.is_dir() else []
        if launches:  # the launch directory; its rank-0 directory follows
            assert len(launches) == 1, launches
            try:
                mon = TrainingMonitor.follow(launches[0], display=False, poll_s=0.1)
            except FileNotFoundError:
                pass
        time.sleep(0.05)
    assert mon is not None, f"no launch directory under {root}: {seen.done and seen.done.output[-3000:]}"
    follower = mon.parts.follower
    while not follower.done.wait(0.1) and time.monotonic() < deadline:
        seen.passes.append((mon.ranks[0]["step"], mon.straggler, html.unescape(mon.parts.header_html())))
        seen.times.append(time.monotonic())
    ranks.join(max(1.0, deadline - time.monotonic()))
    assert seen.done is not None and seen.done.returncode == 0, seen.done and seen.done.output[-3000:]
    seen.live = json.loads(next(line for line in seen.done.output.splitlines() if "LIVE " in line).split("LIVE ", 1)[1])
    assert follower.done.is_set() and mon.status == "finished" and mon.world_size == 2
    return seen


@pytest.mark.parametrize("case", ["input", "compute"])
def test_a_slow_rank_is_named_with_its_cause_within_30_steps(tmp_path, case):
    seen = launch_and_follow(tmp_path, case, steps=50)
    said = seen.verdicts()
    assert said, f"no verdict in {len(seen.passes)} passes"
    step, first, header = said[0]
    assert (first["rank"], first["cause"]) == (1, case), said[0]
    assert step <= 30, f"the verdict came at step {step}"
    assert all(s["rank"] == 1 and s["cause"] == case for _, s, _ in said), said
    excess = [s["excess_s"] for _, s, _ in said]
    assert all(0.6 * SLOW_S < e < 1.6 * SLOW_S for e in excess), excess
    words = "waits" if case == "input" else "more per step in the model's forward"
    assert words in header and "rank 1" in header
    # rank 0's live monitor named the same rank and cause, as soon
    assert seen.live and seen.live[0][0] <= 30, seen.live[:3]
    assert {(r, c) for _, r, c in seen.live} == {(1, case)}, seen.live


def test_a_rank_stuck_before_its_forward_is_seen_stalled_while_it_lasts(tmp_path):
    seen = launch_and_follow(tmp_path, "stalled", steps=16)
    said = seen.verdicts()
    stalled = [p for p in said if p[1]["cause"] == "stalled"]
    assert stalled, f"no stall seen in {len(seen.passes)} passes: {said[:3]}"
    # rank 1 stalls in its 11th step for 25 s: seen after 10 s, for a good part of the rest
    assert all(s["rank"] == 1 for _, s, _ in stalled), stalled
    assert all("rank 1" in h and "has not finished step 11 for" in h for _, _, h in stalled)
    assert seen.span_s("stalled") > 8, f"seen stalled for only {seen.span_s('stalled'):.1f} s"
    assert max(s["excess_s"] for _, s, _ in stalled) > 12
    # and nothing else was said about this launch
    assert [p for p in said if p[1]["cause"] != "stalled"] == []


def test_two_equal_ranks_get_no_verdict_at_any_pass(tmp_path):
    seen = launch_and_follow(tmp_path, "balanced", steps=60)
    assert len(seen.passes) > 10 and seen.passes[-1][0] >= 30, seen.passes[-1:]
    assert seen.verdicts() == [] and seen.live == []
