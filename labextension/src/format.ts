/**
 * Numbers and words for people: metric values, the status-bar summary, times.
 *
 * Pure functions (jest-tested in plain node). Rule for numbers: at most one decimal, and
 * no trailing ".0", so a driver that reports 612.5 W shows "612.5" and 700 W shows "700".
 */
import { IDeviceInfo, MetricId } from './tokens';

export const GIB = 1024 ** 3;
export const MIB = 1024 ** 2;

/** `value` with at most `decimals` decimals and no trailing zeros ("612.5", "700"). */
export function formatNumber(value: number, decimals = 1): string {
  const fixed = value.toFixed(decimals);
  return fixed.includes('.') ? fixed.replace(/\.?0+$/, '') : fixed;
}

/** Bytes as GiB, at most one decimal ("37", "54.6"). */
export function formatGiB(bytes: number): string {
  return formatNumber(bytes / GIB, 1);
}

/** Bytes in the unit that reads best: "512 MiB", "2 GiB", "54.6 GiB". */
export function formatBytes(bytes: number): string {
  if (Math.abs(bytes) < GIB) {
    return `${formatNumber(bytes / MIB, 0)} MiB`;
  }
  return `${formatGiB(bytes)} GiB`;
}

/** Peak memory bandwidth: "3.35 TB/s" (decimal units, as datasheets write it). */
export function formatBandwidth(bytesPerS: number): string {
  if (bytesPerS >= 1e12) {
    return `${formatNumber(bytesPerS / 1e12, 2)} TB/s`;
  }
  return `${formatNumber(bytesPerS / 1e9, 1)} GB/s`;
}

/** Local wall-clock time of a unix timestamp, "14:03:21". */
export function formatClock(unixS: number): string {
  const d = new Date(unixS * 1000);
  const two = (n: number): string => String(n).padStart(2, '0');
  return `${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}`;
}

/** A duration for people: "45 s", "10 min", "1 h 30 min". */
export function formatDuration(seconds: number): string {
  const s = Math.round(seconds);
  if (s < 120) {
    return `${s} s`;
  }
  const min = Math.round(s / 60);
  if (min < 120) {
    return `${min} min`;
  }
  const h = Math.floor(min / 60);
  const rest = min % 60;
  return rest ? `${h} h ${rest} min` : `${h} h`;
}

/** The title of the stale banner: how long no new sample has come. */
export function staleTitle(sampleAgeS: number | null): string {
  return sampleAgeS === null ? 'Stale: no GPU sample yet' : `Stale: no new sample for ${formatDuration(sampleAgeS)}`;
}

/** The latest values of one GPU that the numbers on a card come from. */
export interface ILatestValues {
  index: number;
  lost: boolean;
  utilization_gpu_percent: number | null;
  utilization_memory_percent: number | null;
  memory_used_bytes: number | null;
  memory_total_bytes: number | null;
  temperature_c: number | null;
  power_w: number | null;
  power_limit_w: number | null;
}

/** How a metric is shown: its label, the numbers and the text. */
export interface IMetricReading {
  label: string;
  /** The number as the server sent it (null when unknown): `aria-valuenow`. */
  value: number | null;
  /** The largest value the meter can show: `aria-valuemax`. */
  max: number | null;
  /** What the card prints, e.g. "37 / 141 GiB"; "—" when unknown. */
  text: string;
  /** A one-line explanation (tooltip). */
  help: string;
}

export const METRIC_LABELS: { readonly [K in MetricId]: string } = {
  utilization: 'Utilization',
  memory: 'Memory',
  memory_controller: 'Memory controller',
  temperature: 'Temperature',
  power: 'Power'
};

const HELP: { readonly [K in MetricId]: string } = {
  utilization: 'Share of the last sample period in which a kernel ran on the GPU (NVML "gpu").',
  memory: 'Device memory in use / in total.',
  memory_controller:
    'Share of the last sample period in which device memory was read or written (NVML "memory"); not how full memory is.',
  temperature: 'GPU core temperature.',
  power: 'Power draw / enforced power limit.'
};

const DASH = '—';

