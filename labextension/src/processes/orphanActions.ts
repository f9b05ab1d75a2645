/**
 * A process left behind by a kernel that ended (`orphan_of`, set by the server): the row's words
 * and the Kill confirmation. Kill is offered for the user's own processes only (another user's
 * come redacted: no user); the server decides again (403 for anything else).
 *
 * Kept free of JupyterLab imports so that jest can test it in plain node.
 */
import { freesWords } from './processActions';
import { IGpu } from '../gpus/gpus';
import { IAttributedProcess } from '../api/tokens';

/** The clock time of `epochS` as the row shows it: 13:02. */
function clock(epochS: number): string {
  const d = new Date(epochS * 1000);
  return `${String(d.getHours()).padStart(2, '0')}:${String(d.getMinutes()).padStart(2, '0')}`;
}

function basename(path: string): string {
  return path.split('/').pop() || path;
}

/** "orphan of train.ipynb, kernel ended 13:02", or null for a process that is no orphan. */
export function orphanWords(proc: IAttributedProcess): string | null {
  const orphan = proc.orphan_of;
  if (!orphan) {
    return null;
  }
  const of = orphan.notebook_path ? basename(orphan.notebook_path) : `kernel ${orphan.kernel_id.slice(0, 8)}`;
  return `orphan of ${of}, kernel ended ${clock(orphan.ended)}`;
}

/** Whether the row offers Kill: an orphan, and the user's own (its owner is shown). */
export function killOffered(proc: IAttributedProcess): boolean {
  return !!proc.orphan_of && proc.uid !== null && proc.uid !== undefined;
}

/** The Kill confirmation: the process, its notebook and the GPU memory it frees. */
export function killConfirmation(
  proc: IAttributedProcess,
  gpus: readonly IGpu[]
): { title: string; body: string; button: string } {
  const perGpu = new Map<number, number>();
  for (const gpu of gpus) {
    for (const p of gpu.processes ?? []) {
      if (p.pid === proc.pid && p.used_memory_bytes !== null) {
        perGpu.set(gpu.index, (perGpu.get(gpu.index) ?? 0) + p.used_memory_bytes);
      }
    }
  }
  const what = proc.name ? `${proc.name} (pid ${proc.pid})` : `process ${proc.pid}`;
  const frees = perGpu.size ? freesWords(perGpu) : '';
  return {
    title: 'Kill orphaned process?',
    body: `Kill ${what}, ${orphanWords(proc) ?? 'an orphan'}? ${frees} SIGTERM first, SIGKILL after 5 s.`.replace('?  ', '? '),
    button: 'Kill'
  };
}
