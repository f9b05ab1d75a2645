/**
 * The sidebar model with the request module replaced by an endpoint table: polling, states,
 * incremental samples (the history it keeps and the catalogue: history.spec.ts).
 */
import { metricReading } from '../gpus/metrics';
import { GpuModel } from '../gpus/model';
import { MAX_BACKOFF_MS, STATUS_BAR_INTERVAL_MS } from '../api/pollLimits';
import { requestAPI } from '../api/request';
import { ENABLE_COMMAND } from '../api/tokens';
import { catalogueBody, devices, FakeHistory, GIB, metricOf as m, MockApi, processes, serveModel, status, until } from './utils';

jest.mock('../api/request', () => ({ requestAPI: jest.fn() }));

const mockedRequest = requestAPI as jest.MockedFunction<typeof requestAPI>;

/** A model wired to a fake server with `nDevices` GPUs and `n` samples of history. */
function setup(options: { n?: number; nDevices?: number; windowS?: number; now?: () => number } = {}) {
  return serveModel(mockedRequest, options);
}

afterEach(() => {
  mockedRequest.mockReset();
});

describe('GpuModel: incremental samples', () => {
  it('asks for the whole window first, then only what is newer than the newest point', async () => {
    const { history, api, model } = setup({ n: 5 });
    await model.refresh();

    expect(model.state).toEqual({ kind: 'ok', backend: 'nvml' });
    const [first] = api.callsTo('samples');
    // The window ends at the server's time, not the browser's (which runs 50 s ahead).
    expect(first.query.since).toBeCloseTo(history.serverTime - 600, 6);
    expect(first.query.max_points).toBe(model.maxPoints);
    expect(model.timeline.t).toEqual(history.t);

    history.addRun(3);
    await model.refresh();
    const second = api.callsTo('samples')[1];
    expect(second.query.since).toBe(history.t[4]);
    expect(model.timeline.t).toEqual(history.t);
    expect(model.timeline.length).toBe(8);
    // The status and the spec cards are not asked again while nothing changes.
    expect(api.callsTo('status')).toHaveLength(1);
    expect(api.callsTo('devices')).toHaveLength(1);
  });

  it('never duplicates points when an answer overlaps what it holds', async () => {
    const { history, api, model } = setup({ n: 4 });
    await model.refresh();
    // A server that ignores `since` and sends everything again, plus one new point.
    history.addRun(1);
    api.table.samples = { body: () => history.samples({}) };
    await model.refresh();
    expect(model.timeline.t).toEqual(history.t);
    expect(model.timeline.devices.get(0)!.values.utilization_gpu_percent).toHaveLength(5);
  });

  it('asks max_points suited to the chart width', async () => {
    const { api, model } = setup();
    model.setChartWidth(250);
    await model.refresh();
    expect(api.callsTo('samples')[0].query.max_points).toBe(250); // a point per pixel
    model.setChartWidth(10);
    expect(model.maxPoints).toBe(120);
  });

  it('shows the newest values of each GPU', async () => {
    const { history, model } = setup({ n: 0 });
    history.add(1000, [{ util: 97, memUsedGiB: 37, temp: 71, power: 612.5 }, { util: 13 }]);
    await model.refresh();
    const [g0, g1] = model.gpus;
    expect(g0.latestTimestamp).toBe(1000);
    expect(metricReading(m('utilization'), g0.latest).text).toBe('97 %');
    expect(metricReading(m('memory'), g0.latest).text).toBe('37 / 141 GiB');
    expect(metricReading(m('temperature'), g0.latest).text).toBe('71 °C');
    expect(metricReading(m('power'), g0.latest).text).toBe('612 / 700 W'); // the catalogue: no decimals (a tie rounds to even)
    expect(g1.latest!.values.utilization_gpu_percent).toBe(13);
    expect(g0.info!.name).toBe('NVIDIA H200');
  });
});

describe('GpuModel: why readings are null', () => {
  it('keeps the newest unavailable reasons of each GPU, replacing them on every answer', async () => {
    const { history, model } = setup({ n: 0 });
    history.add(1000);
    history.unavailable[0] = { power_w: 'not supported on this GPU (simulated fault)' };
    history.unavailable[1] = {};
    await model.refresh();
    expect(model.gpus[0].unavailable).toEqual({ power_w: 'not supported on this GPU (simulated fault)' });
    expect(model.gpus[1].unavailable).toEqual({});

    // The next answer says something else: the held reasons are replaced, not merged.
    history.add(1001);
    history.unavailable[0] = {};
    history.unavailable[1] = { temperature_c: 'not readable right now' };
    await model.refresh();
    expect(model.gpus[0].unavailable).toEqual({});
    expect(model.gpus[1].unavailable).toEqual({ temperature_c: 'not readable right now' });
  });
});

