"""The text part of the widgets: status, progress, latest values, GPUs, advice and problems, as HTML.

Pure functions of plain data, so tests read exactly what a user reads. Everything that came from
the user or the system (titles, keys, error messages, GPU names) is escaped. Colours use
JupyterLab's theme variables with fallbacks, so the text reads in light and dark themes.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Any

from ..sampling.stall import STALE
from ..metrics.catalogue import DASHBOARD, shown_in
from ..metrics.throttle import LABELS, SLOWDOWNS, slowdown_names
from . import units
from .advice import Advice
from ..runs.gpu_trace import DeviceTrace
from .torch_probe import TorchState

STATUS_COLORS = {
    "ready": "#757575",
    "running": "#1565c0",
    "idle": "#757575",
    "finished": "#2e7d32",
    "failed": "#c62828",
    "interrupted": "#ef6c00",
    "unfinished": "#ef6c00",
}
STATUS_HINTS = {
    "idle": "the cell ended without finish(); log() continues the run, finish() ends it",
    "unfinished": "the log has no end: the process stopped without finishing (or is still running)",
}
MUTED = "color: var(--jp-ui-font-color2, #616161)"
WARN = "color: var(--jp-warn-color0, #e65100)"
ERROR = "color: var(--jp-error-color1, #c62828)"


def badge(text: str, color: str) -> str:
    return (
        f'<span style="background:{color};color:#fff;border-radius:3px;padding:1px 6px;'
        f'font-size:0.85em;font-weight:600;margin-left:6px">{escape(text)}</span>'
    )


def backend_line(backend: str | None, status: str | None, reason: str | None, config_error: str | None) -> tuple[str, str]:
    """(badge html, line html) describing where GPU readings come from."""
    if config_error:
        return "", f'<div style="{WARN}">GPU monitoring off: {escape(config_error)}</div>'
    if status == STALE:
        # ``reason`` is stall.stale_text: the sample's age and the call the sampler waits on.
        sim_badge, sim_line = backend_line(backend, None, None, None)
        return sim_badge + badge("STALE", STATUS_COLORS["interrupted"]), sim_line + (
            f'<div style="{WARN}">GPU readings are stale: {escape(reason or "no new sample")}.'
            " The GPU values shown are from before then.</div>"
        )
    if backend == "simulated":
        return badge("SIMULATED GPUs", "#6a1b9a"), (
            '<div style="color:#6a1b9a;font-weight:600">SIMULATED GPUs: these are not real devices '
            "(GPU_WIDGETS_BACKEND=simulated)</div>"
        )
    if status == "no_gpu":
        return badge("NO GPU", "#616161"), (
            f'<div style="{MUTED}">No GPU: {escape(reason or "no NVIDIA driver found")}.'
            " Metrics still plot.</div>"
        )
    return "", ""


def device_line(d: DeviceTrace, torch_dev: Any | None = None) -> str:
    latest = d.latest
    parts = [f"<b>GPU {d.index}</b> {escape(d.name or '')}"]
    if d.lost_samples and not latest:
        parts.append(f'<span style="{ERROR}">lost (not answering)</span>')
    util = latest.get("utilization_gpu_percent")
    if util is not None:
        mean = d.util_mean
        parts.append(f"{util:.0f}% busy" + (f" (mean {mean:.0f}%)" if mean is not None else ""))
    used, total = latest.get("memory_used_bytes"), latest.get("memory_total_bytes")
    if used is not None and total:
        parts.append(f"{units.gib(used)} / {units.gib(total)}" + (f" (peak {units.gib(d.memory_peak)})" if d.memory_peak else ""))
    if latest.get("temperature_c") is not None:
        parts.append(f"{latest['temperature_c']:.0f} °C")
    if latest.get("power_w") is not None:
        parts.append(f"{latest['power_w']:.0f} W")
    now = [r for r in latest.get("throttle_reasons") or () if r in SLOWDOWNS]
    if now:
        parts.append(f'<span style="{WARN}">throttled now: {escape(", ".join(LABELS.get(r, r) for r in now))}</span>')
    if d.throttled_s:
        spent = ", ".join(f"{LABELS.get(r, r)} {units.duration(s)}" for r, s in sorted(d.throttled_s.items(), key=lambda kv: -kv[1]))
        parts.append(f'<span style="{WARN}">throttled this run: {escape(spent)}</span>')
    if torch_dev is not None:
        parts.append(
            f"PyTorch cuda:{torch_dev.ordinal}: {units.gib(torch_dev.allocated_bytes)} allocated, "
            f"{units.gib(torch_dev.reserved_bytes)} reserved (peak {units.gib(torch_dev.peak_reserved_bytes)})"
        )
    return "<div>" + " · ".join(parts) + "</div>"


def torch_line(state: TorchState | None) -> str:
    if state is None:
        return ""
    if state.error:
        return f'<div style="{MUTED}">PyTorch {escape(state.version)}: could not read CUDA state ({escape(state.error)})</div>'
    if not state.cuda_initialized:
        return f'<div style="{MUTED}">PyTorch {escape(state.version)}: CUDA not initialised in this process (CPU only)</div>'
    return ""


@dataclass
class MonitorText:
    """What the training monitor's header shows; filled by the monitor on its thread."""

    title: str
    status: str
    status_detail: str | None = None
    steps_done: int | None = None  # a count, not the last step's number (monitor_header.steps_done)
    rows: int = 0
    total_steps: int | None = None
    epoch: str | None = None
    elapsed_s: float | None = None
    steps_per_s: float | None = None
    samples_per_s: float | None = None
    energy_j: float | None = None
    latest: Mapping[str, Any] = field(default_factory=dict)
    nonfinite: Mapping[str, tuple[float, float, int]] = field(default_factory=dict)  # key -> (step, value, count)
    backend: str | None = None
    backend_status: str | None = None
    backend_reason: str | None = None
    config_error: str | None = None
    devices: Sequence[DeviceTrace] = ()
    torch: TorchState | None = None
    advice: Sequence[Advice] = ()
    errors: Sequence[str] = ()
    notes: Sequence[str] = ()
    run_dir: str | None = None


