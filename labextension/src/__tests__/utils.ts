/**
 * Test helpers: an endpoint table that stands in for the request module, a metric catalogue
 * as the server serves it, and a small fake of the server's history so `since` requests
 * answer like the real one.
 */
import { Catalogue } from '../api/catalogue';
import { CATALOGUE, GPM_FIELDS } from '../api/catalogue.generated';
import { ILatestValues } from '../ui/format';
import { GpuModel } from '../gpus/model';
import { Query, requestAPI } from '../api/request';
import {
  ApiError,
  IDeviceHistory,
  IDeviceInfo,
  IDeviceProcesses,
  IDevices,
  IMetricInfo,
  IMetricsCatalogue,
  IProcesses,
  ISamples,
  IStatus,
  IUnavailable
} from '../api/tokens';

export const GIB = 1024 ** 3;

/** How one endpoint answers: a body (from the query), an HTTP error, or no answer. */
export type Reply =
  | { body: (query: Query) => unknown }
  | { status: number; code?: string | null; message?: string }
  | { network: true };

export interface IRecordedCall {
  endpoint: string;
  query: Query;
}

/**
 * A stand-in for `requestAPI` answering from a mutable endpoint table; records every call.
 * An endpoint missing from the table fails the test loudly.
 */
export class MockApi {
  constructor(public table: { [endpoint: string]: Reply }) {}

  readonly calls: IRecordedCall[] = [];

  /** The calls of one endpoint. */
  callsTo(endpoint: string): IRecordedCall[] {
    return this.calls.filter(c => c.endpoint === endpoint);
  }

  handler = async (endpoint: string, query: Query = {}): Promise<unknown> => {
    this.calls.push({ endpoint, query });
    const reply = this.table[endpoint];
    if (!reply) {
      throw new Error(`no mocked reply for ${endpoint}`);
    }
    if ('network' in reply) {
      throw new ApiError('network', endpoint, 'the Jupyter server did not answer (Failed to fetch)');
    }
    if ('status' in reply) {
      throw new ApiError(
        'http',
        endpoint,
        reply.message ?? `HTTP ${reply.status}`,
        reply.status,
        reply.code ?? null
      );
    }
    // A copy, as JSON would be: the model must not share objects with the "server".
    return JSON.parse(JSON.stringify(reply.body(query)));
  };
}

/** The newest values of one GPU (an H200 at work), with some fields changed. */
export function latest(
  index: number,
  changes: { lost?: boolean; [field: string]: number | null | boolean | undefined } = {}
): ILatestValues {
  const { lost, ...values } = changes;
  return {
    index,
    lost: Boolean(lost),
    values: {
      utilization_gpu_percent: 97,
      utilization_memory_percent: 41,
      memory_used_bytes: 37 * GIB,
      memory_total_bytes: 141 * GIB,
      temperature_c: 71,
      power_w: 612.5,
      power_limit_w: 700,
      ...(values as { [field: string]: number | null })
    }
  };
}

/** One catalogue entry with the defaults of gpu_widgets/metrics/catalogue.py's `Metric`. */
export function metricInfo(
  id: string,
  field: string,
  label: string,
  unit: string,
  overrides: Partial<IMetricInfo> = {}
): IMetricInfo {
  return {
    id,
    field,
    label,
    title: `${label} (${unit})`,
    unit,
    help: `${label}: what it means.`,
    scale: 1,
    decimals: 0,
    y_min: 0,
    y_max: null,
    y_max_field: null,
    views: ['sidebar', 'monitor', 'dashboard', 'summary'],
    ...overrides
  };
}

/**
 * `GET metrics` as the server answers it today: this version's catalogue (catalogue.generated.ts,
 * made from gpu_widgets/metrics/catalogue.py), each help sentence a stand-in ("GPU busy: what it
 * means.") so that tests tell where words come from; `extra` metrics are appended; `gpm: false`
 * answers as a server from before the GPM metrics. The browser tests run the sidebar against the
 * real one.
 */
export function catalogueBody(extra: IMetricInfo[] = [], gpm = true): IMetricsCatalogue {
  const metrics = CATALOGUE.metrics
    .filter(m => gpm || !GPM_FIELDS.some(f => f === m.field))
    .map(m => ({ ...m, help: `${m.label}: what it means.`, views: [...m.views] }));
  return {
    metrics: [...metrics, ...extra],
    throttle_reasons: CATALOGUE.throttle_reasons.map(r => ({ ...r }))
  };
}

