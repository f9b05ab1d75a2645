"""The comparison's header: its title, a key naming each run in its colour, and the table of the
runs' summaries (the same cells go into the static PNG).

Classes are the monitor's (header_css): ``gpuw-h`` for the header, ``gpuw-legend`` for the keys
(the colour swatch is its ``<i>``), ``gpuw-table`` inside ``gpuw-scroll`` for the table, so the
comparison reads like the monitor in light and dark themes.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from ..widgets import units
from .compare_runs import COUNTER, NO_GPU, ComparedRun
from ..widgets.drawable import short_title

COLUMNS = ("run", "status", "steps", "duration", "steps/s", "samples/s", "energy", "peak memory")


def _energy(row: Mapping[str, Any]) -> str:
    if row["energy_from"] == NO_GPU:
        return NO_GPU
    text = units.energy(row["energy_j"])
    return text if row["energy_from"] in (None, COUNTER) else f"{text} *"  # *: see the table's note


def table_cells(summary: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> tuple[list[str], list[list[str]]]:
    """The table's head and one row of text per run: the columns above (and "ranks" after the
    status when a launch is among them), then the final value of each charted key ("–" where a run
    never logged it)."""
    ranks = any(row["world_size"] > 1 for row in summary)  # a column only when a launch is compared
    head = [*COLUMNS[:2], *(["ranks"] if ranks else []), *COLUMNS[2:], *(f"final {short_title(k)}" for k in keys)]
    rows = []
    for row in summary:
        steps = row["steps"]
        rows.append([
            row["run"], row["status"], *([str(row["world_size"])] if ranks else []),
            "–" if steps is None else f"{steps:,}", units.duration(row["duration_s"]),
            units.rate(row["steps_per_s"], "steps").removesuffix(" steps/s"),
            units.rate(row["samples_per_s"], "samples").removesuffix(" samples/s"),
            _energy(row), units.gib(row["peak_memory_bytes"]),
            *(units.value(row["final"].get(k)) for k in keys),
        ])
    return head, rows


def energy_note(summary: Sequence[Mapping[str, Any]]) -> str:
    """What the energy column is made of: the GPUs' energy counters, or (marked *) power
    integrated over time where a GPU has no counter."""
    ways = {row["energy_from"] for row in summary if row["energy_from"] not in (None, NO_GPU)}
    if not ways:
        return "energy: no GPU samples with power or an energy counter"
    if ways == {COUNTER}:
        return "energy: from the GPUs' energy counters"
    return "energy: from the GPUs' energy counters; * power integrated over time (a GPU without a counter)"


def header_html(title: str, runs: Sequence[ComparedRun], summary: Sequence[Mapping[str, Any]],
                keys: Sequence[str], x_axis: str) -> str:
    keys_html = "".join(
        f'<span><i style="color:{escape(run.color)}"></i>{escape(run.label)}'
        f'{"" if run.source is None else f" <span class=gpuw-sub>{escape(str(run.source))}</span>"}</span>'
        for run in runs)
    head, rows = table_cells(summary, keys)
    th = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = []
    for run, cells in zip(runs, rows):
        first = f'<span class="gpuw-legend" style="display:inline"><i style="color:{escape(run.color)}"></i></span>{escape(cells[0])}'
        body.append(f"<tr><td>{first}</td>" + "".join(f"<td>{escape(c)}</td>" for c in cells[1:]) + "</tr>")
    axis = "by step" if x_axis == "step" else "by time since each run's start"
    return (
        f'<div class="gpuw-h"><div class="gpuw-row"><span class="gpuw-htitle">{escape(short_title(title))}</span>'
        f'<span class="gpuw-muted">{len(runs)} runs, {axis}</span></div>'
        f'<div class="gpuw-legend gpuw-runs">{keys_html}</div>'
        f'<div class="gpuw-scroll"><table class="gpuw-table gpuw-compare"><tr>{th}</tr>{"".join(body)}</table></div>'
        f'<div class="gpuw-sub">{escape(energy_note(summary))}; GPU charts: the mean of each run\'s GPUs</div></div>'
    )
