/**
 * What a cell cost the GPU, in words: the line under a code cell, its hover text, the running
 * line, and the bill's figures. Pure functions of the server's `cells/summary` answer (or the
 * copy kept in the cell's metadata), jest-tested in plain node.
 */
import { ICellGpu, ICellSummary } from '../api/tokens';
import { formatBytes, formatNumber } from '../ui/format';

export type { ICellGpu, ICellSummary };

/** The cell metadata key (`cell.metadata.gpu_widgets.cell`), written only with the setting on. */
export const METADATA_KEY = 'gpu_widgets';
/** The version of what is kept in the metadata. */
export const STORED_VERSION = 1;

/** From this many GPUs on, the line is one sum ("8 GPUs"), each GPU in the hover text. */
export const SUM_FROM_GPUS = 4;

/** What the cell's metadata keeps: the summary without the server's clock. */
export interface IStoredCell {
  v: number;
  summary: ICellSummary;
}

const SLOWDOWN_WORDS: { [name: string]: string } = {
  sw_power_cap: 'power capped',
  hw_power_brake_slowdown: 'power brake',
  sw_thermal_slowdown: 'thermal slowdown',
  hw_thermal_slowdown: 'thermal slowdown',
  hw_slowdown: 'hardware slowdown'
};

/** "2.3 s", "41 s", "12 min 5 s", "1 h 12 min". */
export function formatCellDuration(seconds: number): string {
  if (seconds < 10) {
    return `${formatNumber(seconds, 1)} s`;
  }
  const s = Math.round(seconds);
  if (s < 60) {
    return `${s} s`;
  }
  if (s < 3600) {
    const rest = s % 60;
    return rest ? `${Math.floor(s / 60)} min ${rest} s` : `${s / 60} min`;
  }
  const min = Math.round(s / 60);
  const rest = min % 60;
  return rest ? `${Math.floor(min / 60)} h ${rest} min` : `${min / 60} h`;
}

/** A running cell's clock: "0:07", "1:23", "1:02:03". */
export function formatElapsed(seconds: number): string {
  const s = Math.max(0, Math.floor(seconds));
  const two = (n: number): string => String(n).padStart(2, '0');
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  return h ? `${h}:${two(m)}:${two(s % 60)}` : `${m}:${two(s % 60)}`;
}

/** "640 J", "9.8 kJ", "1.2 MJ". */
export function formatEnergy(joules: number): string {
  if (joules < 1000) {
    return `${formatNumber(joules, 0)} J`;
  }
  if (joules < 1e6) {
    return `${formatNumber(joules / 1000, 1)} kJ`;
  }
  return `${formatNumber(joules / 1e6, 1)} MJ`;
}

/** "+2.1 GiB", "-512 MiB", "±0". */
export function formatChange(bytes: number): string {
  if (bytes === 0) {
    return '±0';
  }
  return `${bytes > 0 ? '+' : '-'}${formatBytes(Math.abs(bytes))}`;
}

function slowdownWords(names: readonly string[]): string[] {
  const words = names.map(n => SLOWDOWN_WORDS[n] ?? n.replace(/_/g, ' '));
  return words.filter((w, i) => words.indexOf(w) === i);
}

function shared(n: number): string {
  return `shared with ${n} other process${n === 1 ? '' : 'es'}`;
}

/** One GPU's figures without its name: "busy 87 % (SM 64 %) · peak 12.3 GiB (+2.1 GiB) · 9.8 kJ". */
export function gpuFigures(gpu: ICellGpu): string {
  if (gpu.lost) {
    return 'lost during the cell (no figures)';
  }
  const parts: string[] = [];
  if (gpu.busy_percent !== null) {
    const sm = gpu.sm_percent !== null ? ` (SM ${formatNumber(gpu.sm_percent, 0)} %)` : '';
    parts.push(`busy ${formatNumber(gpu.busy_percent, 0)} %${sm}`);
  } else if (!gpu.samples) {
    parts.push('no samples');
  }
  if (gpu.memory_unknown && gpu.peak_memory_bytes === null) {
    parts.push('memory unknown');
  } else if (gpu.peak_memory_bytes !== null) {
    const change = gpu.memory_change_bytes !== null ? ` (${formatChange(gpu.memory_change_bytes)})` : '';
    parts.push(`peak ${formatBytes(gpu.peak_memory_bytes)}${change}`);
  }
  if (gpu.energy_j !== null) {
    parts.push(formatEnergy(gpu.energy_j));
  }
  if (gpu.shared_with > 0) {
    parts.push(shared(gpu.shared_with));
  }
  parts.push(...slowdownWords(gpu.slowdowns));
  return parts.join(' · ');
}

