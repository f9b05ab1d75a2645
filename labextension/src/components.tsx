/**
 * The sidebar's React views: the state messages, one card per GPU (numbers, history charts,
 * throttle legend, processes, spec card on demand).
 *
 * Views only read the model; the one side effect, drawing a chart, happens in an effect.
 * Numbers carry ARIA roles (`meter` with `aria-valuenow`) so that tests and assistive
 * technology read the same values people see.
 */
import { notebookIcon } from '@jupyterlab/ui-components';
import * as React from 'react';

import { HistoryChart, IChartData } from './chart';
import {
  formatBandwidth,
  formatBytes,
  formatClock,
  formatDuration,
  formatGiB,
  formatNumber,
  metricReading,
  migText,
  NOT_AVAILABLE,
  staleTitle,
  unavailableReason
} from './format';
import { METRIC_SPECS } from './metrics';
import { GpuModel, IGpu } from './model';
import { IPalette } from './palette';
import {
  episodeKind,
  episodeReasons,
  IDeviceColumns,
  IEpisode,
  lostEpisodes,
  throttleEpisodes,
  throttleLabel
} from './series';
import {
  ENABLE_COMMAND,
  IAttributedProcess,
  IDeviceInfo,
  IDLE_REASON,
  MetricId,
  MonitorState,
  SIMULATED_HINT
} from './tokens';

/** What every view below needs from the sidebar widget. */
export interface IViewContext {
  model: GpuModel;
  metrics: readonly MetricId[];
  palette: IPalette;
  /** Open a file of the server's root in JupyterLab (a process's notebook). */
  openPath: (path: string) => void;
}

/** The whole sidebar body. */
export function SidebarView(props: IViewContext): JSX.Element {
  const { model } = props;
  const state = model.state;
  const status = model.status;
  const gpus = model.gpus;
  const stale = state.kind !== 'ok' && gpus.length > 0;
  const showCards = gpus.length > 0 && (state.kind === 'ok' || stale);
  return (
    <div className="jp-GpuWidgets-body">
      <header className="jp-GpuWidgets-header">
        <h2 className="jp-GpuWidgets-title">GPU Dashboard</h2>
        {status && (status.status === 'ok' || status.status === 'stale') && (
          <span className="jp-GpuWidgets-versions">
            {status.backend === 'simulated'
              ? 'simulated backend'
              : [
                  status.driver_version && `driver ${status.driver_version}`,
                  status.cuda_driver_version && `CUDA ${status.cuda_driver_version}`
                ]
                  .filter(Boolean)
                  .join(' · ')}
          </span>
        )}
      </header>
      {model.simulated && (
        <div className="jp-GpuWidgets-simulatedNote" role="note">
          <span className="jp-GpuWidgets-badge">SIMULATED</span> Made-up readings for demos and tests (
          <code>{SIMULATED_HINT}</code>), not real GPUs.
        </div>
      )}
      <StateMessage state={state} onRetry={() => void model.refresh()} />
      {showCards && (
        <div className={`jp-GpuWidgets-cards${stale ? ' jp-mod-stale' : ''}`}>
          {gpus.map(gpu => (
            <GpuCard key={gpu.index} gpu={gpu} ctx={props} />
          ))}
        </div>
      )}
    </div>
  );
}

