/**
 * One open notebook's GPU lines: follows its kernel's messages (cellRuns.ts), asks the server for
 * each cell's cost (cellCosts.ts), draws the line under each code cell that used a GPU
 * (cellLine.ts) and, with the setting on, keeps the summary in the cell's metadata. A notebook
 * opened with such metadata shows its lines from it, with or without a server.
 */
import { Cell } from '@jupyterlab/cells';
import { NotebookPanel } from '@jupyterlab/notebook';
import { Kernel, KernelMessage } from '@jupyterlab/services';
import { ISignal, Signal } from '@lumino/signaling';

import { requestAPI } from '../api/request';
import { ICellSummary } from '../api/tokens';
import { CellCosts, ICellRecord } from './cellCosts';
import { CellLine } from './cellLine';
import { CellRuns, IMessageLike } from './cellRuns';
import { METADATA_KEY, readStored, toStored } from './cellText';

export interface ICellSettings {
  /** Draw the lines (and ask for them) at all. */
  showCellLines: boolean;
  /** Keep each cell's summary in its metadata (`gpu_widgets`). */
  storeInMetadata: boolean;
}

/** A row of the notebook's bill: a cell that used a GPU. */
export interface IBillRow {
  cellId: string;
  /** Position in the notebook. */
  position: number;
  executionCount: number | null;
  firstLine: string;
  summary: ICellSummary;
  running: boolean;
}

/** The first line of a cell's source, at most this long in the bill. */
const FIRST_LINE_CHARS = 80;

export class NotebookHost {
  constructor(panel: NotebookPanel, settings: ICellSettings) {
    this.panel = panel;
    this._settings = settings;
    this.costs = new CellCosts({
      host: {
        draw: record => this._draw(record),
        finished: record => this._store(record),
        changed: () => this._changed.emit()
      },
      request: (kernelId, start, end, nextStart) =>
        requestAPI<ICellSummary>('cells/summary', {
          kernel_id: kernelId,
          start,
          end: end ?? undefined,
          next_start: nextStart ?? undefined
        })
    });
    const session = panel.sessionContext;
    session.kernelChanged.connect(this._onKernelChanged, this);
    session.statusChanged.connect(this._onStatus, this);
    this._follow(session.session?.kernel ?? null);
    panel.content.model?.cells.changed.connect(this._onCellsChanged, this);
    void panel.context.ready.then(() => this._restore());
    panel.disposed.connect(() => this.dispose());
  }

  readonly panel: NotebookPanel;
  readonly costs: CellCosts;

  /** The bill's rows changed. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  set settings(settings: ICellSettings) {
    const linesChanged = settings.showCellLines !== this._settings.showCellLines;
    this._settings = settings;
    if (linesChanged) {
      for (const record of this.costs.records.values()) {
        this._draw(record);
      }
      this._changed.emit();
    }
  }

  /** The cells that used a GPU, in notebook order. */
  rows(): IBillRow[] {
    const rows: IBillRow[] = [];
    const cells = this.panel.content.model?.cells;
    if (!cells) {
      return rows;
    }
    const records = this.costs.records;
    for (let position = 0; position < cells.length; position++) {
      const model = cells.get(position);
      const record = records.get(model.id);
      if (!record?.summary?.gpus.length) {
        continue;
      }
      const source = model.sharedModel.getSource();
      const count = model.type === 'code' ? (model as unknown as { executionCount: number | null }).executionCount : null;
      rows.push({
        cellId: model.id,
        position,
        executionCount: count,
        firstLine: source.split('\n', 1)[0].slice(0, FIRST_LINE_CHARS),
        summary: record.summary,
        running: record.end === null
      });
    }
    return rows;
  }

  /** Scroll to the cell and make it the active one (a bill row's click). */
  showCell(cellId: string): void {
    const notebook = this.panel.content;
    const index = notebook.widgets.findIndex(c => c.model.id === cellId);
    if (index < 0) {
      return;
    }
    notebook.activeCellIndex = index;
    void notebook.scrollToCell(notebook.widgets[index], 'center');
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    this.costs.dispose();
    this._follow(null);
    for (const line of this._lines.values()) {
      line.dispose();
    }
    this._lines.clear();
    Signal.clearData(this);
  }

