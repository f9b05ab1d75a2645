/**
 * The sidebar's React views: the panel and one card per GPU (numbers, history charts, throttle
 * legend). The state messages are in stateMessage.tsx, processes and the spec card in cardDetails.tsx.
 *
 * Views only read the model; the one side effect, drawing a chart, happens in an effect.
 * Numbers carry ARIA roles (`meter` with `aria-valuenow`) so that tests and assistive
 * technology read the same values people see.
 */
import * as React from 'react';

import { HistoryChart, IChartData } from './chart';
import {
  formatClock,
  formatDuration,
  metricReading,
  NOT_AVAILABLE,
  unavailableReason
} from './format';
import { METRIC_SPECS } from './metrics';
import { IGpu } from './gpus';
import { GpuModel } from './model';
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
import { IDLE_REASON, MetricId, SIMULATED_HINT } from './tokens';

import { ProcessList, SpecCard } from './cardDetails';
import { StateMessage } from './stateMessage';

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
