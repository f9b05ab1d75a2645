"""What the GPUs did while one ``%%gpuwatch`` cell ran: a plain-text summary and the same as data.

Plain text, so it reads the same in JupyterLab, VS Code, a terminal IPython and a notebook
executed headless (nbclient, papermill).
"""
from __future__ import annotations

from typing import Any

from ..metrics.throttle import LABELS
from ..widgets import units
from ..runs.gpu_trace import GpuTrace
from ..widgets.torch_probe import TorchState


def summarize(trace: GpuTrace, duration_s: float, interval_s: float, torch: TorchState | None = None,
              config_error: str | None = None) -> tuple[str, dict[str, Any]]:
    data: dict[str, Any] = {
        "duration_s": duration_s,
        "interval_s": interval_s,
        "backend": trace.backend,
        "status": trace.status,
        "reason": trace.reason,
        "gpus": [],
    }
    head = f"%%gpuwatch: cell ran {units.duration(duration_s)}"
    if config_error:
        data["error"] = config_error
        return f"{head}; GPU monitoring off: {config_error}", data
    if trace.backend == "simulated":
        head += " · SIMULATED GPUs (not real devices)"
    if trace.status == "no_gpu":
        return f"{head}; no GPU: {trace.reason or 'no NVIDIA driver found'}", data
    samples = max((d.samples for d in trace.devices.values()), default=0)
    head += f" · {samples} sample{'s' if samples != 1 else ''} (every {interval_s:g} s)"
    lines = [head]
    if samples == 0:
        lines.append(
            f"  no GPU sample was taken: the cell was shorter than the sampling interval "
            f"(try %%gpuwatch --interval {max(0.1, round(duration_s / 4, 1)):g})"
        )
    for index, d in sorted(trace.devices.items()):
        gpu: dict[str, Any] = {
            "index": index, "name": d.name, "samples": d.samples, "util_mean_percent": d.util_mean,
            "util_peak_percent": d.util_peak, "memory_peak_bytes": d.memory_peak, "memory_total_bytes": d.memory_total,
            "memory_change_bytes": None, "temperature_peak_c": d.temperature_peak, "power_peak_w": d.power_peak,
            "energy_j": d.energy_j, "throttled_s": dict(d.throttled_s), "lost_samples": d.lost_samples,
        }
        last_used = d.latest.get("memory_used_bytes")
        if d.memory_first is not None and last_used is not None:
            gpu["memory_change_bytes"] = last_used - d.memory_first
        data["gpus"].append(gpu)
        parts = []
        if d.util_mean is not None:
            parts.append(f"busy mean {d.util_mean:.0f}% (peak {d.util_peak:.0f}%)")
        if d.memory_peak is not None:
            mem = f"memory peak {units.gib(d.memory_peak)}" + (f" of {units.gib(d.memory_total)}" if d.memory_total else "")
            change = gpu["memory_change_bytes"]
            if change:
                mem += f" ({'+' if change > 0 else '-'}{units.gib(abs(change))} during the cell)"
            parts.append(mem)
        if d.temperature_peak is not None:
            parts.append(f"temperature peak {d.temperature_peak:.0f} °C")
        if d.power_peak is not None:
            parts.append(f"power peak {d.power_peak:.0f} W")
        if d.energy_j:
            parts.append(f"energy {d.energy_j / 1000:.2f} kJ")
        if d.throttled_s:
            parts.append("throttled: " + ", ".join(f"{LABELS.get(r, r)} {units.duration(s)}" for r, s in d.throttled_s.items()))
        else:
            parts.append("no throttling")
        if d.lost_samples:
            parts.append(f"LOST in {d.lost_samples} sample{'s' if d.lost_samples != 1 else ''}")
        lines.append(f"  GPU {index} {d.name or ''}: " + " · ".join(parts))
    if torch is not None and torch.cuda_initialized:
        for td in torch.devices:
            lines.append(
                f"  PyTorch cuda:{td.ordinal}: {units.gib(td.allocated_bytes)} allocated now, "
                f"peak {units.gib(td.peak_allocated_bytes)} since the process started (or the last reset of peak stats)"
            )
        data["torch"] = [vars(td) for td in torch.devices]
    return "\n".join(lines), data
