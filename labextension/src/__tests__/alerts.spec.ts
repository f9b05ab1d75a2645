/**
 * The alerts poller against a scripted alerts endpoint and a recording notifier: each episode
 * once per tab (also after a reload), its notification updated when it ends, kinds switched off
 * not shown; and the `alerts` setting split between the tab and the server.
 */
import { AlertsPoller, IAlertEpisode, IAlerts, INotifier, IStore, SEEN_KEY } from '../alerts/alertsModel';
import { normalizeAlertsSetting, serverChanges } from '../alerts/alertsSettings';

const SETTINGS: IAlerts['settings'] = {
  temperature_margin_c: 5, throttle_s: 30, memory_percent: 95, idle_kernel_memory_gib: 1, idle_minutes: 10, gpus: 'all'
};

function episode(id: string, change: Partial<IAlertEpisode> = {}): IAlertEpisode {
  return {
    id, kind: 'lost', severity: 'error', gpu: 1, uuid: 'GPU-1', start: 100, end: null, updated: 100,
    message: `${id} open`, kernel_id: null, notebook_path: null, pid: null, memory_bytes: null, ...change
  };
}

class Recorder implements INotifier {
  calls: { op: string; id: string; message?: string; type?: string; labels: string[] }[] = [];
  emit(message: string, type: string, options: { actions?: { label: string }[] }): string {
    const id = `n${this.calls.length}`;
    this.calls.push({ op: 'emit', id, message, type, labels: (options.actions ?? []).map(a => a.label) });
    return id;
  }
  update(args: { id: string; message?: string; type?: string; actions?: { label: string }[] }): boolean {
    this.calls.push({ op: 'update', id: args.id, message: args.message, type: args.type, labels: (args.actions ?? []).map(a => a.label) });
    return true;
  }
}

class MapStore implements IStore {
  map = new Map<string, string>();
  getItem(key: string): string | null { return this.map.get(key) ?? null; }
  setItem(key: string, value: string): void { this.map.set(key, value); }
}

function tab(answers: { episodes: IAlertEpisode[] }, store: IStore = new MapStore()) {
  const notifier = new Recorder();
  const requests: string[] = [];
  const poller = new AlertsPoller({
    notifier,
    store,
    autoStart: false,
    actions: ep => [{ label: 'Show GPU', callback: () => undefined }, ...(ep.kind === 'idle_kernel' && ep.end === null ? [{ label: 'Shut down kernel', callback: () => undefined }] : [])],
    request: async endpoint => {
      requests.push(endpoint);
      return { enabled: true, problem: null, version: 1, settings: SETTINGS, episodes: answers.episodes, server_time: 200 };
    }
  });
  return { notifier, poller, requests };
}

describe('AlertsPoller', () => {
  it('shows an episode once however often it polls, and updates that notification when it ends', async () => {
    const answers = { episodes: [episode('lost/1')] };
    const { notifier, poller } = tab(answers);
    await poller.refresh();
    await poller.refresh();
    expect(notifier.calls).toEqual([{ op: 'emit', id: 'n0', message: 'lost/1 open', type: 'error', labels: ['Show GPU'] }]);
    answers.episodes = [episode('lost/1', { end: 150, updated: 153, message: 'lost/1 ended' })];
    await poller.refresh();
    await poller.refresh();
    expect(notifier.calls.slice(1)).toEqual([{ op: 'update', id: 'n0', message: 'lost/1 ended', type: 'success', labels: ['Show GPU'] }]);
    poller.dispose();
  });

  it('never shows an episode again after a reload of the tab, nor one that ended before the tab saw it', async () => {
    const store = new MapStore();
    const answers = { episodes: [episode('a'), episode('b', { end: 120 })] };
    const first = tab(answers, store);
    await first.poller.refresh();
    expect(first.notifier.calls.map(c => c.message)).toEqual(['a open']);
    expect(JSON.parse(store.getItem(SEEN_KEY)!)).toEqual({ a: 'open', b: 'ended' });
    first.poller.dispose();
    // the reloaded page: same sessionStorage, a new episode besides
    answers.episodes = [episode('a'), episode('c', { kind: 'idle_kernel', severity: 'info', start: 130, kernel_id: 'k1' })];
    const again = tab(answers, store);
    await again.poller.refresh();
    expect(again.notifier.calls).toEqual([{ op: 'emit', id: 'n0', message: 'c open', type: 'info', labels: ['Show GPU', 'Shut down kernel'] }]);
    // the server forgot a and b: so does the tab (bounded)
    expect(Object.keys(JSON.parse(store.getItem(SEEN_KEY)!)).sort()).toEqual(['a', 'c']);
    again.poller.dispose();
  });

  it('leaves out the kinds switched off, shows them when switched back on, and asks nothing when off', async () => {
    const answers = { episodes: [episode('lost/1'), episode('mem/0', { kind: 'memory', severity: 'warning', gpu: 0 })] };
    const { notifier, poller, requests } = tab(answers);
    poller.configure({ enabled: true, kinds: ['memory'] });
    await poller.refresh();
    expect(notifier.calls.map(c => c.message)).toEqual(['mem/0 open']);
    poller.configure({ enabled: true, kinds: ['memory', 'lost'] });
    expect(notifier.calls.map(c => c.message)).toEqual(['mem/0 open', 'lost/1 open']);
    poller.configure({ enabled: false, kinds: ['memory', 'lost'] });
    const asked = requests.length;
    await poller.refresh();
    expect(requests.length).toBe(asked);
    poller.dispose();
  });

  it('shows nothing when the server has the alerts off', async () => {
    const notifier = new Recorder();
    const poller = new AlertsPoller({
      notifier, autoStart: false, actions: () => [],
      request: async () => ({ enabled: false, problem: 'bad', version: 0, settings: SETTINGS, episodes: [episode('x')], server_time: 1 })
    });
    await poller.refresh();
    expect(notifier.calls).toEqual([]);
    poller.dispose();
  });
});

describe('the alerts setting', () => {
  it('keeps on/off and kinds in the tab and sends only what the user set that the server lacks', () => {
    const s = normalizeAlertsSetting({ enabled: true, kinds: { lost: true, throttle: false }, memoryPercent: 80, gpus: 'mine', idleMinutes: 'x' });
    expect(s.kinds).toEqual(['lost', 'temperature', 'memory', 'idle_kernel']);
    expect(s.server).toEqual({ memory_percent: 80, gpus: 'mine' });
    expect(serverChanges(s.server, SETTINGS)).toEqual({ memory_percent: 80, gpus: 'mine' });
    expect(serverChanges(s.server, { ...SETTINGS, memory_percent: 80, gpus: 'mine' })).toBeNull();
    expect(normalizeAlertsSetting(undefined)).toEqual({ enabled: true, kinds: ['lost', 'temperature', 'throttle', 'memory', 'idle_kernel'], server: {} });
  });
});
