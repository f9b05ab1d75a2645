/**
 * The sidebar's Cluster view: the "This machine | Cluster" switch, a totals line, and a host
 * table that fits the panel (sortable, filterable, a page of 100 rows at a time: the server
 * filters, sorts and pages, so every host can be found); a click on a host opens its GPUs
 * (clusterHost.tsx). The rows' numbers come from cluster.ts.
 *
 * The view records how long each render with data takes (`performance.measure`, name
 * CLUSTER_RENDER_MEASURE) so the scale benchmark can read it from Chromium.
 */
import * as React from 'react';

import { CLUSTER_BUSY_PERCENT, CLUSTER_FREE_MEMORY_FRACTION, METRIC } from '../api/catalogue.generated';
import {
  busyFill,
  formatMemory,
  formatPercent,
  formatPower,
  formatTemperature,
  HostFilter,
  HostSortKey,
  IClusterHost,
  pageText,
  problemText,
  staleText,
  totalsText
} from './cluster';
import { HostDetail } from './clusterHost';
import { ClusterModel, HOST_PAGE } from './clusterModel';
import { formatClock } from '../ui/format';
import { IPalette } from '../charts/palette';
import { ISort, ISortColumn, nextSort, SortHeader } from '../ui/sortHeader';
import { SIMULATED_HINT } from '../api/tokens';

/** Which view the GPU panel shows. */
export type PanelView = 'local' | 'cluster';

/** Typing in the filter box asks the server once it pauses this long. */
export const FILTER_DEBOUNCE_MS = 300;

/** The filter box takes no more than a host name's characters (the server's limit). */
const MAX_FILTER_CHARS = 1024;

/** From this many hosts on, the table offers the filter box and the busy/free/stale choice. */
export const HOST_FILTER_FROM = 4;

/** performance.measure names: React's render and commit; and up to the next frame (painted). */
export const CLUSTER_RENDER_MEASURE = 'gpu-widgets:cluster-render';
export const CLUSTER_PAINT_MEASURE = 'gpu-widgets:cluster-paint';

/** The switch at the top of the GPU panel (shown when the server has a Prometheus). */
export function ViewSwitch(props: { view: PanelView; onChange: (view: PanelView) => void }): JSX.Element {
  const tab = (view: PanelView, label: string): JSX.Element => (
    <button
      role="tab"
      aria-selected={props.view === view}
      className={`jp-GpuWidgets-viewTab${props.view === view ? ' jp-mod-active' : ''}`}
      onClick={() => props.onChange(view)}
    >
      {label}
    </button>
  );
  return (
    <div className="jp-GpuWidgets-viewSwitch" role="tablist" aria-label="GPUs of">
      {tab('local', 'This machine')}
      {tab('cluster', 'Cluster')}
    </div>
  );
}

const MEMORY_UNIT = METRIC.memory.unit;

const HEAD_MAIN: readonly ISortColumn<HostSortKey>[] = [
  { key: 'host', label: 'Host', title: 'Sort by host name' },
  { key: 'gpus', label: 'GPUs', title: 'Sort by number of GPUs' },
  { key: 'busy', label: 'Busy', title: `Sort by busy GPUs (utilization of ${CLUSTER_BUSY_PERCENT} % or more)` },
  {
    key: 'free',
    label: 'Free',
    title: `Sort by free GPUs (utilization under ${CLUSTER_BUSY_PERCENT} % and memory under ${CLUSTER_FREE_MEMORY_FRACTION * 100} %)`
  },
  { key: 'utilization', label: 'Util', title: 'Sort by mean GPU utilization' }
];
const HEAD_SUB: readonly ISortColumn<HostSortKey>[] = [
  { key: 'utilMax', label: 'max', title: 'Sort by the busiest GPU’s utilization' },
  { key: 'memory', label: `mem ${MEMORY_UNIT}`, title: `Sort by GPU memory used (${MEMORY_UNIT} used / total)` },
  { key: 'temperature', label: 'temp', title: 'Sort by the hottest GPU' },
  { key: 'power', label: 'power', title: 'Sort by power draw' }
];

