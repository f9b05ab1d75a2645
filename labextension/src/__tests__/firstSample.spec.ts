/**
 * Before the server's first sample: `starting` (the backend opened, no sample yet), then `stale`
 * when the first read hangs past the stall rule, then `ok` once a sample exists.
 */
import * as React from 'react';

import { SidebarView } from '../cards/components';
import { GpuModel } from '../gpus/model';
import { FALLBACK_PALETTE } from '../charts/palette';
import { requestAPI } from '../api/request';
import { statusText } from '../shell/statusbar';
import { IStatus } from '../api/tokens';
import { catalogueBody, devices, FakeHistory, MockApi, processes, status } from './utils';

jest.mock('../api/request', () => ({ requestAPI: jest.fn() }));
// The views' JupyterLab icon, the status bar's widgets and the chart library need a browser; the text does not.
jest.mock('@jupyterlab/ui-components', () => ({ notebookIcon: { react: () => null }, ReactWidget: class {} }));
jest.mock('@jupyterlab/statusbar', () => ({}));
jest.mock('../shell/icons', () => ({ gpuIcon: {} }));
jest.mock('uplot', () => ({}));
const { renderToStaticMarkup } = jest.requireActual('react-dom/server') as {
  renderToStaticMarkup: (element: React.ReactElement) => string;
};

const mockedRequest = requestAPI as jest.MockedFunction<typeof requestAPI>;

const WAITING = 'waiting for the first GPU sample';
const HUNG = 'nvmlDeviceGetPowerUsage on GPU 1 has not returned';

function render(model: GpuModel): string {
  const ctx = { model, metrics: model.catalogue?.sidebar ?? [], palette: FALLBACK_PALETTE, openPath: () => undefined };
  return renderToStaticMarkup(React.createElement(SidebarView, ctx));
}

function setup(first: Partial<IStatus>) {
  const history = new FakeHistory(2);
  let answer: Partial<IStatus> = first;
  const api = new MockApi({
    status: { body: () => status({ sample_age_s: null, server_time: history.serverTime, ...answer }) },
    metrics: { body: () => catalogueBody() },
    devices: { body: () => devices(2) },
    samples: { body: q => ({ ...history.samples(q), status: answer.status ?? 'ok' }) },
    processes: { body: () => processes([[], []]) }
  });
  mockedRequest.mockImplementation(api.handler as typeof requestAPI);
  const model = new GpuModel({ autoPoll: false, now: () => history.serverTime * 1000 });
  return { history, api, model, answer: (next: Partial<IStatus>) => (answer = next) };
}

afterEach(() => {
  mockedRequest.mockReset();
});

describe('GpuModel: the first sample', () => {
  it('says it waits for the first sample, then which call hangs, then shows the GPUs', async () => {
    const { history, api, model, answer } = setup({ status: 'starting', reason: WAITING });
    await model.refresh();
    expect(model.state).toEqual({ kind: 'starting', reason: WAITING });
    let html = render(model);
    expect(html).toContain('<h3 class="jp-GpuWidgets-messageTitle">The GPU sampler is starting…</h3>');
    expect(html).toContain('<span class="jp-GpuWidgets-reason">Waiting for the first GPU sample.</span>');
    expect(html).not.toContain('jp-GpuWidgets-cards');
    expect(statusText(model)).toEqual({ text: 'GPU …', title: `The GPU monitor is starting: ${WAITING}` });
    expect(api.callsTo('samples')).toHaveLength(0); // nothing to ask for before a sample exists

    // The first read hangs: 5 s after the start the stall rule says stale, with no sample at all.
    answer({ status: 'stale', reason: HUNG });
    await model.refresh();
    expect(model.state).toEqual({ kind: 'stale', sampleAgeS: null, reason: HUNG });
    html = render(model);
    expect(html).toContain('Stale: no GPU sample yet');
    expect(html).toContain(`<span class="jp-GpuWidgets-reason">${HUNG}</span>`);
    expect(html).toContain('No GPU has been read yet; the readings appear when the call returns.');
    expect(html).not.toContain('from before then');

    answer({ status: 'ok', reason: null, sample_age_s: 0.1 });
    history.addRun(3);
    await model.refresh();
    await model.refresh();
    expect(model.state).toEqual({ kind: 'ok', backend: 'nvml' });
    expect(model.gpus).toHaveLength(2);
    expect(render(model)).not.toContain('jp-GpuWidgets-message ');
  });

  it('without a reason says the backend is opening, as a sentence', async () => {
    const { model } = setup({ status: 'starting', backend: null, reason: null });
    await model.refresh();
    expect(render(model)).toContain(
      '<span class="jp-GpuWidgets-reason">The server is opening the GPU backend.</span> Readings appear in a moment.'
    );
    expect(statusText(model).title).toBe('The GPU monitor is starting');
  });
});
