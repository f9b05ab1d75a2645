import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ISettingRegistry } from '@jupyterlab/settingregistry';

import { normalizeRefreshInterval } from './settings';

/** Must match the schema file labextension/schema/plugin.json. */
const PLUGIN_ID = 'gpu-widgets:plugin';

/**
 * The gpu-widgets front-end plugin.
 *
 * For now it only announces itself and reads its settings; the GPU sidebar
 * builds on it. The activation message is what the browser test waits for.
 */
const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'A GPU monitor for JupyterLab.',
  autoStart: true,
  optional: [ISettingRegistry],
  activate: (
    app: JupyterFrontEnd,
    settingRegistry: ISettingRegistry | null
  ): void => {
    console.log('gpu-widgets extension activated');

    if (settingRegistry) {
      settingRegistry
        .load(PLUGIN_ID)
        .then(settings => {
          const read = (): number =>
            normalizeRefreshInterval(settings.get('refreshIntervalMs').composite);
          console.debug(`gpu-widgets: refresh interval ${read()} ms`);
          settings.changed.connect(() => {
            console.debug(`gpu-widgets: refresh interval now ${read()} ms`);
          });
        })
        .catch(reason => {
          console.error('gpu-widgets: failed to load settings.', reason);
        });
    }
  }
};

export default plugin;