function sum(values: (number | null)[]): number | null {
  const known = values.filter((v): v is number => v !== null);
  return known.length ? known.reduce((a, b) => a + b, 0) : null;
}

/** Several GPUs as one: the busy mean, the memory and energy summed, the most sharing, every slowdown. */
export function combined(gpus: readonly ICellGpu[]): ICellGpu {
  const live = gpus.filter(g => !g.lost);
  const busy = live.map(g => g.busy_percent).filter((v): v is number => v !== null);
  const sm = live.map(g => g.sm_percent).filter((v): v is number => v !== null);
  return {
    index: -1,
    uuid: null,
    name: null,
    peak_memory_bytes: sum(live.map(g => g.peak_memory_bytes)),
    memory_change_bytes: live.some(g => g.memory_change_bytes === null) ? null : sum(live.map(g => g.memory_change_bytes)),
    memory_unknown: live.some(g => g.memory_unknown),
    shared_with: Math.max(0, ...live.map(g => g.shared_with)),
    busy_percent: busy.length ? busy.reduce((a, b) => a + b, 0) / busy.length : null,
    sm_percent: sm.length ? sm.reduce((a, b) => a + b, 0) / sm.length : null,
    energy_j: sum(live.map(g => g.energy_j)),
    slowdowns: live.flatMap(g => g.slowdowns),
    lost: live.length === 0,
    samples: Math.max(0, ...live.map(g => g.samples))
  };
}

function gpuNames(gpus: readonly ICellGpu[]): string {
  return gpus.length === 1 ? `GPU ${gpus[0].index}` : `GPUs ${gpus.map(g => g.index).join(', ')}`;
}

/** What comes before the figures: a restart, figures from part of the cell only. */
function caveats(summary: ICellSummary): string[] {
  const out: string[] = [];
  if (summary.restarted) {
    out.push('kernel restarted during the cell');
  }
  if (summary.partial) {
    out.push('≈ (history from part of the cell)');
  }
  return out;
}

/**
 * The line under a finished cell that used a GPU, or null for one that used none:
 * "GPU 0 · 41 s · busy 87 % (SM 64 %) · peak 12.3 GiB (+2.1 GiB) · 9.8 kJ".
 */
export function cellLine(summary: ICellSummary): string | null {
  const gpus = summary.gpus;
  if (!gpus.length) {
    return null;
  }
  const duration = formatCellDuration(summary.duration_s);
  const head = caveats(summary);
  const lost = gpus.filter(g => g.lost);
  if (gpus.length >= SUM_FROM_GPUS) {
    const lostNote = lost.length ? [`${gpuNames(lost)} lost during the cell`] : [];
    return [...head, `${gpus.length} GPUs`, duration, gpuFigures(combined(gpus)), ...lostNote].join(' · ');
  }
  if (gpus.length === 1) {
    return [...head, `GPU ${gpus[0].index}`, duration, gpuFigures(gpus[0])].join(' · ');
  }
  return `${[...head, duration].join(' · ')} · ${gpus.map(g => `GPU ${g.index}: ${gpuFigures(g)}`).join('  |  ')}`;
}

/** The line's hover text: every GPU on its own line, with its name, and the caveats in full. */
export function cellTitle(summary: ICellSummary): string {
  const lines = summary.gpus.map(g => `GPU ${g.index}${g.name ? ` (${g.name})` : ''}: ${gpuFigures(g)}`);
  if (summary.gpus.some(g => g.shared_with > 0)) {
    lines.push('Shared: busy and energy are the whole GPU\'s, not this cell\'s alone.');
  }
  if (summary.gpus.some(g => g.memory_unknown)) {
    lines.push('Memory unknown: in a container the driver could not tell this kernel\'s memory apart.');
  }
  if (summary.restarted) {
    lines.push('The kernel restarted during the cell: memory before the restart was freed.');
  }
  if (summary.partial && summary.history_from !== null) {
    lines.push(`The server's history starts ${formatNumber(summary.history_from - summary.start, 0)} s after the cell did: the figures cover only the rest.`);
  }
  lines.push('Memory: what this kernel\'s processes held (the kernel, its children and theirs).');
  return lines.join('\n');
}

