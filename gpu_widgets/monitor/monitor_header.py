"""The TrainingMonitor's header, assembled from the run's parts (header.py renders it as HTML):
status and what ended the run, progress (step, epoch, rates, ETA), latest values, the GPUs,
advice, the monitor's problems and notes."""
from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..runs.records import Records
from .advice import advice_for_run, torch_without_cuda
from .batches import SampleCounter
from .data_wait import diagnose, recent_busy
from .monitor_text import MonitorText, render_monitor
from .monitor_charts import MonitorCharts
from .run_energy import run_energy
from .run_gpus import RunGpus
from .run_state import RunState, State
from .small_kernels import small_kernels

RATE_WINDOW_S = 10.0  # rates of a running run: over the last 10 s


@dataclass
class Progress:
    """What the loop told the monitor about the run's shape."""

    batch_size: int | None = None  # samples per step, when given
    total_steps: int | None = None
    epoch: int | None = None  # as shown: from 1 in track(), as given to set_epoch()
    epochs: int | None = None


def epoch_text(progress: Progress, latest: Mapping[str, Any]) -> str | None:
    """"3/10", "3" without a total, else an ``epoch`` value the loop logged."""
    if progress.epoch is not None:
        return f"{progress.epoch}/{progress.epochs}" if progress.epochs else f"{progress.epoch}"
    value = latest.get("epoch")
    return None if value is None or value != value else f"{value:g}"


def steps_done(records: Records) -> int | None:
    """How many steps the run has done, as the header shows it (``step 300 / 300``).

    Steps are numbered from 0 by ``track()`` and by ``log()`` without ``step=``, so after step
    299 there are 300 done. A loop that numbers its own steps from 1 (``step=1..300``) logs the
    count itself; the first step logged tells the two apart: 0 means "from 0", anything else
    "from 1"."""
    if not records.size:
        return None
    last = records.steps[records.size - 1]
    return last + 1 if records.steps[0] == 0 else last


def samples_rate(counter: SampleCounter, window_s: float | None, steps_per_s: float | None,
                 batch_size: int | None) -> float | None:
    if len(counter.marks) >= 2:  # counted from the batches seen
        return counter.rate(window_s)
    if steps_per_s and batch_size:
        return steps_per_s * batch_size
    return None


def header_html(title: str, run: RunState, records: Records, charts: MonitorCharts, gpus: RunGpus,
                progress: Progress, counter: SampleCounter, run_dir: Path | None, world: Any = None) -> str:
    running = run.state == State.RUNNING
    notes = run.notes
    if run.readonly:
        notes = [f"{'followed' if run.followed else 'loaded'} from {run.loaded_from or ''}", *notes]
    devices = gpus.shown()
    latest = records.latest()
    window = RATE_WINDOW_S if running else None
    steps_per_s = records.rate(window)
    trace = gpus.trace
    backend_status, backend_reason = gpus.freshness(running)
    detail = run.detail()
    summary = gpus.summarised()
    torch = gpus.torch
    snap = trace.last_snapshot or {}
    advice = advice_for_run(
        devices, progress.batch_size or counter.first_batch,
        cpu_tensors_only="torch" in sys.modules and records.tensor_devices == {"cpu"},
        gpus_present=trace.status == "ok" and bool(trace.devices),
        torch_cuda=None if torch is None else torch.cuda_initialized,
        # NVML's own GPUs only: simulated ones are no reason to reinstall PyTorch.
        cpu_build=torch_without_cuda() if trace.backend == "nvml" and records.tensor_devices <= {"cpu"} else None,
        cuda_driver=snap.get("cuda_driver_version"),
    )
    if summary:  # the GPUs are other processes': only "training runs on the CPU" is about this run
        advice = [a for a in advice if a.kind in ("cpu", "cpu-build")]
    else:  # busy but SM-idle: tiny kernels (needs SM activity, read while the monitor runs)
        tip = small_kernels(devices)
        if tip is not None:
            advice = [*advice, tip]
    share = charts.waits.share()
    if share is not None:  # the diagnosis says it better than the busy-% tip
        advice = [a for a in advice if a.kind != "utilization"]
    # How busy this run's GPUs were lately, when they are known to be its own: torch started CUDA,
    # a tensor was on a GPU, or gpus= named them. Others' GPUs say nothing about this loop.
    ours = not summary and (bool(torch and torch.cuda_initialized) or bool(records.tensor_devices - {"cpu"})
                            or isinstance(gpus.choice, frozenset))
    diagnosis = diagnose(share, recent_busy(devices) if ours else None)
    energy = run_energy(devices, gpus.uses_no_gpu(records.tensor_devices))
    alerts = gpus.alerts
    # Alerts of the GPUs the run uses: a summary shows others' GPUs (the sidebar tells their owners).
    used = [] if summary else devices
    return render_monitor(MonitorText(
        title=title, status=run.state, status_detail=None if detail is None else detail[:400],
        steps_done=steps_done(records), rows=records.size, total_steps=progress.total_steps,
        epoch=epoch_text(progress, latest), elapsed_s=run.elapsed(), steps_per_s=steps_per_s,
        samples_per_s=samples_rate(counter, window, steps_per_s, progress.batch_size),
        energy_j=energy.joules, energy_text=energy.text, energy_why=energy.why,
        latest=latest, nonfinite=charts.nonfinite(records), backend=trace.backend,
        backend_status=backend_status, backend_reason=backend_reason, config_error=gpus.config_error,
        devices=devices, torch=gpus.torch, errors=run.errors, summary=summary, advice=advice,
        notes=notes, run_dir=str(run_dir) if run_dir is not None else None,
        data_wait=share, diagnosis=diagnosis, alerts=alerts.header_lines(used, running),
        alerts_ended=alerts.ended_on(used), alerts_problem=alerts.problem,
        world=None if world is None else world.line(), straggler=world is not None and world.straggler is not None,
    ))
