/**
 * "This notebook": the sidebar's bill of the active notebook, one row per cell that used a GPU
 * (execution count, first line, duration, GPUs, peak memory, energy), sortable, a click jumping to
 * the cell, and a total (GPU-hours, energy).
 */
import { ISignal, Signal } from '@lumino/signaling';
import * as React from 'react';

import { formatBytes, formatNumber } from '../ui/format';
import { ISort, nextSort } from '../ui/sortHeader';
import { formatCellDuration, formatEnergy, gpuHours, totalEnergy, totalPeak } from './cellText';
import type { IBillRow, NotebookHost } from './notebookHost';

/** The active notebook's host, followed; `changed` fires when it or its rows change. */
export class BillSource {
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get host(): NotebookHost | null {
    return this._host;
  }

  set host(host: NotebookHost | null) {
    if (host === this._host) {
      return;
    }
    this._host?.changed.disconnect(this._emit, this);
    this._host = host;
    host?.changed.connect(this._emit, this);
    this._emit();
  }

  /** Whether the lines are on (off: the bill says so instead of listing). */
  get enabled(): boolean {
    return this._enabled;
  }

  set enabled(value: boolean) {
    if (value !== this._enabled) {
      this._enabled = value;
      this._emit();
    }
  }

  private _emit(): void {
    this._changed.emit();
  }

  private _changed = new Signal<this, void>(this);
  private _enabled = true;
  private _host: NotebookHost | null = null;
}

export type BillKey = 'cell' | 'duration' | 'gpus' | 'peak' | 'energy';

const COLUMNS: { key: BillKey; label: string; title: string }[] = [
  { key: 'cell', label: 'Cell', title: 'Execution count and first line; sorted: notebook order' },
  { key: 'duration', label: 'Time', title: 'How long the cell ran' },
  { key: 'gpus', label: 'GPUs', title: 'The GPUs its kernel’s processes held memory on' },
  { key: 'peak', label: 'Peak', title: 'The most its kernel’s processes held, summed over the GPUs' },
  { key: 'energy', label: 'Energy', title: 'The GPUs’ energy over the cell (the whole GPU’s where it was shared)' }
];

function value(row: IBillRow, key: BillKey): number {
  const s = row.summary;
  switch (key) {
    case 'cell':
      return row.position;
    case 'duration':
      return s.duration_s;
    case 'gpus':
      return s.gpus.length;
    case 'peak':
      return totalPeak(s) ?? -1;
    case 'energy':
      return totalEnergy(s) ?? -1;
  }
}

/** The rows in the order asked for (ties in notebook order). */
export function sortRows(rows: readonly IBillRow[], sort: ISort<BillKey>): IBillRow[] {
  const sign = sort.descending ? -1 : 1;
  return [...rows].sort((a, b) => sign * (value(a, sort.key) - value(b, sort.key)) || a.position - b.position);
}

/** The total row's words: "3 cells · 2.42 GPU-hours · 1.2 MJ" (under an hour: GPU-minutes, under a minute: GPU-seconds). */
export function totalText(rows: readonly IBillRow[]): string {
  const hours = rows.reduce((sum, r) => sum + gpuHours(r.summary), 0);
  const energies = rows.map(r => totalEnergy(r.summary)).filter((e): e is number => e !== null);
  const energy = energies.length ? ` · ${formatEnergy(energies.reduce((a, b) => a + b, 0))}` : '';
  const minutes = Math.round(hours * 60);
  const seconds = Math.round(hours * 3600);
  const hoursText =
    hours * 60 < 1
      ? `${seconds} GPU-second${seconds === 1 ? '' : 's'}`
      : hours < 1
        ? `${minutes} GPU-minute${minutes === 1 ? '' : 's'}`
        : `${formatNumber(hours, 2)} GPU-hours`;
  return `${rows.length} cell${rows.length === 1 ? '' : 's'} · ${hoursText}${energy}`;
}

