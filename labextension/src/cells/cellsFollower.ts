/**
 * Every open notebook gets its host (notebookHost.ts) as it opens; the active one feeds the
 * sidebar's bill. Settings apply to all of them at once.
 */
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';

import { BillSource } from './bill';
import { ICellSettings, NotebookHost } from './notebookHost';

export class CellsFollower {
  constructor(tracker: INotebookTracker) {
    this._tracker = tracker;
    tracker.widgetAdded.connect((_, panel) => this._add(panel));
    tracker.forEach(panel => this._add(panel));
    tracker.currentChanged.connect(this._follow, this);
    this._follow();
  }

  readonly bill = new BillSource();

  configure(settings: ICellSettings): void {
    this._settings = settings;
    this.bill.enabled = settings.showCellLines;
    for (const host of this._hosts.values()) {
      host.settings = settings;
    }
  }

  private _add(panel: NotebookPanel): void {
    if (this._hosts.has(panel)) {
      return;
    }
    const host = new NotebookHost(panel, this._settings);
    this._hosts.set(panel, host);
    panel.disposed.connect(() => {
      this._hosts.delete(panel);
      this._follow();
    });
    this._follow();
  }

  private _follow(): void {
    const current = this._tracker.currentWidget;
    this.bill.host = (current && this._hosts.get(current)) ?? null;
  }

  private _hosts = new Map<NotebookPanel, NotebookHost>();
  private _settings: ICellSettings = { showCellLines: true, storeInMetadata: false };
  private _tracker: INotebookTracker;
}
