"""Many GPUs drawn each (``gpus="all"`` on a node): one table row per GPU instead of a card each.

Eight cards stack four deep above the charts and make the header re-sent on a redraw several
kilobytes; a row per GPU reads like the sidebar's overview, keeps every GPU in sight and costs
a third. Cells hold the same words as the cards (gpu_cards.py); notes (throttled, lost,
PyTorch) go in the last column. Classes only, styled by header_css.py.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any

from ..metrics.catalogue import Metric
from ..metrics.throttle import SLOWDOWNS, slowdown_names
from ..runs.gpu_trace import DeviceTrace
from . import units
from .gpu_cards import lost_now, reasons_text, short_label, value_text

# Cards up to this many GPUs, a table beyond: two cards sit side by side in one row.
MAX_CARDS = 2


def _short(name: str | None) -> str:
    """"NVIDIA H100 80GB HBM3" -> "H100 80GB HBM3": the vendor is the same on every row (the
    full name is the cell's tooltip); "Simulated" stays."""
    return (name or "").replace("NVIDIA ", "", 1)


def row(index: int, name: str | None, cells: Sequence[str], notes: Iterable[tuple[str, str]], lost: bool) -> str:
    head = (f'<td><b>GPU {index}</b> <span class="gpuw-name" title="{escape(name or "")}">'
            f"{escape(_short(name))}</span></td>")
    body = "".join(f"<td>{escape(c)}</td>" for c in cells)
    said = " · ".join(f'<span class="{kind}">{escape(text)}</span>' for kind, text in notes)
    return f'<tr{" class=gpuw-lost" if lost else ""}>{head}{body}<td>{said}</td></tr>'


def table(rows: Sequence[str], metrics: Sequence[Metric]) -> str:
    labels = "".join(f"<th>{escape(short_label(m))}</th>" for m in metrics)
    # In a scroller: a narrow notebook scrolls the table rather than pushing the header wide.
    return (f'<div class="gpuw-scroll"><table class="gpuw-table"><thead><tr><th>GPU</th>{labels}<th></th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div>')


def trace_rows(devices: Sequence[DeviceTrace], metrics: Sequence[Metric], torch_by_index: Mapping[int, Any]) -> str:
    """A run's GPUs (TrainingMonitor): latest values, with the busy mean and memory peak as notes."""
    rows = []
    for d in devices:
        lost = lost_now(d)
        notes: list[tuple[str, str]] = []
        if lost:
            notes.append(("gpuw-error", "lost"))
        now = [r for r in d.latest.get("throttle_reasons") or () if r in SLOWDOWNS]
        if now and not lost:
            notes.append(("gpuw-warn", f"throttled: {reasons_text(now)}"))
        elif d.throttled_s:
            notes.append(("gpuw-warn", f"throttled {units.duration(sum(d.throttled_s.values()))} this run"))
        torch_dev = torch_by_index.get(d.index)
        if torch_dev is not None:
            notes.append(("gpuw-muted", f"PyTorch {units.gib(torch_dev.allocated_bytes)}"))
        cells = ["—" if lost else value_text(m, d.latest) for m in metrics]
        rows.append(row(d.index, d.name, cells, notes, lost))
    return table(rows, metrics)


def snapshot_rows(devices: Sequence[Mapping[str, Any]], metrics: Sequence[Metric]) -> str:
    """A live snapshot's GPUs (GpuDashboard)."""
    rows = []
    for dev in devices:
        lost = dev.get("status") == "lost"
        notes: list[tuple[str, str]] = []
        if lost:
            notes.append(("gpuw-error", "lost (not answering)"))
        slow = [] if lost else slowdown_names(dev.get("throttle_reasons"))
        if slow:
            notes.append(("gpuw-warn", f"throttled: {reasons_text(slow)}"))
        procs = dev.get("processes")
        if procs:
            notes.append(("gpuw-muted", f"{len(procs)} process{'es' if len(procs) != 1 else ''}"))
        cells = ["—" if lost else value_text(m, dev) for m in metrics]
        rows.append(row(dev["index"], dev.get("name"), cells, notes, lost))
    return table(rows, metrics)