/** A metric of the test catalogue, by id. */
export function metricOf(id: string): IMetricInfo {
  return catalogue().metrics.find(x => x.id === id)!;
}

/**
 * A model (not polling) wired, through the mocked request module, to a fake server with
 * `nDevices` GPUs and `n` samples of history. The client's clock runs 50 s ahead of the
 * server's: `since` must use the server's.
 */
export function serveModel(
  mocked: jest.MockedFunction<typeof requestAPI>,
  options: { n?: number; nDevices?: number; windowS?: number; now?: () => number } = {}
): { history: FakeHistory; api: MockApi; model: GpuModel } {
  const history = new FakeHistory(options.nDevices ?? 2);
  history.addRun(options.n ?? 5);
  const api = new MockApi({
    status: { body: () => status({ server_time: history.serverTime }) },
    metrics: { body: () => catalogueBody() },
    devices: { body: () => devices(history.nDevices) },
    samples: { body: history.samples },
    processes: { body: () => processes([[], []]) }
  });
  mocked.mockImplementation(api.handler as typeof requestAPI);
  const now = options.now ?? (() => (history.serverTime + 50) * 1000);
  const model = new GpuModel({ autoPoll: false, historyWindowS: options.windowS ?? 600, now });
  return { history, api, model };
}

/** The catalogue the sidebar builds from `catalogueBody(extra)`. */
export function catalogue(extra: IMetricInfo[] = []): Catalogue {
  return new Catalogue(catalogueBody(extra));
}

export function status(overrides: Partial<IStatus> = {}): IStatus {
  return {
    backend: 'nvml',
    status: 'ok',
    reason: null,
    sample_age_s: 0.2,
    driver_version: '580.65.06',
    cuda_driver_version: '13.0',
    nvml_version: '13.580.65.06',
    interval_s: 1,
    window_s: 3600,
    server_time: 1000,
    version: '0.1.0',
    device_count: 2,
    processes_note: null,
    ...overrides
  };
}

export function deviceInfo(index: number, overrides: Partial<IDeviceInfo> = {}): IDeviceInfo {
  return {
    index,
    uuid: `GPU-${index}`,
    name: 'NVIDIA H200',
    status: 'ok',
    memory_total_bytes: 141 * GIB,
    power_limit_w: 700,
    power_default_limit_w: 700,
    max_sm_clock_mhz: 1980,
    max_memory_clock_mhz: 2619,
    cores: 16896,
    memory_bus_width_bits: 5120,
    memory_bandwidth_bytes_per_s: 3.35e12,
    pcie_max_generation: 5,
    pcie_max_width: 16,
    compute_capability: '9.0',
    pci_bus_id: `00000000:${String(index + 1).padStart(2, '0')}:00.0`,
    mig_mode: 'disabled',
    mig_device_uuids: [],
    unavailable: {},
    ...overrides
  };
}

export function devices(n: number): IDevices {
  return { backend: 'nvml', status: 'ok', reason: null, devices: [...Array(n).keys()].map(i => deviceInfo(i)) };
}

/** One point of one GPU in the fake history. */
export interface IPoint {
  util?: number | null;
  memUsedGiB?: number | null;
  temp?: number | null;
  power?: number | null;
  throttle?: string[] | null;
  lost?: boolean;
  /** GPM figures: null (the default) as while nobody asks for them. */
  smActive?: number | null;
  tensorActive?: number | null;
}

/**
 * The server's history, as `GET samples` serves it: points newer than `since`, at most
 * `max_points` of them, evenly spread over the range and ending at the newest (enough for the
 * model's logic; the real server keeps each bucket's min and max instead).
 */
export class FakeHistory {
  constructor(public nDevices = 2, public backend: 'nvml' | 'simulated' = 'nvml') {}

  readonly t: number[] = [];
  readonly points: IPoint[][] = [];
  serverTime = 1000;
  intervalS = 1;
  /** Per GPU: why its latest values are null (sent with every samples answer). */
  unavailable: { [index: number]: IUnavailable } = {};

  /** Add one sample at time `t` (one IPoint per GPU; missing GPUs get defaults). */
  add(t: number, perGpu: IPoint[] = []): void {
    this.t.push(t);
    this.points.push([...Array(this.nDevices).keys()].map(i => perGpu[i] ?? {}));
    this.serverTime = t + 0.1;
  }