export function ClusterView(props: { model: ClusterModel; palette: IPalette }): JSX.Element {
  const { model, palette } = props;
  const overview = model.overview;
  const query = model.query;
  const sort: ISort<HostSortKey> = { key: query.sort, descending: query.descending };
  // The box shows what is typed at once; the server is asked when typing pauses.
  const [text, setText] = React.useState(query.filter);
  React.useEffect(() => {
    const timer = setTimeout(() => model.setQuery({ filter: text }), FILTER_DEBOUNCE_MS);
    return () => clearTimeout(timer);
  }, [model, text]);
  const started = React.useRef(0);
  started.current = performance.now();
  const shown = model.hosts;
  const all = overview?.totals.hosts ?? shown.length;
  const matched = overview?.matched_hosts ?? shown.length;
  const offset = overview?.offset ?? 0;
  const after = Math.max(0, matched - offset - shown.length);
  const open = model.openHosts;
  const toggle = React.useCallback((hostname: string) => model.toggleHost(hostname), [model]);
  React.useLayoutEffect(() => {
    // Only renders with hosts count: the benchmark times the table, not the empty states.
    if (!shown.length) {
      return;
    }
    const start = started.current;
    const detail = { hosts: all, rows: shown.length, queriedAt: overview?.queried_at ?? null };
    performance.measure(CLUSTER_RENDER_MEASURE, { start, end: performance.now(), detail });
    requestAnimationFrame(() => {
      setTimeout(() => performance.measure(CLUSTER_PAINT_MEASURE, { start, end: performance.now(), detail }), 0);
    });
  });
  const clickHeader = (key: HostSortKey): void => {
    const next = nextSort(sort, key, 'host');
    model.setQuery({ sort: next.key, descending: next.descending });
  };
  const problem = overview ? problemText(overview.status, overview.reason, overview.prometheus_url) : null;
  return (
    <div className="jp-GpuWidgets-body jp-GpuWidgets-cluster" aria-label="GPU cluster" role="region">
      <header className="jp-GpuWidgets-header">
        <h2 className="jp-GpuWidgets-title">GPU Cluster</h2>
        {overview?.queried_at && (
          <span className="jp-GpuWidgets-versions" title={overview.prometheus_url ?? undefined}>
            from Prometheus, {formatClock(overview.queried_at)}
          </span>
        )}
      </header>
      {!overview && !model.error && <p className="jp-GpuWidgets-muted">Asking Prometheus for the cluster’s GPUs…</p>}
      {(problem || model.error) && (
        <div className="jp-GpuWidgets-message jp-mod-error" role="alert" aria-label="The cluster cannot be shown">
          <h3 className="jp-GpuWidgets-messageTitle">
            {problem ? 'Prometheus is not answering' : 'The cluster view could not be updated'}
          </h3>
          <div className="jp-GpuWidgets-messageBody">
            <p className="jp-GpuWidgets-reason">{model.error ?? problem}</p>
            <p>
              “This machine” still shows this server’s GPUs. Retrying every few seconds.{' '}
              <button className="jp-GpuWidgets-button" onClick={() => void model.refresh()}>
                Retry now
              </button>
            </p>
          </div>
        </div>
      )}
      {overview && (all > 0 || overview.status === 'ok') && (
        <p className="jp-GpuWidgets-clusterTotals" role="status" aria-label="Cluster totals">
          {totalsText(overview.totals)}
        </p>
      )}
      {overview?.unlisted_reason && (
        // Hosts no page can list (unusable names); the totals above still count them.
        <p className="jp-GpuWidgets-muted jp-GpuWidgets-unlisted" aria-label="Hosts not listed">
          {overview.unlisted_reason}.
        </p>
      )}
      {overview?.status === 'ok' && !all && (
        <p className="jp-GpuWidgets-muted">Prometheus has no GPU metrics (DCGM_FI_DEV_*) from any host yet.</p>
      )}
      {all > 0 && (
        <section className="jp-GpuWidgets-hosts" aria-label="Hosts">
          {all >= HOST_FILTER_FROM && (
            <div className="jp-GpuWidgets-overviewTools">
              <input
                className="jp-GpuWidgets-filter"
                type="search"
                value={text}
                placeholder="Filter: host name"
                aria-label="Filter hosts by name"
                maxLength={MAX_FILTER_CHARS}
                onChange={e => setText(e.target.value)}
              />
              <select
                className="jp-GpuWidgets-activity"
                value={query.activity}
                aria-label="Show busy, free or stale hosts"
                onChange={e => model.setQuery({ activity: e.target.value as HostFilter })}
              >
                <option value="all">All</option>
                <option value="busy">With busy GPUs</option>
                <option value="free">With free GPUs</option>
                <option value="stale">Stale</option>
              </select>
            </div>
          )}
          <div className="jp-GpuWidgets-hostGrid" role="grid" aria-label="Hosts" aria-rowcount={matched + 1}>
            <div className="jp-GpuWidgets-hostHead" role="row">
              {HEAD_MAIN.map(c => (
                <SortHeader key={c.key} column={c} sort={sort} className={`jp-GpuWidgets-h-${c.key}`} onClick={clickHeader} />
              ))}
              <span className="jp-GpuWidgets-hostHeadSub">
                <span />
                {HEAD_SUB.map(c => (
                  <SortHeader key={c.key} column={c} sort={sort} className={`jp-GpuWidgets-h-${c.key}`} onClick={clickHeader} />
                ))}
              </span>
            </div>
            <div className="jp-GpuWidgets-hostRows" role="rowgroup">
              {shown.map(host => (
                <React.Fragment key={host.hostname}>
                  <HostRow host={host} open={open.includes(host.hostname)} onToggle={toggle} />
                  {open.includes(host.hostname) && (
                    <div role="row" className="jp-GpuWidgets-hostDetailRow">
                      <div role="gridcell">
                        <HostDetail
                          hostname={host.hostname}
                          state={model.detail(host.hostname)}
                          endS={overview?.queried_at ?? null}
                          palette={palette}
                        />
                      </div>
                    </div>
                  )}
                </React.Fragment>
              ))}
            </div>
          </div>
          {!shown.length && <p className="jp-GpuWidgets-muted">No host matches the filter.</p>}
          {(offset > 0 || after > 0) && shown.length > 0 && (
            // Pages of the hosts that match: the server sends one page per refresh.
            <nav className="jp-GpuWidgets-hostPages" aria-label="Pages of hosts">
              <span role="status" aria-label="Hosts shown">
                {pageText(offset, shown.length, matched)}
              </span>
              {offset > 0 && (
                <button
                  className="jp-GpuWidgets-button"
                  onClick={() => model.setQuery({ offset: Math.max(0, offset - HOST_PAGE) })}
                >
                  Previous {HOST_PAGE}
                </button>
              )}
              {after > 0 && (
                <button
                  className="jp-GpuWidgets-button jp-GpuWidgets-nextPage"
                  onClick={() => model.setQuery({ offset: offset + shown.length })}
                >
                  Next {Math.min(HOST_PAGE, after)} ({after} more {after === 1 ? 'host' : 'hosts'})
                </button>
              )}
            </nav>
          )}
        </section>
      )}
    </div>
  );
}

