/**
 * The Cluster view rendered to HTML (React's server renderer: no DOM in these tests): 500 hosts
 * render without throwing, a page of 100 rows at a time; stale and current hosts are marked.
 */
import * as React from 'react';

import { IHostQuery } from '../cluster/cluster';
import { ClusterModel, HOST_PAGE, RequestFn } from '../cluster/clusterModel';
import { ClusterView } from '../cluster/clusterView';
import { FALLBACK_PALETTE } from '../charts/palette';
import { hostDetail, hostRow, manyHosts, overview, pageOf } from './clusterData';
import { MockApi } from './utils';

// react-dom (JupyterLab's) comes without its types here: the one function used.
const { renderToString } = require('react-dom/server') as { renderToString: (el: React.ReactElement) => string };

/** The query of a `GET cluster` (what the mocked server reads). */
type Q = { [name: string]: unknown };

async function rendered(
  body: unknown | ((q: Q) => unknown),
  detail: (host: string) => unknown = host => hostDetail(host),
  query: Partial<IHostQuery> = {}
): Promise<string> {
  const page = typeof body === 'function' ? (body as (q: Q) => unknown) : () => body;
  const api = new MockApi({ cluster: { body: q => (q.host ? detail(String(q.host)) : page(q)) } });
  const m = new ClusterModel({ request: api.handler as RequestFn });
  m.setQuery(query);
  m.setVisible(true);
  await m.refresh();
  m.setVisible(false);
  // The server renderer warns that layout effects (the render timing) do not run there.
  const errors = jest.spyOn(console, 'error').mockImplementation(() => undefined);
  let html: string;
  try {
    html = renderToString(React.createElement(ClusterView, { model: m, palette: FALLBACK_PALETTE }));
    const other = errors.mock.calls.filter(c => !String(c[0]).includes('useLayoutEffect does nothing on the server'));
    expect(other).toEqual([]);
  } finally {
    errors.mockRestore();
    m.dispose();
  }
  // Without the markers React puts between adjacent texts.
  return html.replace(/<!-- -->/g, '');
}

function count(html: string, pattern: RegExp): number {
  return (html.match(pattern) ?? []).length;
}

describe('ClusterView', () => {
  it('renders the first page of 500 hosts, with the next page as the way on', async () => {
    const rows = manyHosts(500);
    const html = await rendered((q: Q) => pageOf(rows, q));
    expect(count(html, /class="jp-GpuWidgets-hostRow[ "]/g)).toBe(HOST_PAGE);
    expect(html).toContain('Hosts 1–100 of 500');
    expect(html).toContain('Next 100 (400 more hosts)');
    expect(html).not.toContain('Previous');
    expect(html).toContain('500 hosts · 4000 GPUs');
    expect(html).toContain('aria-label="Filter hosts by name"');
  });

  it('renders the page asked for: the last one, from its first host, with the way back', async () => {
    const rows = manyHosts(450);
    const html = await rendered((q: Q) => pageOf(rows, q), undefined, { offset: 400 });
    expect(count(html, /class="jp-GpuWidgets-hostRow[ "]/g)).toBe(50);
    expect(html).toContain('data-host="node-400"');
    expect(html).not.toContain('data-host="node-399"');
    expect(html).toContain('Hosts 401–450 of 450');
    expect(html).toContain('Previous 100');
    expect(html).not.toContain('Next');
  });

  it('keeps the filter box and the totals when no host matches the filter', async () => {
    const rows = manyHosts(300);
    const html = await rendered((q: Q) => pageOf(rows, q), undefined, { filter: 'zzz' });
    expect(html).toContain('No host matches the filter.');
    expect(html).toContain('aria-label="Filter hosts by name"');
    expect(html).toContain('value="zzz"');
    expect(html).toContain('300 hosts · 2400 GPUs');
    expect(html).not.toContain('Pages of hosts');
  });

  it('marks the current host and greys stale ones with how long they are silent', async () => {
    const html = await rendered(
      overview([
        hostRow({ hostname: 'node-a', current: true }),
        hostRow({ hostname: 'node-b', stale: true, age_s: 45 })
      ])
    );
    expect(html).toMatch(/data-host="node-a"[^>]*class="[^"]*jp-mod-current/);
    expect(html).toContain('this server');
    expect(html).toMatch(/data-host="node-b" data-stale="true" class="[^"]*jp-mod-stale/);
    expect(html).toContain('no data for 45 s');
    // Two hosts: both open at a glance, a line per GPU.
    expect(count(html, /class="jp-GpuWidgets-clusterGpu"/g)).toBe(4);
    expect(html).toContain('1.8 kW');
    expect(html).not.toContain('Filter hosts'); // two hosts need no filter
  });

  it('marks a simulated host with the SIMULATED badge and its GPUs as simulated, and counts it', async () => {
    const html = await rendered(
      overview(
        [hostRow({ hostname: 'node-a', simulated: true }), hostRow({ hostname: 'node-b' })],
        { totals: { hosts: 2, gpus: 16, stale_hosts: 0, busy_gpus: 6, free_gpus: 10, simulated_hosts: 1 } }
      ),
      host => hostDetail(host, 2, { simulated: host === 'node-a' })
    );
    const row = (name: string): string => html.match(new RegExp(`data-host="${name}"[\\s\\S]*?</div>`))![0];
    expect(row('node-a')).toMatch(/class="jp-GpuWidgets-badge"[^>]*>SIMULATED<\/span> made-up readings/);
    expect(row('node-b')).not.toContain('SIMULATED');
    expect(html).toContain('2 hosts · 16 GPUs · 6 busy · 10 free · 1 simulated');
    // The detail's GPU lines keep the word the short model name drops.
    const detail = (name: string): string => html.match(new RegExp(`aria-label="GPUs of ${name}"[\\s\\S]*?</ul>`))![0];
    expect(count(detail('node-a'), /Simulated H100 80GB HBM3/g)).toBe(2);
    expect(detail('node-b')).not.toContain('Simulated');
    expect(count(detail('node-b'), />H100 80GB HBM3</g)).toBe(2);
  });

  it('says how many hosts no page can list, beside totals over every host', async () => {
    const unlisted_reason = 'Not listed: 2 hosts with an unusable name (empty, over 1024 characters, or not Unicode text)';
    const rows = manyHosts(500);
    const html = await rendered((q: Q) =>
      pageOf(rows, q, {
        totals: { hosts: 502, gpus: 4016, stale_hosts: 0, busy_gpus: 1, free_gpus: 2, simulated_hosts: 0 },
        unlisted_hosts: 2,
        unlisted_reason
      })
    );
    expect(html).toContain('502 hosts · 4016 GPUs');
    expect(html).toContain(`aria-label="Hosts not listed">${unlisted_reason}.</p>`);
    expect(count(html, /class="jp-GpuWidgets-hostRow[ "]/g)).toBe(HOST_PAGE);
  });

  it('lists every host of an older server that sends no unlisted count', async () => {
    const html = await rendered(overview(manyHosts(5)));
    expect(html).not.toContain('Hosts not listed');
  });

  it('says why Prometheus cannot be read', async () => {
    const reason = 'Prometheus at http://127.0.0.1:9090 cannot be reached: connection refused';
    const html = await rendered(overview([], { status: 'unreachable', reason }));
    expect(html).toContain('role="alert"');
    expect(html).toContain(`${reason}.`);
    expect(html).toContain('This machine');
  });
});
