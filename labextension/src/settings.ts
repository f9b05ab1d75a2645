/**
 * Settings helpers shared by the plugin and (next) the GPU sidebar.
 *
 * Kept free of JupyterLab imports so that jest can test them in plain node.
 */

/** Default poll period of the GPU monitor, in milliseconds (schema default). */
export const DEFAULT_REFRESH_INTERVAL_MS = 1000;

/** Fastest poll period allowed (schema minimum): NVML queries are not free. */
export const MIN_REFRESH_INTERVAL_MS = 100;

/**
 * Turn a raw `refreshIntervalMs` setting into a usable poll period.
 *
 * The settings registry validates against the schema, but a user can still
 * hand-edit overrides or the value may be missing while settings load, so
 * anything that is not a finite number falls back to the default and
 * numbers below the minimum are raised to it.
 */
export function normalizeRefreshInterval(value: unknown): number {
  if (typeof value !== 'number' || !Number.isFinite(value)) {
    return DEFAULT_REFRESH_INTERVAL_MS;
  }
  return Math.max(MIN_REFRESH_INTERVAL_MS, Math.round(value));
}
