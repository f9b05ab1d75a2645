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
import { METRIC_IDS, MetricId } from './tokens';

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
 * Turn a raw `metrics` setting into the metrics to show, in display order (the order of
 * the cards does not depend on the order in the setting). Unknown names are ignored; a
 * value that is not a list gives every metric; an empty list shows none.
 */
export function normalizeMetrics(value: unknown): MetricId[] {
  if (!Array.isArray(value)) {
    return [...METRIC_IDS];
  }
  return METRIC_IDS.filter(id => value.includes(id));
}

/** Turn a raw `showStatusBarItem` setting into a boolean (default true). */
export function normalizeShowStatusBar(value: unknown): boolean {
  return typeof value === 'boolean' ? value : true;
}
