/**
 * The Cluster view's data: columns read by name, the page asked for, stale hosts, words.
 */
import {
  DEFAULT_HOST_QUERY,
  formatMemory,
  formatPower,
  historyPoints,
  hostQueryParams,
  IClusterHost,
  IClusterTotals,
  pageText,
  parseOverview,
  problemText,
  staleText,
  totalsOf,
  totalsText
} from '../cluster/cluster';
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

describe('the page asked of the server', () => {
  it('asks for the first page by host name by default', () => {
    expect(hostQueryParams(DEFAULT_HOST_QUERY, 100)).toEqual({ sort: 'host', descending: 0, offset: 0, limit: 100 });
  });

  it('sends the filter trimmed, the activity, the sort by the server\'s name and the offset', () => {
    const q = { filter: '  node B ', activity: 'free' as const, sort: 'utilMax' as const, descending: true, offset: 200 };
    expect(hostQueryParams(q, 100)).toEqual({
      filter: 'node B',
      activity: 'free',
      sort: 'utilization_max',
      descending: 1,
      offset: 200,
      limit: 100
    });
  });

  it('refuses a column or an activity that does not exist', () => {
    expect(() => hostQueryParams({ ...DEFAULT_HOST_QUERY, sort: 'nonsense' as never }, 100)).toThrow(
      /cannot sort the hosts by "nonsense": use one of host, gpus/
    );
    expect(() => hostQueryParams({ ...DEFAULT_HOST_QUERY, activity: 'idle' as never }, 100)).toThrow(
      /use one of all, busy, free, stale/
    );
  });

  it('reads where the page starts and how many hosts match; an older server sends every host on one', () => {
    const paged = parseOverview(overview([hostRow({ hostname: 'a' })], { matched_hosts: 301, offset: 300, limit: 100 }));
    expect([paged.overview.matched_hosts, paged.overview.offset, paged.overview.limit]).toEqual([301, 300, 100]);
    const old = parseOverview(overview([hostRow({ hostname: 'a' }), hostRow({ hostname: 'b' })]));
    expect([old.overview.matched_hosts, old.overview.offset]).toEqual([2, 0]);
    expect(pageText(300, 1, 301)).toBe('Hosts 301–301 of 301');
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