def render_monitor(t: MonitorText) -> str:
    color = STATUS_COLORS.get(t.status, "#757575")
    backend_badge, backend_html = backend_line(t.backend, t.backend_status, t.backend_reason, t.config_error)
    head = f"<b>{escape(t.title)}</b>{badge(t.status, color)}{backend_badge}"
    lines = [f"<div>{head}</div>"]
    detail = t.status_detail or STATUS_HINTS.get(t.status)
    if detail:
        style = ERROR if t.status == "failed" else MUTED
        lines.append(f'<div style="{style}">{escape(detail)}</div>')
    progress = []
    if t.steps_done is not None:
        s = f"step {t.steps_done:,}"
        if t.total_steps:
            s += f" / {t.total_steps:,} ({min(1.0, t.steps_done / t.total_steps):.0%})"
        progress.append(s)
    if t.epoch:
        progress.append(f"epoch {t.epoch}")
    if t.steps_per_s:
        progress.append(units.rate(t.steps_per_s, "steps"))
    if t.samples_per_s:
        progress.append(units.rate(t.samples_per_s, "samples"))
    if t.elapsed_s is not None:
        progress.append(f"elapsed {units.duration(t.elapsed_s)}")
    if t.total_steps and t.steps_per_s and t.steps_done is not None and t.status == "running":
        left = max(0, t.total_steps - t.steps_done) / t.steps_per_s
        progress.append(f"ETA {units.duration(left)}")
    if t.energy_j is not None:
        progress.append(f"energy {units.energy(t.energy_j)}")
    if progress:
        lines.append("<div>" + " · ".join(progress) + "</div>")
    if t.latest:
        vals = " · ".join(f"{escape(k)} <b>{units.value(v)}</b>" for k, v in t.latest.items())
        lines.append(f"<div>{vals}</div>")
    for key, (step, value, count) in t.nonfinite.items():
        lines.append(
            f'<div style="{WARN}">{escape(key)} was {units.value(value)} at step {int(step):,}'
            f" (first of {count} non-finite value{'s' if count != 1 else ''}; not plotted)</div>"
        )
    lines.append(backend_html)
    torch_by_index = {d.nvml_index: d for d in (t.torch.devices if t.torch else ())}
    for d in t.devices:
        lines.append(device_line(d, torch_by_index.get(d.index)))
    lines.append(torch_line(t.torch))
    for a in t.advice:
        lines.append(f"<div><b>Tip:</b> {escape(a.text)}</div>")
    if t.errors:
        more = f" (+{len(t.errors) - 1} more)" if len(t.errors) > 1 else ""
        lines.append(f'<div style="{ERROR}">monitor problem: {escape(t.errors[-1])}{more}; your loop is not affected</div>')
    for note in t.notes:
        lines.append(f'<div style="{MUTED}">{escape(note)}</div>')
    if t.run_dir:
        lines.append(f'<div style="{MUTED}">run log: {escape(t.run_dir)}</div>')
    body = "".join(x for x in lines if x)
    return f'<div class="gpu-widgets-monitor" style="font-size:var(--jp-ui-font-size1, 13px);line-height:1.5">{body}</div>'


