/**
 * The GPU overview at the top of the sidebar: one row per GPU, sortable by a click on a column
 * header, filtered by a text box and a busy/idle choice; a click on a row shows that GPU's card.
 * The rows' numbers and their order are worked out in overview.ts.
 */
import * as React from 'react';

import { IGpu } from '../gpus/gpus';
import { ActivityFilter, filterRows, IOverviewRow, overviewRows, SortKey, sortRows } from '../gpus/overview';
import { ISort, ISortColumn, nextSort, SortHeader } from '../ui/sortHeader';
import { IMetricInfo } from '../api/tokens';

/** From this many GPUs on, the overview offers the filter box (fewer fit at a glance). */
export const FILTER_FROM_GPUS = 4;

const COLUMNS: readonly ISortColumn<SortKey>[] = [
  { key: 'index', label: 'GPU', title: 'Sort by GPU index' },
  { key: 'busy', label: 'Busy', title: 'Sort by GPU busy' },
  { key: 'memory', label: 'Memory', title: 'Sort by memory used' },
  { key: 'temperature', label: 'Temp', title: 'Sort by temperature' },
  { key: 'power', label: 'Power', title: 'Sort by power draw' }
];

export interface IOverviewProps {
  gpus: readonly IGpu[];
  /** The whole catalogue (the columns read its busy, memory, temperature and power metrics). */
  metrics: readonly IMetricInfo[];
  /** The GPUs whose cards are shown. */
  selected: readonly number[];
  /** A row was clicked: show that GPU's card (`add`: keep the others too). */
  onSelect: (index: number, add: boolean) => void;
  /** The GPUs are simulated: their processes' users are marked so. */
  simulated?: boolean;
}

export function Overview(props: IOverviewProps): JSX.Element {
  const { gpus, metrics, selected, onSelect } = props;
  const [sort, setSort] = React.useState<ISort<SortKey>>({ key: 'index', descending: false });
  const [text, setText] = React.useState('');
  const [activity, setActivity] = React.useState<ActivityFilter>('all');
  const all = overviewRows(gpus, metrics, props.simulated ?? false);
  const rows = sortRows(filterRows(all, text, activity), sort.key, sort.descending);
  const clickHeader = (key: SortKey): void => setSort(s => nextSort(s, key, 'index'));
  return (
    <section className="jp-GpuWidgets-overview" aria-label="GPU overview">
      {gpus.length >= FILTER_FROM_GPUS && (
        <div className="jp-GpuWidgets-overviewTools">
          <input
            className="jp-GpuWidgets-filter"
            type="search"
            value={text}
            placeholder="Filter: index, name, user"
            aria-label="Filter GPUs by index, name or user"
            onChange={e => setText(e.target.value)}
          />
          <select
            className="jp-GpuWidgets-activity"
            value={activity}
            aria-label="Show busy or idle GPUs"
            onChange={e => setActivity(e.target.value as ActivityFilter)}
          >
            <option value="all">All</option>
            <option value="busy">Busy</option>
            <option value="idle">Idle</option>
          </select>
        </div>
      )}
      <div className="jp-GpuWidgets-overviewGrid" role="grid" aria-label="GPUs" aria-rowcount={rows.length + 1}>
        <div className="jp-GpuWidgets-overviewHead" role="row">
          {COLUMNS.map(c => (
            <SortHeader key={c.key} column={c} sort={sort} className={`jp-GpuWidgets-ov-${c.key}`} onClick={clickHeader} />
          ))}
        </div>
        <div className="jp-GpuWidgets-overviewRows" role="rowgroup">
          {rows.map(row => (
            <OverviewRow key={row.index} row={row} selected={selected.includes(row.index)} onSelect={onSelect} />
          ))}
        </div>
      </div>
      {!rows.length && <p className="jp-GpuWidgets-muted">No GPU matches the filter.</p>}
    </section>
  );
}

function OverviewRow(props: {
  row: IOverviewRow;
  selected: boolean;
  onSelect: (index: number, add: boolean) => void;
}): JSX.Element {
  const { row, selected, onSelect } = props;
  const cell = (key: 'busy' | 'memory' | 'temperature' | 'power'): JSX.Element => {
    const fill = row.fill[key];
    return (
      <span role="gridcell" className={`jp-GpuWidgets-ov-${key}`} title={row.readings[key]?.label}>
        {row.text[key]}
        {fill !== null && (key === 'busy' || key === 'memory') && (
          <span className="jp-GpuWidgets-ovBar" style={{ width: `${Math.round(fill * 100)}%` }} aria-hidden="true" />
        )}
      </span>
    );
  };
  return (
    <div
      role="row"
      tabIndex={0}
      aria-label={`GPU ${row.index}`}
      aria-selected={selected}
      data-gpu-index={row.index}
      className={`jp-GpuWidgets-overviewRow jp-GpuWidgets-clickRow${selected ? ' jp-mod-selected' : ''}${row.lost ? ' jp-mod-lost' : ''}`}
      title={`Show the card of GPU ${row.index} (Ctrl-click: show it beside the others)`}
      onClick={e => onSelect(row.index, e.ctrlKey || e.metaKey || e.shiftKey)}
      onKeyDown={e => {
        if (e.key === 'Enter' || e.key === ' ') {
          e.preventDefault();
          onSelect(row.index, e.ctrlKey || e.metaKey || e.shiftKey);
        }
      }}
    >
      <span role="rowheader" className="jp-GpuWidgets-ov-index">
        GPU {row.index}
      </span>
      {cell('busy')}
      {cell('memory')}
      {cell('temperature')}
      {cell('power')}
      <span role="gridcell" className="jp-GpuWidgets-ovSub">
        <span className="jp-GpuWidgets-ovName" title={row.name ?? 'name not available'}>
          {row.lost ? 'lost' : row.shortName ?? 'name n/a'}
        </span>
        <span className="jp-GpuWidgets-ovOwner" title={row.ownerTitle}>
          {row.owner}
        </span>
      </span>
    </div>
  );
}
