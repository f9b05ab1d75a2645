/**
 * The small muted line under a code cell's outputs: what the cell cost the GPU, or, while it
 * runs, how it is going. Every GPU's figures in full on hover.
 */
import { Cell } from '@jupyterlab/cells';
import { PanelLayout, Widget } from '@lumino/widgets';

import { ICellSummary } from '../api/tokens';
import { cellLine, cellTitle, runningLine } from './cellText';

export class CellLine extends Widget {
  constructor() {
    super();
    this.addClass('jp-GpuWidgets-cellLine');
    this.node.setAttribute('role', 'note');
    this.node.setAttribute('aria-label', 'GPU use of this cell');
  }

  /** Below the cell's outputs (the last part of its layout). */
  attachTo(cell: Cell): void {
    const add = (): void => {
      if (!this.isDisposed && !cell.isDisposed) {
        (cell.layout as PanelLayout).addWidget(this);
      }
    };
    // A cell of a long notebook may not be built yet (windowed notebooks build cells as they scroll in).
    void cell.ready.then(add);
  }

  render(summary: ICellSummary, running: boolean): void {
    const text = running ? runningLine(summary) : cellLine(summary);
    this.node.textContent = text ?? '';
    this.node.title = cellTitle(summary);
    this.node.dataset.state = running ? 'running' : summary.restarted ? 'restarted' : 'done';
    this.node.classList.toggle('jp-mod-running', running);
    this.node.classList.toggle('jp-mod-warn', summary.restarted || summary.gpus.some(g => g.lost));
  }
}
