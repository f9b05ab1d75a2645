/**
 * One row of a GPU card: a metric's label (its meaning on hover), its number (a meter) and its
 * history chart. A metric whose field the history does not keep (SM active from an older
 * server's catalogue, read from `samples/latest`) has a number and no chart.
 */
import * as React from 'react';

import { isPendingReason, labelHelp, PENDING_TEXT, PENDING_TITLE } from '../gpus/activity';
import { rangeLabels } from '../charts/axes';
import { Catalogue } from '../api/catalogue';
import { IChartData } from '../charts/chart';
import { Chart } from '../charts/chartView';
import { IGpu } from '../gpus/gpus';
import { chartRange, formatValue, metricReading, NOT_AVAILABLE, unavailableReason, widestText } from '../gpus/metrics';
import { GpuModel } from '../gpus/model';
import { IPalette } from '../charts/palette';
import { IDeviceColumns, IEpisode } from '../gpus/series';
import { IDLE_REASON, IMetricInfo } from '../api/tokens';

export function MetricRow(props: {
  metric: IMetricInfo;
  catalogue: Catalogue;
  gpu: IGpu;
  cols: IDeviceColumns | null;
  times: readonly number[];
  span: [number, number] | null;
  episodes: readonly IEpisode[];
  model: GpuModel;
  palette: IPalette;
}): JSX.Element {
  const { metric, catalogue, gpu, cols, times, span, episodes, model } = props;
  const reading = metricReading(metric, gpu.latest);
  // A null value the server explains: say "n/a" and why (only while the GPU answers; a lost
  // GPU says so on its card). A GPM value that is only being fetched reads "…", not a fault.
  const why = gpu.lost ? null : unavailableReason(metric, reading, gpu.unavailable);
  const pending = isPendingReason(why);
  const reason = pending ? null : why;
  const text = pending ? PENDING_TEXT : reason !== null ? NOT_AVAILABLE : reading.text;
  const labelId = `jp-GpuWidgets-${gpu.index}-${metric.id}`;
  const reasonId = `jp-GpuWidgets-${gpu.index}-${metric.id}-reason`;
  // The history keeps the catalogue's fields (null columns for a field the server does not send).
  const kept = cols !== null && metric.field in cols.values;
  let data: IChartData | null = null;
  if (cols && span && kept) {
    const [yMin, yMax] = chartRange(metric, cols, gpu.info);
    data = {
      t: times,
      y: cols.values[metric.field],
      xMin: span[0],
      xMax: span[1],
      yMin,
      yMax,
      episodes,
      format: v => formatValue(metric, v),
      markersAt: i => {
        const out = (cols.throttle[i] ?? []).filter(r => r !== IDLE_REASON);
        return (cols.lost[i] ? [...out, 'lost'] : out).map(r => catalogue.throttleLabel(r));
      },
      kindOf: r => catalogue.episodeKind(r)
    };
  }
  return (
    <div className={`jp-GpuWidgets-metric jp-GpuWidgets-metric-${metric.id}`} data-metric={metric.id}>
      <div className="jp-GpuWidgets-metricHead">
        <span className="jp-GpuWidgets-metricLabel" id={labelId} title={labelHelp(metric)}>
          {reading.label}
        </span>
        <span
          className="jp-GpuWidgets-metricValue"
          role="meter"
          aria-labelledby={labelId}
          aria-valuenow={reading.value ?? undefined}
          aria-valuemin={0}
          aria-valuemax={reading.max ?? undefined}
          aria-valuetext={pending ? 'being read' : reason !== null ? `${text}: ${reason}` : text}
          aria-describedby={reason !== null ? reasonId : undefined}
          title={pending ? PENDING_TITLE : reason ?? undefined}
          data-widest={widestText(metric, reading)}
        >
          {text}
        </span>
      </div>
      {reason !== null && (
        <div className="jp-GpuWidgets-metricReason" id={reasonId} title={reason}>
          {reason}
        </div>
      )}
      {(kept || !cols) && (
        <Chart
          data={data}
          palette={props.palette}
          label={reading.label}
          windowS={model.historyWindowS}
          range={data ? rangeLabels(metric, data.yMin, data.yMax) : null}
        />
      )}
    </div>
  );
}
