/**
 * The sidebar's model: polls the server extension, keeps a bounded history per GPU, and
 * tells views when something changed.
 *
 * One poll drives everything (fetchPoll.ts: backoff on failure, standby while the browser tab
 * is hidden or nobody looks). A tick asks:
 * - `status` only when it is not known to be `ok` (at start, after any error, or when a
 *   samples answer reports a different backend/status);
 * - `metrics` (the metric catalogue: what the cards draw) once, before the first samples;
 * - `samples?since=<newest timestamp held>` every tick: only what is new. The first request
 *   asks for the whole history window, with `max_points` suited to the chart width, and the
 *   server's bucketed answer is kept as it is. When incremental answers pile up past
 *   `pointCap`, the whole window is asked for again (bounded by `max_points`);
 * - `devices` (the spec cards) once, and again when the set of GPUs or a GPU's lost state
 *   changes (the server re-reads a card when a GPU comes back);
 * - `processes` at a slower cadence, only while the panel is visible (`refreshProcesses` now);
 * - `samples/latest?gpm=1` only while a GPU card is on screen (liveSample.ts: GPM figures,
 *   per-process use and MIG instances are read by the server only while someone looks).
 * The panel polls at the refresh interval while it is visible; when only the status-bar
 * item needs data it polls `samples?since` every few seconds (cheap, and the history stays
 * current for when the panel opens); with neither it stands by.
 */
import { IDisposable } from '@lumino/disposable';
import { ISignal, Signal } from '@lumino/signaling';

import { Catalogue, parseCatalogue } from '../api/catalogue';
import { FetchPoll } from '../api/fetchPoll';
import { buildGpus, IGpu } from './gpus';
import { stateFromError, stateFromStatus } from '../api/monitorState';
import { MAX_MAX_POINTS, MIN_MAX_POINTS, MIN_PROCESS_INTERVAL_MS, pollInterval } from '../api/pollLimits';
import { requestAPI } from '../api/request';
import { History, ISamplesQuery } from './history';
import { requestSamples } from './samplesRequest';
import { LiveSample } from './liveSample';
import { Timeline } from './series';
import {
  DEFAULT_HISTORY_WINDOW_S,
  DEFAULT_REFRESH_INTERVAL_MS,
  normalizeHistoryWindow,
  normalizeRefreshInterval
} from './settings';
import {
  ApiError,
  IDeviceInfo,
  IDevices,
  IMetricsCatalogue,
  IProcesses,
  ISamples,
  IStatus,
  MonitorState
} from '../api/tokens';
import { versionMismatch } from '../api/version';

/** Chart width assumed until a view says otherwise. */
const DEFAULT_CHART_WIDTH_PX = 300;

export namespace GpuModel {
  export interface IOptions {
    /** Poll period while the panel is visible (the `refreshIntervalMs` setting). */
    refreshIntervalMs?: number;
    /** Seconds of history kept and drawn (the `historyWindowS` setting). */
    historyWindowS?: number;
    /** Start polling when a view asks for data (default true; tests call `refresh()`). */
    autoPoll?: boolean;
    /** Clock in milliseconds (tests); default `Date.now`. */
    now?: () => number;
  }
}

export class GpuModel implements IDisposable {
  constructor(options: GpuModel.IOptions = {}) {
    this._refreshMs = normalizeRefreshInterval(options.refreshIntervalMs ?? DEFAULT_REFRESH_INTERVAL_MS);
    this._history = new History(normalizeHistoryWindow(options.historyWindowS ?? DEFAULT_HISTORY_WINDOW_S));
    this._autoPoll = options.autoPoll ?? true;
    this._now = options.now ?? Date.now;
    this._fetcher = new FetchPoll(() => this._fetch(), {
      interval: pollInterval(this._panelVisible, this._refreshMs),
      name: 'gpu-widgets:model',
      active: () => this._panelVisible || this._statusBarActive,
      onRetry: waitMs => this._onRetry(waitMs)
    });
  }

  /** Emitted after every update (new data, a new state, a new setting). */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** What the sidebar shows. */
  get state(): MonitorState {
    return this._state;
  }

  /** The last `status` answer (null before it, and after an error until the next one). */
  get status(): IStatus | null {
    return this._lastStatus;
  }

  /** What to say when the server runs another gpu-widgets than this page (version.ts), else null. */
  get versionProblem(): string | null {
    return this._versionProblem;
  }

  /** Readings come from simulated GPUs: views must say so. */
  get simulated(): boolean {
    return this._lastStatus?.backend === 'simulated';
  }

