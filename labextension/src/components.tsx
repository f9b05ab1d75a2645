/**
 * The sidebar's React views: the panel and one card per GPU (numbers, history charts, throttle
 * legend). The state messages are in stateMessage.tsx, processes and the spec card in cardDetails.tsx.
 *
 * Views only read the model; the one side effect, drawing a chart, happens in an effect.
 * Numbers carry ARIA roles (`meter` with `aria-valuenow`) so that tests and assistive
 * technology read the same values people see.
 */
import * as React from 'react';

import { Catalogue } from './catalogue';
import { HistoryChart, IChartData } from './chart';
import { formatClock, formatDuration } from './format';
import { chartRange, formatValue, metricReading, NOT_AVAILABLE, unavailableReason } from './metrics';
import { IGpu } from './gpus';
import { GpuModel } from './model';
import { IPalette } from './palette';
import { episodeReasons, IDeviceColumns, IEpisode, lostEpisodes, throttleEpisodes } from './series';
import { IDLE_REASON, IMetricInfo, SIMULATED_HINT } from './tokens';

import { ProcessList, SpecCard } from './cardDetails';
import { StateMessage } from './stateMessage';

/** What every view below needs from the sidebar widget. */
export interface IViewContext {
  model: GpuModel;
  /** The metrics each card shows, in display order (the catalogue's, narrowed by the settings). */
  metrics: readonly IMetricInfo[];
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
  const catalogue = model.catalogue;
  // The catalogue is read before the first samples: no GPU is known without it.
  const showCards = catalogue !== null && gpus.length > 0 && (state.kind === 'ok' || stale);
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
            <GpuCard key={gpu.index} gpu={gpu} catalogue={catalogue!} ctx={props} />
          ))}
        </div>
      )}
    </div>
  );
}

/** One GPU: its name, a row and a chart per metric, the throttle legend and its processes. */
function GpuCard(props: { gpu: IGpu; catalogue: Catalogue; ctx: IViewContext }): JSX.Element {
  const { gpu, catalogue, ctx } = props;
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
  const order = (reason: string): number => catalogue.reasonOrder(reason);
  const episodes: IEpisode[] = cols ? [...throttleEpisodes(tl.t, cols.throttle, order), ...lostEpisodes(tl.t, cols.lost)] : [];
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
            key={metric.id}
            metric={metric}
            catalogue={catalogue}
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
      <Legend episodes={episodes} catalogue={catalogue} />
      <ProcessList gpu={gpu} openPath={ctx.openPath} />
    </section>
  );
}

/** One metric: its label, its number (a meter) and its history chart. */
function MetricRow(props: {
  metric: IMetricInfo;
  catalogue: Catalogue;
  gpu: IGpu;
  cols: IDeviceColumns | null;
  times: readonly number[];
  episodes: readonly IEpisode[];
  ctx: IViewContext;
}): JSX.Element {
  const { metric, catalogue, gpu, cols, times, episodes, ctx } = props;
  const reading = metricReading(metric, gpu.latest);
  // A null value the server explains: say "n/a" and why (only while the GPU answers; a lost
  // GPU says so on its card).
  const reason = gpu.lost ? null : unavailableReason(metric, reading, gpu.unavailable);
  const text = reason !== null ? NOT_AVAILABLE : reading.text;
  const labelId = `jp-GpuWidgets-${gpu.index}-${metric.id}`;
  const reasonId = `jp-GpuWidgets-${gpu.index}-${metric.id}-reason`;
  let data: IChartData | null = null;
  if (cols && times.length) {
    const [yMin, yMax] = chartRange(metric, cols, gpu.info);
    const xMax = times[times.length - 1];
    data = {
      t: times,
      // A field this server does not send is drawn as "no reading" throughout.
      y: cols.values[metric.field] ?? times.map(() => null),
      xMin: xMax - ctx.model.historyWindowS,
      xMax,
      yMin,
      yMax,
      episodes,
      format: v => formatValue(metric, v),
      markersAt: i => {
        const out = (cols.throttle[i] ?? []).filter(r => r !== IDLE_REASON);
        return (cols.lost[i] ? [...out, 'lost'] : out).map(r => catalogue.throttleLabel(r));
      },
      kindOf: reason => catalogue.episodeKind(reason)
    };
  }
  return (
    <div className={`jp-GpuWidgets-metric jp-GpuWidgets-metric-${metric.id}`} data-metric={metric.id}>
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
function Legend(props: { episodes: readonly IEpisode[]; catalogue: Catalogue }): JSX.Element | null {
  const { catalogue } = props;
  const reasons = episodeReasons(props.episodes, reason => catalogue.reasonOrder(reason));
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
          className={`jp-GpuWidgets-legendItem jp-mod-${catalogue.episodeKind(reason)}`}
          title={
            reason === 'lost'
              ? 'The GPU did not answer NVML here'
              : `Clocks held down (${reason}) for ${formatDuration(total(reason))} in this window`
          }
        >
          <span className="jp-GpuWidgets-swatch" aria-hidden="true" />
          {reason === 'lost' ? 'GPU lost' : `Throttled: ${catalogue.throttleLabel(reason)}`}
        </li>
      ))}
    </ul>
  );
}
