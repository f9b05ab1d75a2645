/**
 * SM activity, per-process use and MIG in the sidebar: the model asks `samples/latest?gpm=1`
 * only while a GPU card is on screen, and the cards show what it says (or that it is being read,
 * or why it is missing).
 */
import * as React from 'react';

import { SidebarView } from '../cards/components';
import { GpuModel } from '../gpus/model';
import { FALLBACK_PALETTE } from '../charts/palette';
import { requestAPI } from '../api/request';
import { IMetricInfo, IProcess } from '../api/tokens';
import { catalogueBody, devices, FakeHistory, IPoint, MockApi, processes, status } from './utils';
import { HOPPER, liveDevice, mig, NOBODY, proc, snapshot } from './gpmData';

jest.mock('../api/request', () => ({ requestAPI: jest.fn() }));
jest.mock('@jupyterlab/ui-components', () => ({ notebookIcon: { react: () => null } }));
jest.mock('uplot', () => ({}));
const { renderToStaticMarkup } = jest.requireActual('react-dom/server') as {
  renderToStaticMarkup: (element: React.ReactElement) => string;
};
const mockedRequest = requestAPI as jest.MockedFunction<typeof requestAPI>;

afterEach(() => {
  mockedRequest.mockReset();
});

/** One GPU, busy 98 %, whose history has the GPM figures given (null by default). */
function serve(options: { point?: IPoint; gpm?: boolean; procs?: IProcess[] } = {}): { api: MockApi; model: GpuModel; history: FakeHistory } {
  const history = new FakeHistory(1);
  history.addRun(5, { util: 98, ...options.point });
  const api = new MockApi({
    status: { body: () => status({ server_time: history.serverTime }) },
    metrics: { body: () => catalogueBody([], options.gpm ?? true) },
    devices: { body: () => devices(1) },
    samples: { body: history.samples },
    processes: { body: () => processes([(options.procs ?? []) as never]) },
    'samples/latest': { body: () => snapshot([liveDevice(0)]) }
  });
  mockedRequest.mockImplementation(api.handler as typeof requestAPI);
  const model = new GpuModel({ autoPoll: false, now: () => history.serverTime * 1000 });
  return { api, model, history };
}

function render(model: GpuModel): string {
  const metrics: readonly IMetricInfo[] = model.catalogue!.sidebar;
  return renderToStaticMarkup(
    React.createElement(SidebarView, { model, metrics, palette: FALLBACK_PALETTE, openPath: () => undefined })
  );
}

