/**
 * The buttons of a process row: its kernel's (processActions.ts says which rows have them), or
 * Kill for an orphan the kernel left behind (orphanActions.ts).
 */
import * as React from 'react';

import { IGpu } from '../gpus/gpus';
import { ACTION_LABELS, IKernelActions, kernelActionsFor } from './processActions';
import { killOffered } from './orphanActions';
import { IAttributedProcess } from '../api/tokens';

export function KernelButtons(props: {
  proc: IAttributedProcess;
  gpus: readonly IGpu[];
  actions: IKernelActions | null | undefined;
}): JSX.Element | null {
  const { proc, gpus, actions } = props;
  const offered = actions ? kernelActionsFor(proc) : [];
  if (actions && killOffered(proc)) {
    return (
      <div className="jp-GpuWidgets-kernelActions" role="group" aria-label={`Orphaned process ${proc.pid}`}>
        <button
          className="jp-GpuWidgets-kernelAction jp-GpuWidgets-kill jp-mod-styled jp-mod-warn"
          title={`Kill process ${proc.pid}: SIGTERM, then SIGKILL after 5 s (its kernel has ended)`}
          onClick={() => void actions.kill(proc, gpus)}
        >
          Kill
        </button>
      </div>
    );
  }
  if (!actions || !offered.length) {
    return null;
  }
  const who = proc.notebook_path ?? `kernel ${proc.kernel_id}`;
  return (
    <div className="jp-GpuWidgets-kernelActions" role="group" aria-label={`Kernel of process ${proc.pid}`}>
      {offered.map(action => (
        <button
          key={action}
          className={`jp-GpuWidgets-kernelAction jp-mod-styled${action === 'shutdown' ? ' jp-mod-warn' : ''}`}
          title={`${ACTION_LABELS[action]}: ${who} (through Jupyter's kernel API)`}
          onClick={() => void actions.run(action, proc, gpus)}
        >
          {ACTION_LABELS[action]}
        </button>
      ))}
    </div>
  );
}
