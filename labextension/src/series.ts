/**
 * The client-side history: one shared time axis, per-GPU columns of the fields the sidebar
 * draws, bounded by a time window and a point cap; and the throttle / lost episodes the
 * charts shade.
 *
 * Pure data code (no DOM, no JupyterLab imports): tested by jest in plain node.
 */
import { IDLE_REASON, ISamples, Series, THROTTLE_LABELS } from './tokens';

/** The numeric fields the sidebar keeps per point (the rest of a sample is not drawn). */
export const KEPT_FIELDS = [
  'utilization_gpu_percent',
  'utilization_memory_percent',
  'memory_used_bytes',
  'memory_total_bytes',
  'temperature_c',
  'power_w',
  'power_limit_w'
] as const;

export type KeptField = (typeof KEPT_FIELDS)[number];

/** One GPU's columns, aligned with `Timeline.t`. */
export interface IDeviceColumns {
  index: number;
  uuid: string | null;
  name: string | null;
  values: { [K in KeptField]: Series };
  /** Reasons per point (null: not known there). */
  throttle: (string[] | null)[];
  lost: boolean[];
}

/** A stretch of time in which something held: a throttle reason, or the GPU being lost. */
export interface IEpisode {
  /** The throttle reason name, or `lost`. */
  reason: string;
  /** Unix seconds. */
  start: number;
  /** Unix seconds; the start of the first point after the episode (or its last point). */
  end: number;
}

/** Gaps longer than this (and than a few sample intervals) break the chart lines. */
const MIN_GAP_S = 5;

function emptyColumns(index: number, uuid: string | null, name: string | null, n: number): IDeviceColumns {
  const values = {} as { [K in KeptField]: Series };
  for (const f of KEPT_FIELDS) {
    values[f] = new Array<number | null>(n).fill(null);
  }
  return {
    index,
    uuid,
    name,
    values,
    throttle: new Array<string[] | null>(n).fill(null),
    lost: new Array<boolean>(n).fill(false)
  };
}

/**
 * Samples as the sidebar holds them: newest last, all devices on one time axis.
 *
 * `append` takes a `samples` answer and keeps only points newer than what it holds (so an
 * overlapping answer is harmless); `trim` drops what left the history window; `compact`
 * min/max-buckets everything when the point cap is passed, so memory stays bounded whatever
 * the window and the sampling rate.
 */
export class Timeline {
  /** Unix seconds, oldest first. */
  readonly t: number[] = [];
  /** NVML index -> columns. */
  readonly devices = new Map<number, IDeviceColumns>();

  get length(): number {
    return this.t.length;
  }

  /** The newest timestamp, or null when empty. */
  get last(): number | null {
    return this.t.length ? this.t[this.t.length - 1] : null;
  }

  /** Devices by index. */
  sortedDevices(): IDeviceColumns[] {
    return [...this.devices.values()].sort((a, b) => a.index - b.index);
  }

  clear(): void {
    this.t.length = 0;
    this.devices.clear();
  }

  /**
   * Append the points of a samples answer that are newer than the newest held.
   * A long pause (e.g. the browser tab was hidden) gets a null point so lines break there.
   * Returns how many points were added.
   */
  append(samples: ISamples): number {
    const { timestamps } = samples;
    let first = 0;
    const last = this.last;
    if (last !== null) {
      while (first < timestamps.length && timestamps[first] <= last) {
        first++;
      }
    }
    if (first >= timestamps.length) {
      return 0;
    }
    const gapS = Math.max(MIN_GAP_S, 5 * (samples.interval_s || 0));
    if (last !== null && timestamps[first] - last > gapS) {
      this._pushGap((last + timestamps[first]) / 2);
    }
    const n0 = this.t.length;
    for (const d of samples.devices) {
      if (!this.devices.has(d.index)) {
        this.devices.set(d.index, emptyColumns(d.index, d.uuid, d.name, n0));
      }
    }
    for (let i = first; i < timestamps.length; i++) {
      this.t.push(timestamps[i]);
    }
    const added = timestamps.length - first;
    const seen = new Set<number>();
    for (const d of samples.devices) {
      seen.add(d.index);
      const cols = this.devices.get(d.index)!;
      cols.uuid = d.uuid;
      cols.name = d.name;
      for (const f of KEPT_FIELDS) {
        const src = d[f];
        for (let i = first; i < timestamps.length; i++) {
          cols.values[f].push(src[i] ?? null);
        }
      }
      for (let i = first; i < timestamps.length; i++) {
        cols.throttle.push(d.throttle_reasons[i] ?? null);
        cols.lost.push(Boolean(d.lost[i]));
      }
    }
    for (const [index, cols] of this.devices) {
      if (!seen.has(index)) {
        this._pad(cols, added);
      }
    }
    return added;
  }

