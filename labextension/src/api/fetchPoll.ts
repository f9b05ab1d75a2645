/**
 * How every model of the front end polls (GPUs, cluster, alerts): a Lumino `Poll` whose tick
 * runs the model's fetch at an interval, backs off after a rejected fetch (up to a bound, see
 * pollLimits.ts), and stands by while nobody needs the data or the browser tab is hidden.
 *
 * One fetch at a time: a refresh while the poll's fetch is in flight waits for that one instead
 * of asking twice. A dispose leaves no timer behind (the poll's, nor a first look's retry).
 */
import { Poll } from '@lumino/polling';

import { MAX_BACKOFF_MS } from './pollLimits';

export namespace FetchPoll {
  export interface IOptions {
    name: string;
    /** Milliseconds between two ticks while fetches succeed. */
    interval: number;
    /** The longest wait after failures (never shorter than the interval); default MAX_BACKOFF_MS. */
    maxBackoffMs?: number;
    /** Someone needs the data: poll while the browser tab is shown. Otherwise stand by. */
    active: () => boolean;
    /** A fetch of the poll failed: the poll tries again in `waitMs` (a model may say so). */
    onRetry?: (waitMs: number) => void;
  }
}

export class FetchPoll {
  constructor(fetch: () => Promise<void>, options: FetchPoll.IOptions) {
    this._fetch = fetch;
    this._maxBackoffMs = options.maxBackoffMs ?? MAX_BACKOFF_MS;
    this._poll = new Poll<void, unknown, 'standby'>({
      auto: false,
      factory: () => this.run(),
      frequency: this._frequency(options.interval),
      name: options.name,
      standby: () => (options.active() ? 'when-hidden' : true)
    });
    const onRetry = options.onRetry;
    if (onRetry) {
      this._poll.ticked.connect((_, state) => {
        if (state.phase === 'rejected') {
          onRetry(state.interval);
        }
      });
    }
  }

  /** Whether the poll has been started (by `start`). */
  get started(): boolean {
    return this._started;
  }

  /** The poll's period (ms) while fetches succeed. */
  get interval(): number {
    return this._poll.frequency.interval;
  }

  set interval(ms: number) {
    if (ms !== this.interval) {
      this._poll.frequency = this._frequency(ms);
    }
  }

  /** Start polling (once; later calls do nothing). The first tick asks at once. */
  start(): void {
    if (!this._started && !this._poll.isDisposed) {
      this._started = true;
      void this._poll.start();
    }
  }

  /** Tick now (a new setting, the view shown again): the backoff starts afresh; standby holds. */
  tickNow(): void {
    if (this._started) {
      void this._poll.refresh();
    }
  }

  /** One fetch; concurrent callers (the poll, a refresh) share the one in flight. */
  run(): Promise<void> {
    if (!this._inflight) {
      this._inflight = this._fetch().finally(() => {
        this._inflight = null;
      });
    }
    return this._inflight;
  }

  /** Fetch now instead of at the next tick; never rejects (the model shows what failed). */
  async refresh(): Promise<void> {
    try {
      await this.run();
    } catch {
      // the model has recorded the failure
    }
  }

  /**
   * One fetch before the poll is started (e.g. "is there anything to show?"). When it fails and
   * `again(error)` says so, it is asked again `retryMs` later, until the poll starts. Never rejects.
   */
  async firstLook(retryMs: number, again: (error: unknown) => boolean): Promise<void> {
    try {
      await this.run();
    } catch (error) {
      if (again(error) && !this._started && !this._poll.isDisposed) {
        clearTimeout(this._retryTimer);
        this._retryTimer = setTimeout(() => void this.firstLook(retryMs, again), retryMs);
      }
    }
  }

  dispose(): void {
    clearTimeout(this._retryTimer);
    // Poll.dispose leaves its next tick's timer pending; stopping first clears it.
    void this._poll.stop();
    this._poll.dispose();
  }

  private _frequency(interval: number): { interval: number; backoff: boolean; max: number } {
    return { interval, backoff: true, max: Math.max(this._maxBackoffMs, interval) };
  }

  private _fetch: () => Promise<void>;
  private _inflight: Promise<void> | null = null;
  private _maxBackoffMs: number;
  private _poll: Poll<void, unknown, 'standby'>;
  private _retryTimer: ReturnType<typeof setTimeout> | undefined = undefined;
  private _started = false;
}