/** What to say (and what to do) in every state but `ok`. */
export function StateMessage(props: { state: MonitorState; onRetry: () => void }): JSX.Element | null {
  const { state, onRetry } = props;
  const retry = (
    <button className="jp-GpuWidgets-button" onClick={onRetry}>
      Retry now
    </button>
  );
  switch (state.kind) {
    case 'ok':
      return null;
    case 'loading':
      return (
        <Message kind="info" title="Connecting to the GPU monitor…">
          Asking the gpu-widgets server extension for GPU readings.
        </Message>
      );
    case 'starting':
      return (
        <Message kind="info" title="The GPU sampler is starting…">
          {state.reason ?? 'The server is opening the GPU backend.'} Readings appear in a moment.
        </Message>
      );
    case 'stale':
      return (
        <Message kind="warn" title={staleTitle(state.sampleAgeS)}>
          <p>
            <span className="jp-GpuWidgets-reason">{state.reason ?? 'The server has no new GPU sample'}</span>.
          </p>
          <p>The numbers and charts below are from before then; they update again when the call returns.</p>
        </Message>
      );
    case 'no_gpu':
      return (
        <Message kind="warn" title="No NVIDIA GPU available">
          <p>
            NVML says: <q className="jp-GpuWidgets-reason">{state.reason ?? 'no reason given'}</q>
          </p>
          <p>
            gpu-widgets reads GPUs through the NVIDIA driver's NVML library (libnvidia-ml.so.1) on
            the machine that runs the Jupyter server. Install the NVIDIA driver there, or run the
            server where the GPUs are. For a demo without a GPU, start JupyterLab with{' '}
            <code>{SIMULATED_HINT}</code>.
          </p>
        </Message>
      );
    case 'extension_missing':
      return (
        <Message kind="error" title="The gpu-widgets server extension is not enabled">
          <p>The GPU readings come from a Jupyter server extension that this server did not load. Run:</p>
          <pre className="jp-GpuWidgets-command">
            <code>{ENABLE_COMMAND}</code>
          </pre>
          <p>and restart JupyterLab.</p>
        </Message>
      );
    case 'forbidden':
      return (
        <Message kind="error" title="The Jupyter server refused the request (403)">
          <p>{state.message}</p>
          <p>Your session may have expired: reload the page and log in again.</p>
        </Message>
      );
    case 'server_error':
      return (
        <Message kind="error" title="The gpu-widgets server extension reported an error">
          <p>
            {state.status !== null && `HTTP ${state.status}${state.code ? ` (${state.code})` : ''}: `}
            <span className="jp-GpuWidgets-reason">{state.message}</span>
          </p>
          <p>The Jupyter server's log has the details. Retrying automatically. {retry}</p>
        </Message>
      );
    case 'network':
      return (
        <Message kind="error" title="Cannot reach the Jupyter server">
          <p>{state.message}.</p>
          <p>
            Retrying automatically
            {state.retryInMs !== null && `, next try in about ${formatDuration(state.retryInMs / 1000)}`}
            ; the wait grows while the server does not answer. {retry}
          </p>
        </Message>
      );
  }
}

function Message(props: {
  kind: 'info' | 'warn' | 'error';
  title: string;
  children: React.ReactNode;
}): JSX.Element {
  return (
    <div
      className={`jp-GpuWidgets-message jp-mod-${props.kind}`}
      role={props.kind === 'error' ? 'alert' : 'status'}
      aria-label={props.title}
    >
      <h3 className="jp-GpuWidgets-messageTitle">{props.title}</h3>
      <div className="jp-GpuWidgets-messageBody">{props.children}</div>
    </div>
  );
}

