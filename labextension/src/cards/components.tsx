/**
 * The sidebar's React views: the panel and one card per GPU (numbers, history charts, throttle
 * legend). The state messages are in stateMessage.tsx, a card's rows in metricRow.tsx, its
 * processes, MIG instances and spec card in cardDetails.tsx.
 *
 * Views only read the model; the one side effect, drawing a chart, happens in an effect.
 * Numbers carry ARIA roles (`meter` with `aria-valuenow`) so that tests and assistive
 * technology read the same values people see.
 */
import * as React from 'react';

import { cardMetrics } from '../gpus/activity';
import { Catalogue } from '../api/catalogue';
import { formatClock, formatDuration } from '../ui/format';
import { IGpu } from '../gpus/gpus';
import { GpuModel } from '../gpus/model';
import { IPalette } from '../charts/palette';
import { episodeReasons, IEpisode, lostEpisodes, throttleEpisodes } from '../gpus/series';
import { IMetricInfo, SIMULATED_HINT } from '../api/tokens';

import { MigList, ProcessList, SpecCard } from './cardDetails';
import { CopyFreeGpus } from './freeGpus';
import { IKernelActions } from '../processes/processActions';
import { MetricRow } from './metricRow';
import { StateMessage } from './stateMessage';
import { Overview } from './overviewTable';
import { timeSpan } from '../charts/axes';

/** What every view below needs from the sidebar widget. */
export interface IViewContext {
  model: GpuModel;
  /** The metrics each card shows, in display order (the catalogue's, narrowed by the settings). */
  metrics: readonly IMetricInfo[];
  palette: IPalette;
  /** Open a file of the server's root in JupyterLab (a process's notebook). */
  openPath: (path: string) => void;
  /** Interrupt, restart or shut down a kernel from its process rows (absent: no buttons). */
  kernelActions?: IKernelActions | null;
  /** Put text on the clipboard (absent: no copy button). */
  copy?: ((text: string) => void) | null;
  /** A GPU to show (an alert's "Show GPU"); `seq` tells two requests for the same GPU apart. */
  focus?: { index: number; seq: number } | null;
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
  const [picked, setPicked] = React.useState<readonly number[]>([]);
  const [scrollTo, setScrollTo] = React.useState<number | null>(null);
  const cardsRef = React.useRef<HTMLDivElement>(null);
  const shown = shownCards(gpus, picked);
  const select = (index: number, add: boolean): void => {
    const now = shown.map(g => g.index);
    setPicked(add ? (now.includes(index) ? now.filter(i => i !== index) : [...now, index]) : [index]);
    setScrollTo(index);
  };
  const focus = props.focus;
  React.useEffect(() => {
    if (focus) {
      setPicked([focus.index]);
      setScrollTo(focus.index);
    }
  }, [focus?.seq]);
  React.useEffect(() => {
    // After the click's render: bring the card into view.
    if (scrollTo !== null) {
      cardsRef.current?.querySelector(`[data-gpu-index="${scrollTo}"]`)?.scrollIntoView({ block: 'nearest' });
      setScrollTo(null);
    }
  }, [scrollTo]);
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
        {props.copy && showCards && <CopyFreeGpus gpus={gpus} copy={props.copy} />}
      </header>
      {model.simulated && (
        <div className="jp-GpuWidgets-simulatedNote" role="note">
          <span className="jp-GpuWidgets-badge">SIMULATED</span> Made-up readings for demos and tests, not real
          GPUs: <SimulatedHint />
        </div>
      )}
      <StateMessage state={state} onRetry={() => void model.refresh()} />
      {showCards && gpus.length > 1 && (
        <Overview
          gpus={gpus}
          metrics={catalogue!.metrics}
          // Marked only when the cards are a choice (with every card shown, none is chosen).
          selected={shown.length < gpus.length ? shown.map(g => g.index) : []}
          onSelect={select}
          simulated={model.simulated}
        />
      )}
      {showCards && (
        <div className={`jp-GpuWidgets-cards${stale ? ' jp-mod-stale' : ''}`} ref={cardsRef}>
          {shown.length < gpus.length && (
            <p className="jp-GpuWidgets-muted jp-GpuWidgets-cardsHint">
              {shown.length === 1 ? 'The card of one GPU' : `The cards of ${shown.length} GPUs`} of {gpus.length}: click
              a row above for another, Ctrl-click for several.
            </p>
          )}
          {shown.map(gpu => (
            <GpuCard key={gpu.index} gpu={gpu} catalogue={catalogue!} ctx={props} />
          ))}
        </div>
      )}
    </div>
  );
}

/** `GPU_WIDGETS_BACKEND=simulated`, which may break after the `=` only (never mid-name). */
function SimulatedHint(): JSX.Element {
  const [name, value] = SIMULATED_HINT.split('=');
  return (
    <code className="jp-GpuWidgets-hint">
      <span>{name}=</span>
      <wbr />
      <span>{value}</span>
    </code>
  );
}

/**
 * Up to this many GPUs every card is shown; past it only the cards picked in the overview
 * (the first GPU's until one is picked), so eight or 64 GPUs do not make the panel screens long.
 */
export const ALL_CARDS_UP_TO = 2;

/** The cards to show, in index order. */
function shownCards(gpus: readonly IGpu[], picked: readonly number[]): readonly IGpu[] {
  if (gpus.length <= ALL_CARDS_UP_TO) {
    return gpus;
  }
  const chosen = gpus.filter(g => picked.includes(g.index));
  return chosen.length ? chosen : gpus.slice(0, 1);
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
  const span = timeSpan(tl.t, model.historyWindowS);
  const rows = cardMetrics(ctx.metrics, catalogue.sidebar);
  const ref = useOnScreen(gpu.index, model);
  return (
    <section
      ref={ref}
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
        {rows.map(metric => (
          <MetricRow
            key={metric.id}
            metric={metric}
            catalogue={catalogue}
            gpu={gpu}
            cols={cols}
            times={tl.t}
            span={span}
            episodes={episodes}
            model={model}
            palette={ctx.palette}
          />
        ))}
      </div>
      {ctx.metrics.length > 0 && (
        <div className="jp-GpuWidgets-timeAxis" aria-hidden="true">
          <span>−{formatDuration(span ? span[1] - span[0] : model.historyWindowS)}</span>
          <span>{latestT !== null ? `updated ${formatClock(latestT)}` : ''}</span>
        </div>
      )}
      <Legend episodes={episodes} catalogue={catalogue} />
      <MigList gpu={gpu} metrics={catalogue.metrics} />
      <ProcessList
        gpu={gpu}
        openPath={ctx.openPath}
        actions={ctx.kernelActions}
        gpus={model.gpus}
        simulated={model.simulated}
      />
    </section>
  );
}

/**
 * Tells the model whether this card is on screen (GPM figures are asked for only then). Where
 * the browser cannot tell (no IntersectionObserver), a mounted card counts as seen.
 */
function useOnScreen(index: number, model: GpuModel): React.RefObject<HTMLElement> {
  const ref = React.useRef<HTMLElement>(null);
  React.useEffect(() => {
    const node = ref.current;
    if (!node || typeof IntersectionObserver === 'undefined') {
      model.setCardVisible(index, true);
      return () => model.setCardVisible(index, false);
    }
    const observer = new IntersectionObserver(entries => {
      for (const entry of entries) {
        model.setCardVisible(index, entry.isIntersecting);
      }
    });
    observer.observe(node);
    return () => {
      observer.disconnect();
      model.setCardVisible(index, false);
    };
  }, [index, model]);
  return ref;
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
