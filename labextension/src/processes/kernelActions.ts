/**
 * The kernel actions of a process row, through Jupyter's own kernel API: the service manager for
 * a shutdown (so JupyterLab's running-kernels list and the notebook learn of it), the kernel REST
 * API for interrupt and restart. Both carry the server's token and XSRF cookie, and the server's
 * authoriser decides. Restart and shutdown ask first, naming the notebook and the memory freed.
 * Kill (an orphan a kernel left behind) goes through our own API, which checks again whose it is.
 */
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import { KernelAPI, ServiceManager } from '@jupyterlab/services';

import { IGpu } from '../gpus/gpus';
import { ACTION_LABELS, confirmation, IHeld, IKernelActions, KernelAction } from './processActions';
import { killConfirmation } from './orphanActions';
import { requestAPI } from '../api/request';
import { formatBytes } from '../ui/format';
import { IAttributedProcess } from '../api/tokens';

export class KernelActions implements IKernelActions {
  /** `afterShutdown`: the panel re-reads the processes (the memory coming back). */
  constructor(private _services: ServiceManager.IManager, private _afterShutdown: () => void) {}

  async run(action: KernelAction, proc: IAttributedProcess, gpus: readonly IGpu[], held?: IHeld): Promise<void> {
    const id = proc.kernel_id;
    if (!id) {
      return; // never offered (processActions.kernelActionsFor)
    }
    if (action !== 'interrupt' && !(await confirmed(confirmation(action, proc, gpus, held)))) {
      return;
    }
    const settings = this._services.serverSettings;
    try {
      if (action === 'interrupt') {
        await KernelAPI.interruptKernel(id, settings);
      } else if (action === 'restart') {
        await KernelAPI.restartKernel(id, settings);
      } else {
        await this._services.kernels.shutdown(id);
        this._afterShutdown();
      }
    } catch (error) {
      const why = error instanceof Error ? error.message : String(error);
      Notification.error(`${ACTION_LABELS[action]} failed for kernel ${id}: ${why}`, { autoClose: false });
    }
  }

  async kill(proc: IAttributedProcess, gpus: readonly IGpu[]): Promise<void> {
    if (!(await confirmed(killConfirmation(proc, gpus)))) {
      return;
    }
    try {
      const done = await requestAPI<{ signals: string[]; ended: boolean; freed_bytes: number }>(
        `processes/${proc.pid}/kill`,
        {},
        { method: 'POST', body: {}, settings: this._services.serverSettings }
      );
      if (done.ended) {
        const freed = done.freed_bytes > 0 ? `: ${formatBytes(done.freed_bytes)} of GPU memory given back` : '';
        Notification.success(`Process ${proc.pid} ended (${done.signals.join(', then ')})${freed}.`, { autoClose: 8000 });
      } else {
        Notification.warning(`Process ${proc.pid} did not end after ${done.signals.join(' and ')}.`, { autoClose: false });
      }
    } catch (error) {
      const why = error instanceof Error ? error.message : String(error);
      Notification.error(`Kill failed for process ${proc.pid}: ${why}`, { autoClose: false });
    }
    this._afterShutdown();
  }
}

/** Ask with Cancel and a warning button; whether the user chose the warning one. */
async function confirmed(words: { title: string; body: string; button: string }): Promise<boolean> {
  const answer = await showDialog({
    title: words.title,
    body: words.body,
    buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: words.button })]
  });
  return answer.button.accept;
}
