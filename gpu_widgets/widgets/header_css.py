"""CSS for the widgets' header and cards (classes used by header.py), sent once per widget by theme.py.

The look of the sidebar's cards (labextension/style/base.css): small muted labels over big values,
orange SIMULATED badge with a muted sentence, warn/error colours for throttled and lost. Only
JupyterLab's theme variables, each with a light fallback for front ends without them (VS Code,
nbviewer). The header HTML re-sent on a redraw then carries class names only. Orange badges
take black text in both themes: white on JupyterLab's orange is under 3:1.
"""
HEADER_CSS = """
.gpuw-h{font-size:var(--jp-ui-font-size1,13px);line-height:1.45;color:var(--jp-ui-font-color1,#212121);padding:2px 0 6px}
.gpuw-h b,.gpuw-v{color:var(--jp-ui-font-color0,#000)}
.gpuw-htitle{font-weight:600;font-size:var(--jp-ui-font-size2,15px);margin-right:2px}
.gpuw-row{display:flex;flex-wrap:wrap;align-items:baseline;gap:2px 16px;margin:3px 0}
.gpuw-badge{display:inline-block;margin-left:6px;padding:0 6px;border-radius:3px;font-size:var(--jp-ui-font-size0,11px);font-weight:700;letter-spacing:.04em;line-height:17px;white-space:nowrap;vertical-align:1px;color:var(--jp-ui-inverse-font-color0,#fff);background:var(--jp-ui-font-color2,#616161)}
.gpuw-s-running,.gpuw-s-live{background:var(--jp-brand-color1,#1976d2)}
.gpuw-s-finished{background:var(--jp-success-color1,#388e3c)}
.gpuw-s-failed{background:var(--jp-error-color1,#d32f2f)}
.gpuw-s-interrupted,.gpuw-s-unfinished,.gpuw-s-stale,.gpuw-s-sim{background:var(--jp-warn-color1,#f57c00);color:#000}
.gpuw-l{color:var(--jp-ui-font-color2,#616161);font-size:var(--jp-ui-font-size0,11px)}
.gpuw-v{font-size:var(--jp-ui-font-size2,15px);font-weight:600;font-variant-numeric:tabular-nums;white-space:nowrap}
.gpuw-sub{color:var(--jp-ui-font-color2,#616161);font-size:var(--jp-ui-font-size0,11px);white-space:nowrap}
.gpuw-muted{color:var(--jp-ui-font-color2,#616161)}
.gpuw-warn{color:var(--jp-warn-color0,#e65100)}
.gpuw-error{color:var(--jp-error-color1,#c62828)}
.gpuw-note{margin:4px 0;padding:3px 8px;border-left:3px solid var(--jp-warn-color1,#f57c00);border-radius:2px;background:var(--jp-layout-color2,#eee);color:var(--jp-ui-font-color2,#616161);font-size:var(--jp-ui-font-size0,11px)}
.gpuw-note.gpuw-err{border-left-color:var(--jp-error-color1,#d32f2f)}
.gpuw-cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(340px,100%),1fr));gap:6px;margin:6px 0}
.gpuw-card{min-width:0;padding:5px 10px 6px;border:1px solid var(--jp-border-color2,#e0e0e0);border-radius:4px;background:var(--jp-layout-color1,#fff)}
.gpuw-card.gpuw-wide{grid-column:1/-1}
.gpuw-card.gpuw-lost{border-color:var(--jp-error-color1,#d32f2f)}
.gpuw-card.gpuw-lost .gpuw-v{color:var(--jp-ui-font-color3,#9e9e9e)}
.gpuw-card-head{display:flex;align-items:baseline;gap:8px;min-width:0}
.gpuw-name{min-width:0;overflow:hidden;white-space:nowrap;text-overflow:ellipsis;color:var(--jp-ui-font-color2,#616161);font-size:var(--jp-ui-font-size0,11px)}
.gpuw-cells{display:flex;flex-wrap:wrap;gap:0 18px}
.gpuw-cell .gpuw-l{display:block}
.gpuw .widget-html-content{min-width:0}
.gpuw-scroll{max-width:100%;overflow-x:auto}
.gpuw-table{border-collapse:collapse;margin:6px 0;font-variant-numeric:tabular-nums}
.gpuw-table th{color:var(--jp-ui-font-color2,#616161);font-size:var(--jp-ui-font-size0,11px);font-weight:400;text-align:right;padding:0 8px;white-space:nowrap}
.gpuw-table th:first-child,.gpuw-table td:first-child,.gpuw-table td:last-child{text-align:left}
.gpuw-table td{padding:1px 8px;text-align:right;white-space:nowrap;border-top:1px solid var(--jp-border-color2,#e0e0e0);vertical-align:top}
.gpuw-table td:last-child{white-space:normal;min-width:8em}
.gpuw-table .gpuw-name{display:block;max-width:12em}
.gpuw-table tr.gpuw-lost td{color:var(--jp-ui-font-color3,#9e9e9e)}
.gpuw-tiles{display:flex;flex-wrap:wrap;gap:4px;margin:4px 0}
.gpuw-tile{padding:0 6px;border:1px solid var(--jp-border-color2,#e0e0e0);border-radius:3px;font-size:var(--jp-ui-font-size0,11px);font-variant-numeric:tabular-nums;white-space:nowrap}
.gpuw-tile.gpuw-warn{border-color:var(--jp-warn-color1,#f57c00)}
.gpuw-tile.gpuw-error{border-color:var(--jp-error-color1,#d32f2f)}
"""
