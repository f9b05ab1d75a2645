/**
 * One notebook's cell costs: for each cell that ran, its summary from the server, asked once when
 * it ends (again, briefly, until the server has a sample past the end) and at most every
 * POLL_MS while it runs. Nothing is asked for an idle notebook, however many cells it has.
 *
 * The notebook itself is behind `ICellHost` (notebookHost.ts: the lines under the cells, the cell
 * metadata), the server behind `request`: kept free of JupyterLab imports for jest.
 */
import { ICellSummary } from '../api/tokens';

/** A running cell's line is asked for at most this often. */
export const POLL_MS = 2000;
/** A finished cell is asked again this long after an answer that was not final... */
export const SETTLE_MS = 1000;
/** ...at most this many times (the server books a sample every slow interval, 2 s by default). */
export const SETTLE_TRIES = 8;

export interface ICellRecord {
  cellId: string;
  kernelId: string;
  /** Unix seconds, the kernel's clock. */
  start: number;
  /** Null while it runs. */
  end: number | null;
  /** The latest answer (or the one kept in the metadata); null before the first. */
  summary: ICellSummary | null;
  /** From the notebook's metadata, not asked of a server. */
  restored: boolean;
}

export interface ICellHost {
  /** Draw (or remove, when `record.summary` has no GPU) the line under the cell. */
  draw(record: ICellRecord): void;
  /** The cell's final summary: kept in its metadata where the setting says so. */
  finished(record: ICellRecord): void;
  /** Any record changed (the bill redraws). */
  changed(): void;
}

export interface ICellCostsOptions {
  host: ICellHost;
  /** `nextStart`: when the kernel's next cell started, where one did after this one ended. */
  request: (kernelId: string, start: number, end: number | null, nextStart: number | null) => Promise<ICellSummary>;
  /** Unix seconds by this browser's clock. */
  now?: () => number;
  setTimer?: (fn: () => void, ms: number) => number;
  clearTimer?: (handle: number) => void;
}

export class CellCosts {
  constructor(options: ICellCostsOptions) {
    this._host = options.host;
    this._request = options.request;
    this._now = options.now ?? (() => Date.now() / 1000);
    this._setTimer = options.setTimer ?? ((fn, ms) => window.setTimeout(fn, ms));
    this._clearTimer = options.clearTimer ?? (handle => window.clearTimeout(handle));
  }

  get records(): ReadonlyMap<string, ICellRecord> {
    return this._records;
  }

  /** Asks in flight or waiting: none while the notebook is idle. */
  get busy(): number {
    return this._timers.size + this._inFlight;
  }

  /** Now by the server's clock, as well as its last answer tells (a dead kernel's cell ends then). */
  serverNow(): number {
    return this._now() + this._offset;
  }

  started(cellId: string, kernelId: string, time: number): void {
    if (this._disposed) {
      return;
    }
    this._stop(cellId);
    const record: ICellRecord = { cellId, kernelId, start: time, end: null, summary: null, restored: false };
    this._records.set(cellId, record);
    this._host.draw(record);
    this._host.changed();
    this._schedule(record, POLL_MS, 0);
  }

  ended(cellId: string, time: number): void {
    const record = this._records.get(cellId);
    if (!record || record.end !== null || this._disposed) {
      return;
    }
    this._stop(cellId);
    record.end = Math.max(record.start, time);
    this._ask(record, 0);
  }

  /** A summary kept in the cell's metadata (a reopened notebook): drawn, never asked for. */
  restore(cellId: string, summary: ICellSummary): void {
    if (this._records.get(cellId)?.end === null) {
      return; // running now: the live figures win
    }
    const record: ICellRecord = {
      cellId,
      kernelId: summary.kernel_id,
      start: summary.start,
      end: summary.end,
      summary,
      restored: true
    };
    this._records.set(cellId, record);
    this._host.draw(record);
    this._host.changed();
  }

  /** The cell was deleted. */
  forget(cellId: string): void {
    this._stop(cellId);
    if (this._records.delete(cellId)) {
      this._host.changed();
    }
  }

  dispose(): void {
    this._disposed = true;
    for (const handle of this._timers.values()) {
      this._clearTimer(handle);
    }
    this._timers.clear();
  }

  private _stop(cellId: string): void {
    const handle = this._timers.get(cellId);
    if (handle !== undefined) {
      this._clearTimer(handle);
      this._timers.delete(cellId);
    }
  }

  private _schedule(record: ICellRecord, ms: number, tries: number): void {
    this._stop(record.cellId);
    this._timers.set(
      record.cellId,
      this._setTimer(() => {
        this._timers.delete(record.cellId);
        this._ask(record, tries);
      }, ms)
    );
  }

  /** Ask for the record's figures; the answer counts only if the record is still the cell's. */
  private _ask(record: ICellRecord, tries: number): void {
    const end = record.end;
    this._inFlight++;
    this._request(record.kernelId, record.start, end, end === null ? null : this._nextStart(record, end))
      .then(summary => {
        if (this._disposed || this._records.get(record.cellId) !== record || record.end !== end) {
          return; // run again, ended meanwhile, or forgotten: this answer is of another time
        }
        this._offset = summary.server_time - this._now();
        record.summary = summary;
        this._host.draw(record);
        this._host.changed();
        if (end === null) {
          this._schedule(record, POLL_MS, 0);
        } else if (!summary.final && tries + 1 < SETTLE_TRIES) {
          this._schedule(record, SETTLE_MS, tries + 1);
        } else {
          this._host.finished(record);
        }
      })
      .catch((error: { status?: number; message?: string }) => {
        if (this._disposed || this._records.get(record.cellId) !== record || record.end !== end) {
          return;
        }
        if (error?.status && error.status < 500) {
          // Not a kernel the server knows (another server's, ended long ago), or refused: no line.
          console.debug(`gpu-widgets: no GPU figures for cell ${record.cellId}: ${error.message ?? error}`);
          return;
        }
        // No answer: try again a little later, a bounded number of times once the cell ended.
        if (end === null) {
          this._schedule(record, POLL_MS, 0);
        } else if (tries + 1 < SETTLE_TRIES) {
          this._schedule(record, POLL_MS, tries + 1);
        }
      })
      .finally(() => {
        this._inFlight--;
      });
  }

  /** The earliest start of the kernel's cells that began at or after `end` (Run All: the next one). */
  private _nextStart(record: ICellRecord, end: number): number | null {
    let next: number | null = null;
    for (const other of this._records.values()) {
      if (other !== record && other.kernelId === record.kernelId && !other.restored && other.start >= end) {
        next = next === null ? other.start : Math.min(next, other.start);
      }
    }
    return next;
  }

  private _clearTimer: (handle: number) => void;
  private _disposed = false;
  private _host: ICellHost;
  private _inFlight = 0;
  private _now: () => number;
  private _offset = 0;
  private _records = new Map<string, ICellRecord>();
  private _request: ICellCostsOptions['request'];
  private _setTimer: (fn: () => void, ms: number) => number;
  private _timers = new Map<string, number>();
}