  /** The metric catalogue of the server; null until it has been read. */
  get catalogue(): Catalogue | null {
    return this._catalogue;
  }

  /** The history held (read-only for views). */
  get timeline(): Timeline {
    return this._history.timeline;
  }

  /** The GPUs, by index. */
  get gpus(): readonly IGpu[] {
    return this._gpus;
  }

  get refreshIntervalMs(): number { return this._refreshMs; }
  get historyWindowS(): number { return this._history.windowS; }

  /** Points per GPU asked for when a long stretch of history is fetched. */
  get maxPoints(): number {
    return Math.max(MIN_MAX_POINTS, Math.min(MAX_MAX_POINTS, Math.round(this._chartWidthPx)));
  }

  /** The most points held per GPU before the whole window is asked for again. */
  get pointCap(): number {
    return Math.max(2000, 4 * this.maxPoints);
  }

  /** How often the process list is asked for while the panel is visible. */
  get processIntervalMs(): number {
    return Math.max(MIN_PROCESS_INTERVAL_MS, 2 * this._refreshMs);
  }

  /** The poll's current period (ms). */
  get pollIntervalMs(): number {
    return this._fetcher.interval;
  }

  /** Whether the poll is running (a view asked for data). */
  get polling(): boolean {
    return this._fetcher.started;
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  /** Read the processes again at once (a kernel was shut down: its memory comes back). */
  refreshProcesses(): Promise<void> {
    this._processesAt = -Infinity;
    return this.refresh();
  }

  /** Apply new settings live. */
  configure(options: { refreshIntervalMs?: unknown; historyWindowS?: unknown }): void {
    let changed = false;
    if (options.refreshIntervalMs !== undefined) {
      const ms = normalizeRefreshInterval(options.refreshIntervalMs);
      changed = changed || ms !== this._refreshMs;
      this._refreshMs = ms;
    }
    if (options.historyWindowS !== undefined) {
      const s = normalizeHistoryWindow(options.historyWindowS);
      changed = changed || s !== this._history.windowS;
      this._history.setWindow(s);
    }
    if (changed) {
      this._syncPoll();
      this._emit();
      this._fetcher.tickNow();
    }
  }

  /** The sidebar panel was shown or hidden. */
  setPanelVisible(visible: boolean): void {
    if (visible === this._panelVisible) {
      return;
    }
    this._panelVisible = visible;
    this._syncPoll();
    if (visible) {
      this._fetcher.tickNow();
    }
  }

  /** Whether the GPM figures are asked for: the panel is shown with a GPU card on screen. */
  get gpmWanted(): boolean {
    return this._panelVisible && this._live.cardsVisible;
  }

  /** A GPU card entered or left the screen (GPM figures are asked for only while one shows). */
  setCardVisible(index: number, visible: boolean): void {
    if (this._live.setCardVisible(index, visible) && this.gpmWanted) {
      this._fetcher.tickNow();
    }
  }

  /** The status-bar item needs (or no longer needs) data. */
  setStatusBarActive(active: boolean): void {
    if (active === this._statusBarActive) {
      return;
    }
    this._statusBarActive = active;
    this._syncPoll();
  }

  /** The width charts are drawn at, in CSS pixels (sets `max_points`). */
  setChartWidth(px: number): void {
    if (Number.isFinite(px) && px > 0) {
      this._chartWidthPx = px;
      this._history.setMaxPoints(this.maxPoints);
    }
  }

  /**
   * Ask now instead of waiting for the next tick (the "Retry now" button; tests).
   * Never rejects: failures become the state.
   */
  refresh(): Promise<void> {
    return this._fetcher.refresh(); // the state says what happened
  }

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    this._fetcher.dispose();
    Signal.clearData(this);
  }

  // -- polling ---------------------------------------------------------------------------

  private _syncPoll(): void {
    if (this._isDisposed) {
      return;
    }
    this._fetcher.interval = pollInterval(this._panelVisible, this._refreshMs);
    if (this._autoPoll && (this._panelVisible || this._statusBarActive)) {
      this._fetcher.start();
    }
  }

  private _onRetry(waitMs: number): void {
    // After a failure the poll waits longer each time: tell the user when it tries again.
    if (this._state.kind === 'network') {
      this._state = { ...this._state, retryInMs: waitMs };
      this._emit();
    }
  }

