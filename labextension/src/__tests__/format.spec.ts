/**
 * Numbers for people and the status-bar summary.
 */
import { formatBandwidth, formatBytes, formatDuration, formatNumber, migText, summarize } from '../ui/format';
import { deviceInfo, GIB, latest } from './utils';

const gpu = latest;

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

  it('rounds an exact tie to even, as the Python views do', () => {
    expect(formatNumber(612.5, 0)).toBe('612');
    expect(formatNumber(613.5, 0)).toBe('614');
    expect(formatNumber(612.25)).toBe('612.2');
    expect(formatNumber(612.75)).toBe('612.8');
    expect(formatNumber(-2.5, 0)).toBe('-2');
    expect(formatNumber(-0.5, 0)).toBe('0');
    // Not ties in binary: the nearest decimal wins, as everywhere.
    expect(formatNumber(0.15)).toBe('0.1');
    expect(formatNumber(0.35)).toBe('0.3');
    expect(formatNumber(1.005, 2)).toBe('1');
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

  it('reads unknown values as a dash', () => {
    expect(summarize([gpu(0, { utilization_gpu_percent: null, memory_total_bytes: null })])!.title).toBe(
      'GPU 0: — · 37 GiB'
    );
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
