/**
 * What the sidebar's models (GPUs, cluster) share in how they poll: a Lumino `Poll` whose tick
 * runs the model's fetch, one fetch at a time (a refresh while the poll's fetch is in flight
 * waits for that one instead of asking twice), and a dispose that leaves no timer behind.
 */
import { IPoll, Poll } from '@lumino/polling';

export namespace FetchPoll {
  export interface IOptions {
    name: string;
    frequency: Partial<IPoll.Frequency>;
    /** When the poll stands by (`true`: now; `'when-hidden'`: while the browser tab is hidden). */
    standby: () => boolean | Poll.Standby;
  }
}

export class FetchPoll {
  /** Started by the model (`poll.start()`) when someone needs its data; a rejected fetch backs off. */
  readonly poll: Poll<void, unknown, 'standby'>;

  constructor(fetch: () => Promise<void>, options: FetchPoll.IOptions) {
    this._fetch = fetch;
    this.poll = new Poll<void, unknown, 'standby'>({
      auto: false,
      factory: () => this.run(),
      frequency: options.frequency,
      name: options.name,
      standby: options.standby
    });
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

  dispose(): void {
    // Poll.dispose leaves its next tick's timer pending; stopping first clears it.
    void this.poll.stop();
    this.poll.dispose();
  }

  private _fetch: () => Promise<void>;
  private _inflight: Promise<void> | null = null;
}
