/**
 * The alerts poller: every tab asks the server's alerts endpoint every few seconds (the sidebar
 * open or not) and turns each new episode into one JupyterLab notification, updated when the
 * episode ends.
 *
 * Cheap for the server: the request revalidates (`cache: 'no-cache'`), so an unchanged state is a
 * bodiless 304 for the browser, and the server makes one answer per change for every tab. A
 * hidden tab does not ask at all (the poll's standby); it catches up when it is shown again.
 *
 * Once per tab, also after a reload: the ids seen are kept in the tab's `sessionStorage` (each
 * tab has its own; a reload keeps it, a new tab starts empty). A new tab shows the episodes open
 * now, never those that ended before it opened. After a reload the notifications of the page
 * before are gone, so an episode seen open then is not shown again, and its end passes silently.
 *
 * Kept free of JupyterLab's UI packages: the notification calls come in as `INotifier` (the
 * plugin passes `Notification` of @jupyterlab/apputils) so jest can drive it in plain node.
 */
import { components } from '../api/generated';
import { FetchPoll } from '../api/fetchPoll';
import { requestAPI } from '../api/request';

/** `GET alerts`. */
export type IAlerts = components['schemas']['Alerts'];

/** One episode of `GET alerts`. */
export type IAlertEpisode = components['schemas']['AlertEpisode'];

export type AlertKind = IAlertEpisode['kind'];

/** Every kind, in the order the Settings Editor lists them. */
export const ALERT_KINDS: readonly AlertKind[] = ['lost', 'temperature', 'throttle', 'memory', 'idle_kernel'];

/** How often a visible tab asks. */
export const ALERTS_INTERVAL_MS = 5000;

/** Toasts of warnings and infos close by themselves; they stay in the bell's list. */
export const TOAST_MS = 15000;

/** A button on a notification (JupyterLab's `Notification.IAction`). */
export interface IAlertAction {
  label: string;
  caption?: string;
  displayType?: 'default' | 'accent' | 'warn' | 'link';
  callback: (event: MouseEvent) => void;
}

export interface INotifyOptions {
  autoClose?: number | false;
  actions?: IAlertAction[];
}

/** What the poller needs of JupyterLab's notification manager. */
export interface INotifier {
  emit(message: string, type: IAlertEpisode['severity'] | 'success', options: INotifyOptions): string;
  update(args: INotifyOptions & { id: string; message?: string; type?: IAlertEpisode['severity'] | 'success' }): boolean;
}

/** A small key-value store: the tab's `sessionStorage`, or a map in tests. */
export interface IStore {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
}

export const SEEN_KEY = 'gpu-widgets:alerts-seen';

export type AlertsRequest = (endpoint: string) => Promise<IAlerts>;

export namespace AlertsPoller {
  export interface IOptions {
    notifier: INotifier;
    /** The buttons of an episode's notification, open or ended. */
    actions: (episode: IAlertEpisode) => IAlertAction[];
    store?: IStore | null;
    request?: AlertsRequest;
    /** Start polling at once (default true; tests call `refresh()`). */
    autoStart?: boolean;
  }
}

export class AlertsPoller {
  constructor(options: AlertsPoller.IOptions) {
    this._notifier = options.notifier;
    this._actions = options.actions;
    this._store = options.store ?? null;
    this._request = options.request ?? (endpoint => requestAPI<IAlerts>(endpoint));
    this._seen = readSeen(this._store);
    this._fetcher = new FetchPoll(() => this._update(), {
      interval: ALERTS_INTERVAL_MS,
      maxBackoffMs: 60_000,
      // Off: no request at all. Hidden: nothing to show it to.
      active: () => this._enabled,
      name: 'gpu-widgets:alerts'
    });
    if (options.autoStart ?? true) {
      this._fetcher.start();
    }
  }

  /** The newest answer (null before the first). */
  get alerts(): IAlerts | null {
    return this._last;
  }

  /** The `alerts` setting's client side: on/off, and the kinds shown. */
  configure(options: { enabled: boolean; kinds: readonly AlertKind[] }): void {
    this._enabled = options.enabled;
    this._kinds = new Set(options.kinds);
    if (this._last) {
      this._show(this._last); // a kind switched back on shows its open episodes now
    }
    if (this._enabled) {
      this._fetcher.tickNow();
    }
  }

  /** Ask now (tests, and after a settings change). Never rejects: alerts have no error view. */
  refresh(): Promise<void> {
    return this._fetcher.refresh();
  }

  dispose(): void {
    this._fetcher.dispose();
  }

  private async _update(): Promise<void> {
    if (!this._enabled) {
      return;
    }
    const answer = await this._request('alerts');
    this._last = answer;
    this._show(answer);
  }

  private _show(answer: IAlerts): void {
    if (!answer.enabled || !this._enabled) {
      return;
    }
    // Oldest first, so that the newest notification ends on top.
    const episodes = [...answer.episodes].sort((a, b) => a.start - b.start);
    for (const ep of episodes) {
      if (!this._kinds.has(ep.kind)) {
        continue; // not marked seen: switched back on, an open one still shows
      }
      const seen = this._seen.get(ep.id);
      if (ep.end === null) {
        if (seen === undefined) {
          const id = this._notifier.emit(ep.message, ep.severity, {
            autoClose: ep.severity === 'error' ? false : TOAST_MS,
            actions: this._actions(ep)
          });
          this._shown.set(ep.id, id);
          this._seen.set(ep.id, 'open');
        }
      } else if (seen !== 'ended') {
        const id = this._shown.get(ep.id);
        if (id !== undefined) {
          // Its end, in place: the same notification, now saying from when to when.
          this._notifier.update({ id, message: ep.message, type: 'success', autoClose: TOAST_MS, actions: this._actions(ep) });
          this._shown.delete(ep.id);
        }
        this._seen.set(ep.id, 'ended');
      }
    }
    // The server forgets old episodes (an hour, at most 200): so does the tab.
    const known = new Set(answer.episodes.map(e => e.id));
    for (const id of [...this._seen.keys()]) {
      if (!known.has(id)) {
        this._seen.delete(id);
      }
    }
    writeSeen(this._store, this._seen);
  }

  private _actions: (episode: IAlertEpisode) => IAlertAction[];
  private _enabled = true;
  private _fetcher: FetchPoll;
  private _kinds = new Set<AlertKind>(ALERT_KINDS);
  private _last: IAlerts | null = null;
  private _notifier: INotifier;
  private _request: AlertsRequest;
  private _seen: Map<string, 'open' | 'ended'>;
  /** episode id -> notification id, for the episodes shown open by this page. */
  private _shown = new Map<string, string>();
  private _store: IStore | null;
}

function readSeen(store: IStore | null): Map<string, 'open' | 'ended'> {
  const out = new Map<string, 'open' | 'ended'>();
  try {
    const raw = JSON.parse(store?.getItem(SEEN_KEY) ?? '{}');
    for (const [id, state] of Object.entries(raw ?? {})) {
      if (state === 'open' || state === 'ended') {
        out.set(id, state);
      }
    }
  } catch {
    // unreadable (another version, or edited by hand): start afresh
  }
  return out;
}

function writeSeen(store: IStore | null, seen: Map<string, 'open' | 'ended'>): void {
  try {
    store?.setItem(SEEN_KEY, JSON.stringify(Object.fromEntries(seen)));
  } catch {
    // storage full or refused (private mode): the tab still shows each episode once per page
  }
}
