/**
 * The Cluster view's model: one question at start decides whether the switch shows; details of
 * the open hosts (all of them for a few hosts); failures said in words.
 */
import { ClusterModel, EXPAND_ALL_UP_TO, RequestFn } from '../cluster/clusterModel';
import { hostDetail, hostRow, manyHosts, overview, pageOf } from './clusterData';
import { MockApi } from './utils';

function model(api: MockApi): ClusterModel {
  return new ClusterModel({ request: api.handler as RequestFn });
}

const twoHosts = overview([hostRow({ hostname: 'node-a', current: true }), hostRow({ hostname: 'node-b' })]);

/** `cluster` answers the overview, or a host's detail when asked with `?host=`. */
function clusterReply(body: unknown): MockApi['table'][string] {
  return { body: q => (q.host === undefined ? body : hostDetail(String(q.host))) };
}

describe('ClusterModel', () => {
  it('offers the switch when a Prometheus is configured, even one that cannot be reached', async () => {
    const api = new MockApi({ cluster: clusterReply(overview([], { status: 'unreachable', reason: 'connection refused' })) });
    const m = model(api);
    await m.probe();
    expect(m.offered).toBe(true);
    expect(m.overview?.reason).toBe('connection refused');
    // not visible: no polling, no details
    expect(api.calls).toEqual([{ endpoint: 'cluster', query: { sort: 'host', descending: 0, offset: 0, limit: 100 } }]);
    m.dispose();
  });

  it('does not offer it without a Prometheus, nor on a server without the endpoint', async () => {
    const off = model(new MockApi({ cluster: clusterReply({ status: 'not_configured', reason: null, host_columns: [], hosts: [] }) }));
    await off.probe();
    expect(off.offered).toBe(false);
    const old = model(new MockApi({ cluster: { status: 404 } }));
    await old.probe();
    expect(old.offered).toBe(false);
    expect(old.error).toMatch(/no cluster endpoint/);
  });

  it('asks again later when the first question got no answer at all', async () => {
    const api = new MockApi({ cluster: { network: true } });
    const m = new ClusterModel({ request: api.handler as RequestFn, probeRetryMs: 5 });
    await m.probe();
    expect(m.offered).toBe(false);
    api.table.cluster = clusterReply(twoHosts);
    for (let i = 0; i < 100 && !m.offered; i++) {
      await new Promise(r => setTimeout(r, 5));
    }
    expect(m.offered).toBe(true);
    expect(m.hosts.map(h => h.hostname)).toEqual(['node-a', 'node-b']);
    m.dispose();
  });

  it('opens every host of a small cluster and fetches their details', async () => {
    const api = new MockApi({ cluster: clusterReply(twoHosts) });
    const m = model(api);
    await m.probe();
    m.setVisible(true);
    await m.refresh();
    expect(m.openHosts).toEqual(['node-a', 'node-b']);
    expect(new Set(api.callsTo('cluster').map(c => c.query.host))).toEqual(new Set([undefined, 'node-a', 'node-b']));
    const a = m.detail('node-a');
    expect(a.kind === 'ok' && a.detail.gpus.length).toBe(2);
    m.toggleHost('node-a');
    expect(m.openHosts).toEqual(['node-b']);
    m.setVisible(false);
    m.dispose();
  });

  it('opens nothing by itself past a few hosts; a click opens one', async () => {
    const api = new MockApi({ cluster: clusterReply(overview(manyHosts(EXPAND_ALL_UP_TO + 1))) });
    const m = model(api);
    m.setVisible(true);
    await m.refresh();
    m.setVisible(false);
    expect(m.openHosts).toEqual([]);
    m.toggleHost('node-003');
    expect(m.openHosts).toEqual(['node-003']);
    expect(m.detail('node-003').kind).toBe('loading');
    await new Promise(r => setTimeout(r, 0));
    expect(m.detail('node-003').kind).toBe('ok');
    m.dispose();
  });

  it('says when a host is gone and when the answer is not an overview', async () => {
    const api = new MockApi({ cluster: clusterReply(twoHosts) });
    const m = model(api);
    m.setVisible(true);
    await m.refresh();
    m.setVisible(false);
    api.table.cluster = { status: 404, code: 'unknown_host', message: 'no host node-b' };
    m.toggleHost('node-a'); // closes node-a (both were open): node-b stays
    m.toggleHost('node-a'); // and opens it again: its detail is asked, and now fails
    await new Promise(r => setTimeout(r, 0));
    const a = m.detail('node-a');
    expect(a.kind === 'error' && a.message).toBe('Prometheus no longer knows node-a.');
    api.table.cluster = { body: () => ({ status: 'ok', host_columns: ['x'], hosts: [[1]] }) };
    await m.refresh();
    expect(m.error).toMatch(/could not be updated: not a cluster overview: "host_columns" has no "hostname"/);
    m.dispose();
  });

  it('asks the server for the page, filter and sort shown; a new filter starts at the first page', async () => {
    const rows = manyHosts(450);
    const api = new MockApi({ cluster: { body: q => (q.host === undefined ? pageOf(rows, q) : hostDetail(String(q.host))) } });
    const m = model(api);
    m.setVisible(true);
    await m.refresh();
    expect(m.hosts).toHaveLength(100);
    m.setQuery({ offset: 400 });
    await m.refresh();
    expect(m.hosts.map(h => h.hostname)).toEqual(rows.slice(400).map(r => r[0]));
    expect(m.overview?.matched_hosts).toBe(450);
    m.setQuery({ filter: 'node-44' });
    await m.refresh();
    expect(m.query.offset).toBe(0);
    expect(api.calls[api.calls.length - 1].query).toEqual({ filter: 'node-44', sort: 'host', descending: 0, offset: 0, limit: 100 });
    expect(m.hosts.map(h => h.hostname)).toEqual(Array.from({ length: 10 }, (_, i) => `node-44${i}`));
    m.setQuery({ sort: 'power', descending: true });
    await m.refresh();
    expect(api.calls[api.calls.length - 1].query).toMatchObject({ sort: 'power', descending: 1, filter: 'node-44' });
    const asked = api.calls.length;
    m.setQuery({ sort: 'power', descending: true }); // nothing new: nothing asked
    await m.refresh();
    expect(api.calls.length).toBe(asked + 1); // (the refresh itself)
    expect(() => m.setQuery({ sort: 'bogus' as never })).toThrow(/cannot sort the hosts by "bogus"/);
    m.setVisible(false);
    m.dispose();
  });

  it('never shows the answer to an older filter after a newer one was asked', async () => {
    const rows = manyHosts(300);
    let release: () => void = () => undefined;
    const api = new MockApi({
      cluster: {
        body: q => pageOf(rows, q)
      }
    });
    const slow = async (endpoint: string, query: { [name: string]: unknown } = {}): Promise<unknown> => {
      if (query.filter === 'node-1') {
        await new Promise<void>(r => (release = r)); // typing goes on while this travels
      }
      return api.handler(endpoint, query as never);
    };
    const m = new ClusterModel({ request: slow as RequestFn });
    m.setVisible(true);
    await m.refresh();
    m.setQuery({ filter: 'node-1' });
    await new Promise(r => setTimeout(r, 0));
    m.setQuery({ filter: 'node-29' });
    release();
    await m.refresh();
    expect(m.query.filter).toBe('node-29');
    expect(m.hosts.map(h => h.hostname)).toEqual(Array.from({ length: 10 }, (_, i) => `node-29${i}`));
    m.setVisible(false);
    m.dispose();
  });

  it('opens every host only when the whole cluster is small, not a filtered page of a large one', async () => {
    const rows = manyHosts(50);
    const api = new MockApi({ cluster: { body: q => (q.host === undefined ? pageOf(rows, q) : hostDetail(String(q.host))) } });
    const m = model(api);
    m.setQuery({ filter: 'node-001' });
    m.setVisible(true);
    await m.refresh();
    expect(m.hosts.map(h => h.hostname)).toEqual(['node-001']);
    expect(m.openHosts).toEqual([]);
    m.toggleHost('node-001'); // a click opens it
    expect(m.openHosts).toEqual(['node-001']);
    m.setVisible(false);
    m.dispose();
  });
});