  /** `n` samples one interval apart after the newest (or from `start`). */
  addRun(n: number, point: IPoint | ((k: number) => IPoint[]) = {}, start?: number): void {
    let t = start ?? (this.t.length ? this.t[this.t.length - 1] + this.intervalS : 900);
    for (let k = 0; k < n; k++, t += this.intervalS) {
      this.add(t, typeof point === 'function' ? point(k) : [...Array(this.nDevices)].map(() => point));
    }
  }

  samples = (query: Query): ISamples => {
    const since = query.since === undefined ? -Infinity : Number(query.since);
    const until = query.until === undefined ? Infinity : Number(query.until);
    const maxPoints = query.max_points === undefined ? 600 : Number(query.max_points);
    let idx = this.t
      .map((t, i) => [t, i])
      .filter(([t]) => t > since && t <= until)
      .map(([, i]) => i);
    if (idx.length > maxPoints) {
      const all = idx;
      const step = (all.length - 1) / (maxPoints - 1);
      idx = [...Array(maxPoints).keys()].map(k => all[Math.round(k * step)]);
    }
    const devs: IDeviceHistory[] = [...Array(this.nDevices).keys()].map(d => {
      const p = idx.map(i => this.points[i][d]);
      const v = (f: (q: IPoint) => number | null): (number | null)[] =>
        p.map(q => (q.lost ? null : f(q)));
      return {
        index: d,
        uuid: `GPU-${d}`,
        name: 'NVIDIA H200',
        utilization_gpu_percent: v(q => q.util ?? 50),
        utilization_memory_percent: v(q => Math.round((q.util ?? 50) * 0.4)),
        memory_used_bytes: v(q => (q.memUsedGiB ?? 37) * GIB),
        memory_free_bytes: v(q => (141 - (q.memUsedGiB ?? 37)) * GIB),
        memory_total_bytes: v(() => 141 * GIB),
        temperature_c: v(q => q.temp ?? 60),
        fan_percent: v(() => null),
        power_w: v(q => q.power ?? 300),
        power_limit_w: v(() => 700),
        energy_j: v(() => 1000),
        sm_clock_mhz: v(() => 1980),
        memory_clock_mhz: v(() => 2619),
        graphics_clock_mhz: v(() => 1980),
        performance_state: v(() => 0),
        pcie_tx_bytes_per_s: v(() => 0),
        pcie_rx_bytes_per_s: v(() => 0),
        sm_active_percent: v(q => q.smActive ?? null),
        sm_occupancy_percent: v(() => null),
        tensor_active_percent: v(q => q.tensorActive ?? null),
        dram_active_percent: v(() => null),
        throttle_reasons: p.map(q => (q.lost ? null : q.throttle === undefined ? ['gpu_idle'] : q.throttle)),
        lost: p.map(q => Boolean(q.lost)),
        unavailable: this.unavailable[d] ?? { fan_percent: 'not supported on this GPU (passively cooled)' }
      };
    });
    return {
      backend: this.backend,
      status: 'ok',
      interval_s: this.intervalS,
      window_s: 3600,
      max_points: maxPoints,
      server_time: this.serverTime,
      timestamps: idx.map(i => this.t[i]),
      devices: devs
    };
  };
}

export function processes(perGpu: IProcesses['devices'][number]['processes'][]): IProcesses {
  return {
    timestamp: 1000,
    offset: 0,
    limit: 100,
    devices: perGpu.map((procs, index): IDeviceProcesses => ({
      index,
      uuid: `GPU-${index}`,
      name: 'NVIDIA H200',
      status: 'ok',
      processes: procs,
      processes_total: procs === null ? null : procs.length,
      unavailable: procs === null ? { processes: 'not read yet (read on the slow cadence)' } : ({} as IUnavailable)
    }))
  };
}

/** Resolve when `predicate()` holds, checking after every `changed` emission. */
export function until(
  changed: { connect: (fn: () => void) => boolean; disconnect: (fn: () => void) => boolean },
  predicate: () => boolean,
  timeoutMs = 5000
): Promise<void> {
  return new Promise((resolve, reject) => {
    if (predicate()) {
      resolve();
      return;
    }
    const timer = setTimeout(() => {
      changed.disconnect(check);
      reject(new Error('condition not met in time'));
    }, timeoutMs);
    function check(): void {
      if (predicate()) {
        clearTimeout(timer);
        changed.disconnect(check);
        resolve();
      }
    }
    changed.connect(check);
  });
}
