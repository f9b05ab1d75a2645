/**
 * The history the sidebar holds, and which `samples` request fills it next.
 *
 * The server downsamples (`max_points`, min/max buckets that keep peaks); this side keeps its
 * answers as they are and never re-buckets. The first request, and any after the held points
 * pass `pointCap`, asks for the whole window (bounded by `max_points`) and replaces what is
 * held; the others ask only for what is newer than the newest point held. A longer window asks
 * for the stretch before the oldest point held alone (`until`), never for what is held again.
 *
 * Pure data code (no JupyterLab imports): jest-tested through the model.
 */
import { Timeline } from './series';
import { ISamples, IUnavailable } from '../api/tokens';

/** What the next `samples` request asks. */
export interface ISamplesQuery {
  /** Unix seconds on the server's clock: only samples newer than this. */
  since: number;
  max_points: number;
  /** The whole window: its answer replaces what is held. */
  full: boolean;
  /** Only samples up to this (the stretch before what is held: its answer goes before it). */
  until?: number;
}

export class History {
  constructor(windowS: number) {
    this._windowS = windowS;
  }

  /** The points held (read-only for views). */
  readonly timeline = new Timeline();

  /** Per GPU: why a field of its latest sample is null (the newest answer's reasons). */
  readonly unavailable = new Map<number, IUnavailable>();

  get windowS(): number {
    return this._windowS;
  }

  /** A new history window: a shorter one trims; for a longer one the stretch before is asked for. */
  setWindow(windowS: number): void {
    if (windowS > this._windowS) {
      this._older = this.timeline.length > 0;
    } else if (windowS < this._windowS) {
      this.timeline.trim(windowS);
    }
    this._windowS = windowS;
  }

  /** The server's clock (unix seconds) as of `nowMs` on this one. */
  setServerTime(serverTime: number, nowMs: number): void {
    this._clockOffsetS = nowMs / 1000 - serverTime;
  }

  /** Ask for the whole window again (a server that cannot answer `until`). */
  refill(): void {
    this._older = false;
    this._refill = true;
  }

  /** The charts' `max_points` changed: much finer charts want the window again. */
  setMaxPoints(maxPoints: number): void {
    this._refill = this._refill || (this.timeline.length > 0 && maxPoints > 2 * this._filledWith);
  }

  /** The next request. */
  query(maxPoints: number, nowMs: number): ISamplesQuery {
    const last = this.timeline.last;
    const serverNow = nowMs / 1000 - this._clockOffsetS;
    const start = Math.max(0, serverNow - this._windowS);
    const first = this.timeline.first;
    if (first !== null && !this._refill && this._older) {
      if (start < first) {
        // The points for the stretch before: its share of the chart's width.
        const share = Math.max(2, Math.ceil((maxPoints * (first - start)) / this._windowS));
        return { since: start, until: first, max_points: share, full: false };
      }
      this._older = false;
    }
    if (last !== null && !this._refill) {
      return { since: last, max_points: maxPoints, full: false };
    }
    return { since: start, max_points: maxPoints, full: true };
  }

  /**
   * Take the answer to `query`. Past `pointCap` points the next query asks for the whole
   * window again. Returns true when the set of GPUs or a GPU's lost state changed (not on the
   * first fill).
   */
  accept(samples: ISamples, query: ISamplesQuery, pointCap: number, nowMs: number): boolean {
    this.setServerTime(samples.server_time, nowMs);
    const before = this._lostFlags();
    if (query.full) {
      this.timeline.clear();
      this._refill = false;
      this._older = false;
      this._filledWith = query.max_points;
    }
    if (query.until !== undefined) {
      this._older = false;
      this.timeline.prepend(samples);
    } else {
      this.timeline.append(samples);
    }
    // The reasons describe the server's latest sample: each answer replaces what was held.
    for (const d of samples.devices) {
      this.unavailable.set(d.index, { ...(d.unavailable ?? {}) });
    }
    this.timeline.trim(this._windowS);
    this._refill = this._refill || this.timeline.length > pointCap;
    return before !== '' && before !== this._lostFlags();
  }

  /** A fingerprint of each GPU's identity and newest lost flag ('' when nothing is held). */
  private _lostFlags(): string {
    const tl = this.timeline;
    const n = tl.length;
    return tl
      .sortedDevices()
      .map(d => `${d.index}:${d.uuid}:${n ? d.lost[n - 1] : false}`)
      .join('|');
  }

  private _clockOffsetS = 0;
  /** The `max_points` the held window was filled with. */
  private _filledWith = 0;
  private _refill = false;
  /** The window grew: the stretch before the oldest point held is still to be asked for. */
  private _older = false;
  private _windowS: number;
}
