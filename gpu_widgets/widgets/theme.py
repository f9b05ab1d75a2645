"""The widgets' look in JupyterLab's light and dark themes: one ``<style>`` sent once per widget.

Charts sit in cards like the sidebar's (``labextension/style/base.css``): the theme's layout and
border colours, a small upper-case muted title, the legend row above the plot. Every colour is a
JupyterLab theme variable with a light fallback for front ends without them.

Why bqplot's words turned orange in the dark theme: bqplot's own CSS declares
``.bbg, [data-jp-theme-light='false'] { --bq-content-font-color: orange; ... }`` — its "bbg"
(dark) figure theme, whose selector also matches JupyterLab's ``<body>`` in any dark theme. Every
figure inherits that orange for its title and axis labels. The rules below set bqplot's variables
on our figures themselves (a more specific selector than bqplot's theme classes), so titles,
axis labels and ticks take the theme's UI font colours in both themes.

The style travels as an HTML widget made once with the view; redraws never resend it.
"""
from __future__ import annotations

from ipywidgets import HTML, Layout

from .header_css import HEADER_CSS

FONT = "var(--jp-ui-font-family, -apple-system, 'Segoe UI', Roboto, sans-serif)"
MUTED = "var(--jp-ui-font-color2, #616161)"
TEXT = "var(--jp-ui-font-color1, #212121)"

# Colours that must read on white and on a dark theme's near-black (alert marks, monitor_alerts):
# the deep tone is the light theme's (and the fallback), the light tone the dark theme's. A mark
# takes ``themed(colour)``, a CSS variable set below, so a theme switch recolours it with no resend.
DARK_VARIANTS = {
    "#c62828": "#ef5350",  # lost
    "#e65100": "#ffa726",  # throttled
    "#ad1457": "#f06292",  # hot
    "#6a1b9a": "#ce93d8",  # memory full
}


def themed(color: str) -> str:
    """``color`` as a theme-aware CSS value when it has a dark variant, else as given."""
    return f"var(--gpuw-c-{color.lstrip('#')}, {color})" if color in DARK_VARIANTS else color


DARK_CSS = "[data-jp-theme-light='false'] .gpuw {{ {} }}\n".format(
    " ".join(f"--gpuw-c-{light.lstrip('#')}: {dark};" for light, dark in DARK_VARIANTS.items()))

CHART_CSS = f"""
.gpuw-charts {{ gap: 8px; }}
.gpuw-chart {{
  box-sizing: border-box; min-width: 0; padding: 6px 8px 0; overflow: hidden;
  border: 1px solid var(--jp-border-color2, #e0e0e0); border-radius: 4px;
  background: var(--jp-layout-color1, #fff); color: {TEXT}; font-family: {FONT};
}}
.gpuw-head {{ margin: 0; height: auto; line-height: 1.35; overflow: hidden; }}
.gpuw-head .gpuw-title {{
  color: {MUTED}; font-size: var(--jp-ui-font-size0, 11px); text-transform: uppercase;
  letter-spacing: 0.04em; white-space: nowrap; overflow: hidden; text-overflow: ellipsis;
}}
.gpuw-legend {{
  display: flex; flex-wrap: wrap; gap: 0 12px; min-height: 18px;
  font-size: var(--jp-ui-font-size1, 13px); color: {TEXT}; font-variant-numeric: tabular-nums;
}}
.gpuw-legend > span {{ white-space: nowrap; }}
.gpuw-legend b {{ font-weight: 600; color: var(--jp-ui-font-color0, #000); }}
.gpuw-legend i {{
  display: inline-block; width: 14px; height: 0; margin-right: 4px; vertical-align: middle;
  border-top: 2px solid currentColor;
}}
.gpuw-legend i.d {{ border-top-style: dashed; }}
.gpuw-legend i.a {{ height: 10px; border: 0; border-radius: 2px; background: currentColor; opacity: 0.35; }}
.gpuw-chart .bqplot {{
  --bq-content-font-color: {TEXT};
  --bq-mainheading-fill: {TEXT};
  --bq-axislabel-fill: {MUTED};
  --bq-axis-tick-text-fill: {MUTED};
  --bq-axislabel-font: 11px {FONT};
  --bq-axis-tick-text-font: 11px {FONT};
  --bq-background: transparent;
  --bq-plotarea-background-fill: transparent;
  --bq-grid-color: var(--jp-border-color2, #e0e0e0);
  --bq-axis-border-color: var(--jp-border-color1, #bdbdbd);
  --bq-axis-path-stroke: var(--jp-border-color1, #bdbdbd);
  --bq-axis-rect-stroke: var(--jp-border-color1, #bdbdbd);
  --bq-axis-tick-stroke: var(--jp-border-color2, #e0e0e0);
  --bq-axis-tick-short-stroke: var(--jp-border-color1, #bdbdbd);
  background: transparent;
}}
"""


def css() -> str:
    """Everything the widgets style: the charts' cards and the header (header_css)."""
    return CHART_CSS + DARK_CSS + HEADER_CSS


def style_widget() -> HTML:
    """The ``<style>`` element as a widget that takes no room (a hidden style still applies)."""
    return HTML(value=f"<style>{css()}</style>", layout=Layout(display="none"))
