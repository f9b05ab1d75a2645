"""Bounded history, since() queries and peak-keeping downsampling."""
from __future__ import annotations

import math
import random

import numpy as np
import pytest

from gpu_widgets.metrics.throttle import BITS, mask_from_names
from gpu_widgets.store.downsample import bucket_starts, downsample
from gpu_widgets.store.history import READ_MARGIN_S, History, capacity_for

IDLE, POWER_CAP = BITS["gpu_idle"], BITS["sw_power_cap"]


def snap(t: float, util: float | None, lost: bool = False, reasons=("gpu_idle",)) -> dict:
    dev = {"index": 0, "uuid": "GPU-a", "name": "A", "status": "lost" if lost else "ok",
           "utilization_gpu_percent": None if lost else util, "temperature_c": 40.0,
           "throttle_reasons": None if lost else mask_from_names(list(reasons))}
    return {"timestamp": t, "devices": [dev]}


def reference_downsample(timestamps, columns, max_points, bitmask_columns=frozenset()):
    """The min/max buckets written plainly over lists (None = null): the oracle for the package's one
    NumPy implementation."""
    n = len(timestamps)
    if n <= max_points:
        return list(timestamps), {k: list(v) for k, v in columns.items()}
    k = min(max_points // 2, n)
    out_t, out = [], {key: [] for key in columns}
    for b in range(k):
        lo, hi = n * b // k, n * (b + 1) // k
        out_t += [timestamps[lo], timestamps[hi - 1]]
        for key, values in columns.items():
            part = [(i, v) for i, v in enumerate(values[lo:hi], lo) if v is not None]
            if key in bitmask_columns:
                mask = None
                for _, v in part:
                    mask = (mask or 0) | int(v)
                out[key] += [mask, mask]
            elif not part:
                out[key] += [None, None]
            else:
                i_min = min(part, key=lambda p: (p[1], p[0]))[0]
                i_max = min(part, key=lambda p: (-p[1], p[0]))[0]
                out[key] += [values[min(i_min, i_max)], values[max(i_min, i_max)]]
    return out_t, out


def arrays(cols: dict) -> dict:
    return {k: np.array([np.nan if v is None else v for v in vals], dtype=float) for k, vals in cols.items()}


def test_capacity_bounds_the_history_however_long_it_runs():
    h = History(window_s=60, interval_s=1.0)
    assert h.capacity == 61 + READ_MARGIN_S  # the window, plus a margin for readers (below)
    h.append(snap(-1.0, 0.0))
    held = h.bytes_held
    for i in range(10_000):
        h.append(snap(float(i), i % 100))
    assert len(h) == h.capacity
    assert h.bytes_held == held  # columns allocated once
    data = h.since(None)
    assert data["timestamps"][0] == 10_000 - 60 and data["timestamps"][-1] == 9999  # the last 60 s
    assert data["devices"][0]["utilization_gpu_percent"][-1] == 9999 % 100


def test_since_returns_only_newer_samples_and_nulls_for_missing_values():
    h = History(window_s=100, interval_s=1.0)
    for i in range(10):
        h.append(snap(1000.0 + i, None if i == 7 else float(i), lost=(i == 8)))
    data = h.since(1005.0)
    assert data["timestamps"] == [1006.0, 1007.0, 1008.0, 1009.0]
    dev = data["devices"][0]
    assert dev["utilization_gpu_percent"] == [6.0, None, None, 9.0]
    assert dev["lost"] == [False, False, True, False]
    assert dev["throttle_reasons"] == [IDLE, IDLE, None, IDLE]  # NVML's bitmask, as the samples had it
    assert h.since(1009.0)["timestamps"] == []
    assert h.since(0.0)["timestamps"][0] == 1000.0


def test_since_drops_samples_older_than_the_window():
    h = History(window_s=10, interval_s=1.0)  # capacity 11, but the interval may shrink later
    for t in (0.0, 1.0, 50.0, 51.0):
        h.append(snap(t, 1.0))
    assert h.since(None)["timestamps"] == [50.0, 51.0]


def test_history_downsamples_to_max_points_and_keeps_a_one_sample_spike():
    h = History(window_s=3600, interval_s=1.0)
    for i in range(3600):
        h.append(snap(float(i), 100.0 if i == 1234 else 20.0 + (i % 7),
                      reasons=("sw_power_cap",) if i == 2000 else ("gpu_idle",)))
    data = h.since(None, max_points=300)
    dev = data["devices"][0]
    assert len(data["timestamps"]) <= 300
    assert len(dev["utilization_gpu_percent"]) == len(data["timestamps"])
    assert max(dev["utilization_gpu_percent"]) == 100.0
    assert min(dev["utilization_gpu_percent"]) == 20.0
    assert any(m and m & POWER_CAP for m in dev["throttle_reasons"])


def test_capacity_rejects_bad_settings():
    with pytest.raises(ValueError, match="must be > 0"):
        capacity_for(0, 1)
    with pytest.raises(ValueError, match="must be > 0"):
        capacity_for(10, -1)


def test_buckets_cover_everything_once_with_sizes_differing_by_at_most_one():
    for n, b in [(10, 3), (1000, 150), (7, 7), (5, 10)]:
        starts = bucket_starts(n, b).tolist()
        sizes = [hi - lo for lo, hi in zip(starts, starts[1:] + [n])]
        assert starts[0] == 0 and len(starts) == min(n, b)
        assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1 and sum(sizes) == n


def test_downsample_keeps_every_global_extreme_and_time_order():
    rng = random.Random(4)
    n = 10_000
    t = [float(i) for i in range(n)]
    cols = {"a": [rng.random() for _ in range(n)], "b": [math.sin(i / 50) for i in range(n)]}
    cols["a"][5555] = 9.0
    cols["a"][77] = -9.0
    out_t, out = downsample(t, arrays(cols), 200)
    assert len(out_t) <= 200 and out_t == sorted(out_t)
    assert max(out["a"]) == 9.0 and min(out["a"]) == -9.0
    assert max(out["b"]) == max(cols["b"]) and min(out["b"]) == min(cols["b"])


def test_downsample_handles_nulls_and_short_input():
    t = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    out_t, out = downsample(t, arrays({"x": [None, None, None, None, 1.0, 2.0]}), 4)
    assert out["x"][:2] == [None, None] and 2.0 in out["x"]
    same_t, same = downsample(t[:2], arrays({"x": [1.0, 2.0]}), 10)
    assert same_t == [0.0, 1.0] and same == {"x": [1.0, 2.0]}
    with pytest.raises(ValueError, match="at least 2"):
        downsample(t, {}, 1)


def test_the_downsampler_gives_the_plain_reference_answer():
    rng = random.Random(11)
    for n, max_points in [(300, 10), (1000, 600), (3601, 600), (257, 256), (5000, 3)]:
        t = [float(i) for i in range(n)]
        cols = {
            "x": [None if rng.random() < 0.1 else rng.random() * 100 for _ in range(n)],
            "gap": [None] * (n // 2) + [float(i % 9) for i in range(n - n // 2)],
            "mask": [float(rng.choice([0, 1, 4, 5])) if rng.random() > 0.2 else None for _ in range(n)],
        }
        expected = reference_downsample(t, cols, max_points, frozenset({"mask"}))
        got = downsample(np.array(t), arrays(cols), max_points, frozenset({"mask"}))
        assert got[0] == expected[0]
        for key in cols:
            assert got[1][key] == expected[1][key], (n, max_points, key)


def two_gpus(t: float, rng: random.Random) -> dict:
    return {"timestamp": t, "devices": [
        {"index": i, "uuid": f"GPU-{i}", "name": "A", "status": "ok",
         "utilization_gpu_percent": None if rng.random() < 0.1 else rng.random() * 100,
         "throttle_reasons": rng.choice([0, IDLE, POWER_CAP | BITS["hw_slowdown"]])} for i in range(2)]}


def test_a_big_read_copied_device_by_device_equals_the_list_downsampler_across_the_ring_wrap():
    rng = random.Random(3)
    h = History(window_s=100, interval_s=0.1)
    for k in range(h.capacity + 437):  # the ring has wrapped: the window starts mid-array
        h.append(two_gpus(k * 0.1, rng))
    got = h.since(20.0, max_points=300)
    ref_all = h.since(20.0)  # no max_points: plain lists, nothing downsampled
    t = ref_all["timestamps"]
    assert len(t) > 300 and got["timestamps"] == reference_downsample(t, {}, 300)[0]
    for dev, full in zip(got["devices"], ref_all["devices"]):
        _, cols = reference_downsample(t, {"u": full["utilization_gpu_percent"], "m": full["throttle_reasons"]},
                                       300, frozenset({"m"}))
        assert dev["utilization_gpu_percent"] == cols["u"]
        assert dev["throttle_reasons"] == cols["m"] and len(cols["m"]) == len(got["timestamps"])


def test_a_reader_slower_than_the_margin_gets_nulls_never_newer_values():
    rng = random.Random(5)
    h = History(window_s=60, interval_s=0.1)
    for k in range(h.capacity):
        h.append(two_gpus(k * 0.1, rng))
    expected = h.since(None)
    n = len(expected["timestamps"])
    assert n >= 256  # big enough to be copied device by device
    assert h.capacity - n >= READ_MARGIN_S / 0.1  # the margin a slow reader has
    times, devices = h.since_lazily(None, max_points=10_000)  # nothing to downsample: values as held
    first = next(devices)  # GPU 0 is copied now
    # then the sampler appends more than the ring holds beyond this answer before GPU 1 is copied
    gone = 5
    for k in range(h.capacity - n + gone):
        h.append({"timestamp": 1e6 + k, "devices": [dict(d, utilization_gpu_percent=-1.0)
                                                     for d in two_gpus(0, rng)["devices"]]})
    second = next(devices)
    assert times == expected["timestamps"] and first == expected["devices"][0]
    util = second["utilization_gpu_percent"]
    assert -1.0 not in util
    assert util[:gone] == [None] * gone and util[gone:] == expected["devices"][1]["utilization_gpu_percent"][gone:]


def test_a_few_samples_asked_for_fewer_points_are_bucketed_like_a_big_read():
    h = History(window_s=100, interval_s=1.0)
    masks = [IDLE, 0, POWER_CAP, None, 1 << 40, IDLE | POWER_CAP] * 10
    for i, m in enumerate(masks):
        h.append({"timestamp": float(i), "devices": [
            {"index": 0, "utilization_gpu_percent": float((i * 37) % 101), "throttle_reasons": m}]})
    got = h.since(None, max_points=10)
    full = h.since(None)
    assert full["devices"][0]["throttle_reasons"] == masks  # unknown bits are kept, as ints
    t, cols = reference_downsample(full["timestamps"], {"u": full["devices"][0]["utilization_gpu_percent"],
                                                        "m": masks}, 10, frozenset({"m"}))
    assert got["timestamps"] == t and got["devices"][0]["utilization_gpu_percent"] == cols["u"]
    assert got["devices"][0]["throttle_reasons"] == cols["m"]
    assert all(type(m) is int for m in got["devices"][0]["throttle_reasons"] if m is not None)


def test_a_mask_beyond_53_bits_keeps_the_bits_a_float_holds():
    h = History(window_s=10, interval_s=1.0)
    h.append({"timestamp": 1.0, "devices": [{"index": 0, "throttle_reasons": (1 << 60) | POWER_CAP}]})
    assert h.since(None)["devices"][0]["throttle_reasons"] == [POWER_CAP]


def test_masks_come_back_as_ints_whether_or_not_a_big_read_is_bucketed():
    h = History(window_s=1000, interval_s=1.0)
    for i in range(300):  # a big read (copied with NumPy) that needs no bucketing at 5000 points
        h.append({"timestamp": float(i), "devices": [{"index": 0, "throttle_reasons": POWER_CAP if i % 2 else None}]})
    for max_points in (5000, 10):
        masks = h.since(None, max_points=max_points)["devices"][0]["throttle_reasons"]
        assert {type(m) for m in masks} <= {int, type(None)} and POWER_CAP in masks, max_points


@pytest.mark.parametrize("wrapped", [False, True])
def test_stats_between_reduces_a_range_as_its_samples_say_across_the_ring_edge(wrapped):
    # Given a history whose ring has (or has not) wrapped, with gaps, a lost sample and a throttled one
    h = History(window_s=50, interval_s=1.0)
    rng = random.Random(5)
    total = 200 if wrapped else 40
    kept: list[tuple[float, float | None, bool, tuple[str, ...]]] = []
    for i in range(total):
        util = None if i % 7 == 3 else float(rng.randint(0, 100))
        lost, reasons = i == total - 10, (("sw_power_cap",) if i == total - 12 else ("gpu_idle",))
        s = snap(float(i), util, lost=lost, reasons=reasons)
        s["devices"][0]["energy_j"] = None if i % 9 == 0 else 10.0 * i
        h.append(s)
        kept.append((float(i), util, lost, reasons))
    t0, t1 = total - 30.5, total - 5.0
    n, devices, oldest = h.stats_between(t0, t1)
    # Then each figure is what the samples in [t0, t1] give, computed plainly
    inside = [k for k in kept if t0 <= k[0] <= t1]
    utils = [u for _, u, lost, _ in inside if u is not None and not lost]
    energies = [10.0 * t for t, _, lost, _ in inside if int(t) % 9 and not lost]
    d = devices[0]
    assert n == len(inside) and oldest == (total - len(h)) * 1.0
    assert d["util_mean"] == pytest.approx(sum(utils) / len(utils)) and d["util_max"] == max(utils)
    assert (d["energy_first"], d["energy_last"]) == (energies[0], energies[-1])
    assert d["throttle_mask"] & POWER_CAP and d["lost"] is True and math.isnan(d["sm_mean"])
    # A range with no sample: none counted; GPUs not asked for: left out
    assert h.stats_between(total + 10.0, total + 20.0)[0] == 0
    assert h.stats_between(t0, t1, indices={1})[1] == {}
    # A cell shorter than the interval: the newest sample before it stands for its start, if recent
    short = total - 20.5
    assert h.stats_between(short, short + 0.1)[0] == 0
    assert h.stats_between(short, short + 0.1, lookback_s=0.4)[0] == 0
    assert h.stats_between(short, short + 0.1, lookback_s=2.5)[0] == 1
    # and only that one: not every sample in the lookback (its energy would be the cell's)
    assert h.stats_between(t0, t1, lookback_s=2.5)[0] == len(inside) + 1


@pytest.mark.parametrize("max_points", [None, 4000, 40], ids=["all", "plain-lists", "downsampled"])
def test_until_gives_only_the_stretch_up_to_it_and_never_a_newer_sample(max_points):
    h = History(window_s=1000, interval_s=1.0)
    for t in range(3000):  # the ring has wrapped
        h.append(snap(1000.0 + t, float(t % 97)))
    since, until = 3500.0, 3800.0
    times, devices = h.since_lazily(since, max_points, until=until)
    values = list(devices)[0]["utilization_gpu_percent"]
    assert times and all(since < t <= until for t in times) and len(values) == len(times)
    whole_times, whole_devices = h.since_lazily(since, None)
    whole = dict(zip(whole_times, list(whole_devices)[0]["utilization_gpu_percent"]))
    if max_points == 40:
        assert len(times) <= 40
        stretch = [v for t, v in whole.items() if t <= until]
        assert max(values) == max(stretch) and min(values) == min(stretch)  # peaks kept
    else:
        assert times == [t for t in whole_times if t <= until]
        assert values == [whole[t] for t in times]
    # until before the window, or no sample in (since, until]: nothing
    assert h.since_lazily(0.0, max_points, until=10.0)[0] == []
    assert h.since_lazily(3500.2, max_points, until=3500.7)[0] == []
