/**
 * "Busy" is not "used": how a card shows the GPM figures (SM active, tensor active; Hopper and
 * newer) beside NVML's busy time, per process and per MIG instance.
 *
 * GPM is read only while someone looks (`samples/latest?gpm=1` renews the server's lease), so a
 * reason like "not read: nobody is looking" just means "being fetched": it reads as "…", never
 * as a fault. Where the catalogue offers `sm_active` / `tensor_active` they get rows and charts
 * like any metric; where it does not (an older server), the card still shows their latest
 * values from `samples/latest`, without a chart.
 *
 * Pure functions (no DOM): jest-tested.
 */
import { GPM_FIELDS, METRIC, MetricId } from '../api/catalogue.generated';
import { formatBytes, formatGiB, formatNumber } from '../ui/format';
import { IDeviceSample, IMetricInfo, IMigInstance, IProcess, IUnavailable } from '../api/tokens';

/** The catalogue id of NVML's busy time, and of the GPM metrics a card shows beside it. */
export const BUSY_ID: MetricId = 'utilization';
export const ACTIVITY_IDS: readonly MetricId[] = ['sm_active', 'tensor_active'];

const DIFFERENCE =
  "Busy only says that some kernel ran: one tiny kernel makes it 100 %. SM active says how much of the GPU's " +
  'SMs worked. Busy high with SM active low: the kernels are too small to fill this GPU.';

/** What a card's label says on hover: the metric's own words, and why busy is not SM active. */
export const ACTIVITY_HELP: { readonly [id: string]: string } = {
  utilization: `GPU busy: the share of time in which some kernel ran, however small. ${DIFFERENCE}`,
  sm_active: `SM active: the share of the GPU's streaming multiprocessors (SMs) that had work. ${DIFFERENCE}`,
  tensor_active:
    'Tensor active: the share of time the tensor cores (the matrix units) worked, any precision. ' +
    'Low while SM active is high: the work is not matrix math, or its precision skips the tensor cores.'
};

/** A card's words for a metric's label: the explanation above where there is one. */
export function labelHelp(metric: IMetricInfo): string {
  return ACTIVITY_HELP[metric.id] ?? metric.help;
}

/**
 * The rows a card shows for the GPM metrics when the server's catalogue has none: this version's
 * entries (an older server sends the same fields), with the card's words, for the sidebar only.
 */
export const FALLBACK_ACTIVITY: readonly IMetricInfo[] = ACTIVITY_IDS.map(id => ({
  ...METRIC[id],
  help: ACTIVITY_HELP[id],
  views: ['sidebar']
}));

/**
 * A card's rows: the metrics shown, with SM active and tensor active right after busy. A GPM
 * metric the catalogue does not offer to the sidebar gets a fallback row (a value, no chart);
 * one the person left out in the settings stays out.
 */
export function cardMetrics(shown: readonly IMetricInfo[], offered: readonly IMetricInfo[]): IMetricInfo[] {
  if (!shown.length) {
    return []; // the person chose no metric at all
  }
  const activity = ACTIVITY_IDS.map(
    id => shown.find(m => m.id === id) ?? (offered.some(m => m.id === id) ? null : FALLBACK_ACTIVITY.find(m => m.id === id)!)
  ).filter((m): m is IMetricInfo => m !== null);
  const rest = shown.filter(m => !ACTIVITY_IDS.some(id => id === m.id));
  const at = rest.findIndex(m => m.id === BUSY_ID) + 1;
  return [...rest.slice(0, at), ...activity, ...rest.slice(at)];
}

/** A GPM value that is simply being fetched (nobody was looking, or the first pair of samples). */
export function isPendingReason(reason: string | null | undefined): boolean {
  return typeof reason === 'string' && /^not read(: nobody is looking| yet)/.test(reason);
}

/** What a pending value reads as, and its tooltip. */
export const PENDING_TEXT = '…';
export const PENDING_TITLE = 'Being read: GPM compares two samples taken a moment apart; the first figure comes within about a second.';

/**
 * A GPU's latest values and null-reasons with the newest `samples/latest` answer laid over the
 * history's: the GPM fields the history lacks (or has null) come from it, and so do their reasons.
 */
