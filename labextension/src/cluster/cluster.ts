/**
 * The Cluster view's data: the server's `cluster` answers (read from Prometheus by the server),
 * turned into host rows and words, and the page of hosts the view asks for (the server filters,
 * sorts and pages the hosts: every host is findable in ~48 KB of rows per refresh).
 *
 * The overview sends its hosts as arrays in `host_columns` order (compact for 500 hosts); every
 * column is read by its name, so the server may add or reorder columns without breaking us.
 *
 * Pure functions (no DOM): jest-tested.
 */
import { components } from '../api/generated';
import { METRIC } from '../api/catalogue.generated';
import { formatDuration, formatNumber } from '../ui/format';
import { formatValue } from '../gpus/metrics';

type Schemas = components['schemas'];

/** `GET cluster`: every host Prometheus knows, one array per host (in `host_columns` order). */
export type IClusterOverview = Schemas['ClusterOverview'];

/** `status` of both cluster answers; `not_configured`: no `c.GpuWidgets.prometheus_url`. */
export type ClusterStatus = IClusterOverview['status'];

export type IClusterTotals = IClusterOverview['totals'];

/** `GET cluster?host=NAME`. */
export type IClusterHostDetail = Schemas['ClusterHost'];

/** One GPU of a host's detail; its history lists are `history_step_s` apart, newest last. */
export type IClusterGpu = Schemas['ClusterGpu'];

/** One host of the overview, its columns by name (null where the server sent none). */
export interface IClusterHost {
  hostname: string;
  current: boolean;
  stale: boolean;
  ageS: number | null;
  gpuCount: number | null;
  busyGpus: number | null;
  freeGpus: number | null;
  utilMean: number | null;
  utilMax: number | null;
  memUsedGiB: number | null;
  memTotalGiB: number | null;
  tempMaxC: number | null;
  powerW: number | null;
  /** Its GPUs are gpu-widgets' simulated ones (false from an older server, which cannot say). */
  simulated: boolean;
}

/** The server's column name for each field of a row. */
const COLUMN_OF: { readonly [field in keyof IClusterHost]: string } = {
  hostname: 'hostname',
  current: 'current',
  stale: 'stale',
  ageS: 'age_s',
  gpuCount: 'gpu_count',
  busyGpus: 'busy_gpus',
  freeGpus: 'free_gpus',
  utilMean: 'utilization_mean_percent',
  utilMax: 'utilization_max_percent',
  memUsedGiB: 'memory_used_gib',
  memTotalGiB: 'memory_total_gib',
  tempMaxC: 'temperature_max_c',
  powerW: 'power_w',
  simulated: 'simulated'
};

const STATUSES: readonly ClusterStatus[] = ['ok', 'not_configured', 'unreachable', 'error'];

function num(value: unknown): number | null {
  return typeof value === 'number' && Number.isFinite(value) ? value : null;
}

/**
 * Check a `GET cluster` body and read its rows. Throws an Error saying what is wrong when the
 * body is not a cluster overview (the model turns it into a message).
 */
