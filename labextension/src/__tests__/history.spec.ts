/**
 * The model's history and metric catalogue: what it asks the server, and what it keeps.
 * The server bounds every answer (`max_points`); the model keeps answers as they are and,
 * past its point cap, asks for a fresh window instead of re-bucketing.
 */
import { requestAPI } from '../api/request';
import { catalogueBody, metricOf as m, serveModel, status } from './utils';

jest.mock('../api/request', () => ({ requestAPI: jest.fn() }));

const mockedRequest = requestAPI as jest.MockedFunction<typeof requestAPI>;

function setup(options: { n?: number; nDevices?: number; windowS?: number } = {}) {
  return serveModel(mockedRequest, options);
}

afterEach(() => {
  mockedRequest.mockReset();
});

describe('GpuModel: the metric catalogue', () => {
  it('reads it once, before the first samples, and keeps the fields its metrics draw', async () => {
    const { history, api, model } = setup({ n: 3 });
    expect(model.catalogue).toBeNull();
    await model.refresh();
    expect(api.calls.map(c => c.endpoint).slice(0, 3)).toEqual(['status', 'metrics', 'samples']);
    expect(model.catalogue!.sidebar.map(x => x.id)).toEqual([
      'utilization',
      'sm_active',
      'tensor_active',
      'memory',
      'memory_controller',
      'temperature',
      'power'
    ]);
    expect(Object.keys(model.timeline.devices.get(0)!.values).sort()).toEqual(
      [
        'memory_total_bytes',
        'memory_used_bytes',
        'power_limit_w',
        'power_w',
        'sm_active_percent',
        'temperature_c',
        'temperature_slowdown_c', // the temperature chart's top follows it
        'tensor_active_percent',
        'utilization_gpu_percent',
        'utilization_memory_percent'
      ].sort()
    );
    history.addRun(2);
    await model.refresh();
    expect(api.callsTo('metrics')).toHaveLength(1);
  });

  it('keeps the field of a metric it has never heard of', async () => {
    const { api, model } = setup({ n: 3 });
    const clocks = { id: 'sm_clock', field: 'sm_clock_mhz', label: 'SM clock', unit: 'MHz' };
    api.table.metrics = {
      body: () => catalogueBody([{ ...m('utilization'), ...clocks, title: 'SM clock (MHz)', y_max: null }])
    };
    await model.refresh();
    expect(model.catalogue!.sidebar.map(x => x.id)).toContain('sm_clock');
    expect(model.timeline.devices.get(0)!.values.sm_clock_mhz).toEqual([1980, 1980, 1980]);
    expect(model.gpus[0].latest!.values.sm_clock_mhz).toBe(1980);
  });

  it('reads it again when the server runs another gpu-widgets version', async () => {
    const { history, api, model } = setup({ n: 3 });
    await model.refresh();
    api.table.status = { body: () => status({ server_time: history.serverTime, version: '0.2.0' }) };
    api.table.samples = { network: true }; // the server went away...
    await model.refresh();
    api.table.samples = { body: history.samples }; // ...and came back upgraded
    await model.refresh();
    expect(model.state.kind).toBe('ok');
    expect(api.callsTo('metrics')).toHaveLength(2);
  });

  it('reports a catalogue it cannot use, naming what is wrong, and asks again', async () => {
    const { api, model } = setup();
    api.table.metrics = { body: () => ({ metrics: [{ ...m('power'), decimals: -1 }], throttle_reasons: [] }) };
    await model.refresh();
    expect(model.state).toMatchObject({ kind: 'server_error', code: null });
    expect(model.state.kind === 'server_error' && model.state.message).toBe(
      'the metric catalogue is not usable: metric 0 of the catalogue: `decimals` of power is not an integer from 0 to 20'
    );
    expect(api.callsTo('samples')).toHaveLength(0);

    api.table.metrics = { body: () => catalogueBody() };
    await model.refresh();
    expect(model.state.kind).toBe('ok');
    expect(api.callsTo('metrics')).toHaveLength(2);
  });
});

