"""What both PNG pictures (a run's charts: monitor/static_image; a view's last frame: view_png)
draw the same way: the widget's line styles in matplotlib's words, the muted colour, a card's
head above its plot, and the cache that draws a picture once per state.
"""
from __future__ import annotations

from typing import Any, Callable

from .drawable import LEGEND_CHARS, short_title

STYLES = {"solid": "-", "dashed": "--", "dotted": ":"}  # the widget's line styles in matplotlib's words
MUTED = "#616161"


def card_head(ax: Any, title: str) -> None:
    """The widget's card head: the title, small and muted, over a legend row with the latest
    values, both above the plot (never a legend box over the data)."""
    labels = ax.get_legend_handles_labels()[1]
    per_row = 4 if max(map(len, labels), default=0) <= 14 else 3  # keep the row within the plot's width
    leg = ax.legend(title=short_title(title, LEGEND_CHARS).upper(), loc="lower left", bbox_to_anchor=(0.0, 1.0), ncols=max(1, min(len(labels), per_row)),
                    frameon=False, fontsize=7, title_fontsize=7, alignment="left", borderaxespad=0.2,
                    handlelength=1.4, columnspacing=1.0)
    leg.get_title().set_color(MUTED)


class CachedPng:
    """A picture drawn once per state of what it shows (key) and kept: a notebook asks for the
    output's representation more than once."""

    def __init__(self) -> None:
        self.key: Any = None
        self.png: bytes | None = None

    def get(self, key: Any, draw: Callable[[], bytes] | None, problem: Callable[[str], None]) -> bytes | None:
        """The PNG for ``key``; ``draw`` None: nothing to draw. None without matplotlib."""
        if key == self.key:
            return self.png
        png = None
        if draw is not None:
            try:
                png = draw()
            except ImportError:
                png = None  # no matplotlib: the text/plain line is the fallback
            except Exception as exc:
                problem(f"drawing the static image: {type(exc).__name__}: {exc}")
        self.key, self.png = key, png
        return png
