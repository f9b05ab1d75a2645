/** How often the sidebar asks the server, and how much. */
/** Poll period when only the status-bar item needs data. */
export const STATUS_BAR_INTERVAL_MS = 5000;
/** The longest wait between two tries while the server does not answer (or the interval, if longer). */
export const MAX_BACKOFF_MS = 30000;
/** The process list is read on the server every 2 s (slow cadence): no use asking faster. */
export const MIN_PROCESS_INTERVAL_MS = 2000;
/** Bounds of `max_points`: a point per chart pixel (min/max buckets of two pixels keep the peaks). */
export const MIN_MAX_POINTS = 120;
export const MAX_MAX_POINTS = 2000;

/** The GPU model's poll period: the refresh interval while the panel is shown, else the status bar's slower one. */
export function pollInterval(panelVisible: boolean, refreshMs: number): number {
  return panelVisible ? refreshMs : Math.max(refreshMs, STATUS_BAR_INTERVAL_MS);
}
