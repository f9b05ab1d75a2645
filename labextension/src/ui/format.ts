/**
 * Numbers and words for people: metric values, the status-bar summary, times.
 *
 * Pure functions (jest-tested in plain node). Rule for numbers: at most one decimal, and
 * no trailing ".0", so a driver that reports 612.5 W shows "612.5" and 700 W shows "700".
 */
import { IDeviceInfo } from '../api/tokens';

export const GIB = 1024 ** 3;
export const MIB = 1024 ** 2;

/**
 * `value` with at most `decimals` decimals and no trailing zeros ("612.5", "700"). An exact
 * tie rounds to even, as Python's format does in the other views: 612.5 W reads "612 W"
 * everywhere (`toFixed` alone would say "613").
 */
export function formatNumber(value: number, decimals = 1): string {
  let fixed = value.toFixed(decimals);
  if (Number.isFinite(value) && Math.abs(value) < 1e21) {
    // The exact binary value in decimal (a double needs at most ~60 digits at these sizes).
    const exact = Math.abs(value).toFixed(Math.min(100, decimals + 64));
    const point = exact.indexOf('.');
    const rest = exact.slice(point + 1 + decimals);
    const last = Number(exact[decimals ? point + decimals : point - 1]);
    if (/^50*$/.test(rest) && last % 2 === 0) {
      const down = exact.slice(0, decimals ? point + 1 + decimals : point);
      fixed = value < 0 && /[1-9]/.test(down) ? `-${down}` : down;
    }
  }
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
  /** Sample field -> its newest value (null or absent: unknown). */
  values: { readonly [field: string]: number | null | undefined };
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
  const num = (x: unknown): number | null => (typeof x === 'number' && Number.isFinite(x) ? x : null);
  const alive = devices.filter(d => !d.lost);
  const utils = alive.map(d => num(d.values.utilization_gpu_percent)).filter((x): x is number => x !== null);
  const withMem = alive.filter(
    d => num(d.values.memory_used_bytes) !== null && num(d.values.memory_total_bytes) !== null
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
    const used = withMem.reduce((a, d) => a + (d.values.memory_used_bytes as number), 0);
    const total = withMem.reduce((a, d) => a + (d.values.memory_total_bytes as number), 0);
    parts.push(`${formatGiB(used)}/${formatGiB(total)} GiB`);
  }
  if (lost) {
    parts.push(`${lost} lost`);
  }
  const lines = devices.map(d => {
    if (d.lost) {
      return `GPU ${d.index}: lost (not answering)`;
    }
    const util = num(d.values.utilization_gpu_percent);
    const used = num(d.values.memory_used_bytes);
    const total = num(d.values.memory_total_bytes);
    const u = util === null ? '—' : `${formatNumber(util, 0)} %`;
    const m = used === null ? '—' : total === null ? `${formatGiB(used)} GiB` : `${formatGiB(used)} / ${formatGiB(total)} GiB`;
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
