"""The text part of the widgets, as HTML: badges, stats, the backend's line, GPU cards, and the
dashboard's header (the TrainingMonitor's is monitor/monitor_text, built from these pieces).

Pure functions of plain data, so tests read exactly what a user reads. Everything that came from
the user or the system (titles, keys, error messages, GPU names) is escaped. The look (the
sidebar's: badges, small muted labels before big values, a card per GPU) is CSS classes styled by
header_css.py with JupyterLab's theme variables, sent once per widget: a redraw re-sends words and
class names, not styles.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from ..sampling.stall import STALE
from ..metrics.catalogue import DASHBOARD, Metric, shown_in
from ..metrics.fields import GPM_FIELDS
from . import units
from .gpu_cards import device_line, snapshot_device_line
from .gpu_table import MAX_CARDS, snapshot_rows
from .gpu_summary import from_snapshot, summary_html
from .torch_probe import TorchState

__all__ = ["render_dashboard", "known_somewhere", "gpus_html", "stat", "device_line", "snapshot_device_line",
           "backend_line", "badge", "torch_line"]


def badge(text: str, kind: str) -> str:
    """A small coloured word (status, SIMULATED, STALE); ``kind`` picks the colour (header_css)."""
    return f'<span class="gpuw-badge gpuw-s-{kind}">{escape(text)}</span>'


def stat(label: str, value: str, sub: str = "") -> str:
    """A muted label before a big value, on one line ("step 300 / 300"): read as a phrase."""
    extra = f' <span class="gpuw-sub">{escape(sub)}</span>' if sub else ""
    return f'<span><span class="gpuw-l">{escape(label)}</span> <span class="gpuw-v">{escape(value)}</span>{extra}</span>'


def backend_line(backend: str | None, status: str | None, reason: str | None, config_error: str | None) -> tuple[str, str]:
    """(badge html, line html) describing where GPU readings come from."""
    if config_error:
        return "", f'<div class="gpuw-note gpuw-err">GPU monitoring off: {escape(config_error)}</div>'
    if status == STALE:
        # ``reason`` is stall.stale_text: the sample's age and the call the sampler waits on.
        sim_badge, sim_line = backend_line(backend, None, None, None)
        return sim_badge + badge("STALE", "stale"), sim_line + (
            f'<div class="gpuw-warn">GPU readings are stale: {escape(reason or "no new sample")}.'
            " The GPU values shown are from before then.</div>"
        )
    if backend == "simulated":
        # The sidebar's treatment: an orange badge and a muted sentence, readable in both themes.
        return badge("SIMULATED", "sim"), (
            # Plain text, not <code>: JupyterLab's padding of inline code read as "( ... )".
            '<div class="gpuw-note">SIMULATED GPUs: these are not real devices '
            "(GPU_WIDGETS_BACKEND=simulated)</div>"
        )
    if status == "no_gpu":
        return badge("NO GPU", "idle"), (
            f'<div class="gpuw-muted">No GPU: {escape(reason or "no NVIDIA driver found")}.'
            " Metrics still plot.</div>"
        )
    return "", ""


def gpus_html(cards: Sequence[str]) -> str:
    return f'<div class="gpuw-cards">{" ".join(cards)}</div>' if cards else ""


def torch_line(state: TorchState | None) -> str:
    if state is None:
        return ""
    if state.error:
        return f'<div class="gpuw-muted">PyTorch {escape(state.version)}: could not read CUDA state ({escape(state.error)})</div>'
    if not state.cuda_initialized:
        return f'<div class="gpuw-muted">PyTorch {escape(state.version)}: CUDA not initialised in this process (CPU only)</div>'
    return ""


def known_somewhere(metrics: Sequence[Metric], values: Sequence[Mapping[str, Any]]) -> list[Metric]:
    """``metrics`` less the GPM ones no GPU shown has a value for: a GPU without GPM (or before
    its second read) gets no "SM active —" column or cell."""
    return [m for m in metrics if m.field not in GPM_FIELDS or any(v.get(m.field) is not None for v in values)]


def render_dashboard(snap: Mapping[str, Any] | None, watched: set[int] | None, window_s: float,
                     running: bool, config_error: str | None = None, missing: Sequence[int] = (),
                     summary: bool = False) -> str:
    """The dashboard's header: state, backend, then a card per GPU shown (or one summary card)."""
    state = badge("live" if running else "stopped", "live" if running else "idle")
    title = f'<span class="gpuw-htitle">GPUs</span> {state}'
    if snap is None and config_error is None:
        body = '<div class="gpuw-muted">waiting for the first sample…</div>'
        return f'<div class="gpuw-h gpu-widgets-dashboard"><div>{title}</div>{body}</div>'
    snap = snap or {}
    backend_badge, backend_html = backend_line(snap.get("backend"), snap.get("status"), snap.get("reason"), config_error)
    info = []
    if snap.get("driver_version") and snap.get("backend") == "nvml":
        info.append(f"driver {escape(str(snap['driver_version']))}")
    if snap.get("cuda_driver_version") and snap.get("backend") == "nvml":
        info.append(f"CUDA {escape(str(snap['cuda_driver_version']))}")
    info.append(f"last {units.duration(window_s)}")
    lines = [f'<div>{title}{backend_badge} <span class="gpuw-muted">{" · ".join(info)}</span></div>', backend_html]
    devices = [dev for dev in snap.get("devices", ()) if watched is None or dev["index"] in watched]
    metrics = known_somewhere(shown_in(DASHBOARD), devices)
    if summary and devices:
        lines.append(summary_html([from_snapshot(dev) for dev in devices], metrics))
    elif len(devices) > MAX_CARDS:
        lines.append(snapshot_rows(devices, metrics))
    else:
        lines.append(gpus_html([snapshot_device_line(dev, metrics) for dev in devices]))
    if missing:
        lines.append(f'<div class="gpuw-warn">no GPU with index {", ".join(map(str, missing))} here</div>')
    return '<div class="gpuw-h gpu-widgets-dashboard">' + "\n".join(x for x in lines if x) + "</div>"
