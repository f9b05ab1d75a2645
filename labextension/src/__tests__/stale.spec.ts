/**
 * The stale state: the server's sampler waits on a driver call that has not returned.
 */
import * as React from 'react';

import { SidebarView } from '../cards/components';
import { staleTitle } from '../ui/format';
import { GpuModel } from '../gpus/model';
import { FALLBACK_PALETTE } from '../charts/palette';
import { requestAPI } from '../api/request';
import { catalogueBody, devices, FakeHistory, MockApi, processes, status } from './utils';

jest.mock('../api/request', () => ({ requestAPI: jest.fn() }));
// The views' JupyterLab icon and chart library need a browser; the text does not.
jest.mock('@jupyterlab/ui-components', () => ({ notebookIcon: { react: () => null } }));
jest.mock('uplot', () => ({}));
const { renderToStaticMarkup } = jest.requireActual('react-dom/server') as {
  renderToStaticMarkup: (element: React.ReactElement) => string;
};

function render(model: GpuModel): string {
  const ctx = { model, metrics: model.catalogue?.sidebar ?? [], palette: FALLBACK_PALETTE, openPath: () => undefined };
  return renderToStaticMarkup(React.createElement(SidebarView, ctx));
}

const mockedRequest = requestAPI as jest.MockedFunction<typeof requestAPI>;

const HUNG = 'nvmlDeviceGetPowerUsage on GPU 1 has not returned';

function setup() {
  const history = new FakeHistory(2);
  history.addRun(5);
  let stale: { age: number } | null = null;
  const api = new MockApi({
    status: {
      body: () =>
        stale
          ? status({ status: 'stale', reason: HUNG, sample_age_s: stale.age, server_time: history.serverTime })
          : status({ server_time: history.serverTime })
    },
    metrics: { body: () => catalogueBody() },
    devices: { body: () => devices(2) },
    samples: { body: q => ({ ...history.samples(q), status: stale ? 'stale' : 'ok' }) },
    processes: { body: () => processes([[], []]) }
  });
  mockedRequest.mockImplementation(api.handler as typeof requestAPI);
  const model = new GpuModel({ autoPoll: false, now: () => history.serverTime * 1000 });
  return { history, api, model, setStale: (age: number | null) => (stale = age === null ? null : { age }) };
}

afterEach(() => {
  mockedRequest.mockReset();
});

describe('GpuModel: a stuck sampler on the server', () => {
  it('says how old the newest sample is and which call hangs, keeps the history, and recovers', async () => {
    const { history, api, model, setStale } = setup();
    await model.refresh();
    expect(model.state).toEqual({ kind: 'ok', backend: 'nvml' });

    setStale(12.4);
    await model.refresh(); // the samples answer says stale: the status is asked next
    await model.refresh();
    expect(model.state).toEqual({ kind: 'stale', sampleAgeS: 12.4, reason: HUNG });
    // The cards keep the last values, dimmed under the banner; the history goes on being asked for.
    expect(model.gpus).toHaveLength(2);
    expect(model.gpus[0].latest).not.toBeNull();
    const html = render(model);
    expect(html).toContain('aria-label="Stale: no new sample for 12 s"');
    expect(html).toContain(`<span class="jp-GpuWidgets-reason">${HUNG}</span>`);
    expect(html).toContain('jp-GpuWidgets-cards jp-mod-stale');
    const asked = api.callsTo('samples').length;

    setStale(13.4);
    await model.refresh();
    // While stale the status is asked at every tick: the age moves on, and so would a recovery.
    expect(model.state).toEqual({ kind: 'stale', sampleAgeS: 13.4, reason: HUNG });
    expect(api.callsTo('samples').length).toBe(asked + 1);

    setStale(null);
    history.addRun(2);
    await model.refresh();
    expect(model.state).toEqual({ kind: 'ok', backend: 'nvml' });
    expect(model.timeline.length).toBe(7);
    expect(render(model)).not.toContain('Stale');
  });

  it('reports a sampler stuck before its first sample', async () => {
    const { model, api } = setup();
    api.table.status = {
      body: () =>
        status({ status: 'stale', reason: `${HUNG} (opening the GPU backend)`, sample_age_s: null, device_count: 0 })
    };
    await model.refresh();
    expect(model.state).toEqual({ kind: 'stale', sampleAgeS: null, reason: `${HUNG} (opening the GPU backend)` });
    expect(render(model)).toContain('<h3 class="jp-GpuWidgets-messageTitle">Stale: no GPU sample yet</h3>');
  });
});

describe('staleTitle', () => {
  it('names the age the way people read it', () => {
    expect(staleTitle(12.4)).toBe('Stale: no new sample for 12 s');
    expect(staleTitle(600)).toBe('Stale: no new sample for 10 min');
    expect(staleTitle(null)).toBe('Stale: no GPU sample yet');
  });
});