/** One GPU. */
function GpuCard(props: { gpu: IGpu; ctx: IViewContext }): JSX.Element {
  const { gpu, ctx } = props;
  const { model } = ctx;
  const [showSpec, setShowSpec] = React.useState(false);
  // NVML may not tell the name (NotSupported): the card is then just "GPU <index>", and the
  // placeholder's tooltip gives the server's reason.
  const name = gpu.name ?? 'name not available';
  const nameWhy = gpu.name === null ? gpu.unavailable['name'] ?? gpu.info?.unavailable['name'] ?? null : null;
  const label = gpu.name === null ? `GPU ${gpu.index}` : `GPU ${gpu.index}: ${gpu.name}`;
  const specId = `jp-GpuWidgets-spec-${gpu.index}`;
  const tl = model.timeline;
  const cols = tl.devices.get(gpu.index) ?? null;
  const episodes: IEpisode[] = cols ? [...throttleEpisodes(tl.t, cols.throttle), ...lostEpisodes(tl.t, cols.lost)] : [];
  const latestT = tl.last;
  return (
    <section
      className={`jp-GpuWidgets-card${gpu.lost ? ' jp-mod-lost' : ''}`}
      role="region"
      aria-label={label}
      data-gpu-index={gpu.index}
      data-timestamp={gpu.latestTimestamp ?? undefined}
    >
      <header className="jp-GpuWidgets-cardHeader">
        <div className="jp-GpuWidgets-cardTitle">
          <span className="jp-GpuWidgets-gpuIndex">GPU {gpu.index}</span>
          {model.simulated && (
            <span
              className="jp-GpuWidgets-badge"
              title={`Simulated GPU: made-up readings (${SIMULATED_HINT})`}
            >
              SIMULATED
            </span>
          )}
          <button
            className="jp-GpuWidgets-button jp-GpuWidgets-specToggle"
            aria-expanded={showSpec}
            aria-controls={specId}
            onClick={() => setShowSpec(!showSpec)}
            title="Show or hide this GPU's specifications"
          >
            Specs
          </button>
        </div>
        <div
          className={`jp-GpuWidgets-gpuName${gpu.name === null ? ' jp-GpuWidgets-muted' : ''}`}
          title={[nameWhy ?? name, gpu.uuid].filter(Boolean).join('\n')}
        >
          {name}
        </div>
      </header>
      {gpu.lost && (
        <div className="jp-GpuWidgets-lost" role="alert">
          GPU lost — NVML stopped answering; it is retried automatically.
        </div>
      )}
      {showSpec && <SpecCard id={specId} index={gpu.index} info={gpu.info} />}
      <div className="jp-GpuWidgets-metrics">
        {ctx.metrics.map(metric => (
          <MetricRow
            key={metric}
            metric={metric}
            gpu={gpu}
            cols={cols}
            times={tl.t}
            episodes={episodes}
            ctx={ctx}
          />
        ))}
      </div>
      {ctx.metrics.length > 0 && (
        <div className="jp-GpuWidgets-timeAxis" aria-hidden="true">
          <span>−{formatDuration(model.historyWindowS)}</span>
          <span>{latestT !== null ? `updated ${formatClock(latestT)}` : ''}</span>
        </div>
      )}
      <Legend episodes={episodes} />
      <ProcessList gpu={gpu} openPath={ctx.openPath} />
    </section>
  );
}

/** One metric: its label, its number (a meter) and its history chart. */
function MetricRow(props: {
  metric: MetricId;
  gpu: IGpu;
  cols: IDeviceColumns | null;
  times: readonly number[];
  episodes: readonly IEpisode[];
  ctx: IViewContext;
}): JSX.Element {
  const { metric, gpu, cols, times, episodes, ctx } = props;
  const reading = metricReading(metric, gpu.latest);
  // A null value the server explains: say "n/a" and why (only while the GPU answers; a lost
  // GPU says so on its card).
  const reason = gpu.lost ? null : unavailableReason(metric, reading, gpu.unavailable);
  const text = reason !== null ? NOT_AVAILABLE : reading.text;
  const spec = METRIC_SPECS[metric];
  const labelId = `jp-GpuWidgets-${gpu.index}-${metric}`;
  const reasonId = `jp-GpuWidgets-${gpu.index}-${metric}-reason`;
  let data: IChartData | null = null;
  if (cols && times.length) {
    const [yMin, yMax] = spec.range(cols, gpu.info);
    const xMax = times[times.length - 1];
    data = {
      t: times,
      y: cols.values[spec.field],
      xMin: xMax - ctx.model.historyWindowS,
      xMax,
      yMin,
      yMax,
      episodes,
      format: spec.format,
      markersAt: i => {
        const out = (cols.throttle[i] ?? []).filter(r => r !== IDLE_REASON);
        return cols.lost[i] ? [...out, 'lost'] : out;
      }
    };
  }
  return (
    <div className={`jp-GpuWidgets-metric jp-GpuWidgets-metric-${metric}`}>
      <div className="jp-GpuWidgets-metricHead">
        <span className="jp-GpuWidgets-metricLabel" id={labelId} title={reading.help}>
          {reading.label}
        </span>
        <span
          className="jp-GpuWidgets-metricValue"
          role="meter"
          aria-labelledby={labelId}
          aria-valuenow={reading.value ?? undefined}
          aria-valuemin={0}
          aria-valuemax={reading.max ?? undefined}
          aria-valuetext={reason !== null ? `${text}: ${reason}` : text}
          aria-describedby={reason !== null ? reasonId : undefined}
          title={reason ?? undefined}
        >
          {text}
        </span>
      </div>
      {reason !== null && (
        <div className="jp-GpuWidgets-metricReason" id={reasonId} title={reason}>
          {reason}
        </div>
      )}
      <Chart data={data} palette={ctx.palette} label={reading.label} windowS={ctx.model.historyWindowS} />
    </div>
  );
}