/** The reading of one metric from a GPU's latest values. */
export function metricReading(metric: MetricId, v: ILatestValues | null): IMetricReading {
  const label = METRIC_LABELS[metric];
  const help = HELP[metric];
  const num = (x: number | null | undefined): number | null =>
    v && !v.lost && typeof x === 'number' && Number.isFinite(x) ? x : null;
  switch (metric) {
    case 'utilization': {
      const value = num(v?.utilization_gpu_percent);
      return { label, help, value, max: 100, text: value === null ? DASH : `${formatNumber(value, 0)} %` };
    }
    case 'memory_controller': {
      const value = num(v?.utilization_memory_percent);
      return { label, help, value, max: 100, text: value === null ? DASH : `${formatNumber(value, 0)} %` };
    }
    case 'memory': {
      const value = num(v?.memory_used_bytes);
      const max = num(v?.memory_total_bytes);
      let text = DASH;
      if (value !== null) {
        text = max !== null ? `${formatGiB(value)} / ${formatGiB(max)} GiB` : `${formatGiB(value)} GiB`;
      }
      return { label, help, value, max, text };
    }
    case 'temperature': {
      const value = num(v?.temperature_c);
      return { label, help, value, max: null, text: value === null ? DASH : `${formatNumber(value, 0)} °C` };
    }
    case 'power': {
      const value = num(v?.power_w);
      const max = num(v?.power_limit_w);
      let text = DASH;
      if (value !== null) {
        text = max !== null ? `${formatNumber(value)} / ${formatNumber(max)} W` : `${formatNumber(value)} W`;
      }
      return { label, help, value, max, text };
    }
  }
}

/** The API fields whose `unavailable` reasons explain a metric's missing value. */
export const METRIC_FIELDS: { readonly [K in MetricId]: readonly string[] } = {
  utilization: ['utilization_gpu_percent'],
  memory: ['memory_used_bytes', 'memory_total_bytes'],
  memory_controller: ['utilization_memory_percent'],
  temperature: ['temperature_c'],
  power: ['power_w']
};

/** What a card prints for a value that is null with a known reason. */
export const NOT_AVAILABLE = 'n/a';

/**
 * Why a metric has no value: the server's reasons for its field(s), distinct, joined with
 * "; ". Null when the reading has a value or no reason is known.
 */
export function unavailableReason(
  metric: MetricId,
  reading: IMetricReading,
  unavailable: { readonly [field: string]: string } | null | undefined
): string | null {
  if (reading.value !== null || !unavailable) {
    return null;
  }
  const reasons = METRIC_FIELDS[metric]
    .map(field => unavailable[field])
    .filter((r): r is string => typeof r === 'string' && r.length > 0);
  return reasons.length ? [...new Set(reasons)].join('; ') : null;
}

/** The status-bar text and its tooltip. */
export interface ISummary {
  /** e.g. "GPU 97% · 37/141 GiB", or "2 GPUs 48% · 74/160 GiB". */
  text: string;
  /** One line per GPU. */
  title: string;
  /** GPUs that did not answer. */
  lost: number;
}

/**
 * The status-bar summary over every GPU that answers: the MEAN utilization (how much of
 * the machine's GPU capacity is busy) and the SUM of used / total memory (room left on the
 * machine). One GPU reads exactly as its card; the tooltip lists each GPU. Lost GPUs are
 * left out of the numbers and counted. Null when there is nothing to summarize.
 */
export function summarize(devices: readonly ILatestValues[]): ISummary | null {
  if (!devices.length) {
    return null;
  }
  const alive = devices.filter(d => !d.lost);
  const utils = alive.map(d => d.utilization_gpu_percent).filter((x): x is number => typeof x === 'number');
  const withMem = alive.filter(
    d => typeof d.memory_used_bytes === 'number' && typeof d.memory_total_bytes === 'number'
  );
  const lost = devices.length - alive.length;
  const parts: string[] = [];
  const who = devices.length === 1 ? 'GPU' : `${devices.length} GPUs`;
  if (utils.length) {
    const mean = utils.reduce((a, b) => a + b, 0) / utils.length;
    parts.push(`${who} ${formatNumber(mean, 0)}%`);
  } else {
    parts.push(who);
  }
  if (withMem.length) {
    const used = withMem.reduce((a, d) => a + (d.memory_used_bytes as number), 0);
    const total = withMem.reduce((a, d) => a + (d.memory_total_bytes as number), 0);
    parts.push(`${formatGiB(used)}/${formatGiB(total)} GiB`);
  }
  if (lost) {
    parts.push(`${lost} lost`);
  }
  const lines = devices.map(d => {
    if (d.lost) {
      return `GPU ${d.index}: lost (not answering)`;
    }
    const u = metricReading('utilization', d).text;
    const m = metricReading('memory', d).text;
    return `GPU ${d.index}: ${u} · ${m}`;
  });
  if (devices.length > 1) {
    lines.push('Mean utilization and total memory over the GPUs that answer.');
  }
  return { text: parts.join(' · '), title: lines.join('\n'), lost };
}

/** "enabled (2 instances)": the instances are what CUDA_VISIBLE_DEVICES can name. */
export function migText(info: IDeviceInfo): string | null {
  if (info.mig_mode !== 'enabled' || !info.mig_device_uuids) {
    return info.mig_mode;
  }
  const n = info.mig_device_uuids.length;
  return `enabled (${n} instance${n === 1 ? '' : 's'})`;
}