  /** Drop points older than `newest - windowS`. Returns how many were dropped. */
  trim(windowS: number): number {
    const last = this.last;
    if (last === null) {
      return 0;
    }
    const cutoff = last - windowS;
    let drop = 0;
    while (drop < this.t.length && this.t[drop] < cutoff) {
      drop++;
    }
    if (drop) {
      this._splice(drop);
    }
    return drop;
  }

  /**
   * When more than `cap` points are held, min/max-bucket them down to about `cap / 2`
   * (each bucket keeps its smallest and largest value in time order, so peaks survive;
   * throttle reasons are merged and `lost` OR-ed over a bucket). Returns true if it did.
   */
  compact(cap: number): boolean {
    const n = this.t.length;
    if (n <= cap || cap < 4) {
      return false;
    }
    const bounds = bucketBounds(n, Math.floor(cap / 4));
    const t: number[] = [];
    for (const [lo, hi] of bounds) {
      t.push(this.t[lo]);
      if (hi - lo >= 2) {
        t.push(this.t[hi - 1]);
      }
    }
    for (const cols of this.devices.values()) {
      for (const f of KEPT_FIELDS) {
        cols.values[f] = compactValues(cols.values[f], bounds);
      }
      cols.throttle = compactUnion(cols.throttle, bounds);
      cols.lost = compactAny(cols.lost, bounds);
    }
    this.t.splice(0, this.t.length, ...t);
    return true;
  }

  private _pushGap(at: number): void {
    this.t.push(at);
    for (const cols of this.devices.values()) {
      this._pad(cols, 1);
    }
  }

  private _pad(cols: IDeviceColumns, n: number): void {
    for (let k = 0; k < n; k++) {
      for (const f of KEPT_FIELDS) {
        cols.values[f].push(null);
      }
      cols.throttle.push(null);
      cols.lost.push(false);
    }
  }

  private _splice(drop: number): void {
    this.t.splice(0, drop);
    for (const cols of this.devices.values()) {
      for (const f of KEPT_FIELDS) {
        cols.values[f].splice(0, drop);
      }
      cols.throttle.splice(0, drop);
      cols.lost.splice(0, drop);
    }
  }
}

/** `nBuckets` half-open ranges covering `0..n` with sizes differing by at most 1. */
export function bucketBounds(n: number, nBuckets: number): [number, number][] {
  const b = Math.max(1, Math.min(nBuckets, n));
  const out: [number, number][] = [];
  for (let i = 0; i < b; i++) {
    out.push([Math.floor((n * i) / b), Math.floor((n * (i + 1)) / b)]);
  }
  return out;
}

function compactValues(values: Series, bounds: [number, number][]): Series {
  const out: Series = [];
  for (const [lo, hi] of bounds) {
    let iMin = -1;
    let iMax = -1;
    for (let i = lo; i < hi; i++) {
      const v = values[i];
      if (v === null) {
        continue;
      }
      if (iMin < 0 || v < (values[iMin] as number)) {
        iMin = i;
      }
      if (iMax < 0 || v > (values[iMax] as number)) {
        iMax = i;
      }
    }
    const pair = hi - lo >= 2;
    if (iMin < 0) {
      out.push(null);
      if (pair) {
        out.push(null);
      }
    } else if (pair) {
      out.push(values[Math.min(iMin, iMax)], values[Math.max(iMin, iMax)]);
    } else {
      out.push(values[lo]);
    }
  }
  return out;
}

