"""What one cell cost the GPU: a kernel's booked memory (server/cell_ledger.py) and the GPU history
over the cell's time, as the figures of its line (docs/cells.md).

Per GPU the kernel's processes held memory on during the cell: the peak they held and the change
from the cell's start to its end, the GPU's mean utilization and SM activity over the cell, the
energy counter's difference, the slowdowns seen, a lost GPU, and how many other processes used the
GPU meanwhile (then busy and energy are the GPU's, not the cell's alone). No NVML call: the samples
already taken.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..metrics.throttle import SLOWDOWN_MASK, names_from_mask

COLUMNS = ("utilization_gpu_percent", "sm_active_percent", "energy_j", "throttle_mask", "lost")
# A GPU the kernel only kept memory on, idle all through the cell, is no use of it: a CPU-only
# cell after a model was loaded gets no line. Used: its memory changed, or the GPU was busy.
BUSY_FROM_PERCENT = 5.0


def _mean(values: Any) -> float | None:
    finite = values[np.isfinite(values)]
    return round(float(finite.mean()), 1) if finite.size else None


def _energy(values: Any) -> float | None:
    finite = values[np.isfinite(values)]
    if finite.size < 2:
        return None
    spent = float(finite[-1] - finite[0])
    return round(spent, 1) if spent >= 0 else None  # a counter that went back: the driver reloaded


def _busy(values: Any) -> bool:
    finite = values[np.isfinite(values)]
    return bool(finite.size) and float(finite.max()) >= BUSY_FROM_PERCENT


def _slowdowns(masks: Any) -> list[str]:
    finite = masks[np.isfinite(masks)].astype(np.int64)
    mask = int(np.bitwise_or.reduce(finite)) if finite.size else 0
    return names_from_mask(mask & SLOWDOWN_MASK)


def summarize(entries: Sequence[Any], restarts: Sequence[float], history: Any, t0: float, t1: float,
              running: bool, lookback_s: float, after: Any = None) -> dict[str, Any]:
    """The cell's summary. ``entries``: the kernel's ledger entries in effect during [t0, t1];
    ``after``: the first entry booked just after t1, where there is one (the cell's end state is
    then what it left behind); ``history``: the sampler's History (or None); ``lookback_s``: how far
    before t0 a sample still stands for the cell's start (one fast interval). A GPU the kernel held
    memory on but neither changed it nor saw the GPU busy is listed in ``held_only``, not ``gpus``."""
    gpus: dict[int, dict[str, Any]] = {}
    start_state = entries[0].held if entries and entries[0].t <= t0 else {}
    end_state = after.held if after is not None else entries[-1].held if entries else {}
    for e in entries:
        for gpu, held in e.held.items():
            g = gpus.setdefault(gpu, {"peak": 0, "unknown": False, "others": 0})
            if held is None:
                g["unknown"] = True
            else:
                g["peak"] = max(g["peak"], held)
            g["others"] = max(g["others"], e.others.get(gpu, 0))
    for gpu, held in (after.held.items() if after is not None else ()):
        g = gpus.setdefault(gpu, {"peak": 0, "unknown": False, "others": 0})  # taken as the cell ended
        g["unknown"] = g["unknown"] or held is None
        g["peak"] = max(g["peak"], held or 0)
    times, devices, oldest = (history.between(t0 - lookback_s, t1, COLUMNS) if history is not None
                              else (np.empty(0), {}, None))
    out, held_only = [], []
    for gpu in sorted(gpus):
        g = gpus[gpu]
        dev = devices.get(gpu)
        row: dict[str, Any] = {"index": gpu, "uuid": dev["uuid"] if dev else None, "name": dev["name"] if dev else None}
        start, end = start_state.get(gpu, 0), end_state.get(gpu, 0)
        unknown = g["unknown"] or start is None or end is None
        row["peak_memory_bytes"] = None if g["unknown"] and not g["peak"] else g["peak"]
        row["memory_change_bytes"] = None if unknown else end - start
        row["memory_unknown"] = unknown
        row["shared_with"] = g["others"]
        if dev is None or not len(times):
            row.update(busy_percent=None, sm_percent=None, energy_j=None, slowdowns=[], lost=False, samples=0)
        else:
            row.update(busy_percent=_mean(dev["utilization_gpu_percent"]), sm_percent=_mean(dev["sm_active_percent"]),
                       energy_j=_energy(dev["energy_j"]), slowdowns=_slowdowns(dev["throttle_mask"]),
                       lost=bool(np.nansum(dev["lost"]) > 0), samples=int(len(times)))
        values = [start_state.get(gpu, 0)] + [e.held.get(gpu, 0) for e in entries if e.t > t0] + [end]
        busy = dev is not None and len(times) and _busy(dev["utilization_gpu_percent"])
        if len(set(values)) > 1 or busy or row["lost"]:
            out.append(row)
        else:
            held_only.append(gpu)
    covered_from = oldest if oldest is not None and oldest > t0 else None
    return {"start": t0, "end": t1, "running": running, "duration_s": round(max(0.0, t1 - t0), 3),
            "gpus": out, "held_only": held_only, "restarted": bool(restarts), "restarted_at": list(restarts),
            "history_from": covered_from,
            "partial": covered_from is not None and not math.isclose(covered_from, t0)}
