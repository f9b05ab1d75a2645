/**
 * How a catalogue metric reads on a card and in its chart.
 */
import { chartRange, formatValue, metricReading, unavailableReason, widestText } from '../gpus/metrics';
import { Timeline } from '../gpus/series';
import { IMetricInfo } from '../api/tokens';
import { catalogue, FakeHistory, GIB, latest, metricInfo } from './utils';

function m(id: string): IMetricInfo {
  return catalogue().metrics.find(x => x.id === id)!;
}

describe('metricReading', () => {
  it('reads every metric as the card prints it, with the catalogue\'s words, unit and digits', () => {
    const v = latest(0);
    expect(metricReading(m('utilization'), v)).toEqual({
      label: 'GPU busy',
      help: 'GPU busy: what it means.',
      value: 97,
      max: 100,
      text: '97 %'
    });
    expect(metricReading(m('memory'), v)).toMatchObject({ value: 37 * GIB, max: 141 * GIB, text: '37 / 141 GiB' });
    expect(metricReading(m('memory'), latest(0, { memory_used_bytes: 54.64 * GIB })).text).toBe('54.6 / 141 GiB');
    expect(metricReading(m('memory_controller'), v)).toMatchObject({ value: 41, max: 100, text: '41 %' });
    expect(metricReading(m('temperature'), v)).toMatchObject({ value: 71, max: null, text: '71 °C' });
    expect(metricReading(m('power'), v)).toMatchObject({ value: 612.5, max: 700, text: '612 / 700 W' });
  });

  it('shows a dash for unknown values and for a lost GPU', () => {
    expect(metricReading(m('temperature'), latest(0, { temperature_c: null }))).toMatchObject({ value: null, text: '—' });
    expect(metricReading(m('power'), latest(0, { power_limit_w: null })).text).toBe('612 W');
    expect(metricReading(m('utilization'), latest(0, { lost: true })).text).toBe('—');
    expect(metricReading(m('memory'), null).text).toBe('—');
  });

  it('reads a metric it has never heard of with the generic rule', () => {
    const clock = metricInfo('sm_clock', 'sm_clock_mhz', 'SM clock', 'MHz', { scale: 0.001, decimals: 2 });
    expect(metricReading(clock, latest(0, { sm_clock_mhz: 1980 }))).toMatchObject({
      label: 'SM clock',
      value: 1980,
      max: null,
      text: '1.98 MHz'
    });
    expect(formatValue(clock, 1500)).toBe('1.5 MHz');
    expect(metricReading(clock, latest(0)).text).toBe('—'); // a field the GPU has no value for
  });
});

describe('unavailableReason', () => {
  const power = 'not supported on this GPU (simulated fault)';
  it('explains a null value with the reasons of its fields', () => {
    const v = latest(0, { power_w: null, memory_used_bytes: null, memory_total_bytes: null });
    expect(unavailableReason(m('power'), metricReading(m('power'), v), { power_w: power })).toBe(power);
    expect(
      unavailableReason(m('memory'), metricReading(m('memory'), v), {
        memory_used_bytes: 'no memory info',
        memory_total_bytes: 'no memory info'
      })
    ).toBe('no memory info');
  });

  it('says nothing for a value that is there or a reason for another field', () => {
    const v = latest(0, { temperature_c: null });
    expect(unavailableReason(m('power'), metricReading(m('power'), v), { power_w: power })).toBeNull();
    expect(unavailableReason(m('temperature'), metricReading(m('temperature'), v), { fan_percent: 'passive' })).toBeNull();
    expect(unavailableReason(m('temperature'), metricReading(m('temperature'), v), {})).toBeNull();
  });
});

describe('chartRange', () => {
  function columns(point: object, fields: string[]) {
    const h = new FakeHistory(1);
    h.addRun(3, point, 0);
    const tl = new Timeline(fields);
    tl.append(h.samples({}));
    return tl.devices.get(0)!;
  }
  const all = catalogue().fields();

  it('draws fixed ranges, and tops that follow a limit (memory total, power limit)', () => {
    const cols = columns({ util: 50, memUsedGiB: 37, power: 650 }, all);
    expect(chartRange(m('utilization'), cols, null)).toEqual([0, 100]);
    expect(chartRange(m('memory'), cols, null)).toEqual([0, 141 * GIB]);
    expect(chartRange(m('power'), cols, null)).toEqual([0, 700]);
  });

  it('never clips the data, and fits the data where the catalogue gives no end', () => {
    const cols = columns({ power: 750, temp: 60 }, all);
    expect(chartRange(m('power'), cols, null)).toEqual([0, 750]); // above the limit
    const [lo, hi] = chartRange(m('temperature'), cols, null); // its top follows a field these columns lack
    expect(lo).toBeLessThan(60);
    expect(hi).toBeGreaterThan(60);
  });

  it('falls back on the spec card for a limit the samples lack', () => {
    const cols = columns({ power: 100 }, ['power_w']);
    expect(chartRange(m('power'), cols, null)).toEqual([0, 110]); // no limit known: fit
    const info = { power_limit_w: 400 } as unknown as Parameters<typeof chartRange>[2];
    expect(chartRange(m('power'), cols, info)).toEqual([0, 400]);
  });
});

describe('widestText', () => {
  it('is the widest number up to the range top, whatever the value, so the label beside it keeps its place', () => {
    for (const busy of [5, 41, 100]) {
      expect(widestText(m('memory_controller'), metricReading(m('memory_controller'), latest(0, { utilization_memory_percent: busy })))).toBe('000 %');
    }
    const memory = (used: number): string => widestText(m('memory'), metricReading(m('memory'), latest(0, { memory_used_bytes: used * GIB })));
    expect(memory(4.6)).toBe('000.0 / 141 GiB');
    expect(memory(140.9)).toBe(memory(4.6));
    expect(widestText(m('power'), metricReading(m('power'), latest(0)))).toBe('000 / 700 W');
  });

  it('is empty when the range has no known top', () => {
    expect(widestText(m('temperature'), metricReading(m('temperature'), latest(0)))).toBe('');
    expect(widestText(m('memory'), metricReading(m('memory'), latest(0, { memory_total_bytes: null })))).toBe('');
  });
});