export function withLive(
  values: { [field: string]: number | null },
  unavailable: IUnavailable,
  live: IDeviceSample | null
): { values: { [field: string]: number | null }; unavailable: IUnavailable } {
  if (!live) {
    return { values, unavailable };
  }
  const out = { ...values };
  const why: IUnavailable = { ...unavailable };
  const source = live as unknown as { [field: string]: unknown };
  for (const field of GPM_FIELDS) {
    const v = source[field];
    if (typeof out[field] === 'number') {
      delete why[field];
    } else if (typeof v === 'number' && Number.isFinite(v)) {
      out[field] = v;
      delete why[field];
    } else if (live.unavailable?.[field]) {
      why[field] = live.unavailable[field];
    }
  }
  return { values: out, unavailable: why };
}

/** A percentage of a process or a MIG instance: "45 %", "…" (being read) or "n/a" (why on hover). */
export interface IShare {
  text: string;
  title: string;
  value: number | null;
}

function share(value: number | null | undefined, reason: string | undefined, what: string): IShare {
  if (typeof value === 'number' && Number.isFinite(value)) {
    return { text: `${formatNumber(value, 0)} %`, title: what, value };
  }
  if (isPendingReason(reason)) {
    return { text: PENDING_TEXT, title: `${what}: ${PENDING_TITLE}`, value: null };
  }
  return { text: 'n/a', title: `${what}: ${reason ?? 'not available'}`, value: null };
}

/**
 * A process's GPU use beside its memory: its share of SM time and of the memory controller's
 * busy time. Null when the server does not send them (an older one).
 */
export function processUse(p: IProcess): { sm: IShare; bandwidth: IShare } | null {
  if (p.sm_percent === undefined && p.memory_bandwidth_percent === undefined) {
    return null;
  }
  const u = p.unavailable ?? {};
  return {
    sm: share(p.sm_percent, u['sm_percent'], "This process's share of the GPU's SM time"),
    bandwidth: share(
      p.memory_bandwidth_percent,
      u['memory_bandwidth_percent'],
      "This process's share of the memory controller's busy time"
    )
  };
}

/** One MIG instance as a card lists it. */
export interface IMigRow {
  index: number;
  uuid: string | null;
  /** "GI 1 · CI 0" (what nvidia-smi calls the instance), or "". */
  ids: string;
  /** "3.2 / 9.8 GiB", "—". */
  memory: string;
  smActive: IShare;
  tensorActive: IShare;
  /** The GPU's processes that run in it: pid and a short description. */
  processes: { pid: number; text: string }[];
}

/** The words of a MIG row's figures: the catalogue's labels (`GET metrics`), this version's where it has none. */
export interface IMigLabels {
  smActive: string;
  tensorActive: string;
}

/** The labels of the MIG rows from the server's catalogue (its metrics by id), else this version's. */
export function migLabels(metrics: readonly IMetricInfo[] | null | undefined): IMigLabels {
  const label = (id: 'sm_active' | 'tensor_active'): string =>
    metrics?.find(m => m.id === id)?.label ?? METRIC[id].label;
  return { smActive: label('sm_active'), tensorActive: label('tensor_active') };
}

/** The MIG instances of a GPU, each with the processes of the GPU's list that run in it. */
export function migRows(
  instances: readonly IMigInstance[] | null | undefined,
  procs: readonly IProcess[] | null,
  labels: IMigLabels = { smActive: METRIC.sm_active.label, tensorActive: METRIC.tensor_active.label }
): IMigRow[] {
  return (instances ?? []).map(mig => {
    const u = mig.unavailable ?? {};
    const ids = [
      mig.gpu_instance_id !== null ? `GI ${mig.gpu_instance_id}` : '',
      mig.compute_instance_id !== null ? `CI ${mig.compute_instance_id}` : ''
    ].filter(Boolean);
    let memory = '—';
    if (mig.memory_used_bytes !== null && mig.memory_total_bytes !== null) {
      memory = `${formatGiB(mig.memory_used_bytes)} / ${formatGiB(mig.memory_total_bytes)} GiB`;
    } else if (mig.memory_used_bytes !== null) {
      memory = formatBytes(mig.memory_used_bytes);
    }
    return {
      index: mig.index,
      uuid: mig.uuid,
      ids: ids.join(' · '),
      memory,
      smActive: share(mig.sm_active_percent, u['sm_active_percent'], `${labels.smActive} in this instance`),
      tensorActive: share(mig.tensor_active_percent, u['tensor_active_percent'], `${labels.tensorActive} in this instance`),
      processes: mig.pids.map(pid => {
        const p = procs?.find(x => x.pid === pid);
        const name = p?.name ?? p?.command?.split(' ')[0] ?? null;
        return { pid, text: name ? `${pid} ${name.split('/').pop()}` : String(pid) };
      })
    };
  });
}
