"""Which rank holds a launch back, and why: the straggler verdict. Pure functions, no I/O.

Under DDP every rank's step lasts as long as the slowest one's (the gradient all-reduce inside
backward waits for it), so step times cannot name the slow rank. What differs is what a rank does
before the all-reduce, its wait for data and its model's forward, and, for a rank that stopped
making progress, how far its heartbeat says it got in the step. The first that applies:

* stopped: a live rank's heartbeat is older than ``stall_s`` = max(10 s, 20 x the median step)
  while another live rank's is fresh (its process may be gone);
* stalled: a rank in "data" or "forward" for longer than ``stall_s`` while every other live rank
  has finished its forward (it waits in the all-reduce) or is at a later step;
* input: over its recent steps (at least 10), a rank whose wait per step is over 20 % of its step
  and more than 5 ms over the median of the others';
* compute: a rank whose forward per step is more than 5 ms and 20 % over the others' median, while
  its wait is not over theirs.

No false alarms on balanced ranks: the input and compute tests must hold over the window and over
each half of it (a hiccup in one bin is not a straggler), against the median of the others.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MIN_STEPS = 10  # fewer recent steps timed on a rank: no input or compute verdict about it
WINDOW_STEPS = 20  # the recent steps judged (more when the bins are coarser: at least two bins)
WAIT_SHARE = 0.20
FORWARD_SHARE = 0.20
MIN_EXCESS_S = 0.005
STALL_MIN_S = 10.0
STALL_STEPS = 20.0
PAST_FORWARD = "after_forward"
BEFORE_FORWARD = ("data", "forward")


@dataclass(frozen=True)
class RankTiming:
    """One rank as the verdict sees it: its data-wait bins, oldest first (``{"time", "wait_s",
    "step_s", "steps", "forward_s"?}``, as data_wait.jsonl holds them) and its heartbeat."""

    rank: int
    host: str | None = None
    bins: Sequence[Mapping[str, Any]] = ()
    heartbeat: Mapping[str, Any] | None = None
    live: bool = True  # still running: a rank that ended stops writing its heartbeat, rightly


@dataclass(frozen=True)
class Straggler:
    rank: int
    host: str | None
    cause: str  # "input", "compute" or "stalled" (a rank that stopped is stalled too)
    excess_s: float  # seconds per step it loses against the median of the others
    text: str

    def as_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "host": self.host, "cause": self.cause, "excess_s": self.excess_s}


@dataclass(frozen=True)
class _Means:
    steps: int
    wait: float  # seconds per step
    step: float
    forward: float | None  # None unless every bin timed the forward


@dataclass(frozen=True)
class _Beat:
    time: float
    phase: str
    phase_since: float
    step: int


def verdict(ranks: Sequence[RankTiming], now: float) -> Straggler | None:
    """The straggler among ``ranks`` at ``now`` (epoch seconds), or None: balanced, too few steps
    timed, or a single rank."""
    if len(ranks) < 2:
        return None
    windows = {r.rank: _windows(r.bins) for r in ranks}
    steps = [w[0].step for w in windows.values() if w is not None]
    stall_s = max(STALL_MIN_S, STALL_STEPS * statistics.median(steps)) if steps else STALL_MIN_S
    return _stopped_or_stalled(ranks, windows, now, stall_s) or _slow(ranks, windows)


def who(rank: int, host: str | None) -> str:
    return f"rank {rank} ({host})" if host else f"rank {rank}"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.0f} ms"


def _stopped_or_stalled(ranks: Sequence[RankTiming], windows: dict[int, Any], now: float,
                        stall_s: float) -> Straggler | None:
    beats = {r.rank: b for r in ranks if r.live and (b := _beat(r.heartbeat)) is not None}
    fresh = {k: b for k, b in beats.items() if now - b.time <= stall_s}
    by_rank = {r.rank: r for r in ranks}

    def others_step(k: int) -> float:
        steps = [w[0].step for j, w in windows.items() if j != k and w is not None]
        return statistics.median(steps) if steps else 0.0

    stopped = [(b.time, k) for k, b in beats.items() if k not in fresh]
    if stopped and fresh:  # all silent: the launch ended or died as a whole, nobody straggles
        t, k = min(stopped)
        ago = now - t
        r = by_rank[k]
        return Straggler(k, r.host, "stalled", max(0.0, ago - others_step(k)),
                         f"{who(k, r.host)} stopped writing {ago:.0f} s ago (its process may have died)")
    stuck = []
    for k, b in fresh.items():
        others = [o for j, o in fresh.items() if j != k]
        if b.phase in BEFORE_FORWARD and now - b.phase_since > stall_s and others and all(
                o.step > b.step or (o.step == b.step and o.phase == PAST_FORWARD) for o in others):
            stuck.append((b.phase_since, k))
    if not stuck:
        return None
    since, k = min(stuck)
    r, b = by_rank[k], fresh[k]
    return Straggler(k, r.host, "stalled", max(0.0, now - since - others_step(k)),
                     f"{who(k, r.host)} has not finished step {b.step + 1} for {now - since:.0f} s; "
                     "the others wait for it")


def _slow(ranks: Sequence[RankTiming], windows: dict[int, Any]) -> Straggler | None:
    """The input straggler, else the compute one: the rank that loses the most per step."""
    inputs, computes = [], []
    for r in ranks:
        mine = windows[r.rank]
        others = [w[0] for k, w in windows.items() if k != r.rank and w is not None]
        if mine is None or not others:
            continue
        wait = statistics.median(o.wait for o in others)
        if all(m.wait > WAIT_SHARE * m.step and m.wait - wait > MIN_EXCESS_S for m in mine):
            inputs.append((mine[0].wait - wait, r, wait))
            continue
        forwards = [o.forward for o in others if o.forward is not None]
        if not forwards or mine[0].wait - wait > MIN_EXCESS_S:
            continue
        fwd = statistics.median(forwards)
        if all(m.forward is not None and m.forward - fwd > max(MIN_EXCESS_S, FORWARD_SHARE * fwd) for m in mine):
            computes.append((mine[0].forward - fwd, r, fwd))
    if inputs:
        excess, r, wait = max(inputs, key=lambda c: c[0])
        return Straggler(r.rank, r.host, "input", excess,
                         f"{who(r.rank, r.host)} waits {_ms(wait + excess)} per step for data, the others "
                         f"{_ms(wait)}: its input pipeline is the bottleneck (DataLoader workers, storage, "
                         "preprocessing)")
    if computes:
        excess, r, _ = max(computes, key=lambda c: c[0])
        return Straggler(r.rank, r.host, "compute", excess,
                         f"{who(r.rank, r.host)} spends {_ms(excess)} more per step in the model's forward: "
                         "check its GPU (clocks, throttling — shown on its GPU chart) or an uneven share of the data")
    return None


def _windows(bins: Sequence[Mapping[str, Any]]) -> tuple[_Means, _Means, _Means] | None:
    """(the whole window, its recent half, its older half) over the last WINDOW_STEPS steps (two
    bins at least), or None with fewer than MIN_STEPS steps or a single bin."""
    picked: list[Mapping[str, Any]] = []  # newest first
    n = 0
    for b in reversed(bins):
        if not _sound(b):
            continue
        picked.append(b)
        n += b["steps"]
        if n >= WINDOW_STEPS and len(picked) >= 2:
            break
    if n < MIN_STEPS or len(picked) < 2:
        return None
    recent, count = [], 0
    for b in picked[:-1]:  # the older half keeps one bin at least
        recent.append(b)
        count += b["steps"]
        if 2 * count >= n:
            break
    return _means(picked), _means(recent), _means(picked[len(recent):])


def _means(bins: Sequence[Mapping[str, Any]]) -> _Means:
    steps = sum(b["steps"] for b in bins)
    forwards = [b.get("forward_s") for b in bins]
    forward = sum(forwards) / steps if all(_number(f) for f in forwards) else None
    return _Means(steps, sum(b["wait_s"] for b in bins) / steps, sum(b["step_s"] for b in bins) / steps, forward)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def _sound(b: Any) -> bool:
    """A bin as data_wait.jsonl's reader passes it (a hand-made one may not be)."""
    steps = b.get("steps") if isinstance(b, Mapping) else None
    return type(steps) is int and steps >= 1 and _number(b.get("wait_s")) and _number(b.get("step_s"))


def _beat(hb: Mapping[str, Any] | None) -> _Beat | None:
    if not isinstance(hb, Mapping):
        return None
    t, phase, since, step = hb.get("time"), hb.get("phase"), hb.get("phase_since"), hb.get("step")
    if not (_number(t) and isinstance(phase, str) and type(step) is int and step >= 0):
        return None
    return _Beat(float(t), phase, float(since) if _number(since) else float(t), step)
