"""From the detail queries' answers to the API's detail of one host: its GPUs, each with a short history."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .overview import freshness, host_interval, number, r1, split
from .promql import FB_FREE, FB_USED, HOST, POWER, SANE, STAT, TEMP, UTIL

MIB = 1 << 20
# gw_stat of the detail query -> (field of a GPU, scale, the metric whose plausible range applies)
FIELDS = {
    "util": ("utilization_gpu_percent", 1, UTIL),
    "used": ("memory_used_bytes", MIB, FB_USED),
    "temp": ("temperature_c", 1, TEMP),
    "power": ("power_w", 1, POWER),
}
HISTORY_FIELDS = {"util": FIELDS["util"], "used": FIELDS["used"]}


def _gpu_key(labels: Mapping[str, str]) -> str:
    """A GPU's identity as the overview's count has it (promql._per_gpu): its UUID, else its index."""
    return labels.get("UUID") or f"index {labels.get('gpu', '')}"


def _sort_key(gpu: Mapping[str, Any]) -> tuple[int, str]:
    index = str(gpu["gpu"])
    digits = index.isascii() and index.isdigit() and len(index) < 10
    return (int(index), "") if digits else (1 << 30, index)


def _scaled(value: float | None, scale: int, metric: str) -> float | int | None:
    """The reading in the API's unit; unknown (None) outside its plausible range (promql.SANE)."""
    low, high = SANE[metric]
    if value is None or not low <= value <= high:
        return None
    return int(round(value * scale)) if scale != 1 else r1(value)


def _new_gpu(labels: Mapping[str, str], history_len: int) -> dict[str, Any]:
    gpu: dict[str, Any] = {"gpu": labels.get("gpu"), "uuid": labels.get("UUID"), "model": labels.get("modelName"),
                           "pci_bus_id": labels.get("pci_bus_id")}
    gpu.update({field: None for field, _, _ in FIELDS.values()})
    gpu["memory_total_bytes"] = None
    gpu["history"] = {field: [None] * history_len for field, _, _ in HISTORY_FIELDS.values()}
    return gpu


def gpus_of(result: Iterable[Mapping[str, Any]], history_len: int) -> dict[str, dict[str, Any]]:
    gpus: dict[str, dict[str, Any]] = {}
    free: dict[str, float | None] = {}
    for sample in result:
        labels = sample.get("metric") or {}
        stat = labels.get(STAT)
        if stat not in FIELDS and stat != "free":
            continue
        key = _gpu_key(labels)
        gpu = gpus.setdefault(key, _new_gpu(labels, history_len))
        value = number((sample.get("value") or (None, None))[1])
        if stat == "free":
            free[key] = _scaled(value, MIB, FB_FREE)
        else:
            field, scale, metric = FIELDS[stat]
            gpu[field] = _scaled(value, scale, metric)
    for key, gpu in gpus.items():
        used = gpu["memory_used_bytes"]
        if used is not None and free.get(key) is not None:
            gpu["memory_total_bytes"] = used + free[key]  # dcgm-exporter has no total
    return gpus


def add_history(gpus: dict[str, dict[str, Any]], matrix: Iterable[Mapping[str, Any]], start: float,
                step_s: float, history_len: int) -> None:
    """Put each range series on the grid start, start+step, ...; gaps stay null."""
    for series in matrix:
        labels = series.get("metric") or {}
        stat, key = labels.get(STAT), _gpu_key(labels)
        if stat not in HISTORY_FIELDS or key not in gpus:
            continue
        field, scale, metric = HISTORY_FIELDS[stat]
        points = gpus[key]["history"][field]
        for t, raw in series.get("values") or ():
            slot = round((float(t) - start) / step_s)
            if 0 <= slot < history_len:
                points[slot] = _scaled(number(raw), scale, metric)


def build(host: str, result: list[Mapping[str, Any]], intervals: Mapping[tuple[str, str], float],
          current_host: str, history_len: int) -> dict[str, Any] | None:
    """The detail without its history (added by add_history); None when Prometheus knows no such host."""
    _, stats = split(r for r in result if (r.get("metric") or {}).get(HOST) == host)
    host_stats = stats.get(host, {})
    gpus = gpus_of(result, history_len)
    if not gpus:
        return None
    stale, age = freshness(host_stats, host_interval(host_stats, intervals))
    return {"hostname": host, "current": host == current_host, "stale": stale, "age_s": r1(age),
            "simulated": bool(host_stats.get("simulated")), "gpus_by_key": gpus}


def finish(answer: dict[str, Any]) -> dict[str, Any]:
    gpus = answer.pop("gpus_by_key")
    answer["gpus"] = sorted(gpus.values(), key=_sort_key)
    return answer
