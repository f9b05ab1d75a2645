/**
 * Numbers for people and the status-bar summary.
 */
import {
  formatBandwidth,
  formatBytes,
  formatDuration,
  formatNumber,
  ILatestValues,
  metricReading,
  migText,
  summarize,
  unavailableReason
} from '../format';
import { METRIC_SPECS } from '../metrics';
import { Timeline } from '../series';
import { deviceInfo, FakeHistory, GIB } from './utils';

function gpu(index: number, v: Partial<ILatestValues> = {}): ILatestValues {
  return {
    index,
    lost: false,
    utilization_gpu_percent: 97,
    utilization_memory_percent: 41,
    memory_used_bytes: 37 * GIB,
    memory_total_bytes: 141 * GIB,
    temperature_c: 71,
    power_w: 612.5,
    power_limit_w: 700,
    ...v
  };
}

describe('formatNumber', () => {
  it('keeps at most the given decimals and drops trailing zeros', () => {
    expect(formatNumber(612.5)).toBe('612.5');
    expect(formatNumber(700)).toBe('700');
    expect(formatNumber(54.64)).toBe('54.6');
    expect(formatNumber(37.0)).toBe('37');
    expect(formatNumber(0.04)).toBe('0');
    expect(formatNumber(96.6, 0)).toBe('97');
    expect(formatNumber(3.35, 2)).toBe('3.35');
  });

  it('formats bytes, bandwidth and durations', () => {
    expect(formatBytes(512 * 1024 ** 2)).toBe('512 MiB');
    expect(formatBytes(54 * GIB)).toBe('54 GiB');
    expect(formatBandwidth(3.352e12)).toBe('3.35 TB/s');
    expect(formatBandwidth(936e9)).toBe('936 GB/s');
    expect(formatDuration(45)).toBe('45 s');
    expect(formatDuration(600)).toBe('10 min');
    expect(formatDuration(5400)).toBe('90 min');
    expect(formatDuration(86400)).toBe('24 h');
  });
});

describe('metricReading', () => {
  it('reads every metric as the card prints it', () => {
    const v = gpu(0);
    expect(metricReading('utilization', v)).toMatchObject({ value: 97, max: 100, text: '97 %' });
    expect(metricReading('memory', v)).toMatchObject({ value: 37 * GIB, max: 141 * GIB, text: '37 / 141 GiB' });
    expect(metricReading('memory_controller', v)).toMatchObject({ value: 41, text: '41 %' });
    expect(metricReading('temperature', v)).toMatchObject({ value: 71, text: '71 °C' });
    expect(metricReading('power', v)).toMatchObject({ value: 612.5, max: 700, text: '612.5 / 700 W' });
  });

  it('shows a dash for unknown values and for a lost GPU', () => {
    expect(metricReading('temperature', gpu(0, { temperature_c: null }))).toMatchObject({ value: null, text: '—' });
    expect(metricReading('power', gpu(0, { power_limit_w: null })).text).toBe('612.5 W');
    expect(metricReading('utilization', gpu(0, { lost: true })).text).toBe('—');
    expect(metricReading('memory', null).text).toBe('—');
  });
});

describe('unavailableReason', () => {
  const power = 'not supported on this GPU (simulated fault)';
  it('explains a null value with the reasons of its fields', () => {
    const v = gpu(0, { power_w: null, memory_used_bytes: null, memory_total_bytes: null });
    expect(unavailableReason('power', metricReading('power', v), { power_w: power })).toBe(power);
    expect(
      unavailableReason('memory', metricReading('memory', v), {
        memory_used_bytes: 'no memory info',
        memory_total_bytes: 'no memory info'
      })
    ).toBe('no memory info');
  });

  it('says nothing for a value that is there or a reason for another field', () => {
    const v = gpu(0, { temperature_c: null });
    expect(unavailableReason('power', metricReading('power', v), { power_w: power })).toBeNull();
    expect(unavailableReason('temperature', metricReading('temperature', v), { fan_percent: 'passive' })).toBeNull();
    expect(unavailableReason('temperature', metricReading('temperature', v), {})).toBeNull();
  });
});

describe('summarize (the status-bar item)', () => {
  it('reads one GPU exactly as its card', () => {
    const s = summarize([gpu(0)])!;
    expect(s.text).toBe('GPU 97% · 37/141 GiB');
    expect(s.title).toBe('GPU 0: 97 % · 37 / 141 GiB');
  });

  it('gives the mean utilization and the total memory of several GPUs', () => {
    const s = summarize([gpu(0), gpu(1, { utilization_gpu_percent: 13, memory_used_bytes: 2 * GIB })])!;
    expect(s.text).toBe('2 GPUs 55% · 39/282 GiB');
    expect(s.title.split('\n')).toEqual([
      'GPU 0: 97 % · 37 / 141 GiB',
      'GPU 1: 13 % · 2 / 141 GiB',
      'Mean utilization and total memory over the GPUs that answer.'
    ]);
  });

  it('leaves lost GPUs out of the numbers and counts them', () => {
    const s = summarize([gpu(0), gpu(1, { lost: true, utilization_gpu_percent: null })])!;
    expect(s.text).toBe('2 GPUs 97% · 37/141 GiB · 1 lost');
    expect(s.lost).toBe(1);
    expect(s.title).toContain('GPU 1: lost');
    expect(summarize([gpu(0, { lost: true })])!.text).toBe('GPU · 1 lost');
    expect(summarize([])).toBeNull();
  });
});

describe('METRIC_SPECS (chart ranges)', () => {
  it('draws percentages on 0-100, memory on 0-total and power on 0-limit', () => {
    const h = new FakeHistory(1);
    h.addRun(3, { util: 50, memUsedGiB: 37, power: 650, temp: 104 }, 0);
    const tl = new Timeline();
    tl.append(h.samples({}));
    const cols = tl.devices.get(0)!;
    expect(METRIC_SPECS.utilization.range(cols, null)).toEqual([0, 100]);
    expect(METRIC_SPECS.memory.range(cols, null)).toEqual([0, 141 * GIB]);
    expect(METRIC_SPECS.power.range(cols, null)).toEqual([0, 700]);
    expect(METRIC_SPECS.temperature.range(cols, null)).toEqual([0, 104]);
    expect(METRIC_SPECS.memory.format(54.6 * GIB)).toBe('54.6 GiB');
  });
});

describe('migText (the spec card)', () => {
  it('counts the MIG instances CUDA_VISIBLE_DEVICES can name', () => {
    const info = deviceInfo(0);
    expect(migText({ ...info, mig_mode: 'disabled', mig_device_uuids: [] })).toBe('disabled');
    expect(migText({ ...info, mig_mode: 'enabled', mig_device_uuids: ['MIG-a', 'MIG-b'] })).toBe(
      'enabled (2 instances)'
    );
    expect(migText({ ...info, mig_mode: 'enabled', mig_device_uuids: ['MIG-a'] })).toBe('enabled (1 instance)');
    // The instances could not be read: the mode alone.
    expect(migText({ ...info, mig_mode: 'enabled', mig_device_uuids: null })).toBe('enabled');
    expect(migText({ ...info, mig_mode: null, mig_device_uuids: null })).toBeNull();
  });
});
