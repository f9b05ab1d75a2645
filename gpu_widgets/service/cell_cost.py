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

from ..metrics.throttle import SLOWDOWN_MASK, names_from_mask

# A GPU the kernel only kept memory on, idle all through the cell, is no use of it: a CPU-only
# cell after a model was loaded gets no line. Used: its memory changed, or the GPU was busy.
BUSY_FROM_PERCENT = 5.0
# The newest sample before a cell began stands for its start if it is at most two fast intervals
# (and a loaded machine's lateness) old: a cell shorter than the interval has no sample of its own.
LATE_S = 0.5


def _figure(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 1)


def _energy(first: float, last: float) -> float | None:
    if math.isnan(first) or math.isnan(last):
        return None
    spent = last - first
    return round(spent, 1) if spent >= 0 else None  # a counter that went back: the driver reloaded


def summarize(entries: Sequence[Any], restarts: Sequence[float], history: Any, t0: float, t1: float,
              running: bool, interval_s: float, after: Any = None) -> dict[str, Any]:
    """The cell's summary. ``entries``: the kernel's ledger entries in effect during [t0, t1];
    ``after``: the first entry booked just after t1, where there is one (the cell's end state is
    then what it left behind); ``history``: the sampler's History (or None); ``interval_s``: the
    sampler's fast interval (how far before t0 a sample still stands for the cell's start). A GPU the kernel held
    memory on but neither changed it nor saw the GPU busy is listed in ``held_only``, not ``gpus``."""
    start_state = entries[0].held if entries and entries[0].t <= t0 else {}
    end_state = after.held if after is not None else entries[-1].held if entries else {}
    used: set[int] = set()
    for e in (*entries, *((after,) if after is not None else ())):
        used.update(e.held)
    # Per GPU in one pass each (an hour's cell has a few hundred entries on 8 GPUs).
    gpus: dict[int, dict[str, Any]] = {}
    inside = [e for e in entries if e.t > t0]
    for gpu in used:
        held = [e.held.get(gpu, 0) for e in entries]
        tail = [after.held.get(gpu, 0)] if after is not None else []  # taken as the cell ended
        known = [h for h in held + tail if h is not None]
        gpus[gpu] = {"peak": max(known, default=0), "unknown": len(known) < len(held) + len(tail),
                     "others": max([e.others.get(gpu, 0) for e in entries], default=0),
                     "values": [start_state.get(gpu, 0), *held[len(entries) - len(inside):]]}
    samples, devices, oldest = (history.stats_between(t0, t1, used, 2 * interval_s + LATE_S) if history is not None
                                else (0, {}, None))
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
        if dev is None or not samples:
            row.update(busy_percent=None, sm_percent=None, energy_j=None, slowdowns=[], lost=False, samples=0)
        else:
            row.update(busy_percent=_figure(dev["util_mean"]), sm_percent=_figure(dev["sm_mean"]),
                       energy_j=_energy(dev["energy_first"], dev["energy_last"]),
                       slowdowns=names_from_mask(dev["throttle_mask"] & SLOWDOWN_MASK), lost=dev["lost"],
                       samples=samples)
        values = g["values"] + [end]
        busy = dev is not None and samples > 0 and dev["util_max"] >= BUSY_FROM_PERCENT
        if len(set(values)) > 1 or busy or row["lost"]:
            out.append(row)
        else:
            held_only.append(gpu)
    covered_from = oldest if oldest is not None and oldest > t0 else None
    return {"start": t0, "end": t1, "running": running, "duration_s": round(max(0.0, t1 - t0), 3),
            "gpus": out, "held_only": held_only, "restarted": bool(restarts), "restarted_at": list(restarts),
            "history_from": covered_from,
            "partial": covered_from is not None and not math.isclose(covered_from, t0)}
