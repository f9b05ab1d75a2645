"""One card per GPU in the widgets' headers, in the sidebar's look: "GPU 0" and its name, then the
catalogue's metrics as small muted labels over big values, then throttling, loss and PyTorch.

Two sources: a run's ``DeviceTrace`` (the TrainingMonitor: with the run's mean and peak) and a
live snapshot's device (the dashboard). Classes only (header_css.py styles them), so the HTML
re-sent on a redraw stays small. Names and reasons from the system are escaped.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from html import escape
from typing import Any

from ..metrics.catalogue import Metric
from ..metrics.throttle import LABELS, SLOWDOWNS, slowdown_names
from ..runs.gpu_trace import DeviceTrace
from . import units

# A limit shown beside the value ("54.6 / 80.0 GiB") unless worded here, under the value.
LIMIT_WORDS = {"temperature_slowdown_c": "slows down at"}


def short_label(m: Metric) -> str:
    """The metric's label as it reads inside a GPU's card: "GPU busy" -> "busy"; "SM clock" stays."""
    label = m.label[4:] if m.label.startswith("GPU ") else m.label
    return label if label[1:2].isupper() else label[:1].lower() + label[1:]


def number(m: Metric, raw: float) -> str:
    """A field value in the metric's unit and digits, without the unit."""
    return f"{m.value(raw):.{m.decimals}f}"


def cell(label: str, value: str, sub: str = "", title: str = "") -> str:
    """A small muted label over a big value, with an optional muted note after it (all escaped)."""
    tip = f' title="{escape(title)}"' if title else ""
    note = f' <span class="gpuw-sub">{escape(sub)}</span>' if sub else ""
    return (f'<div class="gpuw-cell"{tip}><span class="gpuw-l">{escape(label)}</span> '
            f'<span class="gpuw-v">{escape(value)}</span>{note}</div>')


def metric_cell(m: Metric, values: Mapping[str, Any], sub: str = "") -> str:
    """``m``'s cell from a sample's fields: "54.6 / 80.0 GiB" where the metric has a limit field.
    No tooltip: the catalogue's help on every GPU's card would triple the header re-sent on a
    redraw (the charts' titles and the summary card carry it)."""
    if values.get(m.field) is None:
        return ""
    limit = values.get(m.y_max_field) if m.y_max_field else None
    words = LIMIT_WORDS.get(m.y_max_field or "")
    if limit and words:
        sub = " · ".join(x for x in (sub, f"{words} {m.text(limit)}") if x)
    return cell(short_label(m), value_text(m, values), sub)


def value_text(m: Metric, values: Mapping[str, Any]) -> str:
    """The value's words: "54.6 / 80.0 GiB" against a limit, "65 °C" where the limit is worded
    apart (the slowdown temperature); "—" when unknown."""
    raw = values.get(m.field)
    if raw is None:
        return "—"
    limit = values.get(m.y_max_field) if m.y_max_field else None
    if limit and not LIMIT_WORDS.get(m.y_max_field or ""):
        return f"{number(m, raw)} / {m.text(limit)}"
    return m.text(raw)


def card(index: int, name: str | None, cells: Iterable[str], notes: Iterable[str], lost: bool = False) -> str:
    head = f'<div class="gpuw-card-head"><b>GPU {index}</b> <span class="gpuw-name" title="{escape(name or "")}">{escape(name or "")}</span></div>'
    body = " ".join(c for c in cells if c)
    return (f'<div class="gpuw-card{" gpuw-lost" if lost else ""}">{head}'
            f'<div class="gpuw-cells">{body}</div>{"".join(notes)}</div>')


def note(text: str, kind: str = "gpuw-muted") -> str:
    return f'<div class="{kind}">{escape(text)}</div>'


def reasons_text(reasons: Iterable[str]) -> str:
    return ", ".join(LABELS.get(r, r) for r in reasons)


def lost_now(d: DeviceTrace) -> bool:
    """The GPU's newest sample said "lost" (or it was never read)."""
    return bool(d.lost[-1]) if len(d.lost) else bool(d.lost_samples and not d.latest)


def extra_of(m: Metric, d: DeviceTrace) -> str:
    """What the run adds under a value: the mean of busy, the peak of memory."""
    if m.field == "utilization_gpu_percent" and d.util_mean is not None:
        return f"mean {m.text(d.util_mean)}"
    if m.field == "memory_used_bytes" and d.memory_peak:
        return f"peak {units.gib(d.memory_peak)}"
    return ""


def device_line(d: DeviceTrace, torch_dev: Any | None = None, metrics: Iterable[Metric] = ()) -> str:
    """One GPU of a run, as a card: the latest values of ``metrics`` and the run's mean and peak."""
    latest = d.latest
    lost = lost_now(d)
    notes = []
    if lost:
        notes.append(note("lost (not answering)", "gpuw-error"))
    now = [r for r in latest.get("throttle_reasons") or () if r in SLOWDOWNS]
    if now and not lost:
        notes.append(note(f"throttled now: {reasons_text(now)}", "gpuw-warn"))
    if d.throttled_s:
        spent = ", ".join(f"{LABELS.get(r, r)} {units.duration(s)}" for r, s in sorted(d.throttled_s.items(), key=lambda kv: -kv[1]))
        notes.append(note(f"throttled this run: {spent}", "gpuw-warn"))
    if torch_dev is not None:
        notes.append(note(
            f"PyTorch cuda:{torch_dev.ordinal}: {units.gib(torch_dev.allocated_bytes)} allocated, "
            f"{units.gib(torch_dev.reserved_bytes)} reserved (peak {units.gib(torch_dev.peak_reserved_bytes)})"))
    cells = (metric_cell(m, latest, extra_of(m, d)) for m in metrics)
    return card(d.index, d.name, cells, notes, lost)


def snapshot_device_line(dev: Mapping[str, Any], metrics: Iterable[Metric] = ()) -> str:
    """One GPU of a live snapshot (the dashboard), as a card."""
    lost = dev.get("status") == "lost"
    notes = []
    if lost:
        notes.append(note("lost (not answering)", "gpuw-error"))
        return card(dev["index"], dev.get("name"), (), notes, lost)
    slow = slowdown_names(dev.get("throttle_reasons"))  # a snapshot's reasons are NVML's bitmask
    if slow:
        notes.append(note(f"throttled: {reasons_text(slow)}", "gpuw-warn"))
    cells = [metric_cell(m, dev) for m in metrics]
    procs = dev.get("processes")
    if procs:
        cells.append(cell("processes", f"{len(procs)}"))
    return card(dev["index"], dev.get("name"), cells, notes)
