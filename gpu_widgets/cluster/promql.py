"""The PromQL of the cluster view, over dcgm-exporter's default metric names and labels only.

One overview query and one detail query (plus one range query for a host's history) per
refresh: each is a union (``or``) of parts told apart by a ``gw_stat`` label, so a refresh costs
one round trip however many parts it has. Aggregation happens in Prometheus, so 500 hosts x 8
GPUs come back as a few thousand small samples, not one series per GPU and metric.
"""
from __future__ import annotations

from collections.abc import Callable

# dcgm-exporter's names (and ours, helper A's export uses the same): memory in MiB, power in W.
UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
TEMP = "DCGM_FI_DEV_GPU_TEMP"
POWER = "DCGM_FI_DEV_POWER_USAGE"
# gpu-widgets' own export says whether its GPUs are simulated; dcgm-exporter has no such series.
INFO = "gpu_widgets_info"
HOST = "Hostname"
# dcgm-exporter 3.3.6+ (NVIDIA/dcgm-exporter PR #655) writes its host as "hostname": read as HOST.
NEW_HOST = "hostname"
GPU_KEY = "gw_gpu"  # our own label: one GPU's identity (its UUID, else its index)
STAT = "gw_stat"  # our own label on each part of a union; no exporter writes it

# Plausible readings; the others are unknown (null), not counted (a negative memory is not "free").
MAX_GPU_MEMORY_MIB = 1 << 30  # 1 PiB: far past any GPU, short of overflowing once scaled to bytes
SANE = {UTIL: (0, 100), TEMP: (-50, 200), FB_USED: (0, MAX_GPU_MEMORY_MIB), FB_FREE: (0, MAX_GPU_MEMORY_MIB),
        POWER: (0, 100_000)}

# A host that stopped reporting stays listed (as stale) this long after its last sample.
LOOKBACK_S = 600
# busy: utilization at or above this; free: below it and memory used below FREE_MEMORY_FRACTION.
BUSY_UTIL_PERCENT = 10
FREE_MEMORY_FRACTION = 0.1
# The history of a host's detail: about 10 minutes in at most this many points.
HISTORY_POINTS = 40
HISTORY_SPAN_S = 600
# A stopped host's last sample is dated by two subqueries, asked only for the hosts that are gone:
# fine steps over the last AGE_FINE_S (half a scrape interval, so that a step falls between a
# host's last sample and the staleness marker one interval later), coarse ones over the lookback.
AGE_FINE_S = 60
AGE_COARSE_STEP_S = 10
# With more gone hosts than the overview names, one query over every host: coarser steps.
AGE_FINE_STEP_ALL_S = 5
AGE_COARSE_STEP_ALL_S = 60


def quote(value: str) -> str:
    """A PromQL string literal. UTF-8 as it is, and ``\\u``/``\\U`` escapes for what is not printable:
    PromQL (Go) rejects the UTF-16 surrogate pairs that JSON writes for characters past U+FFFF."""
    out = ['"']
    for c in value:
        if c in '"\\':
            out.append("\\" + c)
        elif c.isprintable():
            out.append(c)
        else:
            out.append(f"\\u{ord(c):04x}" if ord(c) < 0x10000 else f"\\U{ord(c):08x}")
    out.append('"')
    return "".join(out)


def _tag(expr: str, stat: str) -> str:
    return f'label_replace({expr}, "{STAT}", "{stat}", "", "")'


def union(parts: dict[str, str]) -> str:
    return " or ".join(_tag(expr, stat) for stat, expr in parts.items())


def _either(make: Callable[[str], str], metric: str, match: str = '!=""') -> str:
    """``make`` over the series whose host (``Hostname``, or current dcgm-exporter's ``hostname``)
    matches ``match``, with the host always under ``Hostname``. A series with both is taken once,
    by its ``Hostname``. ``make`` must keep the labels (no aggregation)."""
    old = make(f"{metric}{{{HOST}{match}}}")
    new = make(f'{metric}{{{HOST}="",{NEW_HOST}{match}}}')
    return f'({old} or label_replace({new}, "{HOST}", "$1", "{NEW_HOST}", "(.+)"))'


def _raw(selector: str) -> str:
    return selector


def _sane(metric: str, expr: str) -> str:
    """Only readings in their plausible range: the others are unknown, not counted."""
    low, high = SANE[metric]
    return f"({expr} >= {low:g} <= {high:g})"


def _per_gpu(expr: str) -> str:
    """One value per GPU: by UUID (one GPU scraped by two jobs, or listed twice, folded into one),
    by index where an exporter gives no UUID; the detail keys its GPUs the same way."""
    keyed = f'label_replace(label_replace({expr}, "{GPU_KEY}", "index $1", "gpu", "(.*)"), ' \
            f'"{GPU_KEY}", "$1", "UUID", "(.+)")'
    return f"max by ({HOST}, {GPU_KEY}) ({keyed})"


def _now(metric: str) -> str:
    """Each current GPU's sane value. A plain instant selector: Prometheus drops a host at once
    when its scrape fails (staleness markers)."""
    return _per_gpu(_sane(metric, _either(_raw, metric)))


def age_step_ms(scrape_interval_s: float | None) -> int:
    """The fine subquery's step: half the scrape interval, from 0.1 s to 1 s."""
    return int(min(1000, max(100, 500 * (scrape_interval_s or 2))))


