"""What the snapshot view and its PNG both draw: the unit of the chart, the sites' labels and
colours, the header's sentence, and the table's rows (snapshot_view makes the widget from them,
snapshot_png the picture)."""
from __future__ import annotations

import os
from html import escape

from ..widgets import units
from ..widgets.view import PALETTE
from .snapshot import BEFORE, Analysis

OTHER_COLOR = "#7f7f7f"
PEAK_COLOR = "#ad1457"  # has a dark-theme variant (widgets/theme.DARK_VARIANTS)
TABLE_ROWS = 25  # the rest are summed into one row
PNG_ROWS = 10  # a picture stays one screen high


def unit_of(analysis: Analysis) -> tuple[str, float]:
    """The chart's y unit: GiB from 1 GiB peak up, else MiB (bytes are unreadable ticks)."""
    return ("GiB", units.GIB) if analysis.peak_bytes >= units.GIB else ("MiB", units.MIB)


def short_site(site: str, parts: int = 2) -> str:
    """``/home/me/project/model.py:41`` -> ``project/model.py:41``."""
    if site.startswith("("):
        return site
    return os.sep.join(site.replace("\\", "/").split("/")[-parts:]) if "/" in site or "\\" in site else site


def colors(analysis: Analysis) -> list[str]:
    return [OTHER_COLOR if label == "other" else PALETTE[k % len(PALETTE)] for k, (label, _) in
            enumerate(analysis.series)]


def x_label(analysis: Analysis) -> str:
    return "seconds since the first trace entry" if analysis.timed else "trace entry"


def seconds(s: float) -> str:
    """A moment in the recording: ms below 1 s (a training step's allocations are ms apart)."""
    return f"{s * 1000:.3g} ms" if s < 1 else units.duration(s)


def when(analysis: Analysis) -> str:
    return seconds(analysis.peak_time_s) if analysis.timed else f"entry {analysis.peak_index:,}"


def summary(analysis: Analysis, name: str) -> str:
    """One line of plain text: the peak, when, where most of it came from."""
    top = analysis.sites_at_peak[0] if analysis.sites_at_peak else None
    most = f"; largest at the peak: {top['site']} ({units.gib(top['bytes'])})" if top else ""
    return (f"peak {units.gib(analysis.peak_bytes)} allocated on device {analysis.device} at "
            f"{when(analysis)}{most} ({analysis.entries:,} trace entries, {name})")


def table_rows(analysis: Analysis, limit: int = TABLE_ROWS) -> list[list[str]]:
    """[site, function, size, count, share] per site at the peak, largest first, ``limit`` rows
    and one row summing the rest."""
    peak = analysis.peak_bytes or 1
    rows, rest = analysis.sites_at_peak[:limit], analysis.sites_at_peak[limit:]
    out = [[r["site"], r["function"], units.gib(r["bytes"]), f"{r['count']:,}", f"{100 * r['bytes'] / peak:.0f} %"]
           for r in rows]
    if rest:
        nbytes = sum(r["bytes"] for r in rest)
        out.append([f"… {len(rest):,} more sites", "", units.gib(nbytes), f"{sum(r['count'] for r in rest):,}",
                    f"{100 * nbytes / peak:.0f} %"])
    return out


def header_html(analysis: Analysis, name: str) -> str:
    first = '<span class="gpuw-htitle">Where the memory went</span>'
    cells = [("peak allocated", units.gib(analysis.peak_bytes)), ("at", when(analysis)),
             ("device", str(analysis.device)), ("sites at the peak", f"{len(analysis.sites_at_peak):,}")]
    row = "".join(f'<span><span class="gpuw-l">{escape(k)}</span> <span class="gpuw-v">{escape(v)}</span></span>'
                  for k, v in cells)
    notes = [f'<div class="gpuw-sub">{escape(name)} · {analysis.entries:,} trace entries</div>']
    for oom in analysis.ooms[:3]:
        asked = oom.get("requested_bytes")
        free = oom.get("device_free_bytes")
        at = seconds(oom["time_s"]) if analysis.timed else f"entry {oom['index']:,}"
        notes.append(f'<div class="gpuw-note gpuw-err">out of memory at {escape(at)}: asked for '
                     f'{escape(units.gib(asked if isinstance(asked, int) else None))}, '
                     f'{escape(units.gib(free if isinstance(free, int) else None))} free on the device</div>')
    if any(r["site"] == BEFORE for r in analysis.sites_at_peak):
        notes.append('<div class="gpuw-note">Part of the memory was allocated before the recording began '
                     '(or before the oldest entry the allocator kept): its sites are unknown.</div>')
    return f'<div class="gpuw-h"><div class="gpuw-row">{first}{row}</div>{"".join(notes)}</div>'


def table_html(analysis: Analysis) -> str:
    head = ('<th>allocation site</th><th>size</th><th>count</th><th>share</th>'
            '<th style="text-align:left">function</th>')  # over its column, which reads from the left
    body = []
    for site, function, size, count, share in table_rows(analysis):
        body.append(f'<tr><td title="{escape(site)}">{escape(short_site(site, 3))}</td><td>{escape(size)}</td>'
                    f"<td>{escape(count)}</td><td>{escape(share)}</td><td>{escape(function)}</td></tr>")
    if not body:
        body.append('<tr><td colspan="5">nothing allocated at the peak</td></tr>')
    caption = '<div class="gpuw-l">Alive at the peak, by allocation site (the innermost frame outside PyTorch and Python), largest first</div>'
    return f'<div class="gpuw-scroll">{caption}<table class="gpuw-table"><tr>{head}</tr>{"".join(body)}</table></div>'


def legend_html(analysis: Analysis, unit: str, scale: float) -> str:
    keys = []
    for (label, curve), color in zip(analysis.series, colors(analysis)):
        at_peak = float(curve[analysis.peak_sample]) if curve.size else 0.0
        keys.append(f'<span><i class="a" style="color:{color}"></i>{escape(short_site(label))} '
                    f'<b>{at_peak / scale:.2f} {unit}</b></span>')
    return ('<div class="gpuw-title">memory by site, at the peak</div>'
            f'<div class="gpuw-legend">{"".join(keys)}</div>')

