import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { Clipboard, ICommandPalette, IThemeManager } from '@jupyterlab/apputils';
import { INotebookTracker } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';
import { IFormRendererRegistry } from '@jupyterlab/ui-components';
import { Signal } from '@lumino/signaling';

import { Alerts } from './alerts/alerts';
import { CellsFollower } from './cells/cellsFollower';
import { ClusterModel } from './cluster/clusterModel';
import { gpuIcon } from './shell/icons';
import { KernelActions } from './processes/kernelActions';
import { metricsFieldRenderer } from './shell/metricsField';
import { GpuModel } from './gpus/model';
import {
  normalizeHistoryWindow,
  normalizeRefreshInterval,
  normalizeShowStatusBar
} from './gpus/settings';
import { GpuSidebar } from './shell/sidebar';
import { GpuStatusItem } from './shell/statusbar';

/** Must match the schema file labextension/schema/plugin.json. */
const PLUGIN_ID = 'gpu-widgets:plugin';

/** Command ids. */
export namespace CommandIDs {
  /** Open (reveal and focus) the GPU sidebar. */
  export const open = 'gpu-widgets:open';
}

/**
 * The gpu-widgets front end: the GPU sidebar (left), the `gpu-widgets:open` command (also
 * in the command palette), and a status-bar item with utilization and memory at a glance.
 * Settings (refresh interval, history window, metrics shown, status-bar item) apply live.
 */
const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'A GPU monitor for JupyterLab: a GPU sidebar and a status-bar item.',
  autoStart: true,
  optional: [
    ISettingRegistry,
    ICommandPalette,
    ILayoutRestorer,
    IStatusBar,
    IThemeManager,
    IFormRendererRegistry,
    INotebookTracker
  ],
  activate: (
    app: JupyterFrontEnd,
    settingRegistry: ISettingRegistry | null,
    palette: ICommandPalette | null,
    restorer: ILayoutRestorer | null,
    statusBar: IStatusBar | null,
    themeManager: IThemeManager | null,
    formRegistry: IFormRendererRegistry | null,
    notebooks: INotebookTracker | null
  ): void => {
    console.log('gpu-widgets extension activated');

    const model = new GpuModel();
    // Asked once: the Cluster switch shows only when the server has a Prometheus to read.
    const cluster = new ClusterModel();
    void cluster.probe();
    // A shutdown from the panel: the processes are read again at once (the memory coming back).
    const kernelActions = new KernelActions(app.serviceManager, () => void model.refreshProcesses());
    // Each notebook's cells: a GPU line under those that used one, and the sidebar's bill.
    const cells = notebooks ? new CellsFollower(notebooks) : null;
    const sidebar = new GpuSidebar({
      bill: cells?.bill ?? null,
      model,
      cluster,
      kernelActions,
      copy: text => Clipboard.copyToSystem(text),
      openPath: path => void app.commands.execute('docmanager:open', { path }),
      themeChanged: themeManager?.themeChanged ?? null
    });
    app.shell.add(sidebar, 'left', { rank: 850, type: 'GPU Dashboard' });
    restorer?.add(sidebar, sidebar.id);

    const open = (): void => app.shell.activateById(sidebar.id);
    app.commands.addCommand(CommandIDs.open, {
      label: 'Open GPU Dashboard',
      caption: 'Show the GPU sidebar: utilization, memory, temperature, power and processes per GPU',
      icon: args => (args['isPalette'] ? undefined : gpuIcon),
      execute: open
    });
    palette?.addItem({ command: CommandIDs.open, category: 'GPU' });

    // Every tab polls the server's alerts, with the sidebar open or not (alerts.ts).
    const alerts = new Alerts({
      showGpu: index => {
        open();
        sidebar.showGpu(index);
      },
      kernelActions,
      gpus: () => model.gpus
    });

    let showStatusBar = true;
    const statusBarChanged = new Signal<GpuModel, void>(model);
    if (statusBar) {
      const item = new GpuStatusItem(model, open);
      statusBar.registerStatusItem('gpu-widgets:status', {
        item,
        align: 'left',
        rank: 80,
        isActive: () => showStatusBar,
        activeStateChanged: statusBarChanged
      });
      model.setStatusBarActive(showStatusBar);
    }

    // The Settings Editor shows the `metrics` setting as labelled checkboxes (the catalogue's words).
    formRegistry?.addRenderer(`${PLUGIN_ID}.metrics`, metricsFieldRenderer(model));

    if (settingRegistry) {
      settingRegistry
        .load(PLUGIN_ID)
        .then(settings => {
          const apply = (): void => {
            const refresh = normalizeRefreshInterval(settings.get('refreshIntervalMs').composite);
            console.debug(`gpu-widgets: refresh interval ${refresh} ms`);
            model.configure({
              refreshIntervalMs: refresh,
              historyWindowS: normalizeHistoryWindow(settings.get('historyWindowS').composite)
            });
            sidebar.metricsSetting = settings.get('metrics').composite;
            const show = normalizeShowStatusBar(settings.get('showStatusBarItem').composite);
            if (show !== showStatusBar) {
              showStatusBar = show;
              statusBarChanged.emit();
            }
            model.setStatusBarActive(Boolean(statusBar) && showStatusBar);
            void alerts.applySetting(settings.get('alerts').composite);
            cells?.configure({
              showCellLines: settings.get('showCellLines').composite !== false,
              storeInMetadata: settings.get('storeInMetadata').composite === true
            });
          };
          apply();
          settings.changed.connect(apply);
        })
        .catch(reason => {
          console.error('gpu-widgets: failed to load settings.', reason);
        });
    }
  }
};

export default plugin;
