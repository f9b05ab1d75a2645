"""``show_memory_snapshot(path_or_snapshot)``: where the memory went, drawn by gpu-widgets itself.

The widget: a header with the peak, a bqplot chart of allocated memory over the recording stacked
by the top allocation sites (a band per site, "other" on top) with the word "peak" at the peak,
and the table of the sites alive at the peak, largest first. Everything is sent from the kernel
(the widgets kit's CSS and bqplot): nothing is loaded from the network, so it works offline and
on a locked-down JupyterHub. The chart holds at most ``points`` moments (see snapshot.py), sent
as float32 arrays: a 10^6-entry trace sends tens of KB. The PNG (snapshot_png) draws the same.
"""
from __future__ import annotations

import base64
import copy
import os
from pathlib import Path
from typing import Any

import numpy as np
from bqplot import Axis, Figure, Label, LinearScale, Lines
from ipywidgets import HTML, Layout, VBox

from ..widgets import cell_hooks
from ..widgets.chart_card import FIG_MARGIN
from ..widgets.png_cards import CachedPng
from ..widgets.theme import style_widget, themed
from ..widgets.ticks import nice_ticks
from . import snapshot_parts as parts
from .snapshot import Analysis, analyse_snapshot
from .snapshot_file import read_snapshot

BAND_OPACITY = 0.55


