/**
 * The Cluster view's model: asks the server's `cluster` endpoint once at start (is a Prometheus
 * configured at all?), then polls it only while the Cluster view is on screen, with the details
 * of the hosts that are open. It asks for the page of hosts the view shows (filter, sort, offset):
 * the server pages them, so every host is findable in a bounded answer.
 *
 * Polled as every model is (fetchPoll.ts): backoff on failures, standby while the view is hidden
 * or the browser tab is, so 500 hosts cost nothing while nobody looks.
 */
import { IDisposable } from '@lumino/disposable';
import { ISignal, Signal } from '@lumino/signaling';

import {
  DEFAULT_HOST_QUERY,
  hostQueryParams,
  IClusterHost,
  IClusterHostDetail,
  IClusterOverview,
  IHostQuery,
  parseOverview
} from './cluster';
import { FetchPoll } from '../api/fetchPoll';
import { Query, requestAPI } from '../api/request';
import { ApiError } from '../api/tokens';

/** The endpoint, below the API's path. */
export const CLUSTER_ENDPOINT = 'cluster';

/** How often the view refreshes while shown (Prometheus scrapes every 15 s by default). */
export const CLUSTER_INTERVAL_MS = 5000;

/** With this many hosts or fewer, every host's details are open until the user closes one. */
export const EXPAND_ALL_UP_TO = 4;

/** A first question that got no answer at all (the server restarting) is asked again this much later. */
export const PROBE_RETRY_MS = 30_000;

/** At most this many hosts' details are asked for per refresh (the oldest opened ones close). */
export const MAX_OPEN_HOSTS = 8;

/** Rows per page of hosts (the server's most). */
export const HOST_PAGE = 100;

/** One open host's details: what the last request brought, or why it failed. */
export type HostDetailState =
  | { kind: 'loading' }
  | { kind: 'ok'; detail: IClusterHostDetail }
  | { kind: 'error'; message: string };

export type RequestFn = <T>(endpoint: string, query?: Query) => Promise<T>;

export namespace ClusterModel {
  export interface IOptions {
    /** The request function (tests pass a mock); default `requestAPI`. */
    request?: RequestFn;
    intervalMs?: number;
    probeRetryMs?: number;
  }
}

export class ClusterModel implements IDisposable {
  constructor(options: ClusterModel.IOptions = {}) {
    this._request = options.request ?? (<T>(endpoint: string, query?: Query) => requestAPI<T>(endpoint, query));
    this._probeRetryMs = options.probeRetryMs ?? PROBE_RETRY_MS;
    this._fetcher = new FetchPoll(() => this._fetch(), {
      interval: options.intervalMs ?? CLUSTER_INTERVAL_MS,
      name: 'gpu-widgets:cluster',
      active: () => this._visible
    });
  }

  /** Emitted after every answer, failure or change of the open hosts. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** The server has a Prometheus configured (its first answer was not `not_configured`). */
  get offered(): boolean {
    return this._offered;
  }

  /** The last overview (null before the first answer). */
  get overview(): IClusterOverview | null {
    return this._overview;
  }

  /** The hosts of the page shown. */
  get hosts(): readonly IClusterHost[] {
    return this._hosts;
  }

  /** The page of hosts asked for. */
  get query(): IHostQuery {
    return this._query;
  }

  /**
   * Ask for another page: a new filter, activity or sort starts at the first one. Asked at once
   * while the view is shown (the answer for an older query is never shown after a newer one).
   */
  setQuery(changes: Partial<IHostQuery>): void {
    const next = { ...this._query, ...changes };
    const keys = Object.keys(next) as (keyof IHostQuery)[];
    if (this._isDisposed || keys.every(k => next[k] === this._query[k])) {
      return;
    }
    if (changes.offset === undefined) {
      next.offset = 0;
    }
    hostQueryParams(next, HOST_PAGE); // throws for a sort or activity that does not exist
    this._query = next;
    this._changed.emit();
    if (this._visible) {
      void this._fetcher.refresh();
    }
  }

  /** Why the last request failed (the server's words), or null after a good answer. */
  get error(): string | null {
    return this._error;
  }

  /** The hosts whose details are shown. */
  get openHosts(): readonly string[] {
    if (this._chosen === null) {
      const all = this._overview?.totals.hosts ?? this._hosts.length;
      return all <= EXPAND_ALL_UP_TO ? this._hosts.map(h => h.hostname) : [];
    }
    return this._chosen;
  }

