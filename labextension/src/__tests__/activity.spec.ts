/**
 * "Busy" against "SM active": which rows a card shows, how GPM figures that are only being
 * fetched read, per-process shares and MIG instances.
 */
import {
  ACTIVITY_HELP,
  cardMetrics,
  FALLBACK_ACTIVITY,
  isPendingReason,
  labelHelp,
  migRows,
  processUse,
  withLive
} from '../gpus/activity';
import { catalogue, GIB, metricInfo } from './utils';
import { HOPPER, liveDevice, mig, NOBODY, proc } from './gpmData';

const ids = (metrics: readonly { id: string }[]): string[] => metrics.map(m => m.id);

describe('the rows of a card', () => {
  it('puts SM active and tensor active right after busy when the catalogue offers them', () => {
    const offered = catalogue().sidebar;
    // The settings may list them in another order: they still read beside busy.
    const shown = offered.filter(m => m.id !== 'utilization').concat(offered.filter(m => m.id === 'utilization'));
    expect(ids(cardMetrics(shown, offered))).toEqual([
      'memory',
      'memory_controller',
      'temperature',
      'power',
      'utilization',
      'sm_active',
      'tensor_active'
    ]);
    expect(cardMetrics(offered, offered).find(m => m.id === 'sm_active')).toBe(offered.find(m => m.id === 'sm_active'));
  });

  it('adds value-only rows for them when the server\'s catalogue has none', () => {
    const old = catalogue().sidebar.filter(m => !['sm_active', 'tensor_active'].includes(m.id));
    const rows = cardMetrics(old, old);
    expect(ids(rows)).toEqual(['utilization', 'sm_active', 'tensor_active', 'memory', 'memory_controller', 'temperature', 'power']);
    expect(rows[1]).toBe(FALLBACK_ACTIVITY[0]);
    expect(rows[1].field).toBe('sm_active_percent');
    expect(cardMetrics([], old)).toEqual([]); // no metric chosen: no fallback rows either
  });

  it('leaves out a GPM metric the person left out in the settings', () => {
    const offered = catalogue().sidebar;
    const shown = offered.filter(m => m.id !== 'tensor_active');
    expect(ids(cardMetrics(shown, offered))).not.toContain('tensor_active');
    expect(ids(cardMetrics([], offered))).toEqual([]);
  });

  it('explains on hover why busy is not SM active', () => {
    const busy = catalogue().sidebar.find(m => m.id === 'utilization')!;
    expect(labelHelp(busy)).toMatch(/some kernel ran/);
    expect(labelHelp(busy)).toMatch(/SM active says how much of the GPU's SMs worked/);
    expect(ACTIVITY_HELP.sm_active).toMatch(/one tiny kernel makes it 100 %/);
    expect(labelHelp(metricInfo('fan', 'fan_percent', 'Fan', '%'))).toBe('Fan: what it means.');
  });
});

describe('GPM figures that are only being fetched', () => {
  it('tells "being fetched" from a real reason', () => {
    expect(isPendingReason(NOBODY)).toBe(true);
    expect(isPendingReason('not read yet (GPM compares two samples one slow interval apart)')).toBe(true);
    expect(isPendingReason(HOPPER)).toBe(false);
    expect(isPendingReason('not read for 12 s')).toBe(false);
    expect(isPendingReason(null)).toBe(false);
  });

  it('lays the newest samples/latest figures over the history where it has none', () => {
    const history = { utilization_gpu_percent: 98, sm_active_percent: null, tensor_active_percent: 30 };
    const why = { sm_active_percent: NOBODY, tensor_active_percent: 'stale reason' };
    const live = liveDevice(0, { sm_active_percent: 6, tensor_active_percent: 0.5 });
    const out = withLive(history, why, live);
    expect(out.values).toMatchObject({ utilization_gpu_percent: 98, sm_active_percent: 6, tensor_active_percent: 30 });
    expect(out.unavailable).toEqual({});
    // Null in both: the live reason, which is the newer one.
    const none = withLive(history, why, liveDevice(0, { sm_active_percent: null, unavailable: { sm_active_percent: HOPPER } }));
    expect(none.values.sm_active_percent).toBeNull();
    expect(none.unavailable.sm_active_percent).toBe(HOPPER);
    expect(withLive(history, why, null)).toEqual({ values: history, unavailable: why });
  });
});

describe('a process\'s share of the GPU', () => {
  it('reads its SM and memory bandwidth share beside its memory', () => {
    const use = processUse(proc(42, 63.4, 12))!;
    expect(use.sm.text).toBe('63 %');
    expect(use.sm.title).toMatch(/share of the GPU's SM time/);
    expect(use.bandwidth.text).toBe('12 %');
  });

  it('says "…" while nobody looked yet, "n/a" and why otherwise, nothing for an older server', () => {
    expect(processUse(proc(42, null, null))!.sm.text).toBe('…');
    const na = processUse(proc(42, null, 5, 'the driver cannot say (nvmlDeviceGetProcessUtilization: Not Supported)'))!;
    expect(na.sm.text).toBe('n/a');
    expect(na.sm.title).toMatch(/the driver cannot say/);
    expect(na.bandwidth.text).toBe('5 %');
    const old = { ...proc(42, 1, 1) } as Partial<ReturnType<typeof proc>>;
    delete old.sm_percent;
    delete old.memory_bandwidth_percent;
    expect(processUse(old as ReturnType<typeof proc>)).toBeNull();
  });
});

describe('MIG instances', () => {
  it('lists each with its memory, SM active and the processes in it', () => {
    const rows = migRows(
      [mig(0, { pids: [42, 77] }), mig(1, { sm_active_percent: null, unavailable: { sm_active_percent: HOPPER }, memory_used_bytes: 0.5 * GIB })],
      [proc(42, 10, 1), { ...proc(77, 0, 0), name: '/usr/bin/python3' }]
    );
    expect(rows).toHaveLength(2);
    expect(rows[0]).toMatchObject({ index: 0, ids: 'GI 1 · CI 0', memory: '3 / 10 GiB', uuid: 'MIG-0' });
    expect(rows[0].smActive.text).toBe('40 %');
    expect(rows[0].processes).toEqual([
      { pid: 42, text: '42 python' },
      { pid: 77, text: '77 python3' }
    ]);
    expect(rows[1].memory).toBe('0.5 / 10 GiB');
    expect(rows[1].smActive).toMatchObject({ text: 'n/a', value: null });
    expect(rows[1].smActive.title).toContain(HOPPER);
    expect(rows[1].processes).toEqual([]);
  });

  it('has none for a GPU without MIG, or an answer without the field', () => {
    expect(migRows([], null)).toEqual([]);
    expect(migRows(null, null)).toEqual([]);
    expect(migRows(undefined, null)).toEqual([]);
  });
});
