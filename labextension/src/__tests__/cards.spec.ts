/**
 * The GPU cards drawn from the server's metric catalogue: a metric the sidebar has never
 * heard of gets a row and a chart like the others, with the generic formatting.
 */
import * as React from 'react';

import { SidebarView } from '../cards/components';
import { GpuModel } from '../gpus/model';
import { FALLBACK_PALETTE } from '../charts/palette';
import { requestAPI } from '../api/request';
import { MetricChoice } from '../gpus/settings';
import { IMetricInfo } from '../api/tokens';
import { catalogueBody, devices, FakeHistory, metricInfo, MockApi, processes, status } from './utils';

jest.mock('../api/request', () => ({ requestAPI: jest.fn() }));
// The views' JupyterLab icon and chart library need a browser; the markup does not.
jest.mock('@jupyterlab/ui-components', () => ({ notebookIcon: { react: () => null } }));
jest.mock('uplot', () => ({}));
const { renderToStaticMarkup } = jest.requireActual('react-dom/server') as {
  renderToStaticMarkup: (element: React.ReactElement) => string;
};
const mockedRequest = requestAPI as jest.MockedFunction<typeof requestAPI>;

afterEach(() => {
  mockedRequest.mockReset();
});

/** A model that has read a server whose catalogue has `extra` metrics besides today's. */
async function modelWith(extra: IMetricInfo[]): Promise<GpuModel> {
  const history = new FakeHistory(1);
  history.addRun(5);
  const api = new MockApi({
    status: { body: () => status({ server_time: history.serverTime }) },
    metrics: { body: () => catalogueBody(extra) },
    devices: { body: () => devices(1) },
    samples: { body: history.samples },
    processes: { body: () => processes([[]]) }
  });
  mockedRequest.mockImplementation(api.handler as typeof requestAPI);
  const model = new GpuModel({ autoPoll: false, now: () => history.serverTime * 1000 });
  await model.refresh();
  return model;
}

function render(model: GpuModel, setting: unknown = undefined): string {
  const choice = new MetricChoice(() => undefined);
  choice.setting = setting;
  const metrics = choice.select(model.catalogue!.sidebar);
  return renderToStaticMarkup(
    React.createElement(SidebarView, { model, metrics, palette: FALLBACK_PALETTE, openPath: () => undefined })
  );
}

/** The rows of the (only) card: metric id -> its label, its text, and its chart's points. */
function rows(html: string): { [id: string]: { label: string; text: string; chart: string; points: number } } {
  const out: { [id: string]: { label: string; text: string; chart: string; points: number } } = {};
  const row = /data-metric="([^"]+)">(.*?)<\/div><\/div>(?=<div class="jp-GpuWidgets-metric |<\/div>)/g;
  for (const [, id, body] of html.matchAll(row)) {
    out[id] = {
      label: /class="jp-GpuWidgets-metricLabel"[^>]*>([^<]*)</.exec(body)![1],
      text: /role="meter"[^>]*>([^<]*)</.exec(body)![1],
      chart: /role="img" aria-label="([^"]*)"/.exec(body)![1],
      points: Number(/data-points="(\d+)"/.exec(body)![1])
    };
  }
  return out;
}

describe('GPU cards from the metric catalogue', () => {
  it('draws today\'s metrics with the catalogue\'s words, in its order', async () => {
    const r = rows(render(await modelWith([])));
    expect(Object.keys(r)).toEqual(['utilization', 'sm_active', 'tensor_active', 'memory', 'memory_controller', 'temperature', 'power']);
    expect(r.utilization).toEqual({ label: 'GPU busy', text: '50 %', chart: 'GPU busy over the last 10 min', points: 5 });
    expect(r.memory.text).toBe('37 / 141 GiB');
    expect(r.power.text).toBe('300 / 700 W');
  });

  it('shows a metric it has never heard of as a row and a chart, with the generic formatting', async () => {
    const clock = metricInfo('sm_clock', 'sm_clock_mhz', 'SM clock', 'GHz', { scale: 0.001, decimals: 2 });
    const model = await modelWith([clock]);
    const html = render(model);
    const r = rows(html);
    expect(Object.keys(r)).toEqual(['utilization', 'sm_active', 'tensor_active', 'memory', 'memory_controller', 'temperature', 'power', 'sm_clock']);
    expect(r.sm_clock).toEqual({ label: 'SM clock', text: '1.98 GHz', chart: 'SM clock over the last 10 min', points: 5 });
    expect(html).toContain('title="SM clock: what it means."'); // the help as the label's tooltip
    expect(html).toMatch(/role="meter" aria-labelledby="jp-GpuWidgets-0-sm_clock" aria-valuenow="1980"/);
    // The setting chooses among the catalogue's metrics, the made-up one included.
    expect(Object.keys(rows(render(model, ['sm_clock', 'power'])))).toEqual(['power', 'sm_clock']);
  });

  it('shows a metric whose field this server does not send as unknown', async () => {
    const model = await modelWith([metricInfo('future', 'not_sent_yet', 'Future thing', 'x')]);
    expect(rows(render(model)).future).toEqual({
      label: 'Future thing',
      text: '—',
      chart: 'Future thing over the last 10 min',
      points: 5
    });
  });
});
