"""What the GPUs did while one ``%%gpuwatch`` cell ran: a plain-text summary and the same as data.

Plain text, so it reads the same in JupyterLab, VS Code, a terminal IPython and a notebook
executed headless (nbclient, papermill). ``summary_html`` gives the same figures in the widgets'
look (a card per GPU, a table row per GPU from three GPUs on, as the monitor and dashboard do)
for front ends that render HTML; the text stays beside it. The data (``_gpuwatch``) keeps exact
figures and shows them rounded (``SummaryData``).
"""
from __future__ import annotations

import math
from html import escape
from typing import Any

from ..metrics.catalogue import SUMMARY, Metric, shown_in
from ..metrics.throttle import LABELS
from ..widgets import units
from ..runs.gpu_trace import DeviceTrace, GpuTrace
from ..widgets.gpu_cards import card, cell, note, short_label
from ..widgets.gpu_table import MAX_CARDS, row, table
from ..widgets.header_css import HEADER_CSS
from ..widgets.torch_probe import TorchState


_word = short_label  # the metric's label after "GPU 0 <name>:": "GPU busy" -> "busy"
# Shares of time (GPM): their mean over the cell says what the cell did, a peak says little.
MEAN_FIELDS = frozenset({"sm_active_percent", "tensor_active_percent"})
SHOWN_DIGITS = 6  # significant digits of a float when the data is shown: 54.59999999962747 -> 54.6