  private async _fetch(): Promise<void> {
    if (this._isDisposed) {
      return;
    }
    try {
      if (this._status === null || this._status.status !== 'ok') {
        const status = await requestAPI<IStatus>('status');
        this._acceptStatus(status);
        // Stale: the history held is still worth showing, and asking on notices the recovery
        // (the status is asked for at every tick until it is `ok` again).
        if (status.status !== 'ok' && status.status !== 'stale') {
          this._state = stateFromStatus(status);
          this._emit();
          return;
        }
      }
      if (!this._catalogue) {
        this._acceptCatalogue(await requestAPI<IMetricsCatalogue>('metrics'));
      }
      const now = this._now();
      const query = this._history.query(this.maxPoints, now);
      const wantProcesses = this._panelVisible && now - this._processesAt >= this.processIntervalMs;
      if (!this.gpmWanted) {
        this._live.clear();
      }
      const [samples, devices, processes] = await Promise.all([
        requestSamples(query, () => this._history.refill()),
        this._devicesStale ? requestAPI<IDevices>('devices') : Promise.resolve(null),
        wantProcesses ? requestAPI<IProcesses>('processes') : Promise.resolve(null),
        this.gpmWanted ? this._live.fetch() : null
      ]);
      if (this._isDisposed) {
        return;
      }
      if (devices) {
        this._devices = new Map(devices.devices.map(d => [d.index, d]));
        this._devicesStale = false;
      }
      if (processes) {
        this._processes = processes;
        this._processesAt = now;
      }
      if (samples) {
        this._acceptSamples(samples, query);
      }
      this._state = stateFromStatus(this._lastStatus!);
      this._emit();
    } catch (error) {
      if (this._isDisposed) {
        return;
      }
      if (!(error instanceof ApiError)) {
        console.error('gpu-widgets: unexpected error while updating', error);
      }
      this._status = null; // ask for the status first on the next try
      this._state = stateFromError(error, this._state.kind === 'network' ? this._state.retryInMs : null);
      this._emit();
      throw error; // the poll backs off
    }
  }

  private _acceptStatus(status: IStatus): void {
    const changed =
      this._lastStatus === null ||
      this._lastStatus.backend !== status.backend ||
      this._lastStatus.status !== status.status;
    if (this._lastStatus && this._lastStatus.version !== status.version) {
      this._catalogue = null; // another gpu-widgets on the server: its catalogue may differ
    }
    this._status = status;
    this._lastStatus = status;
    this._versionProblem = versionMismatch(status);
    this._history.setServerTime(status.server_time, this._now());
    if (changed) {
      this._devicesStale = true;
      this._processesAt = -Infinity;
    }
  }

  private _acceptCatalogue(body: unknown): void {
    try {
      this._catalogue = parseCatalogue(body);
    } catch (error) {
      throw new ApiError('bad_response', 'metrics', `the metric catalogue is not usable: ${(error as Error).message}`);
    }
    this._history.timeline.keep(this._catalogue.fields());
  }

  private _acceptSamples(samples: ISamples, query: ISamplesQuery): void {
    const status = this._status;
    if (status && (samples.status !== status.status || samples.backend !== status.backend)) {
      // The server's backend changed under us (e.g. restarted): re-read status and cards.
      this._status = null;
    }
    if (this._history.accept(samples, query, this.pointCap, this._now())) {
      // A GPU was lost or came back, or the set of GPUs changed: re-read the spec cards
      // (the first fill needs no re-read: the cards were asked for with it).
      this._devicesStale = true;
    }
  }

  private _emit(): void {
    const h = this._history;
    this._gpus = buildGpus(h.timeline, this._devices, this._processes, h.unavailable, this._live.devices);
    this._changed.emit();
  }

  private _autoPoll: boolean;
  private _catalogue: Catalogue | null = null;
  private _changed = new Signal<this, void>(this);
  private _chartWidthPx = DEFAULT_CHART_WIDTH_PX;
  private _devices = new Map<number, IDeviceInfo>();
  private _devicesStale = true;
  private _fetcher: FetchPoll;
  private _gpus: IGpu[] = [];
  private _history: History;
  private _isDisposed = false;
  private _lastStatus: IStatus | null = null;
  private _live = new LiveSample();
  private _now: () => number;
  private _panelVisible = false;
  private _processes: IProcesses | null = null;
  private _processesAt = -Infinity;
  private _refreshMs: number;
  private _state: MonitorState = { kind: 'loading' };
  /** The status as far as polling goes: null means "ask again". */
  private _status: IStatus | null = null;
  private _statusBarActive = false;
  private _versionProblem: string | null = null;
}