/** The local sidebar's mark of simulated GPUs, on a host whose export says its GPUs are simulated. */
export function SimulatedBadge(): JSX.Element {
  return (
    <span className="jp-GpuWidgets-badge" title={`Simulated GPUs: made-up readings (${SIMULATED_HINT} on that host)`}>
      SIMULATED
    </span>
  );
}

/** One host: name, GPU counts and mean utilization; below, the max, memory, heat and power. */
const HostRow = React.memo(function HostRow(props: {
  host: IClusterHost;
  open: boolean;
  onToggle: (hostname: string) => void;
}): JSX.Element {
  const { host, open } = props;
  const onToggle = (): void => props.onToggle(host.hostname);
  const count = (n: number | null): string => (n === null || host.stale ? '—' : String(n));
  const fill = host.stale || host.utilMean === null ? null : busyFill(host.utilMean);
  const classes = ['jp-GpuWidgets-hostRow', 'jp-GpuWidgets-clickRow', open ? 'jp-mod-open' : '', host.stale ? 'jp-mod-stale' : '', host.current ? 'jp-mod-current' : ''];
  return (
    <div
      role="row"
      tabIndex={0}
      aria-label={host.hostname}
      aria-expanded={open}
      data-host={host.hostname}
      data-stale={host.stale}
      className={classes.filter(Boolean).join(' ')}
      title={`${open ? 'Hide' : 'Show'} the GPUs of ${host.hostname}`}
      onClick={onToggle}
      onKeyDown={e => {
        if (e.key === 'Enter' || e.key === ' ') {
          e.preventDefault();
          onToggle();
        }
      }}
    >
      <span role="rowheader" className="jp-GpuWidgets-h-host" title={host.hostname}>
        {host.hostname}
      </span>
      <span role="gridcell" className="jp-GpuWidgets-h-gpus">
        {host.gpuCount ?? '—'}
      </span>
      <span role="gridcell" className="jp-GpuWidgets-h-busy">
        {count(host.busyGpus)}
      </span>
      <span role="gridcell" className="jp-GpuWidgets-h-free">
        {count(host.freeGpus)}
      </span>
      <span role="gridcell" className="jp-GpuWidgets-h-utilization" title="Mean GPU utilization">
        {host.stale ? '—' : formatPercent(host.utilMean)}
        {fill !== null && <span className="jp-GpuWidgets-ovBar" style={{ width: `${Math.round(fill * 100)}%` }} aria-hidden="true" />}
      </span>
      <span role="gridcell" className="jp-GpuWidgets-hostSub">
        {/* On the second line: the host's name keeps the whole first one. */}
        <span className="jp-GpuWidgets-hostMark">
          {host.current && <span className="jp-GpuWidgets-thisServer">this server</span>}
        </span>
        {host.stale ? (
          <span className="jp-GpuWidgets-staleNote" title="Prometheus has no recent sample from this host">
            {staleText(host.ageS)}
          </span>
        ) : (
          <>
            <span title="The busiest GPU's utilization">{formatPercent(host.utilMax)}</span>
            <span title={`GPU memory used / total (${MEMORY_UNIT})`}>{formatMemory(host.memUsedGiB, host.memTotalGiB, false)}</span>
            <span title="The hottest GPU">{formatTemperature(host.tempMaxC)}</span>
            <span title="Power draw of all GPUs">{formatPower(host.powerW)}</span>
          </>
        )}
      </span>
      {host.simulated && (
        // A line of its own: beside the name or "this server" it would cut them in a narrow panel.
        <span role="gridcell" className="jp-GpuWidgets-hostSim">
          <SimulatedBadge /> made-up readings
        </span>
      )}
    </div>
  );
});
