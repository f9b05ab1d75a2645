/**
 * One small history chart (a uPlot canvas): the line of one metric over the history window,
 * with throttle episodes shaded where they happened, lost stretches hatched, and a tooltip
 * that names the time, the value and the throttle reasons under the cursor.
 *
 * Imperative on purpose: the React views create it once and hand it new data each tick
 * (`update`), so a tick costs one canvas redraw and no DOM churn.
 */
import uPlot from 'uplot';

import { formatClock } from '../ui/format';
import { FALLBACK_PALETTE, IPalette, withAlpha } from './palette';
import { EpisodeKind } from '../api/catalogue';
import { IEpisode } from '../gpus/series';
import { Series } from '../api/tokens';

/** What one chart draws. */
export interface IChartData {
  /** Unix seconds, oldest first. */
  t: readonly number[];
  y: Series;
  /** The x range (the history window ending at the newest point). */
  xMin: number;
  xMax: number;
  /** The y range. */
  yMin: number;
  yMax: number;
  /** Throttle and lost episodes (shaded behind the line). */
  episodes: readonly IEpisode[];
  /** A value for the tooltip, e.g. "97 %". */
  format: (value: number) => string;
  /** The words for the throttle reasons (without `gpu_idle`) and the lost flag at a point. */
  markersAt: (index: number) => string[];
  /** The colour family of an episode's reason. */
  kindOf: (reason: string) => EpisodeKind;
}

const HEIGHT_PX = 38;
const BAND_ALPHA = 0.22;
/** Space between the cursor line and the tooltip. */
const TOOLTIP_GAP_PX = 6;

export class HistoryChart {
  constructor(host: HTMLElement, label: string) {
    this._host = host;
    this._tooltip = document.createElement('div');
    this._tooltip.className = 'jp-GpuWidgets-tooltip';
    this._tooltip.setAttribute('role', 'tooltip');
    this._tooltip.hidden = true;
    const width = Math.max(50, Math.floor(host.clientWidth || 240));
    const opts: uPlot.Options = {
      width,
      height: HEIGHT_PX,
      padding: [3, 1, 1, 1],
      legend: { show: false },
      select: { show: false, left: 0, top: 0, width: 0, height: 0 },
      cursor: {
        x: true,
        y: false,
        points: { show: false },
        drag: { x: false, y: false, setScale: false }
      },
      scales: {
        x: { time: true, range: () => [this._data?.xMin ?? 0, this._data?.xMax ?? 1] },
        y: { range: () => [this._data?.yMin ?? 0, this._data?.yMax ?? 1] }
      },
      axes: [{ show: false }, { show: false }],
      series: [
        {},
        {
          label,
          width: 1.5,
          points: { show: false },
          spanGaps: false,
          stroke: () => this._palette.line,
          fill: (u: uPlot) => this._gradient(u)
        }
      ],
      hooks: {
        drawClear: [(u: uPlot) => this._drawBackground(u)],
        setCursor: [(u: uPlot) => this._showTooltip(u)]
      }
    };
    this._plot = new uPlot(opts, [[], []], host);
    host.appendChild(this._tooltip);
  }

  /** New data: redraws. */
  update(data: IChartData): void {
    this._data = data;
    this._plot.setData([data.t as number[], data.y], true);
  }

  /** New theme colours: redraws. */
  setPalette(palette: IPalette): void {
    this._palette = palette;
    this._hatch = null;
    this._plot.redraw(false, false);
  }

  /** The host's width changed. */
  resize(width: number): void {
    const w = Math.max(50, Math.floor(width));
    if (w !== this._plot.width) {
      this._plot.setSize({ width: w, height: HEIGHT_PX });
    }
  }

  dispose(): void {
    this._plot.destroy();
    this._tooltip.remove();
  }

  private _gradient(u: uPlot): CanvasGradient | string {
    const { top, height } = u.bbox;
    if (!height) {
      return withAlpha(this._palette.line, 0.15);
    }
    const g = u.ctx.createLinearGradient(0, top, 0, top + height);
    g.addColorStop(0, withAlpha(this._palette.line, 0.35));
    g.addColorStop(1, withAlpha(this._palette.line, 0.03));
    return g;
  }

