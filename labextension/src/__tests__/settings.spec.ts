import schema from '../../schema/plugin.json';
import {
  DEFAULT_HISTORY_WINDOW_S,
  DEFAULT_REFRESH_INTERVAL_MS,
  MAX_HISTORY_WINDOW_S,
  MIN_HISTORY_WINDOW_S,
  MIN_REFRESH_INTERVAL_MS,
  normalizeHistoryWindow,
  normalizeMetrics,
  normalizeRefreshInterval,
  normalizeShowStatusBar
} from '../settings';
import { METRIC_IDS } from '../tokens';

describe('normalizeRefreshInterval', () => {
  it('keeps a valid interval', () => {
    expect(normalizeRefreshInterval(2500)).toBe(2500);
    expect(normalizeRefreshInterval(MIN_REFRESH_INTERVAL_MS)).toBe(MIN_REFRESH_INTERVAL_MS);
  });

  it('raises intervals below the minimum to the minimum', () => {
    expect(normalizeRefreshInterval(10)).toBe(MIN_REFRESH_INTERVAL_MS);
    expect(normalizeRefreshInterval(0)).toBe(MIN_REFRESH_INTERVAL_MS);
    expect(normalizeRefreshInterval(-500)).toBe(MIN_REFRESH_INTERVAL_MS);
  });

  it('rounds fractional milliseconds', () => {
    expect(normalizeRefreshInterval(1234.6)).toBe(1235);
  });

  it('falls back to the default for missing or non-numeric values', () => {
    for (const bad of [undefined, null, '500', NaN, Infinity, {}, []]) {
      expect(normalizeRefreshInterval(bad)).toBe(DEFAULT_REFRESH_INTERVAL_MS);
    }
  });
});

describe('normalizeHistoryWindow', () => {
  it('keeps the window within its bounds', () => {
    expect(normalizeHistoryWindow(300)).toBe(300);
    expect(normalizeHistoryWindow(5)).toBe(MIN_HISTORY_WINDOW_S);
    expect(normalizeHistoryWindow(1e9)).toBe(MAX_HISTORY_WINDOW_S);
    expect(normalizeHistoryWindow('600')).toBe(DEFAULT_HISTORY_WINDOW_S);
  });
});

describe('normalizeMetrics', () => {
  it('keeps known metrics in display order', () => {
    expect(normalizeMetrics(['power', 'utilization', 'bogus'])).toEqual(['utilization', 'power']);
    expect(normalizeMetrics([])).toEqual([]);
    expect(normalizeMetrics(undefined)).toEqual([...METRIC_IDS]);
    expect(normalizeMetrics('utilization')).toEqual([...METRIC_IDS]);
  });

  it('reads the status-bar switch', () => {
    expect(normalizeShowStatusBar(false)).toBe(false);
    expect(normalizeShowStatusBar(undefined)).toBe(true);
  });
});

describe('the settings schema', () => {
  it('matches the defaults and bounds of the code', () => {
    const p = schema.properties;
    expect(p.refreshIntervalMs.default).toBe(DEFAULT_REFRESH_INTERVAL_MS);
    expect(p.refreshIntervalMs.minimum).toBe(MIN_REFRESH_INTERVAL_MS);
    expect(p.historyWindowS.default).toBe(DEFAULT_HISTORY_WINDOW_S);
    expect(p.historyWindowS.minimum).toBe(MIN_HISTORY_WINDOW_S);
    expect(p.historyWindowS.maximum).toBe(MAX_HISTORY_WINDOW_S);
    expect(p.metrics.items.enum).toEqual([...METRIC_IDS]);
    expect(p.metrics.default).toEqual([...METRIC_IDS]);
    expect(p.showStatusBarItem.default).toBe(true);
  });
});
