import schema from '../../schema/plugin.json';
import {
  DEFAULT_REFRESH_INTERVAL_MS,
  MIN_REFRESH_INTERVAL_MS,
  normalizeRefreshInterval
} from '../settings';

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

  it('matches the settings schema default and minimum', () => {
    const prop = schema.properties.refreshIntervalMs;
    expect(prop.default).toBe(DEFAULT_REFRESH_INTERVAL_MS);
    expect(prop.minimum).toBe(MIN_REFRESH_INTERVAL_MS);
  });
});