  /** Guide lines, then the episode bands: all behind the line. */
  private _drawBackground(u: uPlot): void {
    const ctx = u.ctx;
    const { left, top, width, height } = u.bbox;
    ctx.save();
    ctx.strokeStyle = this._palette.grid;
    ctx.lineWidth = 1;
    ctx.setLineDash([2 * devicePixelRatio, 3 * devicePixelRatio]);
    ctx.beginPath();
    const mid = Math.round(top + height / 2) + 0.5;
    ctx.moveTo(left, mid);
    ctx.lineTo(left + width, mid);
    ctx.stroke();
    ctx.setLineDash([]);
    ctx.beginPath();
    const base = Math.round(top + height) - 0.5;
    ctx.moveTo(left, base);
    ctx.lineTo(left + width, base);
    ctx.stroke();

    const minW = 2 * devicePixelRatio;
    const data = this._data;
    for (const e of data?.episodes ?? []) {
      let x0 = u.valToPos(e.start, 'x', true);
      let x1 = u.valToPos(e.end, 'x', true);
      if (x1 < left || x0 > left + width) {
        continue;
      }
      x0 = Math.max(left, x0);
      x1 = Math.min(left + width, Math.max(x1, x0 + minW));
      const kind = data!.kindOf(e.reason);
      const color = this._palette.bands[kind];
      if (kind === 'lost') {
        ctx.fillStyle = this._hatchPattern(ctx) ?? withAlpha(color, 0.4);
      } else {
        ctx.fillStyle = withAlpha(color, BAND_ALPHA);
      }
      ctx.fillRect(x0, top, x1 - x0, height);
      // A solid strip on top marks the episode even where the line covers the band.
      ctx.fillStyle = color;
      ctx.fillRect(x0, top, x1 - x0, 2 * devicePixelRatio);
    }
    ctx.restore();
  }

  private _hatchPattern(ctx: CanvasRenderingContext2D): CanvasPattern | null {
    if (this._hatch) {
      return this._hatch;
    }
    const size = Math.round(6 * devicePixelRatio);
    const tile = document.createElement('canvas');
    tile.width = tile.height = size;
    const t = tile.getContext('2d');
    if (!t) {
      return null;
    }
    t.fillStyle = withAlpha(this._palette.bands.lost, 0.12);
    t.fillRect(0, 0, size, size);
    t.strokeStyle = withAlpha(this._palette.bands.lost, 0.6);
    t.lineWidth = devicePixelRatio;
    t.beginPath();
    t.moveTo(0, size);
    t.lineTo(size, 0);
    t.stroke();
    this._hatch = ctx.createPattern(tile, 'repeat');
    return this._hatch;
  }

  private _showTooltip(u: uPlot): void {
    const idx = u.cursor.idx;
    const data = this._data;
    if (idx === null || idx === undefined || !data || idx >= data.t.length) {
      this._tooltip.hidden = true;
      return;
    }
    const v = data.y[idx];
    // The time and the value never break inside ("92 %" stays on one line); the reasons may wrap.
    const whole = (text: string): HTMLSpanElement => {
      const span = document.createElement('span');
      span.className = 'jp-GpuWidgets-tipWhole';
      span.textContent = text;
      return span;
    };
    const parts: (HTMLSpanElement | string)[] = [
      whole(formatClock(data.t[idx])),
      ' · ',
      whole(v === null ? 'no reading' : data.format(v))
    ];
    const markers = data.markersAt(idx);
    if (markers.length) {
      parts.push(' · ', markers.join(', '));
    }
    this._tooltip.replaceChildren(...parts);
    this._tooltip.hidden = false;
    // Inside the plot, beside the cursor on its wider side (wrapping to fit there): it covers
    // neither the metric's title and value above the chart nor the point it explains, and
    // never leaves the card.
    const x = u.cursor.left ?? 0;
    const hostW = this._host.clientWidth;
    const right = x < hostW / 2;
    const room = Math.max(0, right ? hostW - x - TOOLTIP_GAP_PX : x - TOOLTIP_GAP_PX);
    this._tooltip.style.maxWidth = `${room}px`;
    const tipW = Math.min(this._tooltip.offsetWidth, room);
    const left = right ? x + TOOLTIP_GAP_PX : x - TOOLTIP_GAP_PX - tipW;
    this._tooltip.style.left = `${Math.max(0, left)}px`;
  }

  private _data: IChartData | null = null;
  private _hatch: CanvasPattern | null = null;
  private _host: HTMLElement;
  private _palette: IPalette = FALLBACK_PALETTE;
  private _plot: uPlot;
  private _tooltip: HTMLDivElement;
}