export function parseOverview(body: unknown): { overview: IClusterOverview; hosts: IClusterHost[] } {
  const b = body as Partial<IClusterOverview> | null;
  if (!b || typeof b !== 'object' || !STATUSES.includes(b.status as ClusterStatus)) {
    throw new Error(`not a cluster overview: "status" must be one of ${STATUSES.join(', ')}`);
  }
  // Read as plain names: a newer server may send columns this version does not know.
  const columns: readonly string[] = Array.isArray(b.host_columns) ? b.host_columns : [];
  const rows = Array.isArray(b.hosts) ? b.hosts : [];
  if (rows.length && !columns.includes('hostname')) {
    throw new Error('not a cluster overview: "host_columns" has no "hostname"');
  }
  const at = new Map(columns.map((name, i) => [name, i]));
  const hosts = rows.map((row, n) => {
    if (!Array.isArray(row) || row.length !== columns.length) {
      throw new Error(`not a cluster overview: host row ${n} has not the ${columns.length} values of "host_columns"`);
    }
    const get = (field: keyof IClusterHost): unknown => {
      const i = at.get(COLUMN_OF[field]);
      return i === undefined ? null : row[i];
    };
    return {
      hostname: String(get('hostname') ?? ''),
      current: get('current') === true,
      stale: get('stale') === true,
      ageS: num(get('ageS')),
      gpuCount: num(get('gpuCount')),
      busyGpus: num(get('busyGpus')),
      freeGpus: num(get('freeGpus')),
      utilMean: num(get('utilMean')),
      utilMax: num(get('utilMax')),
      memUsedGiB: num(get('memUsedGiB')),
      memTotalGiB: num(get('memTotalGiB')),
      tempMaxC: num(get('tempMaxC')),
      powerW: num(get('powerW')),
      simulated: get('simulated') === true
    };
  });
  const overview: IClusterOverview = {
    status: b.status as ClusterStatus,
    reason: typeof b.reason === 'string' ? b.reason : null,
    prometheus_url: typeof b.prometheus_url === 'string' ? b.prometheus_url : null,
    current_host: typeof b.current_host === 'string' ? b.current_host : '',
    queried_at: num(b.queried_at) ?? Date.now() / 1000,
    scrape_interval_s: num(b.scrape_interval_s),
    host_columns: columns as IClusterOverview['host_columns'],
    hosts: rows as IClusterOverview['hosts'],
    totals: b.totals && typeof b.totals === 'object' ? b.totals : totalsOf(hosts),
    // An older server lists every host: nothing unlisted.
    unlisted_hosts: num(b.unlisted_hosts) ?? 0,
    unlisted_reason: typeof b.unlisted_reason === 'string' ? b.unlisted_reason : null,
    // An older server sends every host on one page.
    matched_hosts: num(b.matched_hosts) ?? hosts.length,
    offset: num(b.offset) ?? 0,
    limit: num(b.limit) ?? Math.max(1, hosts.length)
  };
  return { overview, hosts };
}

/** The columns a person can sort the hosts by. */
export type HostSortKey = 'host' | 'gpus' | 'busy' | 'free' | 'utilization' | 'utilMax' | 'memory' | 'temperature' | 'power';

export const HOST_SORT_KEYS: readonly HostSortKey[] = [
  'host',
  'gpus',
  'busy',
  'free',
  'utilization',
  'utilMax',
  'memory',
  'temperature',
  'power'
];

/** The server's name of each sort column (`sort=` of `GET cluster`). */
const SORT_PARAM: { readonly [key in HostSortKey]: string } = {
  host: 'host',
  gpus: 'gpus',
  busy: 'busy',
  free: 'free',
  utilization: 'utilization',
  utilMax: 'utilization_max',
  memory: 'memory',
  temperature: 'temperature',
  power: 'power'
};

/** Which hosts the table lists. */
export type HostFilter = 'all' | 'busy' | 'free' | 'stale';

export const HOST_FILTERS: readonly HostFilter[] = ['all', 'busy', 'free', 'stale'];

/** Which page of hosts the view shows: the server filters, sorts and cuts it. */
export interface IHostQuery {
  /** Every word must be in the host name (case-insensitive); "this server" finds the current host. */
  filter: string;
  activity: HostFilter;
  sort: HostSortKey;
  descending: boolean;
  /** The first host of the page, counted among the matching ones. */
  offset: number;
}

export const DEFAULT_HOST_QUERY: IHostQuery = { filter: '', activity: 'all', sort: 'host', descending: false, offset: 0 };

/** The query parameters of `GET cluster` for a page of at most `limit` hosts. */
export function hostQueryParams(q: IHostQuery, limit: number): { [name: string]: string | number } {
  if (!HOST_SORT_KEYS.includes(q.sort)) {
    throw new Error(`cannot sort the hosts by ${JSON.stringify(q.sort)}: use one of ${HOST_SORT_KEYS.join(', ')}`);
  }
  if (!HOST_FILTERS.includes(q.activity)) {
    throw new Error(`cannot filter the hosts by ${JSON.stringify(q.activity)}: use one of ${HOST_FILTERS.join(', ')}`);
  }
  const params: { [name: string]: string | number } = {
    sort: SORT_PARAM[q.sort],
    descending: q.descending ? 1 : 0,
    offset: Math.max(0, Math.floor(q.offset)),
    limit
  };
  const filter = q.filter.trim();
  if (filter) {
    params.filter = filter;
  }
  if (q.activity !== 'all') {
    params.activity = q.activity;
  }
  return params;
}

/** "Hosts 101–200 of 1234" (of those matching the filter). */
export function pageText(offset: number, rows: number, matched: number): string {
  return `Hosts ${offset + 1}–${offset + rows} of ${matched}`;
}

const DASH = '—';

