"""From the overview query's answer to the API's overview: one row per host, sorted by name.

Rows are arrays under ``host_columns`` (columnar). Every host's row is kept here; each request
gets one page of them (pages.py), while the totals count every host and ``unlisted_hosts`` says
how many hosts no page can list (an unusable name) and why. A host is stale when Prometheus no longer holds it current (a failed scrape writes staleness
markers) or when its newest sample is older than two of its scrape intervals.
"""
from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from .hostnames import MAX_HOST_CHARS, host_problem
from .promql import FB_USED, HOST, POWER, SANE, STAT, TEMP, UTIL

HOST_COLUMNS = ("hostname", "current", "stale", "age_s", "gpu_count", "busy_gpus", "free_gpus",
                "utilization_mean_percent", "utilization_max_percent", "memory_used_gib",
                "memory_total_gib", "temperature_max_c", "power_w", "simulated")
STALE_AFTER_INTERVALS = 2
MIB_PER_GIB = 1024
MAX_GPUS_PER_HOST = 100_000  # a count past this is not a count of GPUs
# stat of the overview query -> the metric whose plausible range bounds it (per GPU)
SANE_STAT = {"util_mean": UTIL, "util_max": UTIL, "temp_max": TEMP}

Stats = dict[str, dict[str, Any]]  # host -> stat -> value (or, for "target", a set of (job, instance))


def number(text: Any) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def r1(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def split(result: Iterable[Mapping[str, Any]]) -> tuple[float | None, Stats]:
    """(Prometheus's evaluation time, host -> stat -> value) from a union's vector."""
    stats: Stats = defaultdict(dict)
    evaluated = None
    for sample in result:
        labels, (t, raw) = sample.get("metric") or {}, sample.get("value") or (None, None)
        host, stat = labels.get(HOST), labels.get(STAT)
        if host is None or stat is None:
            continue
        evaluated = number(t) if evaluated is None else evaluated
        if stat == "target":
            stats[host].setdefault("target", set()).add((labels.get("job", ""), labels.get("instance", "")))
        else:
            stats[host][stat] = number(raw)
    return evaluated, stats


def gone_hosts(result: Iterable[Mapping[str, Any]]) -> list[str]:
    """Hosts with GPUs in the lookback but no current sample: the ones whose last sample needs dating."""
    listed, live = set(), set()
    for sample in result:
        labels = sample.get("metric") or {}
        stat = labels.get(STAT)
        if stat == "gpus":
            listed.add(labels.get(HOST))
        elif stat == "age_live":
            live.add(labels.get(HOST))
    return sorted(h for h in listed - live if h is not None)


def host_interval(stats: Mapping[str, Any], intervals: Mapping[tuple[str, str], float]) -> float | None:
    """The longest scrape interval among the targets a host's series come from."""
    known = [intervals[t] for t in stats.get("target", ()) if t in intervals]
    return max(known) if known else None


def freshness(stats: Mapping[str, Any], interval_s: float | None) -> tuple[bool, float | None]:
    """(stale, age in seconds of the host's newest sample)."""
    live = stats.get("age_live")
    last = stats["age_fine"] if stats.get("age_fine") is not None else stats.get("age_coarse")
    if live is None:  # gone from the instant query: Prometheus marked its series stale, or 5 min passed
        return True, None if last is None else max(0.0, last)
    age = max(0.0, live)
    return (interval_s is not None and age > STALE_AFTER_INTERVALS * interval_s), age


def typical_interval(per_host: Iterable[float | None], intervals: Mapping[tuple[str, str], float]) -> float | None:
    known = [i for i in per_host if i is not None] or list(intervals.values())
    return float(statistics.median(known)) if known else None


def _count(value: float | None) -> int:
    return 0 if value is None or not 0 <= value <= MAX_GPUS_PER_HOST else int(value)


def _sane(stat: str, value: float | None, gpus: int) -> float | None:
    """A host's aggregate within what its GPUs' plausible readings can add up to; else unknown.
    Prometheus filters each GPU's readings (promql.SANE): this guards against a look-alike."""
    if value is None:
        return None
    if stat in SANE_STAT:
        low, high = SANE[SANE_STAT[stat]]
    elif stat == "power_w":
        low, high = 0, SANE[POWER][1] * max(gpus, 1)
    else:  # memory, in MiB
        low, high = 0, SANE[FB_USED][1] * max(gpus, 1)
    return value if low <= value <= high else None


def build(result: Iterable[Mapping[str, Any]], intervals: Mapping[tuple[str, str], float],
          current_host: str) -> dict[str, Any]:
    evaluated, stats = split(result)
    rows, per_host, unusable = [], [], 0
    totals = {"hosts": 0, "gpus": 0, "stale_hosts": 0, "busy_gpus": 0, "free_gpus": 0, "simulated_hosts": 0}
    for host in sorted(stats):
        s = stats[host]
        if s.get("gpus") is None:
            continue  # only a date, no GPU values: not a host of the view
        interval = host_interval(s, intervals)
        per_host.append(interval)
        stale, age = freshness(s, interval)
        gpus = _count(s.get("gpus"))
        busy, free = min(_count(s.get("busy")), gpus), min(_count(s.get("free")), gpus)
        v = {stat: _sane(stat, s.get(stat), gpus) for stat in ("util_mean", "util_max", "temp_max", "power_w",
                                                               "mem_used_mib", "mem_total_mib")}
        used, total = v["mem_used_mib"], v["mem_total_mib"]
        simulated = bool(s.get("simulated"))  # absent: not gpu-widgets' simulated backend (dcgm-exporter, real GPUs)
        totals["hosts"] += 1
        totals["gpus"] += gpus
        totals["simulated_hosts"] += simulated
        if stale:
            totals["stale_hosts"] += 1
        else:  # a stale host's GPUs are neither known busy nor known free now
            totals["busy_gpus"] += busy
            totals["free_gpus"] += free
        if host_problem(host) is not None:
            unusable += 1  # counted above, but a row would name a host its detail cannot be asked for
            continue
        rows.append([host, host == current_host, stale, r1(age), gpus, busy, free, r1(v["util_mean"]),
                     r1(v["util_max"]), r1(None if used is None else used / MIB_PER_GIB),
                     r1(None if total is None else total / MIB_PER_GIB), r1(v["temp_max"]), r1(v["power_w"]),
                     simulated])
    return {"queried_at": evaluated, "scrape_interval_s": r1(typical_interval(per_host, intervals)),
            "host_columns": list(HOST_COLUMNS), "hosts": rows, "totals": totals,
            "unlisted_hosts": unusable, "unlisted_reason": _unlisted_reason(unusable)}


def _unlisted_reason(unusable: int) -> str | None:
    if not unusable:
        return None
    return (f"Not listed: {unusable} host{'s' * (unusable != 1)} with an unusable name (empty, over "
            f"{MAX_HOST_CHARS} characters, or not Unicode text)")