  detail(hostname: string): HostDetailState {
    return this._details.get(hostname) ?? { kind: 'loading' };
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  /** Ask once whether a cluster is configured (the switch is shown only then). Never rejects. */
  probe(): Promise<void> {
    // On a failure offered stays false: no switch. An older server without the endpoint answers
    // 404 (never ask again); no answer at all may be a server restarting (ask again later).
    return this._fetcher.firstLook(this._probeRetryMs, error => error instanceof ApiError && error.kind === 'network');
  }

  /** The Cluster view was shown or hidden: poll only while it is shown. */
  setVisible(visible: boolean): void {
    if (visible === this._visible || this._isDisposed) {
      return;
    }
    this._visible = visible;
    if (visible) {
      if (this._fetcher.started) {
        this._fetcher.tickNow();
      } else {
        this._fetcher.start(); // its first tick asks at once
      }
    }
  }

  /** Open or close one host's details (fetched at once, then with every refresh). */
  toggleHost(hostname: string): void {
    const open = [...this.openHosts];
    const next = open.includes(hostname) ? open.filter(h => h !== hostname) : [...open, hostname];
    this._chosen = next.slice(-MAX_OPEN_HOSTS);
    for (const gone of [...this._details.keys()].filter(h => !this._chosen!.includes(h))) {
      this._details.delete(gone);
    }
    this._changed.emit();
    if (this._chosen.includes(hostname)) {
      void this._fetchDetails([hostname]).then(() => this._emit());
    }
  }

  /** Ask now (the "Retry now" button; tests). Never rejects: the error is shown. */
  refresh(): Promise<void> {
    return this._fetcher.refresh();
  }

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    this._fetcher.dispose();
    Signal.clearData(this);
  }

  private async _fetch(): Promise<void> {
    try {
      let body: unknown;
      let asked: IHostQuery;
      do {
        // The query may change while the answer travels (typing): ask again for the newest one.
        asked = this._query;
        body = await this._request<unknown>(CLUSTER_ENDPOINT, hostQueryParams(asked, HOST_PAGE));
      } while (asked !== this._query && !this._isDisposed);
      let parsed: ReturnType<typeof parseOverview>;
      try {
        parsed = parseOverview(body);
      } catch (error) {
        throw new ApiError('bad_response', CLUSTER_ENDPOINT, (error as Error).message);
      }
      if (this._isDisposed) {
        return;
      }
      this._overview = parsed.overview;
      this._hosts = parsed.hosts;
      this._offered = this._offered || parsed.overview.status !== 'not_configured';
      this._error = null;
      const known = new Set(parsed.hosts.map(h => h.hostname));
      if (this._chosen !== null) {
        this._chosen = this._chosen.filter(h => known.has(h));
      }
      if (this._visible) {
        // The first question at start only asks whether there is a cluster.
        await this._fetchDetails(this.openHosts);
      }
      this._emit();
    } catch (error) {
      if (this._isDisposed) {
        return;
      }
      this._error = errorText(error);
      this._emit();
      throw error; // the poll backs off
    }
  }

  /** The details of these hosts, side by side; a failure marks that host only. */
  private async _fetchDetails(hosts: readonly string[]): Promise<void> {
    await Promise.all(
      hosts.map(async host => {
        try {
          const detail = await this._request<IClusterHostDetail>(CLUSTER_ENDPOINT, { host });
          this._details.set(host, { kind: 'ok', detail });
        } catch (error) {
          const gone = error instanceof ApiError && error.status === 404;
          this._details.set(host, {
            kind: 'error',
            message: gone ? `Prometheus no longer knows ${host}.` : errorText(error)
          });
        }
      })
    );
  }

  private _emit(): void {
    if (!this._isDisposed) {
      this._changed.emit();
    }
  }

  private _changed = new Signal<this, void>(this);
  /** The hosts the user opened; null until they open or close one (then the default applies). */
  private _chosen: string[] | null = null;
  private _details = new Map<string, HostDetailState>();
  private _error: string | null = null;
  private _fetcher: FetchPoll;
  private _hosts: IClusterHost[] = [];
  private _isDisposed = false;
  private _offered = false;
  private _overview: IClusterOverview | null = null;
  private _probeRetryMs: number;
  private _query: IHostQuery = DEFAULT_HOST_QUERY;
  private _request: RequestFn;
  private _visible = false;
}

/** A request failure in words for the view. */
function errorText(error: unknown): string {
  if (error instanceof ApiError) {
    if (error.kind === 'http' && error.status === 404 && error.code === null) {
      return 'This Jupyter server has no cluster endpoint (update gpu-widgets on the server).';
    }
    return `The cluster view could not be updated: ${error.message}`;
  }
  return `The cluster view could not be updated: ${error instanceof Error ? error.message : String(error)}`;
}
