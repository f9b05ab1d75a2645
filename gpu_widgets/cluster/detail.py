"""From the detail queries' answers to the API's detail of one host: its GPUs, each with a short history."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .overview import freshness, host_interval, number, r1, split
from .promql import HOST, STAT

MIB = 1 << 20
# gw_stat of the detail query -> (field of a GPU, scale)
FIELDS = {
    "util": ("utilization_gpu_percent", 1),
    "used": ("memory_used_bytes", MIB),
    "temp": ("temperature_c", 1),
    "power": ("power_w", 1),
}
HISTORY_FIELDS = {"util": ("utilization_gpu_percent", 1), "used": ("memory_used_bytes", MIB)}


def _gpu_key(labels: Mapping[str, str]) -> str:
    return labels.get("UUID") or f"gpu{labels.get('gpu', '?')}"


def _sort_key(gpu: Mapping[str, Any]) -> tuple[int, str]:
    index = gpu["gpu"]
    return (int(index), "") if index is not None and str(index).isdigit() else (1 << 30, str(index))


def _scaled(value: float | None, scale: int) -> float | int | None:
    if value is None:
        return None
    return int(round(value * scale)) if scale != 1 else r1(value)


def _new_gpu(labels: Mapping[str, str], history_len: int) -> dict[str, Any]:
    gpu: dict[str, Any] = {"gpu": labels.get("gpu"), "uuid": labels.get("UUID"), "model": labels.get("modelName"),
                           "pci_bus_id": labels.get("pci_bus_id")}
    gpu.update({field: None for field, _ in FIELDS.values()})
    gpu["memory_total_bytes"] = None
    gpu["history"] = {field: [None] * history_len for field, _ in HISTORY_FIELDS.values()}
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
            free[key] = value
        else:
            field, scale = FIELDS[stat]
            gpu[field] = _scaled(value, scale)
    for key, gpu in gpus.items():
        used = gpu["memory_used_bytes"]
        if used is not None and free.get(key) is not None:
            gpu["memory_total_bytes"] = used + int(round(free[key] * MIB))  # dcgm-exporter has no total
    return gpus


def add_history(gpus: dict[str, dict[str, Any]], matrix: Iterable[Mapping[str, Any]], start: float,
                step_s: float, history_len: int) -> None:
    """Put each range series on the grid start, start+step, ...; gaps stay null."""
    for series in matrix:
        labels = series.get("metric") or {}
        stat, key = labels.get(STAT), _gpu_key(labels)
        if stat not in HISTORY_FIELDS or key not in gpus:
            continue
        field, scale = HISTORY_FIELDS[stat]
        points = gpus[key]["history"][field]
        for t, raw in series.get("values") or ():
            slot = round((float(t) - start) / step_s)
            if 0 <= slot < history_len:
                points[slot] = _scaled(number(raw), scale)


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
