/**
 * Cluster answers as the server sends them (the JSON contract of `GET cluster`), for the
 * Cluster view's tests.
 */
import { IClusterHostDetail } from '../cluster/cluster';
import { GIB } from './utils';

export const HOST_COLUMNS = [
  'hostname',
  'current',
  'stale',
  'age_s',
  'gpu_count',
  'busy_gpus',
  'free_gpus',
  'utilization_mean_percent',
  'utilization_max_percent',
  'memory_used_gib',
  'memory_total_gib',
  'temperature_max_c',
  'power_w',
  'simulated'
];

/** One host row; values by column name, in HOST_COLUMNS order unless `columns` says otherwise. */
export function hostRow(values: { [column: string]: unknown }, columns: readonly string[] = HOST_COLUMNS): unknown[] {
  const defaults: { [column: string]: unknown } = {
    current: false,
    stale: false,
    age_s: 0.8,
    gpu_count: 8,
    busy_gpus: 3,
    free_gpus: 5,
    utilization_mean_percent: 41.2,
    utilization_max_percent: 99,
    memory_used_gib: 120.5,
    memory_total_gib: 640,
    temperature_max_c: 71,
    power_w: 1800.5,
    simulated: false
  };
  return columns.map(c => (c in values ? values[c] : defaults[c] ?? null));
}

/** A `GET cluster` body (loosely typed: tests also send what the server never should). */
export type Body = { [key: string]: unknown };

export function overview(rows: unknown[][], changes: Body = {}): Body {
  return {
    status: 'ok',
    reason: null,
    prometheus_url: 'http://127.0.0.1:9090',
    current_host: 'node-a',
    queried_at: 1764790000,
    scrape_interval_s: 15,
    host_columns: HOST_COLUMNS,
    hosts: rows,
    ...changes
  };
}

/** `n` hosts: node-000 (the current one) ... with varied readings; every 50th stale. */
export function manyHosts(n: number): unknown[][] {
  return Array.from({ length: n }, (_, i) =>
    hostRow({
      hostname: `node-${String(i).padStart(3, '0')}`,
      current: i === 0,
      stale: i % 50 === 49,
      age_s: i % 50 === 49 ? 45 : 0.5,
      busy_gpus: i % 9,
      free_gpus: 8 - (i % 9),
      utilization_mean_percent: (i * 37) % 100,
      utilization_max_percent: (i * 53) % 101,
      memory_used_gib: (i * 13) % 640,
      temperature_max_c: 40 + (i % 45),
      power_w: 300 + ((i * 97) % 5000)
    })
  );
}

export function hostDetail(hostname: string, gpus = 2, changes: Partial<IClusterHostDetail> = {}): IClusterHostDetail {
  return {
    status: 'ok',
    reason: null,
    hostname,
    current: hostname === 'node-a',
    stale: false,
    age_s: 0.8,
    simulated: false,
    history_step_s: 15,
    gpus: Array.from({ length: gpus }, (_, i) => ({
      gpu: String(i),
      uuid: `GPU-${hostname}-${i}`,
      model: 'NVIDIA H100 80GB HBM3',
      pci_bus_id: `00000000:0${i}:00.0`,
      utilization_gpu_percent: 97,
      memory_used_bytes: 37 * GIB,
      memory_total_bytes: 80 * GIB,
      temperature_c: 65,
      power_w: 512.3,
      history: { utilization_gpu_percent: [90, 95, null, 97], memory_used_bytes: [1, 2, 3, 4] }
    })),
    ...changes
  };
}

/**
 * The server's pages of `rows` as `GET cluster` cuts them (names in order; the Python tests check
 * the server's own filtering and sorting): `filter` words in the name, `offset`, `limit`.
 */
export function pageOf(rows: unknown[][], q: { [name: string]: unknown }, changes: Body = {}): Body {
  const words = String(q.filter ?? '').toLowerCase().split(/\s+/).filter(Boolean);
  const matching = rows.filter(r => words.every(w => String(r[0]).toLowerCase().includes(w)));
  const limit = Number(q.limit ?? 100);
  const offset = Number(q.offset ?? 0);
  const page = matching.slice(offset, offset + limit);
  const gpus = rows.length * 8;
  return overview(page, {
    totals: { hosts: rows.length, gpus, stale_hosts: 0, busy_gpus: 0, free_gpus: gpus, simulated_hosts: 0 },
    unlisted_hosts: 0,
    unlisted_reason: null,
    matched_hosts: matching.length,
    offset,
    limit,
    ...changes
  });
}
