/**
 * The overview at the top of the sidebar: one row per GPU (busy, memory, temperature, power,
 * owner), sorted and filtered. The numbers come from the catalogue's metrics (their words,
 * units and digits), so the overview reads like the cards.
 *
 * Pure functions (no DOM): jest-tested.
 */
import type { MetricId } from '../api/catalogue.generated';
import { IGpu } from './gpus';
import { formatValue, IMetricReading, metricReading } from './metrics';
import { IMetricInfo, SIMULATED_HINT } from '../api/tokens';

/** The columns a person can sort by. */
export type SortKey = 'index' | 'busy' | 'memory' | 'temperature' | 'power';

export const SORT_KEYS: readonly SortKey[] = ['index', 'busy', 'memory', 'temperature', 'power'];

/** Which GPUs the overview lists. */
export type ActivityFilter = 'all' | 'busy' | 'idle';

/** Below this GPU-busy share a GPU counts as idle (the activity filter). */
export const IDLE_BELOW_PERCENT = 5;

/** The catalogue metric each numeric column reads. */
export const COLUMN_METRIC: { readonly [key in Exclude<SortKey, 'index'>]: MetricId } = {
  busy: 'utilization',
  memory: 'memory',
  temperature: 'temperature',
  power: 'power'
};

/** One row of the overview. */
export interface IOverviewRow {
  index: number;
  /** The name without the words every GPU of a node shares ("NVIDIA"), or null. */
  shortName: string | null;
  name: string | null;
  lost: boolean;
  /** The readings of the columns (null where the catalogue has no such metric). */
  readings: { [key in Exclude<SortKey, 'index'>]: IMetricReading | null };
  /** What each column prints: "97 %", "37.2/80 GiB" (memory against its total), "63 °C". */
  text: { [key in Exclude<SortKey, 'index'>]: string };
  /** The share of each column's range in use, 0..1 (the inline bars), or null. */
  fill: { [key in Exclude<SortKey, 'index'>]: number | null };
  /** Who runs processes on it: "alice", "alice, bob", or "—". */
  owner: string;
  /** The owner in full, for the tooltip (hidden processes included). */
  ownerTitle: string;
}

const DASH = '—';

/** "NVIDIA H100 80GB HBM3" -> "H100 80GB HBM3"; "Simulated NVIDIA A100" -> "A100". */
export function shortName(name: string | null): string | null {
  if (name === null) {
    return null;
  }
  const short = name.replace(/\b(Simulated|NVIDIA|GeForce|Tesla)\s+/gi, '').trim();
  return short || name;
}

/**
 * What marks a simulated process's user: the simulated backend makes its processes up and gives
 * them the login of the server, which must not read as that person's real job.
 */
export const SIMULATED_USER_MARK = '(simulated)';
export const SIMULATED_USER_TITLE = `A simulated process (${SIMULATED_HINT}): made up for demos, not a real process of this user`;

/**
 * The users of a GPU's processes: known names first, then how many are hidden. With `simulated`
 * (the server's backend is the simulated one) each name is marked so.
 */
export function owners(
  gpu: Pick<IGpu, 'processes' | 'processesUnavailable'>,
  simulated = false
): { text: string; title: string } {
  const procs = gpu.processes;
  if (procs === null) {
    return { text: DASH, title: gpu.processesUnavailable ?? 'Processes not read yet' };
  }
  if (!procs.length) {
    return { text: DASH, title: 'No processes' };
  }
  const users = [...new Set(procs.map(p => p.user).filter((u): u is string => typeof u === 'string' && u !== ''))];
  const hidden = procs.filter(p => !p.user).length;
  const hiddenText = hidden ? `${hidden} process${hidden === 1 ? '' : 'es'} of another user (hidden)` : '';
  const text = users.length ? users.join(', ') + (simulated ? ` ${SIMULATED_USER_MARK}` : '') : DASH;
  const title = [
    users.length ? `Users: ${users.join(', ')}` : '',
    hiddenText,
    users.length && simulated ? SIMULATED_USER_TITLE : ''
  ]
    .filter(Boolean)
    .join('; ');
  return { text, title };
}

