"""The runs ``TrainingMonitor.compare()`` puts side by side, and the summary of each.

A run comes from a run-log directory, a file written by ``save()`` (read by ``world.read_any``,
the reader of ``TrainingMonitor.load``: a launch is its rank 0's values over the launch's wall time), or a TrainingMonitor (live or loaded: what it holds now).
Each becomes a ``ComparedRun``: its logged rows in ``Records`` and its GPU samples in a
``GpuTrace`` whose x = 0 is the run's start, the same structures the monitor draws from, so the
comparison reuses the monitor's decimation and totals.

The summary's energy and peak memory count the GPUs the run used (run.json's ``gpus_used``, the
GPUs its live header counted): a run that used none (``[]``) says "no GPU used", as the header
does, since the GPUs it recorded are other people's work. Per GPU the energy is the difference of NVML's energy counter (``energy_j``) between its
first and last sample; a GPU without the counter has its power integrated over time (trapezoids,
gaps longer than ``MAX_GAP_S`` left out). ``energy_from`` says which.
"""
from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..runs.gpu_trace import MAX_GAP_S, GpuTrace
from ..runs.records import Records
from ..widgets.drawable import short_title
from .monitor_header import steps_done
from .run_energy import NO_GPU
from .run_state import State
from .world import read_any
from ..widgets.view import color

X_AXES = ("step", "time")
COUNTER, INTEGRATED = "energy counter", "power integrated"


@dataclass
class ComparedRun:
    """One run of a comparison: its name in the legend and table, its colour, its data."""

    label: str
    title: str
    source: Path | None  # its run directory or file; None for a monitor without a run log
    status: str
    started: float | None  # seconds since the epoch: x = 0 on the time axis
    ended: float | None
    batch_size: int | None
    records: Records
    gpu_rows: list[dict[str, Any]]
    color: str = ""
    trace: GpuTrace | None = None
    gpus_used: list[int] | None = None  # run.json's "gpus_used": [] none, None not known (then all)
    world_size: int = 1  # a launch: its ranks (the rest is rank 0's, over the launch's wall time)

    @property
    def origin(self) -> float:
        """x = 0 of this run's time axis: its start, else its first GPU sample."""
        if self.started is not None:
            return self.started
        times = [float(r["time"]) for r in self.gpu_rows]
        return min(times) if times else 0.0


def check_x_axis(x_axis: Any) -> str:
    if x_axis not in X_AXES:
        raise ValueError(f"x_axis must be 'step' or 'time', got {x_axis!r}")
    return x_axis


def _where(run: Any) -> str:
    if isinstance(run, (str, os.PathLike)):
        return repr(os.fspath(run))
    return repr(run)[:120]


def _from_path(path: str | os.PathLike, n: int) -> ComparedRun:
    try:
        saved = read_any(path)
    except (OSError, ValueError) as exc:  # RunFileError is a ValueError: its message names file and line
        raise type(exc)(f"compare(): run {n} ({_where(path)}): {exc}") from exc
    records = Records()
    records.extend_rows(saved.rows)
    status = str(State.saved(saved.meta.get("status")))
    used = saved.meta.get("gpus_used")
    title, (started, ended), world = saved.title, (saved.started, saved.ended), 1
    launch = saved.launch
    if launch is not None:  # rank 0's values; the launch's title, status and wall time
        title, status, world = launch.title, launch.status, launch.world_size
        started, ended = launch.span()
        started = started if started is not None else saved.started
    return ComparedRun("", title, saved.source.resolve(), status, started, ended, saved.meta.get("batch_size"),
                       records, own_rows(saved.gpu_rows, used), gpus_used=used, world_size=world)


def own_rows(rows: list[dict[str, Any]], used: list[int] | None) -> list[dict[str, Any]]:
    """The samples of the GPUs the run used (all when none or not known: the live view showed them all)."""
    if not used:
        return list(rows)
    keep = set(used)
    return [r for r in rows if r["gpu"] in keep]


def _from_monitor(mon: Any) -> ComparedRun:
    """What a TrainingMonitor holds now (a live one keeps running: this is a copy)."""
    rows, gpu_rows = mon.rows(), mon.gpu_rows()
    records = Records()
    records.extend_rows(rows)
    parts = mon.parts
    run = parts.run  # when the run began and ended
    times = [r["time"] for r in rows if r["time"] == r["time"]]
    started = run.t0 if run.t0 is not None else (min(times) if times else None)
    ended = run.t_end if run.t_end is not None else (max(times) if times else None)
    source = mon.run_dir
    used = parts.gpus.used(parts.records.tensor_devices)["gpus_used"] if parts.trace.devices else None
    status, world = str(mon.status), mon.world_size
    if run.readonly and parts.world is not None:  # a loaded or followed launch: as its directory compares
        status, (first, last) = parts.world.status, parts.world.span
        started, ended = first if first is not None else started, last if status != "running" else None
    return ComparedRun("", mon.title, None if source is None else Path(source).resolve(), status,
                       started, ended, parts.batch_size(), records, own_rows(gpu_rows, used), gpus_used=used,
                       world_size=world)