/** A uPlot chart, created once per mount and fed new data on every render. */
function Chart(props: { data: IChartData | null; palette: IPalette; label: string; windowS: number }): JSX.Element {
  const { data, palette, label, windowS } = props;
  const host = React.useRef<HTMLDivElement>(null);
  const chart = React.useRef<HistoryChart | null>(null);

  React.useEffect(() => {
    const node = host.current!;
    const c = new HistoryChart(node, label);
    chart.current = c;
    const observer = new ResizeObserver(entries => {
      for (const entry of entries) {
        c.resize(entry.contentRect.width);
      }
    });
    observer.observe(node);
    return () => {
      observer.disconnect();
      c.dispose();
      chart.current = null;
    };
  }, [label]);

  React.useEffect(() => {
    chart.current?.setPalette(palette);
  }, [palette]);

  React.useEffect(() => {
    if (data) {
      chart.current?.update(data);
    }
  });

  return (
    <div
      className="jp-GpuWidgets-chart"
      ref={host}
      role="img"
      aria-label={`${label} over the last ${formatDuration(windowS)}`}
      data-points={data ? data.t.length : 0}
    />
  );
}

/** What the shaded bands mean; only reasons that occur in the window are listed. */
function Legend(props: { episodes: readonly IEpisode[] }): JSX.Element | null {
  const reasons = episodeReasons(props.episodes);
  if (!reasons.length) {
    return null;
  }
  const total = (reason: string): number =>
    props.episodes.filter(e => e.reason === reason).reduce((s, e) => s + (e.end - e.start), 0);
  return (
    <ul className="jp-GpuWidgets-legend" aria-label="Chart markers">
      {reasons.map(reason => (
        <li
          key={reason}
          className={`jp-GpuWidgets-legendItem jp-mod-${episodeKind(reason)}`}
          title={
            reason === 'lost'
              ? 'The GPU did not answer NVML here'
              : `Clocks held down (${reason}) for ${formatDuration(total(reason))} in this window`
          }
        >
          <span className="jp-GpuWidgets-swatch" aria-hidden="true" />
          {reason === 'lost' ? 'GPU lost' : `Throttled: ${throttleLabel(reason)}`}
        </li>
      ))}
    </ul>
  );
}

/** The processes on one GPU, with the notebook that owns each (click to open it). */
function ProcessList(props: { gpu: IGpu; openPath: (path: string) => void }): JSX.Element {
  const { gpu, openPath } = props;
  const procs = gpu.processes;
  let body: React.ReactNode;
  if (gpu.lost) {
    body = <p className="jp-GpuWidgets-muted">Not available while the GPU is lost.</p>;
  } else if (procs === null) {
    body = <p className="jp-GpuWidgets-muted">{gpu.processesUnavailable ?? 'Reading the process list…'}</p>;
  } else if (!procs.length) {
    body = <p className="jp-GpuWidgets-muted">No processes on this GPU.</p>;
  } else {
    body = (
      <ul className="jp-GpuWidgets-processList" aria-label={`Processes on GPU ${gpu.index}`}>
        {procs.map(p => (
          <ProcessItem key={p.pid} proc={p} openPath={openPath} />
        ))}
      </ul>
    );
  }
  return (
    <div className="jp-GpuWidgets-processes">
      <h4 className="jp-GpuWidgets-subtitle">
        Processes{procs && procs.length ? <span className="jp-GpuWidgets-count">{procs.length}</span> : null}
      </h4>
      {body}
    </div>
  );
}

/** A field the server did not give (another user's process): a short word, the reason on hover. */
function Hidden(props: { reason: string | undefined; long?: boolean }): JSX.Element {
  const reason = props.reason ?? 'not available';
  // "belongs to another user (hidden; set ... to show)" -> "belongs to another user"
  const short = props.long ? reason.split(' (')[0] : 'hidden';
  return (
    <span className="jp-GpuWidgets-hidden" title={reason}>
      {short}
    </span>
  );
}