/** The totals of these rows (when the server sent none): busy and free count only hosts that report. */
export function totalsOf(hosts: readonly IClusterHost[]): IClusterTotals {
  return {
    hosts: hosts.length,
    gpus: hosts.reduce((s, h) => s + (h.gpuCount ?? 0), 0),
    busy_gpus: hosts.reduce((s, h) => s + (h.stale ? 0 : h.busyGpus ?? 0), 0),
    free_gpus: hosts.reduce((s, h) => s + (h.stale ? 0 : h.freeGpus ?? 0), 0),
    stale_hosts: hosts.filter(h => h.stale).length,
    simulated_hosts: hosts.filter(h => h.simulated).length
  };
}

/** "no data for 45 s" (a stale host), or "no data" when the age is unknown. */
export function staleText(ageS: number | null): string {
  return ageS === null ? 'no data' : `no data for ${formatDuration(ageS)}`;
}

/*
 * The readings come from Prometheus, not from `GET metrics`: they read in the units and digits of
 * this version's catalogue (Prometheus's MiB already turned to GiB by the server).
 */
const { utilization: BUSY, memory: MEMORY, temperature: TEMPERATURE, power: POWER } = METRIC;

/** Watts, in kW past 1000 W so that an 8-GPU host stays short ("5.6 kW"). */
export function formatPower(watts: number | null): string {
  if (watts === null) {
    return DASH;
  }
  return watts >= 1000 ? `${formatNumber(watts / 1000)} k${POWER.unit}` : formatValue(POWER, watts);
}

/** A GPU's utilization (NVML's busy time, as the sidebar's "GPU busy"): "41 %". */
export function formatPercent(value: number | null): string {
  return value === null ? DASH : formatValue(BUSY, value);
}

/** "120/640 GiB" ("120/640" where the column's header gives the unit); whole GiB past 100, to fit the row. */
export function formatMemory(usedGiB: number | null, totalGiB: number | null, unit = true): string {
  const f = (v: number): string => formatNumber(v, v >= 100 ? 0 : MEMORY.decimals);
  if (usedGiB === null) {
    return DASH;
  }
  const text = totalGiB === null ? f(usedGiB) : `${f(usedGiB)}/${f(totalGiB)}`;
  return unit ? `${text} ${MEMORY.unit}` : text;
}

export function formatTemperature(celsius: number | null): string {
  return celsius === null ? DASH : formatValue(TEMPERATURE, celsius);
}

/** The y range of a utilization (the catalogue's, a percentage where it gives none). */
export const BUSY_RANGE: readonly [number, number] = [BUSY.y_min ?? 0, BUSY.y_max ?? 100];

/** The share of the utilization range in use, 0..1 (a host row's inline bar). */
export function busyFill(percent: number): number {
  const [lo, hi] = BUSY_RANGE;
  return Math.min(1, Math.max(0, (percent - lo) / (hi - lo)));
}

/** The totals line: "2 hosts · 16 GPUs · 3 busy · 12 free · 1 stale · 2 simulated". */
export function totalsText(t: IClusterTotals): string {
  const plural = (n: number, word: string): string => `${n} ${word}${n === 1 ? '' : 's'}`;
  const parts = [plural(t.hosts, 'host'), plural(t.gpus, 'GPU'), `${t.busy_gpus} busy`, `${t.free_gpus} free`];
  if (t.stale_hosts) {
    parts.push(`${t.stale_hosts} stale`);
  }
  // Made-up readings are never passed off as real ones, even in a sum (an older server sends no count).
  if (t.simulated_hosts) {
    parts.push(`${t.simulated_hosts} simulated`);
  }
  return parts.join(' · ');
}

/**
 * The words for a status that is not `ok`, for the message above the table: the server's reason
 * (a sentence that names Prometheus's URL), else words of our own.
 */
export function problemText(status: ClusterStatus, reason: string | null, url: string | null): string | null {
  if (status === 'ok' || status === 'not_configured') {
    return null;
  }
  if (reason) {
    return /[.!?]$/.test(reason) ? reason : `${reason}.`;
  }
  const where = url ? ` at ${url}` : '';
  return status === 'unreachable'
    ? `Prometheus${where} cannot be reached.`
    : `Prometheus${where} answered with something the cluster view cannot use.`;
}

/**
 * A GPU's history as chart points: the server sends values `stepS` apart, newest last, ending at
 * `endS` (the query time), so the times are counted back from there.
 */
export function historyPoints(
  values: readonly (number | null)[],
  stepS: number,
  endS: number
): { t: number[]; y: (number | null)[] } {
  const n = values.length;
  return { t: values.map((_, i) => endS - (n - 1 - i) * stepS), y: values.map(v => num(v)) };
}
