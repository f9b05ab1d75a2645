/**
 * A card's sparkline as a React view: the uPlot chart (chart.ts), created once per mount and fed
 * new data on every render, with its y range written beside it so that the line has a scale.
 */
import * as React from 'react';

import { HistoryChart, IChartData } from './chart';
import { formatDuration } from '../ui/format';
import { IPalette } from './palette';

export function Chart(props: {
  data: IChartData | null;
  palette: IPalette;
  label: string;
  windowS: number;
  /** The words at the top and bottom of the y axis ("100 %", "0"); null before data. */
  range: { bottom: string; top: string } | null;
}): JSX.Element {
  const { data, palette, label, windowS, range } = props;
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
    <div className="jp-GpuWidgets-chartRow">
      <div
        className="jp-GpuWidgets-chart"
        ref={host}
        role="img"
        aria-label={`${label} over the last ${formatDuration(windowS)}`}
        data-points={data ? data.t.length : 0}
      />
      {/* Beside the plot, not on it: the scale hides no data and no tooltip hides it. */}
      <div
        className="jp-GpuWidgets-yScale"
        title={range ? `Chart from ${range.bottom} to ${range.top}` : undefined}
        aria-hidden="true"
      >
        <span className="jp-GpuWidgets-yMax">{range?.top ?? ''}</span>
        <span className="jp-GpuWidgets-yMin">{range?.bottom ?? ''}</span>
      </div>
    </div>
  );
}