# Metrics snapshot_device_line words itself ("37% busy", "12.3 GiB / 80.0 GiB", "300 / 700 W").
HAND_WORDED = frozenset({"utilization", "memory", "temperature", "power"})


def snapshot_device_line(dev: Mapping[str, Any]) -> str:
    """One GPU of a live snapshot, for the dashboard."""
    parts = [f"<b>GPU {dev['index']}</b> {escape(dev.get('name') or '')}"]
    if dev.get("status") == "lost":
        parts.append(f'<span style="{ERROR}">lost (not answering)</span>')
        return "<div>" + " · ".join(parts) + "</div>"
    if dev.get("utilization_gpu_percent") is not None:
        parts.append(f"{dev['utilization_gpu_percent']:.0f}% busy")
    used, total = dev.get("memory_used_bytes"), dev.get("memory_total_bytes")
    if used is not None and total:
        parts.append(f"{units.gib(used)} / {units.gib(total)}")
    if dev.get("temperature_c") is not None:
        parts.append(f"{dev['temperature_c']:.0f} °C")
    if dev.get("power_w") is not None:
        limit = dev.get("power_limit_w")
        parts.append(f"{dev['power_w']:.0f}" + (f" / {limit:.0f} W" if limit else " W"))
    for m in shown_in(DASHBOARD):
        # The four above are worded by hand (as in the monitor's header); any other metric the
        # dashboard charts is named here too, in the catalogue's words.
        if m.id not in HAND_WORDED and dev.get(m.field) is not None:
            parts.append(f'<span title="{escape(m.help)}">{escape(m.label)} {escape(m.text(dev[m.field]))}</span>')
    slow = slowdown_names(dev.get("throttle_reasons"))  # a snapshot's reasons are NVML's bitmask
    if slow:
        parts.append(f'<span style="{WARN}">throttled: {escape(", ".join(LABELS.get(r, r) for r in slow))}</span>')
    procs = dev.get("processes")
    if procs:
        parts.append(f"{len(procs)} process{'es' if len(procs) != 1 else ''}")
    return "<div>" + " · ".join(parts) + "</div>"


def render_dashboard(snap: Mapping[str, Any] | None, watched: set[int] | None, window_s: float,
                     running: bool, config_error: str | None = None, missing: Sequence[int] = ()) -> str:
    state = badge("live" if running else "stopped", STATUS_COLORS["running" if running else "idle"])
    if snap is None and config_error is None:
        body = f'<div style="{MUTED}">waiting for the first sample…</div>'
        return f'<div class="gpu-widgets-dashboard"><div><b>GPUs</b>{state}</div>{body}</div>'
    snap = snap or {}
    backend_badge, backend_html = backend_line(snap.get("backend"), snap.get("status"), snap.get("reason"), config_error)
    info = []
    if snap.get("driver_version") and snap.get("backend") == "nvml":
        info.append(f"driver {escape(str(snap['driver_version']))}")
    if snap.get("cuda_driver_version") and snap.get("backend") == "nvml":
        info.append(f"CUDA {escape(str(snap['cuda_driver_version']))}")
    info.append(f"last {units.duration(window_s)}")
    lines = [f"<div><b>GPUs</b>{state}{backend_badge} <span style=\"{MUTED}\">{' · '.join(info)}</span></div>", backend_html]
    for dev in snap.get("devices", ()):
        if watched is None or dev["index"] in watched:
            lines.append(snapshot_device_line(dev))
    if missing:
        lines.append(f'<div style="{WARN}">no GPU with index {", ".join(map(str, missing))} here</div>')
    return '<div class="gpu-widgets-dashboard" style="line-height:1.5">' + "".join(x for x in lines if x) + "</div>"
