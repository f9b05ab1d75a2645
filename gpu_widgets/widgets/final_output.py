"""What a widget's output becomes once it stops: its picture and its header, without the widget.

A saved notebook keeps outputs, not widget models (JupyterLab does not save widget state by
default): an output that still holds the widget mime type reopens as "Error displaying widget:
model not found". So when a monitor or a dashboard stops, its display is updated in place
(IPython's ``display_id``) with a bundle of plain types only:

- ``text/html``: the header's HTML (with the header's CSS) over the picture as an ``<img>``;
  front ends that render HTML (JupyterLab, Notebook 7, VS Code, nbviewer) show this one;
- ``image/png``: the same picture, for those that prefer images (nbconvert to PDF, GitHub);
- ``text/plain``: the object's repr.

The PNG is drawn on a light background (the kernel does not know the front end's theme). In
JupyterLab's dark theme the HTML inverts it (and turns the hues back), so the picture sits on a
dark card as the live widget did; where no theme says "dark" it stays as drawn.
"""
from __future__ import annotations

import base64
from html import escape
from typing import Any

from .header_css import HEADER_CSS

PICTURE_CSS = """
.gpuw-static{max-width:100%}
.gpuw-static img.gpuw-png{display:block;max-width:100%;height:auto;margin:4px 0;border:1px solid var(--jp-border-color2,#e0e0e0);border-radius:4px}
[data-jp-theme-light='false'] .gpuw-static img.gpuw-png{filter:invert(0.92) hue-rotate(180deg);border-color:transparent}
"""


def static_bundle(header_html: str, png: bytes, text: str, alt: str) -> dict[str, Any]:
    """The output of a stopped widget: header and picture as HTML, the PNG, the repr."""
    b64 = base64.b64encode(png).decode("ascii")
    html = (f'<div class="gpuw gpuw-static"><style>{HEADER_CSS}{PICTURE_CSS}</style>{header_html}'
            f'<img class="gpuw-png" alt="{escape(alt, quote=True)}" src="data:image/png;base64,{b64}"></div>')
    return {"text/plain": text, "text/html": html, "image/png": b64}