class MemorySnapshot:
    """A snapshot's answer to "where did the memory go?".

    * ``peak_bytes``, ``peak_time_s`` (seconds since the first trace entry; None when the
      snapshot has no ``time_us``), ``device``;
    * ``sites_at_peak``: one dict per allocation site alive at the peak, largest first: ``site``
      ("file:line"), ``function``, ``bytes``, ``count``;
    * ``widget``; ``to_png(path=None)`` (needs matplotlib); ``summary`` (one line of text).
    """

    def __init__(self, analysis: Analysis, name: str) -> None:
        self.analysis, self.name = analysis, name
        self.problems: list[str] = []
        self._png = CachedPng()
        self._widgets: list[Any] = []
        self._widget = self._build()

    @property
    def peak_bytes(self) -> int:
        return self.analysis.peak_bytes

    @property
    def peak_time_s(self) -> float | None:
        return self.analysis.peak_time_s if self.analysis.timed else None

    @property
    def device(self) -> int:
        return self.analysis.device

    @property
    def sites_at_peak(self) -> list[dict[str, Any]]:
        return copy.deepcopy(self.analysis.sites_at_peak)

    @property
    def summary(self) -> str:
        return parts.summary(self.analysis, self.name)

    @property
    def widget(self) -> Any:
        return self._widget

    def _build(self) -> VBox:
        a = self.analysis
        unit, scale = parts.unit_of(a)
        xs = a.times_s.astype(np.float32)
        x_scale = LinearScale(allow_padding=False)
        top_gib = a.peak_bytes / scale
        y_ticks = nice_ticks(0.0, top_gib * 1.12 or 1.0, 5)
        y_scale = LinearScale(min=0.0, max=max(top_gib * 1.15, max(y_ticks, default=1.0), 1e-9), allow_padding=False)
        marks: list[Any] = []
        floor = np.zeros(xs.shape, np.float64)
        step_x = np.repeat(xs, 2)[1:]  # memory changes at an entry and holds until the next: steps
        for (label, curve), color in zip(a.series, parts.colors(a)):
            ceiling = floor + curve
            band = np.repeat(np.stack([floor / scale, ceiling / scale]), 2, axis=1)[:, :-1].astype(np.float32)
            marks.append(Lines(x=step_x, y=band, scales={"x": x_scale, "y": y_scale}, colors=[color, color],
                               fill="between", fill_colors=[color], fill_opacities=[BAND_OPACITY],
                               opacities=[0.0, 0.0], stroke_width=0, labels=[label], display_legend=False))
            floor = ceiling
        peak_x, peak_y = float(xs[a.peak_sample]) if xs.size else 0.0, a.peak_bytes / scale
        ink = themed(parts.PEAK_COLOR)
        marks.append(Lines(x=np.array([peak_x, peak_x], np.float32), y=np.array([0.0, peak_y], np.float32),
                           scales={"x": x_scale, "y": y_scale}, colors=[ink], line_style="dashed",
                           stroke_width=1.2, labels=["peak"], display_legend=False))
        marks.append(Label(x=[peak_x], y=[peak_y], text=[f"peak {peak_y:.2f} {unit}"], colors=[ink],
                           scales={"x": x_scale, "y": y_scale}, align="middle", y_offset=-8,
                           default_size=12, font_weight="bold"))
        lo, hi = (float(xs[0]), float(xs[-1])) if xs.size else (0.0, 1.0)
        x_scale.min, x_scale.max = lo, hi if hi > lo else lo + 1.0
        x_axis = Axis(scale=x_scale, side="bottom", label=parts.x_label(a), tick_format="~g", label_offset="30px",
                      tick_values=np.array(nice_ticks(lo, hi if hi > lo else lo + 1.0, 6)))
        y_axis = Axis(scale=y_scale, side="left", label=unit, tick_format="~g", label_offset="40px",
                      tick_values=np.array(y_ticks))
        figure = Figure(marks=marks, axes=[x_axis, y_axis], title="allocated memory", title_style={"display": "none"},
                        animation_duration=0, fig_margin=FIG_MARGIN,
                        layout=Layout(width="100%", height="300px", min_width="0"))
        head = HTML(value=parts.legend_html(a, unit, scale))
        head.add_class("gpuw-head")
        card = VBox([head, figure], layout=Layout(min_width="0"))
        card.add_class("gpuw-chart")
        header = HTML(value=parts.header_html(a, self.name))
        table = HTML(value=parts.table_html(a))
        style = style_widget()
        box = VBox([header, card, table, style], layout=Layout(width="100%"))
        box.add_class("gpuw")
        self._widgets = [*marks, x_scale, y_scale, x_axis, y_axis, figure, head, card, header, table, style, box]
        return box

    def figure(self) -> Any:
        """The static picture as a matplotlib Figure (needs matplotlib)."""
        from .snapshot_png import draw_snapshot

        return draw_snapshot(self.analysis, self.name)

    def to_png(self, path: str | os.PathLike | None = None) -> bytes:
        """The static picture as PNG bytes; written to ``path`` too when given (needs matplotlib)."""
        from .snapshot_png import render_snapshot

        png = render_snapshot(self.analysis, self.name)
        if path is not None:
            Path(path).write_bytes(png)
        return png

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = self._widget._repr_mimebundle_(**kwargs)
        bundle["text/plain"] = f"{self!r}\n{self.summary}\n" + "\n".join(
            f"  {row[0]}  {row[2]}  x{row[3]}  {row[4]}  {row[1]}" for row in parts.table_rows(self.analysis))
        png = self._png.get("once", self.to_png, self.problems.append)  # for viewers without widgets
        if png is not None:
            bundle["image/png"] = base64.b64encode(png).decode("ascii")
        return bundle

    def __repr__(self) -> str:
        return (f"<MemorySnapshot device {self.device}: peak {parts.units.gib(self.peak_bytes)}, "
                f"{len(self.analysis.sites_at_peak)} sites at the peak>")

    def close(self) -> None:
        """Close the widgets (the front end forgets them)."""
        for w in self._widgets:
            w.close()


def show_memory_snapshot(path_or_snapshot: Any, *, device: int | None = None, display: bool = True,
                         top: int = 6, points: int = 1200) -> MemorySnapshot:
    """Show where the memory went in a PyTorch memory snapshot, with no network access.

    ``path_or_snapshot``: the pickle ``torch.cuda.memory._dump_snapshot(path)`` wrote (read with a
    reader that refuses anything but plain data: see snapshot_file), or the dict
    ``torch.cuda.memory._snapshot()`` returned. ``device``: the device's trace to show (default:
    the one with the largest peak). ``top``: the sites drawn as their own band (the rest is
    "other"); ``points``: the most moments the chart holds. ``display``: show it now (in a
    notebook). Raises SnapshotError (a ValueError naming the file) for a file that is not a
    readable snapshot. Returns a :class:`MemorySnapshot`.
    """
    for name, value, lo, hi in (("top", top, 1, 20), ("points", points, 16, 20_000)):
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise ValueError(f"{name} must be a whole number from {lo} to {hi}, got {value!r}")
    snapshot, name = read_snapshot(path_or_snapshot)
    result = MemorySnapshot(analyse_snapshot(snapshot, device, top=top, points=points), name)
    if display and cell_hooks.in_kernel():
        from IPython.display import display as show

        show(result)
    return result
