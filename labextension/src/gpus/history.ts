/**
 * The history the sidebar holds, and which `samples` request fills it next.
 *
 * The server downsamples (`max_points`, min/max buckets that keep peaks); this side keeps its
 * answers as they are and never re-buckets. The first request, and any after the held points
 * pass `pointCap`, asks for the whole window (bounded by `max_points`) and replaces what is
 * held; the others ask only for what is newer than the newest point held.
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

  /** A new history window: a shorter one trims, a longer one is asked for again. */
  setWindow(windowS: number): void {
    if (windowS > this._windowS) {
      this.timeline.clear();
    } else if (windowS < this._windowS) {
      this.timeline.trim(windowS);
    }
    this._windowS = windowS;
  }

  /** The server's clock (unix seconds) as of `nowMs` on this one. */
  setServerTime(serverTime: number, nowMs: number): void {
    this._clockOffsetS = nowMs / 1000 - serverTime;
  }

  /** The charts' `max_points` changed: much finer charts want the window again. */
  setMaxPoints(maxPoints: number): void {
    this._refill = this._refill || (this.timeline.length > 0 && maxPoints > 2 * this._filledWith);
  }

  /** The next request. */
  query(maxPoints: number, nowMs: number): ISamplesQuery {
    const last = this.timeline.last;
    if (last !== null && !this._refill) {
      return { since: last, max_points: maxPoints, full: false };
    }
    const serverNow = nowMs / 1000 - this._clockOffsetS;
    return { since: Math.max(0, serverNow - this._windowS), max_points: maxPoints, full: true };
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
      this._filledWith = query.max_points;
    }
    this.timeline.append(samples);
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
  private _windowS: number;
}
