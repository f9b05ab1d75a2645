"""The HTML row above a chart: its title, then one key per line (colour swatch, name, latest value).

Legends live outside the plot so they never hide data. The row is rebuilt from what the view
already holds (each line's last value) and sent only when its text changes; one key is a few
dozen bytes, so eight GPUs add well under a kilobyte to a redraw. Class names are stable for
tests and the browser checks: ``gpuw-head`` (the row), ``gpuw-title``, ``gpuw-legend``,
``gpuw-legend > span`` (one key; its ``<i>`` is the colour swatch).
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from html import escape

from .drawable import short_title

# The shaded styles: episodes (throttling, a lost GPU) and a band between two curves.
AREA_STYLES = ("region", "lost", "range")
DASHED = ("dashed", "dotted", "dash_dotted")
# Keys named once per chart, without a value: shaded episodes and alert marks (monitor_alerts).
MARKS = ("region", "lost", "alert")
_GPU_PREFIX = re.compile(r"^GPU \d+ ")
_GPU_INDEX = re.compile(r"^GPU (\d+)\b")


@dataclass
class Key:
    name: str
    color: str
    style: str
    value: float | None = None  # the latest finite value (a "range": its low end)
    high: float | None = None  # a "range": its high end
    shown: bool = True  # a region key appears once one of its episodes is drawn


def value_text(v: float | None, unit: str, decimals: int | None) -> str:
    """``92 %``, ``54.6 GiB``, ``0.05807``; an en dash when nothing is known."""
    if v is None or not math.isfinite(v):
        return "–"
    text = f"{v:.{decimals}f}" if decimals is not None else f"{v:.4g}"
    return f"{text} {unit}" if unit else text


def _swatch(key: Key) -> str:
    """The key's colour sample: an ``<i>`` (a line; class ``a``: an area, ``d``: a dashed line).
    Short markup on purpose: the row is resent whenever a value changes."""
    kind = ' class="a"' if key.style in AREA_STYLES else (' class="d"' if key.style in DASHED else "")
    return f'<i{kind} style="color:{escape(key.color)}"></i>'


def region_label(name: str) -> str:
    """A region's key names what it marks, once for all GPUs: "GPU 0 throttled" -> "throttled"."""
    return _GPU_PREFIX.sub("", name) or name


def _order(key: Key) -> tuple[int, int]:
    """Lines before shaded areas, GPU lines by index: a GPU whose line starts late (after a lost
    stretch) still reads in its place. Other keys keep the order they came in (a stable sort)."""
    found = _GPU_INDEX.match(key.name)
    return (1 if key.style in MARKS else 0, int(found.group(1)) if found else -1)


def render(title: str, keys: list[Key], unit: str, decimals: int | None,
           hints: Mapping[str, str] | None = None) -> str:
    """``hints``: a key's hover text by its name (a title attribute), for the keys that have one."""
    parts: list[str] = []
    seen_regions: set[str] = set()
    for key in sorted(keys, key=_order):
        if not key.shown:
            continue
        if key.style in MARKS:
            label = region_label(key.name)
            if label in seen_regions:
                continue
            seen_regions.add(label)
            parts.append(f'<span>{_swatch(key)}{escape(label)}</span>')
            continue
        if key.style == "range":
            value = f"{value_text(key.value, '', decimals)}–{value_text(key.high, unit, decimals)}"
        else:
            value = value_text(key.value, unit, decimals)
        hint = (hints or {}).get(key.name)
        tip = f' title="{escape(hint)}"' if hint else ""
        parts.append(f'<span{tip}>{_swatch(key)}{escape(short_title(key.name))} <b>{escape(value)}</b></span>')
    return (f'<div class="gpuw-title">{escape(short_title(title))}</div>'
            f'<div class="gpuw-legend">{"".join(parts)}</div>')