/** The line while the cell runs: "running 1:23 · GPU 0 busy 94 % · peak 31.2 GiB", or null before it used a GPU. */
export function runningLine(summary: ICellSummary): string | null {
  const gpus = summary.gpus;
  if (!gpus.length) {
    return null;
  }
  const one = gpus.length >= SUM_FROM_GPUS ? combined(gpus) : null;
  const parts = (one ? [one] : gpus).map(g => {
    const name = one ? `${gpus.length} GPUs` : `GPU ${g.index}`;
    if (g.lost) {
      return `${name} lost`;
    }
    const busy = g.busy_percent !== null ? ` busy ${formatNumber(g.busy_percent, 0)} %` : '';
    const peak = g.peak_memory_bytes !== null ? ` · peak ${formatBytes(g.peak_memory_bytes)}` : '';
    return `${name}${busy}${peak}`;
  });
  return [...caveats(summary), `running ${formatElapsed(summary.duration_s)}`, ...parts].join(' · ');
}

/** GPU-hours of a cell: its duration times the GPUs it used. */
export function gpuHours(summary: ICellSummary): number {
  return (summary.duration_s * summary.gpus.length) / 3600;
}

/** The cell's energy over its GPUs (null: none known). */
export function totalEnergy(summary: ICellSummary): number | null {
  return sum(summary.gpus.map(g => g.energy_j));
}

/** The most its processes held, summed over the GPUs (null: unknown). */
export function totalPeak(summary: ICellSummary): number | null {
  return sum(summary.gpus.map(g => g.peak_memory_bytes));
}

function isNumber(v: unknown): v is number {
  return typeof v === 'number' && Number.isFinite(v);
}

function nullableNumber(v: unknown): boolean {
  return v === null || isNumber(v);
}

function validGpu(g: unknown): g is ICellGpu {
  if (!g || typeof g !== 'object') {
    return false;
  }
  const x = g as { [k: string]: unknown };
  return (
    Number.isInteger(x.index) &&
    (x.uuid === null || typeof x.uuid === 'string') &&
    (x.name === null || typeof x.name === 'string') &&
    ['peak_memory_bytes', 'memory_change_bytes', 'busy_percent', 'sm_percent', 'energy_j'].every(k => nullableNumber(x[k])) &&
    typeof x.memory_unknown === 'boolean' &&
    typeof x.lost === 'boolean' &&
    isNumber(x.shared_with) &&
    isNumber(x.samples) &&
    Array.isArray(x.slowdowns) &&
    x.slowdowns.every(s => typeof s === 'string')
  );
}

/**
 * What a notebook's metadata says a cell cost, or null when it is not ours or not whole (a
 * notebook is a file anyone may have edited: every field is checked before it is drawn).
 */
export function readStored(value: unknown): ICellSummary | null {
  if (!value || typeof value !== 'object') {
    return null;
  }
  const stored = (value as { cell?: unknown }).cell as Partial<IStoredCell> | undefined;
  if (!stored || stored.v !== STORED_VERSION || !stored.summary || typeof stored.summary !== 'object') {
    return null;
  }
  const s = stored.summary as unknown as { [k: string]: unknown };
  const gpus = s.gpus;
  const ok =
    isNumber(s.start) &&
    isNumber(s.end) &&
    isNumber(s.duration_s) &&
    s.duration_s >= 0 &&
    typeof s.restarted === 'boolean' &&
    typeof s.partial === 'boolean' &&
    nullableNumber(s.history_from) &&
    Array.isArray(gpus) &&
    gpus.length <= 64 &&
    gpus.every(validGpu);
  if (!ok) {
    return null;
  }
  return {
    kernel_id: typeof s.kernel_id === 'string' ? s.kernel_id : '',
    start: s.start as number,
    end: s.end as number,
    running: false,
    duration_s: s.duration_s as number,
    gpus: gpus as ICellGpu[],
    held_only: Array.isArray(s.held_only) ? (s.held_only as unknown[]).filter((i): i is number => Number.isInteger(i)) : [],
    restarted: s.restarted as boolean,
    restarted_at: Array.isArray(s.restarted_at) ? (s.restarted_at as unknown[]).filter(isNumber) : [],
    history_from: s.history_from as number | null,
    partial: s.partial as boolean,
    final: true,
    server_time: s.end as number
  };
}

/** What goes into `cell.metadata.gpu_widgets`: the summary less the server's clock. */
export function toStored(summary: ICellSummary): { cell: IStoredCell } {
  const { server_time: _serverTime, final: _final, running: _running, ...kept } = summary;
  void _serverTime;
  void _final;
  void _running;
  return { cell: { v: STORED_VERSION, summary: kept as ICellSummary } };
}
