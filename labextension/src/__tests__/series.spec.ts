/**
 * The client-side history and the episodes the charts shade.
 */
import { episodeReasons, lostEpisodes, throttleEpisodes, Timeline } from '../gpus/series';
import { catalogue, FakeHistory } from './utils';

describe('throttleEpisodes', () => {
  const t = [0, 1, 2, 3, 4, 5, 6];

  it('finds each run of a reason, ignoring gpu_idle', () => {
    const reasons = [
      ['gpu_idle'],
      ['sw_power_cap'],
      ['sw_power_cap'],
      ['gpu_idle'],
      [],
      ['hw_thermal_slowdown'],
      ['gpu_idle']
    ];
    expect(throttleEpisodes(t, reasons)).toEqual([
      { reason: 'sw_power_cap', start: 1, end: 3 },
      { reason: 'hw_thermal_slowdown', start: 5, end: 6 }
    ]);
  });

  it('keeps overlapping reasons apart and closes an episode still open at the end', () => {
    const reasons = [
      [],
      ['sw_power_cap'],
      ['sw_power_cap', 'sw_thermal_slowdown'],
      ['sw_thermal_slowdown'],
      ['sw_thermal_slowdown'],
      null,
      ['hw_slowdown']
    ];
    expect(throttleEpisodes(t, reasons, r => catalogue().reasonOrder(r))).toEqual([
      { reason: 'sw_power_cap', start: 1, end: 3 },
      { reason: 'sw_thermal_slowdown', start: 2, end: 5 },
      { reason: 'hw_slowdown', start: 6, end: 6 }
    ]);
  });

  it('finds nothing in an idle or unknown history', () => {
    expect(throttleEpisodes(t, t.map(() => ['gpu_idle']))).toEqual([]);
    expect(throttleEpisodes(t, t.map(() => null))).toEqual([]);
    expect(throttleEpisodes([], [])).toEqual([]);
  });
});

describe('lostEpisodes', () => {
  it('finds the lost stretches', () => {
    expect(lostEpisodes([0, 1, 2, 3, 4, 5], [false, true, true, false, true, true])).toEqual([
      { reason: 'lost', start: 1, end: 3 },
      { reason: 'lost', start: 4, end: 5 }
    ]);
    expect(lostEpisodes([0, 1], [false, false])).toEqual([]);
  });
});

describe('episodeReasons', () => {
  it('lists the reasons in the catalogue\'s order, lost last', () => {
    const order = (r: string): number => catalogue().reasonOrder(r);
    const episodes = [
      { reason: 'lost', start: 0, end: 1 },
      { reason: 'other_0x400', start: 0, end: 1 },
      { reason: 'hw_thermal_slowdown', start: 0, end: 1 },
      { reason: 'sw_power_cap', start: 2, end: 3 },
      { reason: 'sw_power_cap', start: 5, end: 6 }
    ];
    expect(episodeReasons(episodes, order)).toEqual(['sw_power_cap', 'hw_thermal_slowdown', 'other_0x400', 'lost']);
  });
});

describe('Timeline', () => {
  it('breaks the lines over a long pause', () => {
    const h = new FakeHistory(1);
    h.addRun(3, { util: 10 }, 100);
    const tl = new Timeline(['utilization_gpu_percent']);
    tl.append(h.samples({}));
    h.addRun(2, { util: 20 }, 200); // the tab was hidden for 100 s
    expect(tl.append(h.samples({ since: 102 }))).toBe(2);
    expect(tl.t).toEqual([100, 101, 102, 151, 200, 201]);
    expect(tl.devices.get(0)!.values.utilization_gpu_percent).toEqual([10, 10, 10, null, 20, 20]);
  });

  it('pads a GPU that is missing from an answer, and one that appears later', () => {
    const tl = new Timeline(['utilization_gpu_percent']);
    const two = new FakeHistory(2);
    two.addRun(2, { util: 5 }, 10);
    tl.append(two.samples({}));
    const one = new FakeHistory(1);
    one.addRun(1, { util: 7 }, 12);
    tl.append(one.samples({}));
    expect(tl.devices.get(1)!.values.utilization_gpu_percent).toEqual([5, 5, null]);
    const three = new FakeHistory(3);
    three.addRun(1, { util: 9 }, 13);
    tl.append(three.samples({}));
    expect(tl.devices.get(2)!.values.utilization_gpu_percent).toEqual([null, null, null, 9]);
    expect(tl.devices.get(2)!.lost).toEqual([false, false, false, false]);
  });

  it('keeps only the fields it is told, and drops its history for a new one', () => {
    const h = new FakeHistory(1);
    h.addRun(2, { util: 10, temp: 50 }, 0);
    const tl = new Timeline(['utilization_gpu_percent', 'temperature_c']);
    tl.append(h.samples({}));
    expect(Object.keys(tl.devices.get(0)!.values)).toEqual(['utilization_gpu_percent', 'temperature_c']);
    expect(tl.keep(['temperature_c'])).toBe(false); // fewer fields: the history stays
    expect(tl.devices.get(0)!.values).toEqual({ temperature_c: [50, 50] });
    expect(tl.keep(['temperature_c', 'power_w'])).toBe(true); // a new field has no history
    expect(tl.length).toBe(0);
    tl.append(h.samples({}));
    expect(tl.devices.get(0)!.values.power_w).toEqual([300, 300]);
  });

  it('reads a field the server does not send as unknown', () => {
    const h = new FakeHistory(1);
    h.addRun(2, {}, 0);
    const tl = new Timeline(['no_such_field']);
    tl.append(h.samples({}));
    expect(tl.devices.get(0)!.values.no_such_field).toEqual([null, null]);
  });
});