describe('GpuModel: states', () => {
  it('goes from starting to ok, asking only the status while starting', async () => {
    const { api, model } = setup();
    api.table.status = { body: () => status({ status: 'starting', backend: null, reason: 'the GPU sampler is starting' }) };
    const seen: string[] = [];
    model.changed.connect(() => seen.push(model.state.kind));

    expect(model.state.kind).toBe('loading');
    await model.refresh();
    expect(model.state).toEqual({ kind: 'starting', reason: 'the GPU sampler is starting' });
    expect(api.callsTo('samples')).toHaveLength(0);

    await model.refresh();
    expect(api.callsTo('status')).toHaveLength(2); // asked again while starting

    api.table.status = { body: () => status() };
    await model.refresh();
    expect(model.state).toEqual({ kind: 'ok', backend: 'nvml' });
    expect(model.gpus).toHaveLength(2);
    expect(seen).toEqual(['starting', 'starting', 'ok']);
  });

  it('reports no GPU with NVML\'s reason and asks for nothing else', async () => {
    const { api, model } = setup();
    const reason = 'the NVML library (libnvidia-ml.so.1) was not found: no NVIDIA driver is installed';
    api.table.status = { body: () => status({ status: 'no_gpu', backend: 'none', reason, device_count: 0 }) };
    await model.refresh();
    expect(model.state).toEqual({ kind: 'no_gpu', reason });
    expect(api.calls.map(c => c.endpoint)).toEqual(['status']); // not even the catalogue
    expect(model.gpus).toEqual([]);
  });

  it('says the server extension is missing on a 404 that is not the API\'s', async () => {
    const { api, model } = setup();
    api.table.status = { status: 404, code: null, message: 'Not Found' };
    await model.refresh();
    expect(model.state).toEqual({ kind: 'extension_missing' });
    expect(ENABLE_COMMAND).toBe('jupyter server extension enable gpu_widgets');
  });

  it('treats the API\'s own 404 (a JSON body) as a server error', async () => {
    const { api, model } = setup();
    api.table.status = { status: 404, code: 'not_found', message: "no such endpoint: 'statu'" };
    await model.refresh();
    expect(model.state).toEqual({
      kind: 'server_error',
      status: 404,
      code: 'not_found',
      message: "no such endpoint: 'statu'"
    });
  });

  it('shows the server error message from the JSON body', async () => {
    const { api, model } = setup();
    await model.refresh();
    api.table.samples = { status: 500, code: 'server_error', message: 'internal error in gpu-widgets (see the Jupyter server log)' };
    await model.refresh();
    expect(model.state).toEqual({
      kind: 'server_error',
      status: 500,
      code: 'server_error',
      message: 'internal error in gpu-widgets (see the Jupyter server log)'
    });
    // Data already shown stays (the view greys it out).
    expect(model.gpus).toHaveLength(2);
  });

  it('says the session expired on 403', async () => {
    const { api, model } = setup();
    api.table.status = { status: 403, code: 'forbidden', message: 'not authenticated' };
    await model.refresh();
    expect(model.state).toEqual({ kind: 'forbidden', message: 'not authenticated' });
  });

  it('reports a network failure, then recovers by asking the status again', async () => {
    const { history, api, model } = setup();
    await model.refresh();
    api.table.samples = { network: true };
    await model.refresh();
    expect(model.state.kind).toBe('network');
    expect(model.state.kind === 'network' && model.state.message).toMatch(/did not answer/);

    api.table.samples = { body: history.samples };
    history.addRun(2);
    const statusCalls = api.callsTo('status').length;
    await model.refresh();
    expect(model.state.kind).toBe('ok');
    expect(api.callsTo('status')).toHaveLength(statusCalls + 1);
    expect(model.timeline.t).toEqual(history.t);
  });

  it('re-reads the status when the samples report another backend', async () => {
    const { history, api, model } = setup();
    await model.refresh();
    history.backend = 'simulated';
    history.addRun(1);
    await model.refresh();
    api.table.status = { body: () => status({ backend: 'simulated' }) };
    await model.refresh();
    expect(api.callsTo('status')).toHaveLength(2);
    expect(model.simulated).toBe(true);
    expect(model.state).toEqual({ kind: 'ok', backend: 'simulated' });
  });
});

