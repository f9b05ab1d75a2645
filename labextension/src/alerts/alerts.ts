/**
 * Alerts in JupyterLab: the poller (alertsModel.ts) with JupyterLab's notifications, the
 * buttons of each notification, and the `alerts` setting applied (the tab's part here, the
 * thresholds sent to the server, see alertsSettings.ts).
 */
import { Notification } from '@jupyterlab/apputils';

import { AlertsPoller, IAlertAction, IAlertEpisode, INotifier } from './alertsModel';
import { KernelEventsPoller } from './kernelEvents';
import { IAlertsSetting, normalizeAlertsSetting, putAlertSettings, serverChanges } from './alertsSettings';
import { IGpu } from '../gpus/gpus';
import { IKernelActions } from '../processes/processActions';
import { IAttributedProcess } from '../api/tokens';

export namespace Alerts {
  export interface IOptions {
    /** Reveal the sidebar on a GPU's card. */
    showGpu: (index: number) => void;
    kernelActions: IKernelActions;
    /** The GPUs as the panel knows them (the memory a shutdown frees). */
    gpus: () => readonly IGpu[];
  }
}

const notifier: INotifier = {
  emit: (message, type, options) => Notification.emit(message, type, options),
  update: args => Notification.update(args)
};

/** The buttons of an episode's notification: "Show GPU"; for an open idle kernel, "Shut down kernel". */
export function episodeActions(ep: IAlertEpisode, options: Alerts.IOptions): IAlertAction[] {
  const actions: IAlertAction[] = [
    { label: 'Show GPU', caption: `Open the GPU sidebar on GPU ${ep.gpu}`, callback: () => options.showGpu(ep.gpu) }
  ];
  if (ep.kind === 'idle_kernel' && ep.end === null && ep.kernel_id) {
    const proc = episodeProcess(ep);
    const held = ep.memory_bytes ? { gpu: ep.gpu, bytes: ep.memory_bytes } : undefined;
    actions.push({
      label: 'Shut down kernel',
      caption: `Shut down the kernel of ${ep.notebook_path ?? ep.kernel_id} (asks first)`,
      displayType: 'warn',
      callback: () => void options.kernelActions.run('shutdown', proc, options.gpus(), held)
    });
  }
  return actions;
}

/** The process an idle-kernel episode names, as a process row would give it. */
function episodeProcess(ep: IAlertEpisode): IAttributedProcess {
  return {
    pid: ep.pid ?? 0,
    kernel_id: ep.kernel_id,
    notebook_path: ep.notebook_path,
    used_memory_bytes: ep.memory_bytes
  } as IAttributedProcess;
}

export class Alerts {
  constructor(options: Alerts.IOptions) {
    this.poller = new AlertsPoller({
      notifier,
      actions: ep => episodeActions(ep, options),
      store: storage()
    });
    // A kernel that died (and why) or was culled: a notification in every tab (kernelEvents.ts).
    this.kernelEvents = new KernelEventsPoller(notifier, storage());
    this.kernelEvents.start();
  }

  readonly poller: AlertsPoller;
  readonly kernelEvents: KernelEventsPoller;

  /** Apply the raw `alerts` setting: the tab's part at once, then the server's where it differs. */
  async applySetting(raw: unknown): Promise<void> {
    const setting = normalizeAlertsSetting(raw);
    this.poller.configure(setting);
    if (setting.enabled && Object.keys(setting.server).length) {
      await this._sendToServer(setting);
    }
  }

  private async _sendToServer(setting: IAlertsSetting): Promise<void> {
    await this.poller.refresh(); // the server's settings now
    const current = this.poller.alerts;
    const changes = current?.enabled ? serverChanges(setting.server, current.settings) : null;
    if (!changes) {
      return;
    }
    try {
      await putAlertSettings(changes);
      await this.poller.refresh();
    } catch (error) {
      const why = error instanceof Error ? error.message : String(error);
      Notification.error(`GPU alerts: the server refused the alert settings: ${why}`, { autoClose: false });
    }
  }
}

function storage(): Storage | null {
  try {
    return window.sessionStorage;
  } catch {
    return null; // refused (some privacy settings): once per page instead of once per tab
  }
}