def gather(runs: Sequence[Any], monitor_type: type) -> list[ComparedRun]:
    """The runs to compare, checked: at least two, each a run, none twice. ``compare([a, b])``
    (one list) is the same as ``compare(a, b)``."""
    if len(runs) == 1 and isinstance(runs[0], (list, tuple)):
        runs = tuple(runs[0])
    if len(runs) < 2:
        raise ValueError(f"compare() needs at least 2 runs (run directories, saved files or TrainingMonitors), "
                         f"got {len(runs)}")
    out: list[ComparedRun] = []
    seen: dict[Any, int] = {}
    for n, run in enumerate(runs, 1):
        if isinstance(run, monitor_type):
            got = _from_monitor(run)
            ids = [("monitor", id(run))] + ([("path", got.source)] if got.source is not None else [])
        elif isinstance(run, (str, os.PathLike)):
            got = _from_path(run, n)
            ids = [("path", got.source)]
        else:
            raise TypeError(f"compare(): run {n} must be a run directory, a file saved by TrainingMonitor.save() "
                            f"or a TrainingMonitor, got {type(run).__name__} {_where(run)}")
        for key in ids:
            if key in seen:
                raise ValueError(f"compare(): run {n} ({_where(run)}) is the same run as run {seen[key]}; "
                                 "pass each run once")
        if not got.records.size and not got.gpu_rows:
            raise ValueError(f"compare(): run {n} ({_where(run)}) has no logged steps and no GPU samples: "
                             "nothing to compare")
        for key in ids:
            seen[key] = n
        out.append(got)
    name_runs(out)
    for i, run in enumerate(out):
        run.color = color(i)
    return out


def name_runs(runs: list[ComparedRun]) -> None:
    """Legend names: the title (a run log's title, else the directory or file name; cut to
    ``TITLE_CHARS``, whole in ``title``) and when the run started; made unique with " #2", " #3"
    when two still read the same."""
    counts: dict[str, int] = {}
    for run in runs:
        base = short_title(run.title)
        if run.started is not None:
            base += " · " + time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run.started))
        counts[base] = counts.get(base, 0) + 1
        run.label = base if counts[base] == 1 else f"{base} #{counts[base]}"


def check_keys(keys: Any, runs: Sequence[ComparedRun]) -> tuple[str, ...]:
    """The logged keys to chart: all of them (None), in the order they first appear, or those named."""
    logged = tuple(dict.fromkeys(k for run in runs for k in run.records.keys))
    if keys is None:
        return logged
    if isinstance(keys, str):
        keys = (keys,)
    try:
        named = tuple(keys)
    except TypeError:
        raise TypeError(f"keys must be None, a key or a list of keys, got {type(keys).__name__} {keys!r}") from None
    for k in named:
        if not isinstance(k, str):
            raise TypeError(f"keys must be names of logged values (text), got {type(k).__name__} {k!r}")
        if k not in logged:
            raise ValueError(f"keys: {k!r} was logged in none of the runs; logged keys: {list(logged)}")
    return tuple(dict.fromkeys(named))


def build_traces(runs: Iterable[ComparedRun], max_points: int) -> None:
    """Each run's GPU samples folded into a GpuTrace (x = seconds since the run's start)."""
    for run in runs:
        trace = run.trace = GpuTrace(run.origin, max_points)
        for row in run.gpu_rows:
            trace.add_row(row)


# -- the summary ---------------------------------------------------------------------------------
def integrated_energy(rows: Iterable[dict[str, Any]]) -> float | None:
    """Joules from one GPU's power samples (time order): trapezoids between neighbours, a gap
    longer than MAX_GAP_S or a lost sample not bridged. None without two usable samples."""
    total, last, pairs = 0.0, None, 0
    for r in rows:
        p = r.get("power_w")
        if r.get("lost") or p is None or p != p:
            last = None
            continue
        t = float(r["time"])
        if last is not None and 0 < t - last[0] <= MAX_GAP_S:
            total += (p + last[1]) / 2 * (t - last[0])
            pairs += 1
        last = (t, float(p))
    return total if pairs else None


def energy(run: ComparedRun) -> tuple[float | None, str | None]:
    """The energy the run's GPUs used, and how it was found (COUNTER, INTEGRATED or both; NO_GPU
    for a run that used none)."""
    assert run.trace is not None
    if run.gpus_used == [] and run.gpu_rows:  # without samples there is nothing to tell
        return None, NO_GPU
    total, ways = 0.0, []
    for index, d in sorted(run.trace.devices.items()):
        if d.energy_j is not None and d.energy_first != d.energy_last:
            total += d.energy_j
            ways.append(COUNTER)
            continue
        joules = integrated_energy(r for r in run.gpu_rows if r["gpu"] == index)
        if joules is not None:
            total += joules
            ways.append(INTEGRATED)
    if not ways:
        return None, None
    return total, " and ".join(w for w in (COUNTER, INTEGRATED) if w in ways)


def duration(run: ComparedRun) -> float | None:
    start, end = run.started, run.ended
    if start is None or end is None:
        times = [float(r["time"]) for r in run.gpu_rows]
        start = start if start is not None else min(times, default=None)
        end = end if end is not None else max(times, default=None)
    return None if start is None or end is None else max(0.0, end - start)


def summary_row(run: ComparedRun, keys: Sequence[str]) -> dict[str, Any]:
    """One run's line of ``RunComparison.summary`` (documented in docs/widgets.md)."""
    assert run.trace is not None
    records, devices = run.records, run.trace.devices.values()
    steps_per_s = records.rate()
    joules, how = energy(run)
    own = run.gpus_used != []  # a run that used no GPU: the memory shown is others'
    peaks = [d.memory_peak for d in devices if d.memory_peak is not None and own]
    latest = records.latest()
    return {
        "run": run.label,
        "title": run.title,
        "source": None if run.source is None else str(run.source),
        "status": run.status,
        "world_size": run.world_size,
        "started": run.started,
        "steps": steps_done(records),
        "duration_s": duration(run),
        "steps_per_s": steps_per_s,
        "samples_per_s": steps_per_s * run.batch_size if steps_per_s and run.batch_size else None,
        "energy_j": joules,
        "energy_from": how,
        "peak_memory_bytes": int(max(peaks)) if peaks else None,
        "gpus": sorted(index for index, d in run.trace.devices.items() if d.samples),
        "final": {k: latest[k] for k in keys if k in latest},
    }


def finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
