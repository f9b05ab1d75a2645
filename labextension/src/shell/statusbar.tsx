/**
 * The status-bar item: GPU utilization and memory at a glance ("GPU 97% · 37/141 GiB");
 * a click opens the GPU sidebar. See `summarize` (format.ts) for what multi-GPU numbers mean.
 */
import { GroupItem, TextItem } from '@jupyterlab/statusbar';
import { ReactWidget } from '@jupyterlab/ui-components';
import * as React from 'react';

import { ILatestValues, staleTitle, summarize } from '../ui/format';
import { gpuIcon } from './icons';
import { IGpu } from '../gpus/gpus';
import { GpuModel } from '../gpus/model';

/** The text and tooltip of the item; the tooltip says first when the server runs another gpu-widgets. */
export function statusText(model: GpuModel): { text: string; title: string } {
  const shown = stateText(model);
  const problem = model.versionProblem;
  return problem ? { text: shown.text, title: `${problem}\n${shown.title}` } : shown;
}

/** The text and tooltip for the model's current state. */
function stateText(model: GpuModel): { text: string; title: string } {
  const state = model.state;
  switch (state.kind) {
    case 'loading':
      return { text: 'GPU …', title: 'The GPU monitor is starting' };
    case 'starting':
      return { text: 'GPU …', title: `The GPU monitor is starting${state.reason ? `: ${state.reason}` : ''}` };
    case 'stale':
      return {
        text: 'GPU stale',
        title: `${staleTitle(state.sampleAgeS)}: ${state.reason ?? 'no reason given'}. Click to open the GPU Dashboard.`
      };
    case 'no_gpu':
      return { text: 'No GPU', title: `No NVIDIA GPU available: ${state.reason ?? 'no reason given'}` };
    case 'extension_missing':
      return { text: 'GPU n/a', title: 'The gpu-widgets server extension is not enabled (open the GPU panel)' };
    case 'forbidden':
    case 'server_error':
    case 'network':
      return { text: 'GPU ⚠', title: `The GPU monitor cannot update: ${state.message}` };
    case 'ok': {
      const summary = summarize(model.gpus.map(latestOf));
      if (!summary) {
        return { text: 'GPU …', title: 'Waiting for the first GPU sample' };
      }
      const sim = model.simulated ? 'SIMULATED GPUs (made-up readings)\n' : '';
      return { text: summary.text, title: `${sim}${summary.title}\nClick to open the GPU Dashboard.` };
    }
  }
}

function latestOf(gpu: IGpu): ILatestValues {
  return gpu.latest ?? { index: gpu.index, lost: gpu.lost, values: {} };
}

export class GpuStatusItem extends ReactWidget {
  constructor(model: GpuModel, open: () => void) {
    super();
    this._model = model;
    this._open = open;
    this.addClass('jp-GpuWidgets-statusItem');
    this.node.setAttribute('role', 'button');
    this.node.tabIndex = 0;
    this.node.addEventListener('click', this._open);
    this.node.addEventListener('keydown', this._onKey);
    model.changed.connect(this._onChanged, this);
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.node.removeEventListener('click', this._open);
    this.node.removeEventListener('keydown', this._onKey);
    this._model.changed.disconnect(this._onChanged, this);
    super.dispose();
  }

  protected render(): JSX.Element {
    const { text, title } = statusText(this._model);
    this.node.title = title;
    this.node.setAttribute('aria-label', `GPU status: ${text}. Open the GPU Dashboard.`);
    const sim = this._model.simulated && this._model.state.kind === 'ok';
    return (
      <GroupItem spacing={4}>
        <gpuIcon.react tag="span" className="jp-GpuWidgets-statusIcon" />
        {sim && <span className="jp-GpuWidgets-statusSim">SIM</span>}
        <TextItem source={text} className="jp-GpuWidgets-statusText" />
      </GroupItem>
    );
  }

  private _onChanged(): void {
    this.update();
  }

  private _onKey = (event: KeyboardEvent): void => {
    if (event.key === 'Enter' || event.key === ' ') {
      event.preventDefault();
      this._open();
    }
  };

  private _model: GpuModel;
  private _open: () => void;
}
