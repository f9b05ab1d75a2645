/**
 * The Cluster view's data: columns read by name, sorting, filtering, stale hosts, words.
 */
import {
  filterHosts,
  formatMemory,
  formatPower,
  historyPoints,
  IClusterHost,
  IClusterTotals,
  parseOverview,
  problemText,
  sortHosts,
  staleText,
  totalsOf,
  totalsText
} from '../cluster';
import { HOST_COLUMNS, hostRow, manyHosts, overview } from './clusterData';

function hosts(rows: unknown[][]): IClusterHost[] {
  return parseOverview(overview(rows)).hosts;
}

describe('parseOverview', () => {
  it('reads every column by its name', () => {
    const [h] = hosts([hostRow({ hostname: 'node-a', current: true })]);
    expect(h).toEqual({
      hostname: 'node-a',
      current: true,
      stale: false,
      ageS: 0.8,
      gpuCount: 8,
      busyGpus: 3,
      freeGpus: 5,
      utilMean: 41.2,
      utilMax: 99,
      memUsedGiB: 120.5,
      memTotalGiB: 640,
      tempMaxC: 71,
      powerW: 1800.5,
      simulated: false
    });
  });

  it('reads which hosts are simulated; an older server without the column has none', () => {
    const [sim, real] = hosts([hostRow({ hostname: 'sim', simulated: true }), hostRow({ hostname: 'real' })]);
    expect(sim.simulated).toBe(true);
    expect(real.simulated).toBe(false);
    const columns = HOST_COLUMNS.filter(c => c !== 'simulated');
    const [old] = parseOverview(overview([hostRow({ hostname: 'old' }, columns)], { host_columns: columns })).hosts;
    expect(old.simulated).toBe(false);
  });

  it('does not depend on the order of the columns, and ignores columns it does not know', () => {
    const columns = ['power_w', 'new_column', ...HOST_COLUMNS.filter(c => c !== 'power_w').reverse()];
    const body = overview([hostRow({ hostname: 'node-b', power_w: 42, new_column: 'x' }, columns)], { host_columns: columns });
    const [h] = parseOverview(body).hosts;
    expect(h.hostname).toBe('node-b');
    expect(h.powerW).toBe(42);
    expect(h.gpuCount).toBe(8);
  });

  it('reads null and missing columns as unknown', () => {
    const columns = HOST_COLUMNS.filter(c => c !== 'temperature_max_c');
    const body = overview([hostRow({ hostname: 'n', power_w: null }, columns)], { host_columns: columns });
    const [h] = parseOverview(body).hosts;
    expect(h.tempMaxC).toBeNull();
    expect(h.powerW).toBeNull();
  });

  it('says what is wrong with a body that is not an overview', () => {
    expect(() => parseOverview({ status: 'fine' })).toThrow(/"status" must be one of ok, not_configured/);
    expect(() => parseOverview(null)).toThrow(/not a cluster overview/);
    expect(() => parseOverview(overview([['a', true]]))).toThrow(/host row 0 has not the 14 values/);
    expect(() => parseOverview(overview([['a']], { host_columns: ['name'] }))).toThrow(/no "hostname"/);
  });

  it('accepts the not-configured and unreachable answers without hosts', () => {
    const off = parseOverview({ status: 'not_configured', reason: null, host_columns: [], hosts: [] });
    expect(off.hosts).toEqual([]);
    expect(off.overview.status).toBe('not_configured');
    const down = parseOverview(overview([], { status: 'unreachable', reason: 'connection refused' }));
    expect(down.overview.reason).toBe('connection refused');
  });
});

describe('sortHosts', () => {
  const rows = hosts([
    hostRow({ hostname: 'b', busy_gpus: 2, utilization_mean_percent: 50 }),
    hostRow({ hostname: 'a', busy_gpus: 7, utilization_mean_percent: null }),
    hostRow({ hostname: 'c', busy_gpus: 2, utilization_mean_percent: 90, stale: true }),
    hostRow({ hostname: 'd', busy_gpus: 0, utilization_mean_percent: 10 })
  ]);
  const names = (hs: IClusterHost[]): string[] => hs.map(h => h.hostname);

  it('sorts by name either way', () => {
    expect(names(sortHosts(rows, 'host', false))).toEqual(['a', 'b', 'c', 'd']);
    expect(names(sortHosts(rows, 'host', true))).toEqual(['d', 'c', 'b', 'a']);
  });

  it('puts unknown values and stale hosts last in both directions, ties by name', () => {
    expect(names(sortHosts(rows, 'utilization', true))).toEqual(['b', 'd', 'a', 'c']);
    expect(names(sortHosts(rows, 'utilization', false))).toEqual(['d', 'b', 'a', 'c']);
    expect(names(sortHosts(rows, 'busy', true))).toEqual(['a', 'b', 'd', 'c']);
  });

  it('refuses a column that does not exist', () => {
    expect(() => sortHosts(rows, 'nonsense' as never, false)).toThrow(/cannot sort the hosts by "nonsense": use one of host, gpus/);
  });
});

