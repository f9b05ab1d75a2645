/**
 * Chart colours, read from CSS variables so the charts follow the JupyterLab theme.
 *
 * The variables (`--jp-gpu-widgets-*`, style/base.css) are defined in terms of JupyterLab's
 * `--jp-*` theme variables; the browser resolves them, so a theme change only needs the
 * palette to be read again and the charts redrawn.
 */
import { EpisodeKind } from '../api/catalogue';

export interface IPalette {
  /** The history line. */
  line: string;
  /** Faint guide lines. */
  grid: string;
  /** Band colours per kind of episode. */
  bands: { [K in EpisodeKind]: string };
  /** Chart background (for the hatch pattern of lost stretches). */
  background: string;
}

/** Used until the panel is attached (and in tests): JupyterLab's light-theme values. */
export const FALLBACK_PALETTE: IPalette = {
  line: '#1976d2',
  grid: '#e0e0e0',
  bands: { power: '#ffb74d', thermal: '#e57373', other: '#4dd0e1', lost: '#9e9e9e' },
  background: '#ffffff'
};

function cssVar(style: CSSStyleDeclaration, name: string, fallback: string): string {
  const value = style.getPropertyValue(name).trim();
  return value || fallback;
}

/** The palette as the theme currently styles `node` (a node inside `.jp-GpuWidgets`). */
export function readPalette(node: HTMLElement): IPalette {
  const style = getComputedStyle(node);
  const f = FALLBACK_PALETTE;
  return {
    line: cssVar(style, '--jp-gpu-widgets-line-color', f.line),
    grid: cssVar(style, '--jp-gpu-widgets-grid-color', f.grid),
    bands: {
      power: cssVar(style, '--jp-gpu-widgets-power-band-color', f.bands.power),
      thermal: cssVar(style, '--jp-gpu-widgets-thermal-band-color', f.bands.thermal),
      other: cssVar(style, '--jp-gpu-widgets-other-band-color', f.bands.other),
      lost: cssVar(style, '--jp-gpu-widgets-lost-band-color', f.bands.lost)
    },
    background: cssVar(style, '--jp-gpu-widgets-chart-background', f.background)
  };
}

let probe: CanvasRenderingContext2D | null = null;

/** `color` (any CSS colour) with opacity `alpha`, as `rgba(...)`. */
export function withAlpha(color: string, alpha: number): string {
  probe = probe ?? document.createElement('canvas').getContext('2d');
  if (!probe) {
    return color;
  }
  probe.fillStyle = '#000000';
  probe.fillStyle = color; // the canvas normalises it to #rrggbb or rgba(...)
  const norm = String(probe.fillStyle);
  const hex = /^#([0-9a-f]{2})([0-9a-f]{2})([0-9a-f]{2})$/i.exec(norm);
  if (hex) {
    const [r, g, b] = hex.slice(1).map(h => parseInt(h, 16));
    return `rgba(${r}, ${g}, ${b}, ${alpha})`;
  }
  const rgba = /^rgba?\(([^,]+),([^,]+),([^,)]+)(?:,([^)]+))?\)$/.exec(norm.replace(/\s/g, ''));
  if (rgba) {
    const a = rgba[4] === undefined ? 1 : parseFloat(rgba[4]);
    return `rgba(${rgba[1]}, ${rgba[2]}, ${rgba[3]}, ${a * alpha})`;
  }
  return norm;
}