describe('GpuModel: lost GPUs', () => {
  it('marks a lost GPU, re-reads the spec cards, and sees it come back', async () => {
    const { history, api, model } = setup({ n: 3 });
    await model.refresh();
    expect(model.gpus[1].lost).toBe(false);

    history.addRun(2, () => [{ util: 90 }, { lost: true }]);
    await model.refresh();
    const [g0, g1] = model.gpus;
    expect(g0.lost).toBe(false);
    expect(g1.lost).toBe(true);
    expect(metricReading(m('utilization'), g1.latest).text).toBe('—');
    expect(metricReading(m('utilization'), g0.latest).text).toBe('90 %');

    // The lost state changed: the next tick asks for the spec cards again.
    history.addRun(1, () => [{}, { lost: true }]);
    await model.refresh();
    expect(api.callsTo('devices')).toHaveLength(2);

    history.addRun(1, () => [{}, { util: 42 }]);
    await model.refresh();
    expect(model.gpus[1].lost).toBe(false);
    expect(model.gpus[1].latest!.values.utilization_gpu_percent).toBe(42);
    // Its lost stretch stays in the history.
    expect(model.timeline.devices.get(1)!.lost.filter(Boolean)).toHaveLength(3);
  });
});

describe('GpuModel: processes and polling', () => {
  it('asks for processes only while the panel is visible, at the slower cadence', async () => {
    let clock = 2_000_000;
    const { api, model } = setup({ now: () => clock });
    api.table.processes = {
      body: () =>
        processes([
          [{ pid: 7, used_memory_bytes: 2 * GIB, name: 'python', uid: 1000, user: 'me', command: 'python train.py', sm_percent: null, memory_bandwidth_percent: null, matched_by: 'pid', nvml_pid: 7, unavailable: {}, kernel_id: 'k1', notebook_path: 'train.ipynb', orphan_of: null }],
          null
        ])
    };
    await model.refresh();
    expect(api.callsTo('processes')).toHaveLength(0);

    model.setPanelVisible(true);
    await model.refresh();
    expect(api.callsTo('processes')).toHaveLength(1);
    expect(model.gpus[0].processes![0].notebook_path).toBe('train.ipynb');
    expect(model.gpus[1].processes).toBeNull();
    expect(model.gpus[1].processesUnavailable).toMatch(/not read yet/);

    clock += model.processIntervalMs - 1;
    await model.refresh();
    expect(api.callsTo('processes')).toHaveLength(1);
    clock += 1;
    await model.refresh();
    expect(api.callsTo('processes')).toHaveLength(2);
    model.dispose();
  });

  it('polls fast while the panel is visible and slowly for the status bar', () => {
    const { model } = setup();
    model.configure({ refreshIntervalMs: 500 });
    model.setStatusBarActive(true);
    expect(model.pollIntervalMs).toBe(STATUS_BAR_INTERVAL_MS);
    model.setPanelVisible(true);
    expect(model.pollIntervalMs).toBe(500);
    model.setPanelVisible(false);
    expect(model.pollIntervalMs).toBe(STATUS_BAR_INTERVAL_MS);
    expect(model.polling).toBe(false); // autoPoll is off in these tests
    model.dispose();
  });

  it('backs off while the server does not answer and says when it retries', async () => {
    const history = new FakeHistory();
    history.addRun(3);
    const api = new MockApi({ status: { network: true } });
    mockedRequest.mockImplementation(api.handler as typeof requestAPI);
    const model = new GpuModel({ refreshIntervalMs: 100 });
    model.setPanelVisible(true);
    expect(model.polling).toBe(true);
    await until(model.changed, () => model.state.kind === 'network' && model.state.retryInMs !== null);
    const state = model.state;
    if (state.kind !== 'network' || state.retryInMs === null) {
      throw new Error('expected a network state with a retry time');
    }
    expect(state.retryInMs).toBeGreaterThan(0);
    expect(state.retryInMs).toBeLessThanOrEqual(MAX_BACKOFF_MS);

    api.table = {
      status: { body: () => status({ server_time: history.serverTime }) },
      metrics: { body: () => catalogueBody() },
      devices: { body: () => devices(2) },
      samples: { body: history.samples },
      processes: { body: () => processes([[], []]) }
    };
    await model.refresh();
    expect(model.state.kind).toBe('ok');
    model.dispose();
    expect(model.isDisposed).toBe(true);
  });

  it('stops emitting after dispose', async () => {
    const { model } = setup();
    let emitted = 0;
    model.changed.connect(() => emitted++);
    model.dispose();
    await model.refresh();
    expect(emitted).toBe(0);
  });
});