function ProcessItem(props: { proc: IAttributedProcess; openPath: (path: string) => void }): JSX.Element {
  const { proc, openPath } = props;
  const u = proc.unavailable ?? {};
  const path = proc.notebook_path;
  return (
    <li className="jp-GpuWidgets-process" aria-label={`Process ${proc.pid}`}>
      <div className="jp-GpuWidgets-processMain">
        <span className="jp-GpuWidgets-pid" title="Process id">
          {proc.pid}
        </span>
        <span className="jp-GpuWidgets-user" title="User">
          {proc.user ?? <Hidden reason={u['user']} />}
        </span>
        <span className="jp-GpuWidgets-procMem" title="GPU memory used by this process">
          {proc.used_memory_bytes !== null ? formatBytes(proc.used_memory_bytes) : '—'}
        </span>
      </div>
      <div className="jp-GpuWidgets-procCommand" title={proc.command ?? u['command'] ?? undefined}>
        {proc.command ?? <Hidden reason={u['command']} long />}
      </div>
      {path && (
        <button
          className="jp-GpuWidgets-notebook"
          onClick={() => openPath(path)}
          title={`Open ${path} (kernel ${proc.kernel_id ?? 'unknown'})`}
          aria-label={`Open notebook ${path}`}
        >
          <notebookIcon.react tag="span" className="jp-GpuWidgets-notebookIcon" />
          <span className="jp-GpuWidgets-notebookPath">{path}</span>
        </button>
      )}
    </li>
  );
}

/** The spec card: the static facts of one GPU (`devices`). */
function SpecCard(props: { id: string; index: number; info: IDeviceInfo | null }): JSX.Element {
  const { id, index, info } = props;
  if (!info) {
    return (
      <div id={id} className="jp-GpuWidgets-spec jp-GpuWidgets-muted">
        Reading the specifications…
      </div>
    );
  }
  const u = info.unavailable ?? {};
  const na = (field: string): JSX.Element => (
    <span className="jp-GpuWidgets-muted" title={u[field] ?? 'not available'}>
      n/a
    </span>
  );
  const rows: [string, React.ReactNode][] = [
    ['Memory', info.memory_total_bytes !== null ? `${formatGiB(info.memory_total_bytes)} GiB` : na('memory_total_bytes')],
    [
      'Power limit',
      info.power_limit_w !== null
        ? `${formatNumber(info.power_limit_w)} W${
            info.power_default_limit_w !== null && info.power_default_limit_w !== info.power_limit_w
              ? ` (default ${formatNumber(info.power_default_limit_w)} W)`
              : ''
          }`
        : na('power_limit_w')
    ],
    ['Max SM clock', info.max_sm_clock_mhz !== null ? `${info.max_sm_clock_mhz} MHz` : na('max_sm_clock_mhz')],
    [
      'Max memory clock',
      info.max_memory_clock_mhz !== null ? `${info.max_memory_clock_mhz} MHz` : na('max_memory_clock_mhz')
    ],
    ['CUDA cores', info.cores !== null ? info.cores.toLocaleString('en-US') : na('cores')],
    ['Memory bus', info.memory_bus_width_bits !== null ? `${info.memory_bus_width_bits} bit` : na('memory_bus_width_bits')],
    [
      'Peak bandwidth',
      info.memory_bandwidth_bytes_per_s !== null
        ? formatBandwidth(info.memory_bandwidth_bytes_per_s)
        : na('memory_bandwidth_bytes_per_s')
    ],
    [
      'PCIe',
      info.pcie_max_generation !== null && info.pcie_max_width !== null
        ? `Gen ${info.pcie_max_generation} x${info.pcie_max_width}`
        : na('pcie_max_generation')
    ],
    ['Compute capability', info.compute_capability ?? na('compute_capability')],
    ['MIG mode', migText(info) ?? na('mig_mode')],
    ['UUID', info.uuid ?? na('uuid')]
  ];
  return (
    <dl id={id} className="jp-GpuWidgets-spec" aria-label={`Specifications of GPU ${index}`}>
      {rows.map(([k, v]) => (
        <React.Fragment key={k}>
          <dt>{k}</dt>
          <dd>{v}</dd>
        </React.Fragment>
      ))}
    </dl>
  );
}
