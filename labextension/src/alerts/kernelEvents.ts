/**
 * Kernel events in every tab: a small poller of `GET kernels/events?since=<id>` that shows each
 * new event (a kernel that died, and why; one that was culled) as one JupyterLab notification.
 *
 * Its own poller, not the alerts feed: alert episodes open and end, a kernel event happens once.
 * The newest id seen is kept in the tab's `sessionStorage`, so a reload shows nothing twice; a new
 * tab shows only the events of the last minute.
 */
import { components } from '../api/generated';
import { FetchPoll } from '../api/fetchPoll';
import { requestAPI } from '../api/request';
import { INotifier, IStore } from './alertsModel';

export type IKernelEvent = components['schemas']['KernelEvent'];
export type IKernelEvents = components['schemas']['KernelEvents'];

export const KERNEL_EVENTS_INTERVAL_MS = 5000;
/** A new tab shows the events of this last stretch (older ones were for the tabs open then). */
export const FRESH_S = 60;
const STORE_KEY = 'gpu-widgets:kernel-events:seen';

export function eventMessage(ev: IKernelEvent): string {
  const where = ev.notebook_path ?? `kernel ${ev.kernel_id.slice(0, 8)}`;
  return `${where}: ${ev.reason}`;
}

export class KernelEventsPoller {
  constructor(
    notifier: INotifier,
    store: IStore | null,
    request: (since?: number) => Promise<IKernelEvents> = since =>
      requestAPI<IKernelEvents>('kernels/events', since === undefined ? {} : { since })
  ) {
    this._notifier = notifier;
    this._store = store;
    this._request = request;
    const kept = Number(store?.getItem(STORE_KEY) ?? NaN);
    this._since = Number.isFinite(kept) ? kept : undefined;
    this._fetcher = new FetchPoll(() => this.update(), {
      interval: KERNEL_EVENTS_INTERVAL_MS,
      maxBackoffMs: 60_000,
      active: () => true,
      name: 'gpu-widgets:kernel-events'
    });
  }

  start(): void {
    this._fetcher.start();
  }

  dispose(): void {
    this._fetcher.dispose();
  }

  /** One poll: notify the events after the newest seen. */
  async update(): Promise<void> {
    const first = this._since === undefined;
    const { events } = await this._request(this._since);
    const now = Date.now() / 1000;
    for (const ev of events) {
      this._since = Math.max(this._since ?? 0, ev.id);
      if (first && ev.time < now - FRESH_S) {
        continue;
      }
      this._notifier.emit(eventMessage(ev), ev.kind === 'died' ? 'error' : 'warning', { autoClose: false });
    }
    if (this._since === undefined) {
      this._since = 0;
    }
    this._store?.setItem(STORE_KEY, String(this._since));
  }

  private _fetcher: FetchPoll;
  private _notifier: INotifier;
  private _request: (since?: number) => Promise<IKernelEvents>;
  private _since: number | undefined;
  private _store: IStore | null;
}
