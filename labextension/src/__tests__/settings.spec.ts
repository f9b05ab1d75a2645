import schema from '../../schema/plugin.json';
import {
  DEFAULT_HISTORY_WINDOW_S,
  DEFAULT_REFRESH_INTERVAL_MS,
  MAX_HISTORY_WINDOW_S,
  MIN_HISTORY_WINDOW_S,
  MIN_REFRESH_INTERVAL_MS,
  MetricChoice,
  normalizeHistoryWindow,
  normalizeRefreshInterval,
  normalizeShowStatusBar
} from '../gpus/settings';
import { chosenIds, toggled } from '../shell/metricsField';
import { catalogue, metricInfo } from './utils';

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

describe('MetricChoice (the `metrics` setting)', () => {
  const made = metricInfo('made_up', 'sm_clock_mhz', 'Made-up clock', 'MHz');
  const available = catalogue([made]).sidebar;
  const ids = (choice: MetricChoice): string[] => choice.select(available).map(m => m.id);

  it('shows every metric the catalogue offers while unset, in the catalogue\'s order', () => {
    const choice = new MetricChoice(() => undefined);
    expect(ids(choice)).toEqual(['utilization', 'sm_active', 'tensor_active', 'memory', 'memory_controller', 'temperature', 'power', 'made_up']);
    choice.setting = 'utilization'; // not a list
    expect(ids(choice)).toHaveLength(8);
    choice.setting = ['made_up', 'power', 'utilization'];
    expect(ids(choice)).toEqual(['utilization', 'power', 'made_up']);
    choice.setting = [];
    expect(ids(choice)).toEqual([]);
  });

  it('ignores ids the catalogue does not offer, with one warning per distinct set', () => {
    const warnings: string[] = [];
    const choice = new MetricChoice(message => warnings.push(message));
    choice.setting = ['power', 'bogus'];
    expect(ids(choice)).toEqual(['power']);
    expect(ids(choice)).toEqual(['power']); // drawn again: no second warning
    expect(warnings).toEqual([
      'gpu-widgets: the `metrics` setting names "bogus", which the server\'s metric catalogue does not offer ' +
        '(ignored). It offers: utilization, sm_active, tensor_active, memory, memory_controller, temperature, power, made_up.'
    ]);
    choice.setting = ['power', 'bogus', 'other'];
    ids(choice);
    expect(warnings).toHaveLength(2);
    expect(warnings[1]).toContain('names "bogus", "other", which');
    choice.setting = ['power'];
    ids(choice);
    expect(warnings).toHaveLength(2);
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
    // No list of ids: the server's catalogue decides (a new metric must not be refused), and
    // unset means every metric it offers.
    expect('enum' in p.metrics.items).toBe(false);
    expect('default' in p.metrics).toBe(false);
    expect(new RegExp(p.metrics.items.pattern).test('made_up_2')).toBe(true);
    expect(p.showStatusBarItem.default).toBe(true);
  });
});

describe('the metrics checkboxes of the Settings Editor', () => {
  const offered = catalogue().sidebar;

  it('reads unset (or anything but a list) as every metric', () => {
    expect(chosenIds(undefined)).toBeNull();
    expect(chosenIds(null)).toBeNull();
    expect(chosenIds('power')).toBeNull();
    expect(chosenIds(['power', 3, 'memory'])).toEqual(['power', 'memory']);
  });

  it('ticks and clears a box in the catalogue order, keeping ids the server does not offer', () => {
    expect(toggled(undefined, 'power', false, offered)).toEqual([
      'utilization',
      'sm_active',
      'tensor_active',
      'memory',
      'memory_controller',
      'temperature'
    ]);
    expect(toggled(['power'], 'utilization', true, offered)).toEqual(['utilization', 'power']);
    expect(toggled(['gone', 'power'], 'power', false, offered)).toEqual(['gone']);
    expect(toggled([], 'memory', true, offered)).toEqual(['memory']);
  });
});
