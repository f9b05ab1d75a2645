/**
 * The client-side history: one shared time axis, per-GPU columns of the fields the sidebar
 * draws, bounded by a time window; and the throttle / lost episodes the charts shade.
 *
 * The server already downsamples (`samples?max_points=`, min/max buckets): what it sends is
 * kept as it is. The model bounds what is held by asking the server for a fresh, bounded
 * window when incremental answers have piled up (model.ts), not by re-bucketing here.
 *
 * Pure data code (no DOM, no JupyterLab imports): tested by jest in plain node.
 */
import { IDLE_REASON, ISamples, Series } from '../api/tokens';

/** One GPU's columns, aligned with `Timeline.t`. */
export interface IDeviceColumns {
  index: number;
  uuid: string | null;
  name: string | null;
  /** Sample field -> its column; only the fields the timeline keeps. */
  values: { [field: string]: Series };
  /** Reasons per point (null: not known there). */
  throttle: (string[] | null)[];
  lost: boolean[];
}

/** The display position of a throttle reason (the catalogue's order: Catalogue.reasonOrder). */
export type ReasonOrder = (reason: string) => number;

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

function emptyColumns(
  fields: readonly string[],
  index: number,
  uuid: string | null,
  name: string | null,
  n: number
): IDeviceColumns {
  const values: { [field: string]: Series } = {};
  for (const f of fields) {
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
 * overlapping answer is harmless); `trim` drops what left the history window. Only the
 * numeric fields named in `fields` are kept (the metrics the catalogue says the sidebar draws).
 */
export class Timeline {
  constructor(fields: readonly string[] = []) {
    this._fields = [...fields];
  }

  /** The sample fields kept per point. */
  get fields(): readonly string[] {
    return this._fields;
  }

  /**
   * Keep these fields from now on. A field not kept so far has no history: everything is
   * dropped (the model then asks for the whole window again). Returns true if it was.
   */
  keep(fields: readonly string[]): boolean {
    const added = fields.some(f => !this._fields.includes(f));
    this._fields = [...fields];
    if (added && this.t.length) {
      this.clear();
      return true;
    }
    for (const cols of this.devices.values()) {
      for (const f of Object.keys(cols.values)) {
        if (!fields.includes(f)) {
          delete cols.values[f];
        }
      }
    }
    return false;
  }
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

  /** The oldest timestamp, or null when empty. */
  get first(): number | null {
    return this.t.length ? this.t[0] : null;
  }

  /**
   * Put the points of a samples answer that are older than the oldest held before them (the
   * window grew: only the stretch before what is held was asked for). A long gap between the
   * two gets a null point, as in `append`. Returns how many points were added.
   */
  prepend(samples: ISamples): number {
    const oldest = this.first;
    if (oldest === null) {
      return this.append(samples);
    }
    const older = new Timeline(this._fields);
    const keep = samples.timestamps.filter(t => t < oldest).length;
    const added = older.append({
      ...samples,
      timestamps: samples.timestamps.slice(0, keep)
    });
    if (!added) {
      return 0;
    }
    const gapS = Math.max(MIN_GAP_S, 5 * (samples.interval_s || 0));
    if (oldest - older.last! > gapS) {
      older._pushGap((older.last! + oldest) / 2);
    }
    const nOlder = older.t.length;
    const nHeld = this.t.length;
    this.t.unshift(...older.t);
    for (const [index, cols] of older.devices) {
      if (!this.devices.has(index)) {
        this.devices.set(index, emptyColumns(this._fields, index, cols.uuid, cols.name, nHeld));
      }
    }
    for (const [index, cols] of this.devices) {
      const before = older.devices.get(index) ?? emptyColumns(this._fields, index, cols.uuid, cols.name, nOlder);
      for (const f of this._fields) {
        cols.values[f] = before.values[f].concat(cols.values[f]);
      }
      cols.throttle = before.throttle.concat(cols.throttle);
      cols.lost = before.lost.concat(cols.lost);
    }
    return added;
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
        this.devices.set(d.index, emptyColumns(this._fields, d.index, d.uuid, d.name, n0));
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
      const series = d as unknown as { [field: string]: Series | undefined };
      for (const f of this._fields) {
        // A field this server does not send (an older version) reads as unknown.
        const src = series[f];
        const col = cols.values[f];
        for (let i = first; i < timestamps.length; i++) {
          col.push(src?.[i] ?? null);
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

  private _pushGap(at: number): void {
    this.t.push(at);
    for (const cols of this.devices.values()) {
      this._pad(cols, 1);
    }
  }

  private _pad(cols: IDeviceColumns, n: number): void {
    for (let k = 0; k < n; k++) {
      for (const f of this._fields) {
        cols.values[f].push(null);
      }
      cols.throttle.push(null);
      cols.lost.push(false);
    }
  }

  private _splice(drop: number): void {
    this.t.splice(0, drop);
    for (const cols of this.devices.values()) {
      for (const f of this._fields) {
        cols.values[f].splice(0, drop);
      }
      cols.throttle.splice(0, drop);
      cols.lost.splice(0, drop);
    }
  }

  private _fields: string[];
}

/**
 * The throttle episodes of one GPU: for each reason other than `gpu_idle`, every run of
 * consecutive points that list it. An episode ends where the next point starts (so a
 * one-sample episode still has a width), or at the last point.
 */
export function throttleEpisodes(
  t: readonly number[],
  throttle: readonly (string[] | null)[],
  order: ReasonOrder = () => 0
): IEpisode[] {
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
  return out.sort((a, b) => a.start - b.start || order(a.reason) - order(b.reason));
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

/** The distinct reasons of some episodes, in display order (for a legend). */
export function episodeReasons(episodes: readonly IEpisode[], order: ReasonOrder = () => 0): string[] {
  const seen: string[] = [];
  for (const e of episodes) {
    if (!seen.includes(e.reason)) {
      seen.push(e.reason);
    }
  }
  return seen.sort((a, b) => (a === 'lost' ? 1 : 0) - (b === 'lost' ? 1 : 0) || order(a) - order(b));
}