def _live_age(match: str = '!=""') -> str:
    # The newest sample of the hosts Prometheus holds current: exact, and on Prometheus's clock
    # (the Jupyter server's clock need not agree with it). timestamp() of a plain selector only.
    return f"time() - max by ({HOST}) ({_either(lambda s: f'timestamp({s})', UTIL, match)})"


def _gone_ages(match: str, fine: str, coarse: str) -> dict[str, str]:
    # The newest sample of stopped hosts, in the last minute (fine) or the lookback (coarse), to
    # within one step. Subqueries cost Prometheus ~0.2 s over 4000 series: the overview asks
    # them only for the hosts that are gone (gone_ages_query).
    def ages(span: int, step: str) -> str:
        newest = _either(lambda s: f"max_over_time(timestamp({s})[{span}s:{step}])", UTIL, match)
        return f"time() - max by ({HOST}) ({newest})"
    return {"age_fine": ages(AGE_FINE_S, fine), "age_coarse": ages(LOOKBACK_S, coarse)}


def _simulated(matcher: str = "") -> str:
    """1 for each host whose gpu-widgets export says its GPUs are simulated. A current info series
    decides; a host that stopped reporting keeps what its last one said (within the lookback).
    Only gpu-widgets writes this series, always with ``Hostname``."""
    sel = "{" + (matcher + "," if matcher else "") + 'simulated="true"}'
    now = f"max by ({HOST}) ({INFO}{sel})"
    before = f"max by ({HOST}) (last_over_time({INFO}{sel}[{LOOKBACK_S}s]))"
    current = f"{INFO}{{{matcher}}}" if matcher else INFO
    return f"{now} or ({before} unless on ({HOST}) {current})"


def _regex_quote(text: str) -> str:
    """``text`` as a literal inside an RE2 pattern: every ASCII character but letters and digits
    escaped (RE2 takes any escaped ASCII punctuation literally, and refuses other escapes)."""
    return "".join(c if c.isalnum() or not c.isascii() else "\\" + c for c in text)


def gone_ages_query(hosts: list[str] | None, scrape_interval_s: float | None) -> str:
    """The gone hosts' ages, by name; ``None``: of every host (cheaper than a pattern of hundreds)."""
    if hosts is None:
        return union(_gone_ages('!=""', f"{AGE_FINE_STEP_ALL_S}s", f"{AGE_COARSE_STEP_ALL_S}s"))
    match = f"=~{quote('|'.join(_regex_quote(h) for h in hosts))}"
    return union(_gone_ages(match, f"{age_step_ms(scrape_interval_s)}ms", f"{AGE_COARSE_STEP_S}s"))


def overview_query(scrape_interval_s: float | None) -> str:
    util, used, free = _now(UTIL), _now(FB_USED), _now(FB_FREE)
    by = f"by ({HOST})"
    # gpus over the whole lookback, so that a stopped host keeps its count; readings: current only
    listed = _per_gpu(_either(lambda s: f"last_over_time({s}[{LOOKBACK_S}s])", UTIL))
    parts = {
        "gpus": f"count {by} ({listed})",
        "util_mean": f"avg {by} ({util})",
        "util_max": f"max {by} ({util})",
        "busy": f"count {by} ({util} >= {BUSY_UTIL_PERCENT})",
        "free": f"count {by} ({util} < {BUSY_UTIL_PERCENT} and {used} < {FREE_MEMORY_FRACTION} * ({used} + {free}))",
        "mem_used_mib": f"sum {by} ({used})",
        "mem_total_mib": f"sum {by} ({used} + {free})",
        "temp_max": f"max {by} ({_now(TEMP)})",
        "power_w": f"sum {by} ({_now(POWER)})",
        "age_live": _live_age(),
        # which scrape targets a current host's series come from: their interval dates staleness
        "target": f"group by ({HOST}, job, instance) ({_either(_raw, UTIL)})",
        "simulated": _simulated(),
    }
    return union(parts)


def detail_query(host: str, scrape_interval_s: float | None) -> str:
    match = f"={quote(host)}"
    # Every label kept (model, bus id, device): one series per GPU and metric.
    parts = {
        name: _either(lambda s: f"last_over_time({s}[{LOOKBACK_S}s])", metric, match)
        for name, metric in (("util", UTIL), ("used", FB_USED), ("free", FB_FREE), ("temp", TEMP), ("power", POWER))
    }
    parts["age_live"] = _live_age(match)
    parts.update(_gone_ages(match, f"{age_step_ms(scrape_interval_s)}ms", f"{AGE_COARSE_STEP_S}s"))
    parts["target"] = f"group by ({HOST}, job, instance) ({_either(_raw, UTIL, match)})"
    parts["simulated"] = _simulated(f"{HOST}{match}")
    return union(parts)


def history_step_s(scrape_interval_s: float | None) -> int:
    """At most HISTORY_POINTS over HISTORY_SPAN_S, and never finer than the scrape interval (a
    finer step would show gaps between samples)."""
    return max(-(-HISTORY_SPAN_S // HISTORY_POINTS), int(-(-(scrape_interval_s or 0) // 1)))


def history_query(host: str, step_s: int) -> str:
    match = f"={quote(host)}"
    # utilization: the mean of each step; memory: its peak (what decides whether a job fits).
    return union({
        "util": _either(lambda s: f"avg_over_time({s}[{step_s}s])", UTIL, match),
        "used": _either(lambda s: f"max_over_time({s}[{step_s}s])", FB_USED, match),
    })
