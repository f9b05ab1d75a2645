/**
 * The sortable column headers of the GPU overview and the cluster's host table: a click sorts by
 * that column, a second click turns the order round.
 */
import * as React from 'react';

export interface ISortColumn<K extends string> {
  key: K;
  label: string;
  title: string;
}

export interface ISort<K extends string> {
  key: K;
  descending: boolean;
}

/**
 * The order after a click on `key`: the same column turns round; another starts with the largest,
 * except `ascendingKey` (the host name, the GPU index), which starts from the top.
 */
export function nextSort<K extends string>(sort: ISort<K>, key: K, ascendingKey: K): ISort<K> {
  return sort.key === key ? { key, descending: !sort.descending } : { key, descending: key !== ascendingKey };
}

/** One header cell; `className` places it in its grid. */
export function SortHeader<K extends string>(props: {
  column: ISortColumn<K>;
  sort: ISort<K>;
  className: string;
  onClick: (key: K) => void;
}): JSX.Element {
  const { column, sort } = props;
  const active = sort.key === column.key;
  return (
    <span role="columnheader" className={props.className} aria-sort={active ? (sort.descending ? 'descending' : 'ascending') : 'none'}>
      <button className="jp-GpuWidgets-sortButton" title={column.title} onClick={() => props.onClick(column.key)}>
        {column.label}
        <span className="jp-GpuWidgets-sortMark" aria-hidden="true">
          {active ? (sort.descending ? '▾' : '▴') : ''}
        </span>
      </button>
    </span>
  );
}
