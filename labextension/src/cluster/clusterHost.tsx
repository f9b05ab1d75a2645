/**
 * One host's GPUs in the Cluster view, shown under its row when opened: a line per GPU with its
 * utilization, memory, temperature and power, and a sparkline of its recent utilization (the
 * sidebar's own chart, fed the history Prometheus keeps).
 */
import * as React from 'react';

import { rangeLabels } from '../charts/axes';
import { METRIC } from '../api/catalogue.generated';
import {
  BUSY_RANGE,
  formatMemory,
  formatPercent,
  formatPower,
  formatTemperature,
  historyPoints,
  IClusterGpu,
  staleText
} from './cluster';
import { HostDetailState } from './clusterModel';
import { IChartData } from '../charts/chart';
import { Chart } from '../charts/chartView';
import { formatValue } from '../gpus/metrics';
import { shortName } from '../gpus/overview';
import { IPalette } from '../charts/palette';

export function HostDetail(props: {
  hostname: string;
  state: HostDetailState;
  /** The overview's query time (the history ends there); null: the newest point is now. */
  endS: number | null;
  palette: IPalette;
}): JSX.Element {
  const { hostname, state, endS, palette } = props;
  let body: JSX.Element;
  if (state.kind === 'loading') {
    body = <p className="jp-GpuWidgets-muted">Asking Prometheus for the GPUs of {hostname}…</p>;
  } else if (state.kind === 'error') {
    body = <p className="jp-GpuWidgets-muted jp-GpuWidgets-reason">{state.message}</p>;
  } else {
    const d = state.detail;
    const step = d.history_step_s ?? 15;
    const end = endS ?? Date.now() / 1000;
    body = (
      <>
        {d.stale && (
          <p className="jp-GpuWidgets-muted jp-GpuWidgets-staleNote">
            {staleText(d.age_s)}: these are the last readings Prometheus has.
          </p>
        )}
        {d.status !== 'ok' && d.reason && <p className="jp-GpuWidgets-muted jp-GpuWidgets-reason">{d.reason}</p>}
        {!d.gpus.length && <p className="jp-GpuWidgets-muted">Prometheus has no GPU of this host.</p>}
        <ul className="jp-GpuWidgets-clusterGpus">
          {d.gpus.map(gpu => (
            <GpuLine
              key={gpu.uuid ?? gpu.gpu ?? ''}
              hostname={hostname}
              gpu={gpu}
              simulated={d.simulated === true}
              stepS={step}
              endS={end}
              palette={palette}
            />
          ))}
        </ul>
      </>
    );
  }
  return (
    <div
      className={`jp-GpuWidgets-hostDetail${state.kind === 'ok' && state.detail.stale ? ' jp-mod-stale' : ''}`}
      role="region"
      aria-label={`GPUs of ${hostname}`}
    >
      {body}
    </div>
  );
}

function GpuLine(props: {
  hostname: string;
  gpu: IClusterGpu;
  simulated: boolean;
  stepS: number;
  endS: number;
  palette: IPalette;
}): JSX.Element {
  const { hostname, gpu, simulated, stepS, endS, palette } = props;
  // Prometheus's utilization is the catalogue's busy time; the server sends memory in bytes.
  const busy = METRIC.utilization;
  const gib = (bytes: number | null): number | null => (bytes === null ? null : bytes * METRIC.memory.scale);
  const util = gpu.history?.utilization_gpu_percent ?? [];
  let data: IChartData | null = null;
  if (util.length > 1) {
    const points = historyPoints(util, stepS, endS);
    data = {
      t: points.t,
      y: points.y,
      xMin: points.t[0],
      xMax: points.t[points.t.length - 1],
      yMin: BUSY_RANGE[0],
      yMax: BUSY_RANGE[1],
      episodes: [],
      format: v => formatValue(busy, v),
      markersAt: () => [],
      kindOf: () => 'other'
    };
  }
  const index = gpu.gpu ?? '?';
  const label = `GPU ${index} utilization`;
  return (
    <li className="jp-GpuWidgets-clusterGpu" aria-label={`GPU ${index} of ${hostname}`} data-gpu={index}>
      <div className="jp-GpuWidgets-clusterGpuHead">
        <span className="jp-GpuWidgets-ov-index">GPU {index}</span>
        <span className="jp-GpuWidgets-clusterGpuModel" title={[gpu.model, gpu.uuid, gpu.pci_bus_id].filter(Boolean).join('\n')}>
          {modelText(gpu.model, simulated)}
        </span>
      </div>
      <div className="jp-GpuWidgets-clusterGpuNums">
        <span title="GPU utilization">{formatPercent(gpu.utilization_gpu_percent)}</span>
        <span title="GPU memory used / total">{formatMemory(gib(gpu.memory_used_bytes), gib(gpu.memory_total_bytes))}</span>
        <span title="Temperature">{formatTemperature(gpu.temperature_c)}</span>
        <span title="Power draw">{formatPower(gpu.power_w)}</span>
      </div>
      {data && (
        <Chart
          data={data}
          palette={palette}
          label={label}
          windowS={stepS * (util.length - 1)}
          range={rangeLabels(busy, BUSY_RANGE[0], BUSY_RANGE[1])}
        />
      )}
    </li>
  );
}

/** The model, short; "Simulated" kept in front on a simulated host (the short name drops it). */
export function modelText(model: string | null, simulated: boolean): string {
  const short = shortName(model);
  if (short === null) {
    return simulated ? 'Simulated GPU' : 'model not known';
  }
  return simulated && !/\bsimulated\b/i.test(short) ? `Simulated ${short}` : short;
}