describe('filterHosts', () => {
  const rows = hosts([
    hostRow({ hostname: 'gpu-node-a', current: true, busy_gpus: 8, free_gpus: 0 }),
    hostRow({ hostname: 'gpu-node-b', busy_gpus: 0, free_gpus: 8 }),
    hostRow({ hostname: 'cpu-box', busy_gpus: 8, free_gpus: 8, stale: true, age_s: 45 })
  ]);
  const names = (hs: IClusterHost[]): string[] => hs.map(h => h.hostname);

  it('keeps busy, free or stale hosts (a stale host is neither busy nor free)', () => {
    expect(names(filterHosts(rows, '', 'all'))).toEqual(['gpu-node-a', 'gpu-node-b', 'cpu-box']);
    expect(names(filterHosts(rows, '', 'busy'))).toEqual(['gpu-node-a']);
    expect(names(filterHosts(rows, '', 'free'))).toEqual(['gpu-node-b']);
    expect(names(filterHosts(rows, '', 'stale'))).toEqual(['cpu-box']);
  });

  it('matches every word of the text in the host name, case-insensitively; "this server" finds the current host', () => {
    expect(names(filterHosts(rows, 'NODE b', 'all'))).toEqual(['gpu-node-b']);
    expect(names(filterHosts(rows, 'this server', 'all'))).toEqual(['gpu-node-a']);
    expect(names(filterHosts(rows, 'node', 'free'))).toEqual(['gpu-node-b']);
    expect(filterHosts(rows, 'zzz', 'all')).toEqual([]);
  });

  it('refuses a filter that does not exist', () => {
    expect(() => filterHosts(rows, '', 'idle' as never)).toThrow(/use one of all, busy, free, stale/);
  });
});

describe('words', () => {
  it('marks a stale host with how long it has been silent', () => {
    expect(staleText(45)).toBe('no data for 45 s');
    expect(staleText(600)).toBe('no data for 10 min');
    expect(staleText(null)).toBe('no data');
  });

  it('writes the totals line, from the server totals or from the rows', () => {
    const totals = { hosts: 2, gpus: 16, stale_hosts: 0, busy_gpus: 3, free_gpus: 12, simulated_hosts: 0 };
    expect(totalsText(totals)).toBe('2 hosts · 16 GPUs · 3 busy · 12 free');
    const rows = hosts([hostRow({ hostname: 'a', gpu_count: 1, busy_gpus: 1, free_gpus: 0 }), hostRow({ hostname: 'b', stale: true })]);
    expect(totalsText(totalsOf(rows))).toBe('2 hosts · 9 GPUs · 1 busy · 0 free · 1 stale');
  });

  it('counts simulated hosts in the totals line, only when there are some', () => {
    expect(totalsText({ hosts: 3, gpus: 5, stale_hosts: 1, busy_gpus: 1, free_gpus: 2, simulated_hosts: 2 })).toBe(
      '3 hosts · 5 GPUs · 1 busy · 2 free · 1 stale · 2 simulated'
    );
    const rows = hosts([hostRow({ hostname: 'a', simulated: true }), hostRow({ hostname: 'b' })]);
    expect(totalsOf(rows).simulated_hosts).toBe(1);
    expect(totalsText(totalsOf(rows))).toMatch(/ · 1 simulated$/);
    // An older server's totals have no count: nothing is said rather than a made-up 0.
    const old = { hosts: 1, gpus: 8, stale_hosts: 0, busy_gpus: 3, free_gpus: 5 } as unknown as IClusterTotals;
    expect(totalsText(old)).toBe('1 host · 8 GPUs · 3 busy · 5 free');
  });

  it('writes power, memory and problems short', () => {
    expect(formatPower(1800.5)).toBe('1.8 kW');
    expect(formatPower(612.5)).toBe('612 W');
    expect(formatPower(null)).toBe('—');
    expect(formatMemory(120.5, 640)).toBe('120/640 GiB');
    expect(formatMemory(37.25, 80)).toBe('37.2/80 GiB');
    expect(formatMemory(120.5, 640, false)).toBe('120/640');
    expect(formatMemory(null, 640)).toBe('—');
    // The server's reason is a sentence that names the URL; without one, ours does.
    const refused = 'Prometheus at http://p:9090 cannot be reached: connection refused';
    expect(problemText('unreachable', refused, 'http://p:9090')).toBe(`${refused}.`);
    expect(problemText('error', null, 'http://p:9090')).toBe(
      'Prometheus at http://p:9090 answered with something the cluster view cannot use.'
    );
    expect(problemText('ok', null, null)).toBeNull();
  });

  it('counts the history back from the query time', () => {
    expect(historyPoints([1, null, 3], 15, 1000)).toEqual({ t: [970, 985, 1000], y: [1, null, 3] });
  });

  it('parses 500 hosts', () => {
    const rows = hosts(manyHosts(500));
    expect(rows).toHaveLength(500);
    expect(rows.filter(h => h.stale)).toHaveLength(10);
  });
});
