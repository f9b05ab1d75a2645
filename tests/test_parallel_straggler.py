"""The straggler verdict (parallel/straggler.py) on synthetic ranks: each cause and its text, the
thresholds it must not cross on balanced noisy ranks, the step minimum, the median of several."""
from __future__ import annotations

import random

import pytest

from gpu_widgets.parallel.straggler import RankTiming, verdict

NOW = 1_000_000.0


def bins(n_steps, wait, step=0.1, forward=None, per_bin=5, jitter=0.0, rng=None, t0=NOW - 100):
    """Data-wait bins of ``per_bin`` steps each: ``wait``/``step``/``forward`` seconds per step,
    each step drawn with +-``jitter`` (relative) when ``rng`` is given."""
    out, t = [], t0
    for first in range(0, n_steps, per_bin):
        k = min(per_bin, n_steps - first)
        noisy = [(rng.uniform(1 - jitter, 1 + jitter) if rng else 1.0) for _ in range(3 * k)]
        w = sum(wait * noisy[i] for i in range(k))
        s = max(w, sum(step * noisy[k + i] for i in range(k)))
        row = {"time": t, "wait_s": w, "step_s": s, "steps": k}
        if forward is not None:
            row["forward_s"] = sum(forward * noisy[2 * k + i] for i in range(k))
        out.append(row)
        t += s
    return out


def beat(step, phase="after_forward", since=NOW - 0.05, at=NOW - 0.5):
    return {"time": at, "pid": 1, "step": step, "phase": phase, "phase_since": since, "step_started": since}


def test_a_rank_that_waits_for_data_is_the_input_straggler():
    got = verdict([RankTiming(0, "node-a", bins(20, 0.001)), RankTiming(1, "node-b", bins(20, 0.052))], NOW)
    assert got.cause == "input" and (got.rank, got.host) == (1, "node-b")
    assert got.excess_s == pytest.approx(0.051)
    assert got.text == ("rank 1 (node-b) waits 52 ms per step for data, the others 1 ms: its input pipeline is "
                        "the bottleneck (DataLoader workers, storage, preprocessing)")
    assert got.as_dict() == {"rank": 1, "host": "node-b", "cause": "input", "excess_s": got.excess_s}


def test_a_wait_under_a_fifth_of_the_step_or_under_5_ms_more_is_no_verdict():
    # 15 ms more than the other, but 15 % of a 100 ms step: the step is the model's
    assert verdict([RankTiming(0, None, bins(20, 0.0)), RankTiming(1, None, bins(20, 0.015))], NOW) is None
    # a quarter of a 10 ms step, but only 2.5 ms more than the other
    assert verdict([RankTiming(0, None, bins(20, 0.0, 0.01)), RankTiming(1, None, bins(20, 0.0025, 0.01))],
                   NOW) is None


def test_a_rank_slower_in_its_forward_is_the_compute_straggler():
    ranks = [RankTiming(0, "a", bins(20, 0.001, forward=0.030)), RankTiming(1, "b", bins(20, 0.001, forward=0.080))]
    got = verdict(ranks, NOW)
    assert (got.cause, got.rank) == ("compute", 1) and got.excess_s == pytest.approx(0.050)
    assert got.text == ("rank 1 (b) spends 50 ms more per step in the model's forward: check its GPU (clocks, "
                        "throttling — shown on its GPU chart) or an uneven share of the data")
    # under 20 % more (a 100 ms forward against 90 ms): balanced enough
    assert verdict([RankTiming(0, "a", bins(20, 0.001, forward=0.090)),
                    RankTiming(1, "b", bins(20, 0.001, forward=0.100))], NOW) is None
    # without forward times (no model given) there is nothing to compare
    assert verdict([RankTiming(0, "a", bins(20, 0.001)), RankTiming(1, "b", bins(20, 0.001, forward=0.08))],
                   NOW) is None


def test_a_slow_input_is_named_before_a_slow_forward():
    ranks = [RankTiming(0, None, bins(20, 0.001, forward=0.03)), RankTiming(1, None, bins(20, 0.05, forward=0.09))]
    assert verdict(ranks, NOW).cause == "input"


def test_a_rank_stuck_before_its_forward_while_the_others_wait_is_stalled():
    ranks = [RankTiming(0, "node-a", bins(20, 0.001), beat(11)),
             RankTiming(1, "node-b", bins(20, 0.001), beat(11, "data", since=NOW - 41))]
    got = verdict(ranks, NOW)
    assert (got.cause, got.rank) == ("stalled", 1)
    assert got.text == "rank 1 (node-b) has not finished step 12 for 41 s; the others wait for it"
    assert got.excess_s == pytest.approx(41 - 0.1)
    # under max(10 s, 20 x the median step): not yet
    ranks[1] = RankTiming(1, "node-b", bins(20, 0.001), beat(11, "forward", since=NOW - 9))
    assert verdict(ranks, NOW) is None
    # the others are not waiting for it (rank 0 is itself before its forward): no verdict
    ranks = [RankTiming(0, "a", bins(20, 0.001), beat(11, "data", since=NOW - 30)),
             RankTiming(1, "b", bins(20, 0.001), beat(11, "data", since=NOW - 41))]
    assert verdict(ranks, NOW) is None