def _rounded(value: Any) -> Any:
    if isinstance(value, float) and math.isfinite(value):
        return float(f"{value:.{SHOWN_DIGITS}g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


class SummaryData(dict):
    """The summary as data (``_gpuwatch``): the figures stay exact (GiB from whole bytes carry
    binary noise), and are shown with 6 significant digits, as people read them."""

    def __repr__(self) -> str:
        return repr(_rounded(dict(self)))

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # IPython's display of ``_gpuwatch``
        p.pretty(_rounded(dict(self)))


def _mean(d: DeviceTrace, field: str) -> float | None:
    values = [v for v in d.columns.get(field, ()) if not math.isnan(v)]
    return sum(values) / len(values) if values else None


def _peak(d: DeviceTrace, field: str) -> float | None:
    """The highest value of a sample field over the cell: the running peaks the trace keeps (exact
    however long the cell), else the samples it still holds."""
    kept = {"utilization_gpu_percent": d.util_peak, "memory_used_bytes": d.memory_peak,
            "temperature_c": d.temperature_peak, "power_w": d.power_peak}
    if field in kept:
        return kept[field]
    values = [v for v in d.columns.get(field, ()) if not math.isnan(v)]
    return max(values) if values else None


def _figure(m: Metric, d: DeviceTrace, peak: float, change: float | None) -> str:
    """One metric's figure on a GPU's summary line, in the catalogue's words, unit and digits."""
    # Bytes shown in GiB: small amounts in MiB instead ("0.0 GiB" would say nothing).
    text = units.gib if m.field.endswith("_bytes") and m.unit == "GiB" else m.text
    mean = d.util_mean if m.field == "utilization_gpu_percent" else None
    if m.field in MEAN_FIELDS:
        mean = _mean(d, m.field)
    if mean is not None:
        return f"{_word(m)} mean {text(mean)} (peak {text(peak)})"
    out = f"{_word(m)} peak {text(peak)}"
    limit = d.memory_total if m.y_max_field == "memory_total_bytes" else d.latest.get(m.y_max_field or "")
    if limit:
        out += f" of {text(limit)}"
    if change:
        out += f" ({'+' if change > 0 else '-'}{text(abs(change))} during the cell)"
    return out


def summarize(trace: GpuTrace, duration_s: float, interval_s: float, torch: TorchState | None = None,
              config_error: str | None = None) -> tuple[str, dict[str, Any]]:
    data: dict[str, Any] = SummaryData({
        "duration_s": duration_s,
        "interval_s": interval_s,
        "backend": trace.backend,
        "status": trace.status,
        "reason": trace.reason,
        "gpus": [],
    })
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
    many = len(trace.devices) > MAX_CARDS  # "no throttling" said once, not on every GPU's line
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
        # Peaks in each metric's unit, by metric id: what the line prints, as data.
        gpu["peaks"] = {}
        gpu["means"] = {}  # the GPM shares' means (SM active, tensor active), by metric id
        data["gpus"].append(gpu)
        parts = []
        for m in shown_in(SUMMARY):
            peak = _peak(d, m.field)
            if peak is None:
                continue
            gpu["peaks"][m.id] = m.value(peak)
            if m.field in MEAN_FIELDS:
                gpu["means"][m.id] = m.value(_mean(d, m.field))
            change = gpu["memory_change_bytes"] if m.field == "memory_used_bytes" else None
            parts.append(_figure(m, d, peak, change))
        if d.energy_j:
            parts.append(f"energy {d.energy_j / 1000:.2f} kJ")
        if d.throttled_s:
            parts.append("throttled: " + ", ".join(f"{LABELS.get(r, r)} {units.duration(s)}" for r, s in d.throttled_s.items()))
        elif not many:
            parts.append("no throttling")
        if d.lost_samples:
            parts.append(f"LOST in {d.lost_samples} sample{'s' if d.lost_samples != 1 else ''}")
        lines.append(f"  GPU {index} {d.name or ''}: " + " · ".join(parts))
    if many and not any(d.throttled_s for d in trace.devices.values()):
        lines.append(f"  no throttling on any of the {len(trace.devices)} GPUs")
    if torch is not None and torch.cuda_initialized:
        for td in torch.devices:
            lines.append(
                f"  PyTorch cuda:{td.ordinal}: {units.gib(td.allocated_bytes)} allocated now, "
                f"peak {units.gib(td.peak_allocated_bytes)} since the process started (or the last reset of peak stats)"
            )
        data["torch"] = [vars(td) for td in torch.devices]
    return "\n".join(lines), data


def _figures(gpu: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    """A GPU's figure per summary metric id, as (label, value, note): the peak (busy, SM and tensor
    active: the mean, the peak as the note), in the catalogue's words and units."""
    out = {}
    for m in shown_in(SUMMARY):
        peak = gpu["peaks"].get(m.id)
        if peak is None:
            continue
        text = f"{peak:.{m.decimals}f} {m.unit}"
        mean = gpu["util_mean_percent"] if m.field == "utilization_gpu_percent" else gpu["means"].get(m.id)
        if mean is not None:
            out[m.id] = (f"{_word(m)} mean", f"{mean:.{m.decimals}f} {m.unit}", f"peak {text}")
        elif m.field == "memory_used_bytes":
            change = gpu["memory_change_bytes"]
            sub = f"{'+' if change > 0 else '-'}{units.gib(abs(change))} during the cell" if change else ""
            total = f" / {units.gib(gpu['memory_total_bytes'])}" if gpu["memory_total_bytes"] else ""
            out[m.id] = (f"{_word(m)} peak", units.gib(gpu["memory_peak_bytes"]) + total, sub)
        else:
            out[m.id] = (f"{_word(m)} peak", text, "")
    return out


def _cells(gpu: dict[str, Any]) -> list[str]:
    """A GPU's figures as a card's cells, then the energy."""
    helps = {m.id: m.help for m in shown_in(SUMMARY)}
    out = [cell(label, value, sub, helps[mid]) for mid, (label, value, sub) in _figures(gpu).items()]
    if gpu["energy_j"]:
        out.append(cell("energy", f"{gpu['energy_j'] / 1000:.2f} kJ"))
    return out


def _notes(gpu: dict[str, Any], many: bool) -> list[tuple[str, str]]:
    """(class, text) notes of a GPU: throttling (from three GPUs on, only where it happened: the
    text says "no throttling" once), lost samples."""
    out = []
    if gpu["throttled_s"]:
        spent = ", ".join(f"{LABELS.get(r, r)} {units.duration(s)}" for r, s in gpu["throttled_s"].items())
        out.append(("gpuw-warn", f"throttled: {spent}"))
    elif not many:
        out.append(("gpuw-muted", "no throttling"))
    if gpu["lost_samples"]:
        out.append(("gpuw-error", f"LOST in {gpu['lost_samples']} sample{'s' if gpu['lost_samples'] != 1 else ''}"))
    return out


def _table(gpus: list[dict[str, Any]]) -> str:
    """Many GPUs: a row each (gpu_table.py), a column per summary metric any GPU has, the energy
    with the notes."""
    figures = [_figures(gpu) for gpu in gpus]
    metrics = [m for m in shown_in(SUMMARY) if any(m.id in f for f in figures)]
    rows = []
    for gpu, fig in zip(gpus, figures):
        cells = [" ".join(x for x in (fig[m.id][1], fig[m.id][2] and f"({fig[m.id][2]})") if x) if m.id in fig else "—"
                 for m in metrics]
        notes = _notes(gpu, True)
        if gpu["energy_j"]:
            notes.insert(0, ("gpuw-muted", f"{gpu['energy_j'] / 1000:.2f} kJ"))
        rows.append(row(gpu["index"], gpu["name"], cells, notes, bool(gpu["lost_samples"])))
    means = [short_label(m) for m in metrics if m.field in MEAN_FIELDS or m.field == "utilization_gpu_percent"]
    said = f"{', '.join(means)}: mean (peak) over the cell; the others: peak" if means else "peaks over the cell"
    return f'<div class="gpuw-muted">{escape(said)}</div>{table(rows, metrics)}'


def summary_html(text: str, data: dict[str, Any]) -> str:
    """The summary in the widgets' look: the first line of ``text`` as the title (SIMULATED as a
    badge), a card per GPU, then the text's other lines (PyTorch, hints). Carries its own
    stylesheet: a cell summary may be the only gpu-widgets output on the page."""
    head, *rest = text.splitlines()
    simulated = " · SIMULATED GPUs (not real devices)"
    badge = ""
    if simulated in head:
        head = head.replace(simulated, "")
        badge = ' <span class="gpuw-badge gpuw-s-sim">SIMULATED</span>'
    gpus = data["gpus"]
    if len(gpus) > MAX_CARDS:
        grid = _table(gpus)
    else:
        cards = [card(gpu["index"], gpu["name"], _cells(gpu), [note(text, kind) for kind, text in _notes(gpu, False)],
                      lost=bool(gpu["lost_samples"])) for gpu in gpus]
        grid = f'<div class="gpuw-cards">{" ".join(cards)}</div>' if cards else ""
    lines = [line.strip() for line in rest if not line.startswith("  GPU ")]
    # The variable as plain text, not <code>: JupyterLab pads inline code, which read as
    # "( GPU_WIDGETS_BACKEND=simulated )".
    sim_note = ('<div class="gpuw-note">SIMULATED GPUs: these are not real devices '
                "(GPU_WIDGETS_BACKEND=simulated)</div>") if badge else ""
    body = "".join(f'<div class="gpuw-muted">{escape(x)}</div>' for x in lines if x)
    return (f"<style>{HEADER_CSS}</style><div class=\"gpuw-h gpu-widgets-summary\">"
            f'<div><span class="gpuw-htitle">{escape(head)}</span>{badge}</div>{sim_note}{grid}{body}</div>')