describe('GpuModel: bounded series', () => {
  it('keeps only the history window', async () => {
    const { history, model } = setup({ n: 100, windowS: 30 });
    await model.refresh();
    const t = model.timeline.t;
    expect(t[t.length - 1]).toBe(history.t[99]);
    expect(t[t.length - 1] - t[0]).toBeLessThanOrEqual(30);
    expect(t.length).toBe(30); // the first answer starts after server time - 30 s

    history.addRun(50);
    await model.refresh();
    expect(model.timeline.t[0]).toBe(history.t[149] - 30);
    expect(model.timeline.length).toBe(31);
    for (const cols of model.timeline.devices.values()) {
      expect(cols.values.power_w).toHaveLength(31);
      expect(cols.throttle).toHaveLength(31);
      expect(cols.lost).toHaveLength(31);
    }
  });

  it('shrinks the window live, and asks only for the stretch before what it holds for a longer one', async () => {
    const { history, api, model } = setup({ n: 100, windowS: 60 });
    await model.refresh();
    expect(model.timeline.length).toBe(60);

    model.configure({ historyWindowS: 30 });
    expect(model.timeline.length).toBe(31);
    const held = [...model.timeline.t];

    model.configure({ historyWindowS: 90 });
    expect(model.timeline.t).toEqual(held); // what is held stays
    await model.refresh();
    const older = api.callsTo('samples').pop()!.query;
    expect(older.since).toBeCloseTo(history.serverTime - 90, 6);
    expect(older.until).toBe(held[0]); // never the points held again
    expect(older.max_points).toBe(Math.ceil((model.maxPoints * (held[0] - Number(older.since))) / 90));
    expect(model.timeline.length).toBe(90);
    expect(model.timeline.t).toEqual(history.t.slice(10)); // oldest first, no point twice
    for (const cols of model.timeline.devices.values()) {
      expect(cols.values.power_w).toHaveLength(90);
      expect(cols.lost).toHaveLength(90);
    }
    // Then only what is new again.
    history.addRun(2);
    await model.refresh();
    const next = api.callsTo('samples').pop()!.query;
    expect(next.since).toBe(history.t[99]);
    expect(next.until).toBeUndefined();
    expect(model.timeline.t).toEqual(history.t.slice(11)); // the window moved on by the two
  });

  it('asks for the whole window again when an older server refuses until', async () => {
    const { history, api, model } = setup({ n: 100, windowS: 30 });
    await model.refresh();
    model.configure({ historyWindowS: 90 });
    api.table.samples = { status: 400, code: 'bad_parameter', message: 'until: unknown parameter' };
    await model.refresh(); // the API 1 server's 400: no error shown, nothing taken
    expect(api.callsTo('samples').pop()!.query.until).toBeDefined();
    expect(model.state.kind).toBe('ok');
    api.table.samples = { body: history.samples };
    await model.refresh();
    const whole = api.callsTo('samples').pop()!.query;
    expect(whole.until).toBeUndefined();
    expect(whole.since).toBeCloseTo(history.serverTime - 90, 6);
    expect(model.timeline.length).toBe(90);
  });

  it('puts a gap between the older stretch and what it holds when the two do not meet', async () => {
    const { history, model } = setup({ n: 0, nDevices: 1, windowS: 60 });
    history.addRun(20);
    const gapEnd = history.t[19] + 100;
    history.add(gapEnd, [{ util: 50 }]);
    history.addRun(30);
    await model.refresh(); // the last 60 s: after the gap only
    expect(model.timeline.t[0]).toBe(gapEnd);
    model.configure({ historyWindowS: 300 });
    await model.refresh();
    const t = model.timeline.t;
    expect(t.length).toBe(20 + 1 + 31); // the older 20, a null point, what was held
    const util = model.timeline.devices.get(0)!.values.utilization_gpu_percent;
    expect(util[20]).toBeNull();
    expect(t[20]).toBeGreaterThan(t[19]);
    expect(t[20]).toBeLessThan(t[21]);
  });

  it('keeps what the server sent, and asks for a fresh bounded window past the point cap', async () => {
    const { history, api, model } = setup({ n: 100, nDevices: 1, windowS: 86400 });
    model.setChartWidth(60);
    expect([model.maxPoints, model.pointCap]).toEqual([120, 2000]);
    await model.refresh();
    expect(model.timeline.length).toBe(100);
    let most = 0;
    for (let tick = 0; tick < 20; tick++) {
      history.addRun(100);
      await model.refresh();
      most = Math.max(most, model.timeline.length);
    }
    // Incremental answers are appended as they are (no re-bucketing here) until the cap...
    expect(most).toBe(2100);
    const queries = api.callsTo('samples').map(c => c.query);
    expect(queries.every(q => q.max_points === 120)).toBe(true);
    // (the window starts before the history: a full request asks since 0)
    expect(queries.map(q => q.since === 0)).toEqual([true, ...Array(20).fill(false)]);
    // ...then the next tick asks for the whole window again and keeps that answer instead.
    history.addRun(1);
    await model.refresh();
    expect(api.callsTo('samples').pop()!.query.since).toBe(0);
    expect(model.timeline.length).toBe(120);
    expect(model.timeline.t[0]).toBe(history.t[0]);
    expect(model.timeline.last).toBe(history.t[history.t.length - 1]);
    // And from there on, only what is new again.
    history.addRun(2);
    await model.refresh();
    expect(api.callsTo('samples').pop()!.query.since).toBe(history.t[history.t.length - 3]);
    expect(model.timeline.length).toBe(122);
  });

  it('keeps an answer bigger than asked as it is (the server bounds it, not the sidebar)', async () => {
    const { history, api, model } = setup({ n: 0, nDevices: 1, windowS: 86400 });
    model.setChartWidth(60);
    history.addRun(2500, k => [{ util: k === 1777 ? 100 : 40 }]);
    api.table.samples = { body: q => history.samples({ since: q.since, max_points: 100000 }) };
    await model.refresh();
    expect(model.timeline.length).toBe(2500);
    expect(model.timeline.devices.get(0)!.values.utilization_gpu_percent[1777]).toBe(100);
    // Over the cap: the next request is for a fresh window, bounded by max_points.
    api.table.samples = { body: history.samples };
    await model.refresh();
    expect(api.callsTo('samples')[1].query.since).toBe(0);
    expect(model.timeline.length).toBe(120);
  });

  it('asks for the window again when the charts get much wider', async () => {
    const { history, api, model } = setup({ n: 50, nDevices: 1 });
    model.setChartWidth(60);
    await model.refresh();
    model.setChartWidth(200); // 200 points: not worth a refetch
    history.addRun(1);
    await model.refresh();
    expect(api.callsTo('samples')[1].query.since).toBe(history.t[49]);
    model.setChartWidth(400);
    history.addRun(1);
    await model.refresh();
    const third = api.callsTo('samples')[2].query;
    expect(third.max_points).toBe(400);
    expect(third.since).toBeCloseTo(history.serverTime - 600, 6);
    expect(model.timeline.length).toBe(52);
  });
});
