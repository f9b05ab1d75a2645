/**
 * The kernel actions of a process row, through Jupyter's own kernel API: the service manager for
 * a shutdown (so JupyterLab's running-kernels list and the notebook learn of it), the kernel REST
 * API for interrupt and restart. Both carry the server's token and XSRF cookie, and the server's
 * authoriser decides. Restart and shutdown ask first, naming the notebook and the memory freed.
 */
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import { KernelAPI, ServiceManager } from '@jupyterlab/services';

import { IGpu } from '../gpus/gpus';
import { ACTION_LABELS, confirmation, IHeld, IKernelActions, KernelAction } from './processActions';
import { IAttributedProcess } from '../api/tokens';

export class KernelActions implements IKernelActions {
  /** `afterShutdown`: the panel re-reads the processes (the memory coming back). */
  constructor(private _services: ServiceManager.IManager, private _afterShutdown: () => void) {}

  async run(action: KernelAction, proc: IAttributedProcess, gpus: readonly IGpu[], held?: IHeld): Promise<void> {
    const id = proc.kernel_id;
    if (!id) {
      return; // never offered (processActions.kernelActionsFor)
    }
    if (action !== 'interrupt') {
      const words = confirmation(action, proc, gpus, held);
      const answer = await showDialog({
        title: words.title,
        body: words.body,
        buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: words.button })]
      });
      if (!answer.button.accept) {
        return;
      }
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
}