/** The rows for these GPUs, with the catalogue's metrics (`Catalogue.metrics`); `simulated` marks the owners. */
export function overviewRows(gpus: readonly IGpu[], metrics: readonly IMetricInfo[], simulated = false): IOverviewRow[] {
  const byId = new Map(metrics.map(m => [m.id, m]));
  return gpus.map(gpu => {
    const readings = {} as IOverviewRow['readings'];
    const fill = {} as IOverviewRow['fill'];
    const text = {} as IOverviewRow['text'];
    for (const [key, id] of Object.entries(COLUMN_METRIC) as [Exclude<SortKey, 'index'>, string][]) {
      const metric = byId.get(id);
      const r = metric ? metricReading(metric, gpu.latest) : null;
      readings[key] = r;
      // Memory reads against its total; the other columns give the value alone (their bar
      // shows how near the limit it is), to keep a row on one line.
      text[key] =
        !metric || !r ? DASH : key === 'memory' || r.value === null ? r.text.replace(' / ', '/') : formatValue(metric, r.value);
      const bottom = metric && metric.y_min !== null ? metric.y_min / metric.scale : 0;
      fill[key] =
        r && r.value !== null && r.max !== null && r.max > bottom
          ? Math.min(1, Math.max(0, (r.value - bottom) / (r.max - bottom)))
          : null;
    }
    const who = owners(gpu, simulated);
    return {
      index: gpu.index,
      name: gpu.name,
      shortName: shortName(gpu.name),
      lost: gpu.lost,
      readings,
      text,
      fill,
      owner: who.text,
      ownerTitle: who.title
    };
  });
}

/** The value a row sorts by (null: unknown, sorted last whatever the direction). */
function sortValue(row: IOverviewRow, key: SortKey): number | null {
  if (key === 'index') {
    return row.index;
  }
  return row.readings[key]?.value ?? null;
}

/** The rows sorted by a column; ties and unknown values keep GPU index order. */
export function sortRows(rows: readonly IOverviewRow[], key: SortKey, descending: boolean): IOverviewRow[] {
  if (!SORT_KEYS.includes(key)) {
    throw new Error(`cannot sort the GPU overview by ${JSON.stringify(key)}: use one of ${SORT_KEYS.join(', ')}`);
  }
  return [...rows].sort((a, b) => {
    const va = sortValue(a, key);
    const vb = sortValue(b, key);
    if (va === null || vb === null) {
      return va === vb ? a.index - b.index : va === null ? 1 : -1;
    }
    return va === vb ? a.index - b.index : descending ? vb - va : va - vb;
  });
}

/**
 * The rows a filter keeps. The text matches the GPU's index ("3", "GPU 3"), its name or an
 * owner, case-insensitively; several words must all match. The activity keeps busy GPUs
 * (at least IDLE_BELOW_PERCENT busy) or idle ones (unknown counts as neither).
 */
export function filterRows(rows: readonly IOverviewRow[], text: string, activity: ActivityFilter): IOverviewRow[] {
  const words = text.toLowerCase().split(/\s+/).filter(Boolean);
  return rows.filter(row => {
    const busy = row.readings.busy?.value ?? null;
    if (activity === 'busy' && !(busy !== null && busy >= IDLE_BELOW_PERCENT)) {
      return false;
    }
    if (activity === 'idle' && !(busy !== null && busy < IDLE_BELOW_PERCENT)) {
      return false;
    }
    const hay = [`gpu ${row.index}`, row.name ?? '', row.owner].join(' ').toLowerCase();
    // A bare number is a GPU index: "1" finds GPU 1, not GPU 10 or an "H100".
    return words.every(w => (/^\d+$/.test(w) ? String(row.index) === w : hay.includes(w)));
  });
}