function compactUnion(values: (string[] | null)[], bounds: [number, number][]): (string[] | null)[] {
  const out: (string[] | null)[] = [];
  for (const [lo, hi] of bounds) {
    let merged: string[] | null = null;
    for (let i = lo; i < hi; i++) {
      const r = values[i];
      if (r) {
        merged = merged ?? [];
        for (const name of r) {
          if (!merged.includes(name)) {
            merged.push(name);
          }
        }
      }
    }
    out.push(merged);
    if (hi - lo >= 2) {
      out.push(merged);
    }
  }
  return out;
}

function compactAny(values: boolean[], bounds: [number, number][]): boolean[] {
  const out: boolean[] = [];
  for (const [lo, hi] of bounds) {
    let any = false;
    for (let i = lo; i < hi; i++) {
      any = any || values[i];
    }
    out.push(any);
    if (hi - lo >= 2) {
      out.push(any);
    }
  }
  return out;
}

/**
 * The throttle episodes of one GPU: for each reason other than `gpu_idle`, every run of
 * consecutive points that list it. An episode ends where the next point starts (so a
 * one-sample episode still has a width), or at the last point.
 */
export function throttleEpisodes(t: readonly number[], throttle: readonly (string[] | null)[]): IEpisode[] {
  const open = new Map<string, number>(); // reason -> start
  const out: IEpisode[] = [];
  for (let i = 0; i < t.length; i++) {
    const now = new Set((throttle[i] ?? []).filter(r => r !== IDLE_REASON));
    for (const [reason, start] of open) {
      if (!now.has(reason)) {
        out.push({ reason, start, end: t[i] });
        open.delete(reason);
      }
    }
    for (const reason of now) {
      if (!open.has(reason)) {
        open.set(reason, t[i]);
      }
    }
  }
  const end = t.length ? t[t.length - 1] : 0;
  for (const [reason, start] of open) {
    out.push({ reason, start, end });
  }
  return out.sort((a, b) => a.start - b.start || reasonOrder(a.reason) - reasonOrder(b.reason));
}

/** The stretches in which a GPU was lost (reason `lost`). */
export function lostEpisodes(t: readonly number[], lost: readonly boolean[]): IEpisode[] {
  const out: IEpisode[] = [];
  let start: number | null = null;
  for (let i = 0; i < t.length; i++) {
    if (lost[i] && start === null) {
      start = t[i];
    } else if (!lost[i] && start !== null) {
      out.push({ reason: 'lost', start, end: t[i] });
      start = null;
    }
  }
  if (start !== null) {
    out.push({ reason: 'lost', start, end: t[t.length - 1] });
  }
  return out;
}

const ORDER = Object.keys(THROTTLE_LABELS);

function reasonOrder(reason: string): number {
  const i = ORDER.indexOf(reason);
  return i < 0 ? ORDER.length : i;
}

/** Words for a throttle reason; unknown NVML bits (`other_0x...`) are shown as they are. */
export function throttleLabel(reason: string): string {
  if (reason === 'lost') {
    return 'GPU lost';
  }
  return THROTTLE_LABELS[reason] ?? reason.replace(/_/g, ' ');
}

/** Which colour family a reason is drawn in. */
export type EpisodeKind = 'power' | 'thermal' | 'other' | 'lost';

export function episodeKind(reason: string): EpisodeKind {
  switch (reason) {
    case 'lost':
      return 'lost';
    case 'sw_power_cap':
    case 'hw_power_brake_slowdown':
      return 'power';
    case 'sw_thermal_slowdown':
    case 'hw_thermal_slowdown':
    case 'hw_slowdown':
      return 'thermal';
    default:
      return 'other';
  }
}

/** The distinct reasons of some episodes, in display order (for a legend). */
export function episodeReasons(episodes: readonly IEpisode[]): string[] {
  const seen: string[] = [];
  for (const e of episodes) {
    if (!seen.includes(e.reason)) {
      seen.push(e.reason);
    }
  }
  return seen.sort((a, b) => (a === 'lost' ? 1 : 0) - (b === 'lost' ? 1 : 0) || reasonOrder(a) - reasonOrder(b));
}
