/**
 * Settings helpers shared by the plugin and the GPU sidebar: each turns a raw setting
 * (labextension/schema/plugin.json) into a usable value.
 *
 * The settings registry validates against the schema, but a user can still hand-edit
 * overrides or a value may be missing while settings load, so every reader accepts
 * anything and falls back to the schema default.
 *
 * Kept free of JupyterLab imports so that jest can test them in plain node.
 */
import { IMetricInfo } from '../api/tokens';

/** Default poll period of the GPU monitor, in milliseconds (schema default). */
export const DEFAULT_REFRESH_INTERVAL_MS = 1000;

/** Fastest poll period allowed (schema minimum): NVML queries are not free. */
export const MIN_REFRESH_INTERVAL_MS = 100;

/** Default history shown by the charts, in seconds (schema default). */
export const DEFAULT_HISTORY_WINDOW_S = 600;

/** Shortest and longest history window (schema bounds). */
export const MIN_HISTORY_WINDOW_S = 30;
export const MAX_HISTORY_WINDOW_S = 86400;

/**
 * Turn a raw `refreshIntervalMs` setting into a usable poll period: anything that is not a
 * finite number falls back to the default and numbers below the minimum are raised to it.
 */
export function normalizeRefreshInterval(value: unknown): number {
  if (typeof value !== 'number' || !Number.isFinite(value)) {
    return DEFAULT_REFRESH_INTERVAL_MS;
  }
  return Math.max(MIN_REFRESH_INTERVAL_MS, Math.round(value));
}

/** Turn a raw `historyWindowS` setting into seconds within the schema bounds. */
export function normalizeHistoryWindow(value: unknown): number {
  if (typeof value !== 'number' || !Number.isFinite(value)) {
    return DEFAULT_HISTORY_WINDOW_S;
  }
  return Math.min(MAX_HISTORY_WINDOW_S, Math.max(MIN_HISTORY_WINDOW_S, Math.round(value)));
}

/**
 * The `metrics` setting against the catalogue, which arrives from the server later than the
 * settings: the raw value is held and resolved whenever the views ask.
 *
 * Unset (or not a list) shows every metric the catalogue offers the sidebar; an empty list
 * shows none; the cards keep the catalogue's display order whatever the setting's order. An
 * id the catalogue does not offer is ignored, with one console warning for each distinct set
 * of such ids (not one per render).
 */
export class MetricChoice {
  constructor(warn: (message: string) => void = message => console.warn(message)) {
    this._warn = warn;
  }

  /** The raw setting. */
  setting: unknown = undefined;

  /** The metrics to show, from those the catalogue offers (`Catalogue.sidebar`). */
  select(available: readonly IMetricInfo[]): IMetricInfo[] {
    const value = this.setting;
    if (!Array.isArray(value)) {
      return [...available];
    }
    const ids = available.map(m => m.id);
    const unknown = value.filter(id => !ids.includes(id)).map(id => JSON.stringify(id));
    const key = unknown.join(', ');
    if (key && key !== this._warned) {
      this._warn(
        `gpu-widgets: the \`metrics\` setting names ${key}, which the server's metric catalogue does not ` +
          `offer (ignored). It offers: ${ids.join(', ')}.`
      );
    }
    this._warned = key;
    return available.filter(m => value.includes(m.id));
  }

  private _warn: (message: string) => void;
  private _warned = '';
}

/** Turn a raw `showStatusBarItem` setting into a boolean (default true). */
export function normalizeShowStatusBar(value: unknown): boolean {
  return typeof value === 'boolean' ? value : true;
}
