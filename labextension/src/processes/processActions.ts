/**
 * Kernel actions from a process row: which rows offer them, and the words of their confirmations.
 *
 * Offered only for a process the server attributed to one of its own kernels (`kernel_id` set):
 * the server attributes nothing else, and another user's processes come redacted. The actions
 * themselves go through Jupyter's kernel API (kernelActions.ts), so the server's own
 * authorisation decides, not this panel.
 *
 * Kept free of JupyterLab imports so that jest can test it in plain node.
 */
import { formatBytes } from '../ui/format';
import { IGpu } from '../gpus/gpus';
import { IAttributedProcess } from '../api/tokens';

export type KernelAction = 'interrupt' | 'restart' | 'shutdown';

/** What a process row needs to act on its kernel; the sidebar passes it down. */
export interface IKernelActions {
  run(action: KernelAction, proc: IAttributedProcess, gpus: readonly IGpu[], held?: IHeld): Promise<void>;
  /** End an orphaned GPU process (orphanActions.killOffered), after a confirmation. */
  kill(proc: IAttributedProcess, gpus: readonly IGpu[]): Promise<void>;
}

/** Memory a kernel holds as an alert tells it, for when the panel has not read the processes. */
export interface IHeld {
  gpu: number;
  bytes: number;
}

/** The button labels, in the order shown. */
export const ACTION_LABELS: { [action in KernelAction]: string } = {
  interrupt: 'Interrupt',
  restart: 'Restart',
  shutdown: 'Shut down kernel'
};

/** The actions a row offers: all three for one of this server's kernels, none otherwise. */
export function kernelActionsFor(proc: IAttributedProcess): KernelAction[] {
  return typeof proc.kernel_id === 'string' && proc.kernel_id ? ['interrupt', 'restart', 'shutdown'] : [];
}

/** GPU memory held by a kernel's processes (it and its children), per GPU and in all. */
export function kernelMemory(gpus: readonly IGpu[], kernelId: string): { total: number; perGpu: Map<number, number> } {
  const perGpu = new Map<number, number>();
  for (const gpu of gpus) {
    for (const p of gpu.processes ?? []) {
      if (p.kernel_id === kernelId && p.used_memory_bytes !== null) {
        perGpu.set(gpu.index, (perGpu.get(gpu.index) ?? 0) + p.used_memory_bytes);
      }
    }
  }
  return { total: [...perGpu.values()].reduce((a, b) => a + b, 0), perGpu };
}

/** "It frees 1 GiB of GPU memory on GPU 0." or, on several GPUs, "... (2 GiB on GPU 0, 1 GiB on GPU 1)." */
export function freesWords(perGpu: ReadonlyMap<number, number>): string {
  const entries = [...perGpu.entries()];
  const total = entries.reduce((sum, [, bytes]) => sum + bytes, 0);
  if (entries.length === 1) {
    return `It frees ${formatBytes(total)} of GPU memory on GPU ${entries[0][0]}.`;
  }
  const where = entries.map(([i, bytes]) => `${formatBytes(bytes)} on GPU ${i}`).join(', ');
  return `It frees ${formatBytes(total)} of GPU memory (${where}).`;
}

/** The confirmation of a restart or shutdown: the notebook, and the memory it frees. */
export function confirmation(
  action: 'restart' | 'shutdown',
  proc: IAttributedProcess,
  gpus: readonly IGpu[],
  held?: IHeld
): { title: string; body: string; button: string } {
  const who = proc.notebook_path ? `the kernel of ${proc.notebook_path}` : `kernel ${proc.kernel_id}`;
  let { total, perGpu } = kernelMemory(gpus, proc.kernel_id ?? '');
  if (!total && held) {
    ({ total, perGpu } = { total: held.bytes, perGpu: new Map([[held.gpu, held.bytes]]) });
  }
  const frees = total > 0 ? freesWords(perGpu) : 'It holds no GPU memory now.';
  const lost = 'Its variables are lost; the notebook file stays as it is.';
  return action === 'shutdown'
    ? { title: 'Shut down kernel?', body: `Shut down ${who}? ${frees} ${lost}`, button: 'Shut down' }
    : { title: 'Restart kernel?', body: `Restart ${who}? ${frees} ${lost}`, button: 'Restart' };
}