/** The markup of one row of the (only) card. */
function row(html: string, id: string): string {
  const start = html.indexOf(`data-metric="${id}"`);
  expect(start).toBeGreaterThan(-1);
  const rest = html.slice(start + 10);
  const end = rest.search(/data-metric="|jp-GpuWidgets-timeAxis/);
  return rest.slice(0, end < 0 ? undefined : end);
}

const meterText = (html: string): string => /role="meter"[^>]*>([^<]*)</.exec(html)![1];

describe('GpuModel: GPM only while someone looks', () => {
  it('asks samples/latest?gpm=1 only while the panel shows with a card on screen', async () => {
    const { api, model } = serve();
    model.setCardVisible(0, true);
    await model.refresh(); // panel hidden (only the status bar): no GPM
    expect(api.callsTo('samples/latest')).toHaveLength(0);
    expect(model.gpmWanted).toBe(false);

    model.setPanelVisible(true);
    model.setCardVisible(0, false);
    await model.refresh(); // the panel shows, but no card is on screen
    expect(api.callsTo('samples/latest')).toHaveLength(0);

    model.setCardVisible(0, true);
    await model.refresh();
    expect(api.callsTo('samples/latest')).toEqual([{ endpoint: 'samples/latest', query: { gpm: 1 } }]);
    const gpu = model.gpus[0];
    expect(gpu.live?.index).toBe(0);
    // The history has none yet: the card reads the newest figures from samples/latest.
    expect(gpu.latest!.values.sm_active_percent).toBe(6);
    expect(gpu.latest!.values.utilization_gpu_percent).toBe(98);

    model.setCardVisible(0, false);
    await model.refresh();
    expect(api.callsTo('samples/latest')).toHaveLength(1);
    expect(model.gpus[0].live).toBeNull(); // old figures never show later
    expect(model.gpus[0].latest!.values.sm_active_percent).toBeNull();
    model.dispose();
  });

  it('keeps the sidebar working when samples/latest fails', async () => {
    const { api, model } = serve();
    api.table['samples/latest'] = { status: 500, code: 'server_error', message: 'boom' };
    const warn = jest.spyOn(console, 'warn').mockImplementation(() => undefined);
    model.setPanelVisible(true);
    model.setCardVisible(0, true);
    await model.refresh();
    await model.refresh();
    expect(model.state).toEqual({ kind: 'ok', backend: 'nvml' });
    expect(model.gpus[0].live).toBeNull();
    expect(warn).toHaveBeenCalledTimes(1); // once, not at every tick
    warn.mockRestore();
    model.dispose();
  });
});

describe('a GPU card with GPM figures', () => {
  it('shows busy high and SM active low side by side, with charts and the difference on hover', async () => {
    const { model } = serve({ point: { smActive: 6, tensorActive: 0.5 } });
    await model.refresh();
    const html = render(model);
    const order = [...html.matchAll(/data-metric="([^"]+)"/g)].map(m => m[1]);
    expect(order.slice(0, 3)).toEqual(['utilization', 'sm_active', 'tensor_active']);
    expect(meterText(row(html, 'utilization'))).toBe('98 %');
    expect(meterText(row(html, 'sm_active'))).toBe('6 %');
    expect(meterText(row(html, 'tensor_active'))).toBe('0 %'); // 0.5, rounded half to even
    expect(row(html, 'sm_active')).toContain('aria-label="SM active over the last 10 min"');
    expect(row(html, 'utilization')).toMatch(/title="GPU busy: the share of time in which some kernel ran[^"]*SM active says how much/);
    expect(row(html, 'sm_active')).toMatch(/title="SM active: the share of the GPU&#x27;s streaming multiprocessors/);
    model.dispose();
  });

  it('reads "…" while the figures are being fetched, and never shows that as a fault', async () => {
    const { model, history } = serve();
    history.unavailable[0] = { sm_active_percent: NOBODY, tensor_active_percent: NOBODY };
    await model.refresh();
    const sm = row(render(model), 'sm_active');
    expect(meterText(sm)).toBe('…');
    expect(sm).toContain('aria-valuetext="being read"');
    expect(sm).not.toContain('jp-GpuWidgets-metricReason');
    expect(sm).not.toContain('nobody');
    model.dispose();
  });

  it('says n/a and why where the GPU has no GPM', async () => {
    const { model, history } = serve();
    history.unavailable[0] = { sm_active_percent: HOPPER, tensor_active_percent: HOPPER };
    await model.refresh();
    const sm = row(render(model), 'sm_active');
    expect(meterText(sm)).toBe('n/a');
    expect(sm).toContain(`<div class="jp-GpuWidgets-metricReason" id="jp-GpuWidgets-0-sm_active-reason" title="${HOPPER}">`);
    model.dispose();
  });

  it('shows the values without a chart when the server\'s catalogue has no GPM metrics', async () => {
    const { model } = serve({ gpm: false });
    model.setPanelVisible(true);
    model.setCardVisible(0, true);
    await model.refresh();
    const html = render(model);
    expect(meterText(row(html, 'sm_active'))).toBe('6 %');
    expect(meterText(row(html, 'tensor_active'))).toBe('0 %'); // 0.5, rounded half to even
    expect(row(html, 'sm_active')).not.toContain('role="img"');
    expect(row(html, 'utilization')).toContain('role="img"');
    model.dispose();
  });

  it('shows each process\'s SM and bandwidth share beside its memory', async () => {
    const { model } = serve({ procs: [proc(4242, 63, 12), proc(4343, null, null)] });
    model.setPanelVisible(true);
    await model.refresh();
    const html = render(model);
    const first = html.slice(html.indexOf('aria-label="Process 4242"'), html.indexOf('aria-label="Process 4343"'));
    expect(first).toMatch(/jp-GpuWidgets-procSm"[^>]*>SM <span class="jp-GpuWidgets-shareValue">63 %<\/span>/);
    expect(first).toMatch(/jp-GpuWidgets-procBw"[^>]*>BW <span class="jp-GpuWidgets-shareValue">12 %<\/span>/);
    expect(first.indexOf('procMem')).toBeLessThan(first.indexOf('procSm')); // after the memory, in its row
    expect(first.indexOf('procSm')).toBeLessThan(first.indexOf('procCommand'));
    const second = html.slice(html.indexOf('aria-label="Process 4343"'));
    expect(second).toMatch(/SM <span class="jp-GpuWidgets-shareValue">…<\/span>/);
    model.dispose();
  });

  it('lists MIG instances with their memory, SM active and processes', async () => {
    const { api, model } = serve();
    const live = liveDevice(0, {
      processes: [proc(4242, 30, 5)],
      mig_instances: [mig(0, { pids: [4242] }), mig(1, { sm_active_percent: null, unavailable: { sm_active_percent: HOPPER } })]
    });
    api.table['samples/latest'] = { body: () => snapshot([live]) };
    model.setPanelVisible(true);
    model.setCardVisible(0, true);
    await model.refresh();
    const html = render(model);
    expect(html).toContain('aria-label="MIG instances of GPU 0"');
    const m0 = html.slice(html.indexOf('aria-label="MIG instance 0"'), html.indexOf('aria-label="MIG instance 1"'));
    expect(m0).toContain('MIG 0');
    expect(m0).toContain('GI 1 · CI 0');
    expect(m0).toContain('3 / 10 GiB');
    expect(m0).toMatch(/SM active <span class="jp-GpuWidgets-shareValue">40 %/);
    expect(m0).toContain('4242 python');
    const m1 = html.slice(html.indexOf('aria-label="MIG instance 1"'));
    expect(m1).toMatch(/title="SM active in this instance: needs a Hopper[^"]*">SM active <span class="jp-GpuWidgets-shareValue">n\/a/);
    expect(m1).toContain('no processes');
    model.dispose();
  });

  it('titles the MIG figures with the server catalogue labels, not words of its own', async () => {
    const { api, model } = serve();
    const renamed = catalogueBody().metrics.map(m =>
      m.id === 'sm_active' ? { ...m, label: 'SMs at work' } : m.id === 'tensor_active' ? { ...m, label: 'Tensor cores' } : m
    );
    api.table['metrics'] = { body: () => ({ ...catalogueBody(), metrics: renamed }) };
    await model.refresh();
    const live = liveDevice(0, { processes: [proc(4242, 30, 5)], mig_instances: [mig(0, { pids: [4242] })] });
    api.table['samples/latest'] = { body: () => snapshot([live]) };
    model.setPanelVisible(true);
    model.setCardVisible(0, true);
    await model.refresh();
    const m0 = render(model).split('aria-label="MIG instance 0"')[1];
    expect(m0).toMatch(/title="SMs at work in this instance">SMs at work <span class="jp-GpuWidgets-shareValue">40 %/);
    expect(m0).toMatch(/Tensor cores <span class="jp-GpuWidgets-shareValue">/);
    expect(m0).not.toContain('SM active');
    model.dispose();
  });

  it('has no MIG section for a GPU without MIG', async () => {
    const { model } = serve();
    model.setPanelVisible(true);
    model.setCardVisible(0, true);
    await model.refresh();
    expect(render(model)).not.toContain('MIG instances');
    model.dispose();
  });
});