  private _cell(cellId: string): Cell | undefined {
    return this.panel.content.widgets.find(c => c.model.id === cellId);
  }

  private _draw(record: ICellRecord): void {
    const existing = this._lines.get(record.cellId);
    const cell = this._cell(record.cellId);
    const summary = this._settings.showCellLines ? record.summary : null;
    if (!cell || !summary || !summary.gpus.length) {
      existing?.dispose();
      this._lines.delete(record.cellId);
      return;
    }
    let line = existing;
    if (!line || line.isDisposed) {
      line = new CellLine();
      this._lines.set(record.cellId, line);
      line.attachTo(cell);
    }
    line.render(summary, record.end === null);
  }

  private _store(record: ICellRecord): void {
    if (!this._settings.storeInMetadata || !record.summary) {
      return; // off: nothing is ever written to the notebook
    }
    const model = this._cell(record.cellId)?.model;
    if (!model) {
      return;
    }
    if (record.summary.gpus.length) {
      model.setMetadata(METADATA_KEY, toStored(record.summary));
    } else if (model.getMetadata(METADATA_KEY) !== undefined) {
      model.deleteMetadata(METADATA_KEY); // run again without a GPU: the old figures are not this run's
    }
  }

  private _restore(): void {
    const cells = this.panel.content.model?.cells;
    if (!cells || this._disposed) {
      return;
    }
    for (let i = 0; i < cells.length; i++) {
      const model = cells.get(i);
      const stored = model.type === 'code' ? model.getMetadata(METADATA_KEY) : undefined;
      if (stored === undefined) {
        continue;
      }
      const summary = readStored(stored);
      if (summary) {
        this.costs.restore(model.id, summary);
      } else {
        console.warn(`gpu-widgets: cell ${i + 1}'s ${METADATA_KEY} metadata is not a GPU summary this version reads; ignored`);
      }
    }
  }

  private _onCellsChanged(): void {
    // A deleted cell's record goes; its line went with its widget.
    const cells = this.panel.content.model?.cells;
    if (!cells) {
      return;
    }
    const ids = new Set<string>();
    for (let i = 0; i < cells.length; i++) {
      ids.add(cells.get(i).id);
    }
    for (const cellId of [...this.costs.records.keys()]) {
      if (!ids.has(cellId)) {
        this._lines.get(cellId)?.dispose();
        this._lines.delete(cellId);
        this.costs.forget(cellId);
      }
    }
  }

  private _onKernelChanged(): void {
    this._interrupted();
    this._follow(this.panel.sessionContext.session?.kernel ?? null);
  }

  private _onStatus(_: unknown, status: Kernel.Status): void {
    if (status === 'restarting' || status === 'autorestarting' || status === 'dead') {
      this._interrupted();
    }
  }

  /** The running cells end now: their lines then say the kernel restarted. */
  private _interrupted(): void {
    for (const event of this._runs.interrupted(this.costs.serverNow())) {
      this.costs.ended(event.cellId, event.time);
    }
  }

  private _follow(kernel: Kernel.IKernelConnection | null): void {
    this._kernel?.anyMessage.disconnect(this._onMessage, this);
    this._kernel = kernel;
    kernel?.anyMessage.connect(this._onMessage, this);
  }

  private _onMessage(kernel: Kernel.IKernelConnection, args: Kernel.IAnyMessageArgs): void {
    if (!this._settings.showCellLines) {
      return;
    }
    const msg = args.msg as KernelMessage.IMessage as unknown as IMessageLike;
    const event = this._runs.onMessage(msg, args.direction, this.costs.serverNow());
    if (event?.kind === 'started') {
      this.costs.started(event.cellId, kernel.id, event.time);
    } else if (event?.kind === 'ended') {
      this.costs.ended(event.cellId, event.time);
    }
  }

  private _changed = new Signal<this, void>(this);
  private _disposed = false;
  private _kernel: Kernel.IKernelConnection | null = null;
  private _lines = new Map<string, CellLine>();
  private _runs = new CellRuns();
  private _settings: ICellSettings;
}