export function NotebookBill(props: { source: BillSource }): JSX.Element | null {
  const { source } = props;
  const [sort, setSort] = React.useState<ISort<BillKey>>({ key: 'cell', descending: false });
  const [, redraw] = React.useReducer((n: number) => n + 1, 0);
  React.useEffect(() => {
    source.changed.connect(redraw);
    return () => {
      source.changed.disconnect(redraw);
    };
  }, [source]);
  const host = source.host;
  if (!host) {
    return null;
  }
  const rows = source.enabled ? host.rows() : [];
  const sorted = sortRows(rows, sort);
  const name = host.panel.context.path.split('/').pop();
  return (
    <details className="jp-GpuWidgets-bill" open aria-label="This notebook's GPU use">
      <summary className="jp-GpuWidgets-billSummary">
        This notebook <span className="jp-GpuWidgets-muted">{name}</span>
      </summary>
      {!source.enabled ? (
        <p className="jp-GpuWidgets-muted">The cells’ GPU lines are off (Settings → GPU Widgets → Show the cells’ GPU lines).</p>
      ) : !rows.length ? (
        <p className="jp-GpuWidgets-muted">No cell of this notebook has used a GPU since it was opened.</p>
      ) : (
        <div className="jp-GpuWidgets-billTable" role="grid" aria-label="Cells that used a GPU" aria-rowcount={rows.length + 1}>
          <div className="jp-GpuWidgets-billHead" role="row">
            {COLUMNS.map(c => (
              <span
                key={c.key}
                role="columnheader"
                className={`jp-GpuWidgets-bill-${c.key}`}
                aria-sort={sort.key === c.key ? (sort.descending ? 'descending' : 'ascending') : 'none'}
              >
                <button className="jp-GpuWidgets-sortButton" title={c.title} onClick={() => setSort(nextSort(sort, c.key, 'cell'))}>
                  {c.label}
                  <span className="jp-GpuWidgets-sortMark" aria-hidden="true">
                    {sort.key === c.key ? (sort.descending ? '▾' : '▴') : ''}
                  </span>
                </button>
              </span>
            ))}
          </div>
          <div role="rowgroup">
            {sorted.map(row => (
              <BillRow key={row.cellId} row={row} onClick={() => host.showCell(row.cellId)} />
            ))}
          </div>
          <div className="jp-GpuWidgets-billTotal" role="row">
            <span role="gridcell">Total: {totalText(rows)}</span>
          </div>
        </div>
      )}
    </details>
  );
}

function BillRow(props: { row: IBillRow; onClick: () => void }): JSX.Element {
  const { row } = props;
  const s = row.summary;
  const peak = totalPeak(s);
  const energy = totalEnergy(s);
  const count = row.executionCount === null ? ' ' : String(row.executionCount);
  // Two lines: the cell (its count and first line) across the panel, its figures under the headers.
  return (
    <div
      role="row"
      className={`jp-GpuWidgets-billRow jp-GpuWidgets-clickRow${row.running ? ' jp-mod-running' : ''}`}
      data-cell-id={row.cellId}
      tabIndex={0}
      title={`Show cell [${count}]`}
      onClick={props.onClick}
      onKeyDown={e => {
        if (e.key === 'Enter') {
          props.onClick();
        }
      }}
    >
      <span role="rowheader" className="jp-GpuWidgets-billSource">
        <span className="jp-GpuWidgets-billCount">[{count}]</span> <code>{row.firstLine || '(empty)'}</code>
      </span>
      <span role="gridcell" className="jp-GpuWidgets-bill-cell">
        {row.running ? 'running' : ''}
      </span>
      <span role="gridcell" className="jp-GpuWidgets-bill-duration">
        {row.running ? '' : formatCellDuration(s.duration_s)}
      </span>
      <span role="gridcell" className="jp-GpuWidgets-bill-gpus">{s.gpus.map(g => g.index).join(', ')}</span>
      <span role="gridcell" className="jp-GpuWidgets-bill-peak">{peak === null ? '–' : formatBytes(peak)}</span>
      <span role="gridcell" className="jp-GpuWidgets-bill-energy">{energy === null ? '–' : formatEnergy(energy)}</span>
    </div>
  );
}