def test_the_stall_limit_grows_with_the_step_time():
    slow = bins(20, 0.01, step=2.0)  # 2 s steps: 40 s before a rank is stalled
    ranks = [RankTiming(0, None, slow, beat(3)), RankTiming(1, None, slow, beat(3, "forward", since=NOW - 30))]
    assert verdict(ranks, NOW) is None
    ranks[1] = RankTiming(1, None, slow, beat(3, "forward", since=NOW - 45))
    assert verdict(ranks, NOW).cause == "stalled"


def test_a_rank_whose_heartbeat_went_stale_stopped():
    ranks = [RankTiming(0, None, bins(20, 0.001), beat(30)),
             RankTiming(1, "node-b", bins(20, 0.001), beat(12, "idle", at=NOW - 41))]
    got = verdict(ranks, NOW)
    assert (got.cause, got.rank) == ("stalled", 1)
    assert got.text == "rank 1 (node-b) stopped writing 41 s ago (its process may have died)"
    # every heartbeat silent: the launch as a whole ended; ranks that ended say nothing either
    ranks[0] = RankTiming(0, None, bins(20, 0.001), beat(30, at=NOW - 60))
    assert verdict(ranks, NOW) is None
    ranks = [RankTiming(0, None, bins(20, 0.001), beat(30)),
             RankTiming(1, None, bins(20, 0.001), beat(12, at=NOW - 41), live=False)]
    assert verdict(ranks, NOW) is None


@pytest.mark.parametrize("wait", [0.001, 0.030])
def test_balanced_noisy_ranks_get_no_verdict_over_60_steps(wait):
    rng = random.Random(25)
    a = bins(60, wait, forward=0.04, per_bin=2, jitter=0.3, rng=rng)
    b = bins(60, wait, forward=0.04, per_bin=2, jitter=0.3, rng=rng)
    said = [verdict([RankTiming(0, None, a[:i]), RankTiming(1, None, b[:i])], NOW) for i in range(1, len(a) + 1)]
    assert said == [None] * len(a)


def test_one_slow_bin_is_not_a_straggler():
    a, b = bins(20, 0.001, step=0.02, per_bin=2), bins(20, 0.001, step=0.02, per_bin=2)
    b[-1] = {**b[-1], "wait_s": 0.2, "step_s": 0.24}  # one hiccup: over the 20 steps, 11 ms per step and 36 %
    assert verdict([RankTiming(0, None, a), RankTiming(1, None, b)], NOW) is None
    b[-2] = b[-3] = b[-4] = b[-5] = b[-6] = b[-1]  # in both halves of the window: a straggler
    assert verdict([RankTiming(0, None, a), RankTiming(1, None, b)], NOW).cause == "input"


def test_ten_steps_are_needed_and_enough():
    few = [RankTiming(0, None, bins(9, 0.001, per_bin=1)), RankTiming(1, None, bins(9, 0.05, per_bin=1))]
    assert verdict(few, NOW) is None
    ten = [RankTiming(0, None, bins(10, 0.001, per_bin=1)), RankTiming(1, None, bins(10, 0.05, per_bin=1))]
    assert verdict(ten, NOW).cause == "input"
    # ten steps in a single bin are one measurement, not a trend
    one = [RankTiming(0, None, bins(10, 0.001, per_bin=10)), RankTiming(1, None, bins(10, 0.05, per_bin=10))]
    assert verdict(one, NOW) is None


def test_the_imbalance_is_seen_within_30_steps_of_its_start():
    rng = random.Random(7)
    a = bins(100, 0.002, per_bin=2, jitter=0.3, rng=rng)
    b = bins(40, 0.002, per_bin=2, jitter=0.3, rng=rng) + bins(60, 0.05, per_bin=2, jitter=0.3, rng=rng)
    first = next(i for i in range(1, len(a) + 1)
                 if verdict([RankTiming(0, None, a[:i]), RankTiming(1, None, b[:i])], NOW) is not None)
    assert 40 < 2 * first <= 40 + 30


def test_with_several_ranks_the_others_median_is_the_measure():
    ranks = [RankTiming(r, f"h{r}", bins(20, w)) for r, w in enumerate([0.001, 0.002, 0.060, 0.003])]
    got = verdict(ranks, NOW)
    assert (got.rank, got.cause) == (2, "input") and got.excess_s == pytest.approx(0.060 - 0.002)
    # one fast outlier among the others does not make a normal rank look slow
    ranks = [RankTiming(r, None, bins(20, w)) for r, w in enumerate([0.030, 0.031, 0.0, 0.030, 0.029])]
    assert verdict(ranks, NOW) is None


def test_a_single_rank_or_none_gets_no_verdict():
    assert verdict([RankTiming(0, None, bins(50, 0.09), beat(3, "data", since=NOW - 100))], NOW) is None
    assert verdict([], NOW) is None


def test_odd_bins_and_heartbeats_are_passed_over():
    junk = [{"steps": "5"}, {"steps": 3, "wait_s": float("nan"), "step_s": 1.0}, "not a bin", {"steps": True}]
    ranks = [RankTiming(0, None, junk + bins(20, 0.001), {"time": "now"}),
             RankTiming(1, None, bins(20, 0.05) + junk, {"step": -1, "time": NOW, "phase": "data"})]
    assert verdict(ranks, NOW).cause == "input"
