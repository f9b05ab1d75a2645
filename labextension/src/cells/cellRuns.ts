/**
 * When each cell ran, by the kernel's own clock: the execute_request JupyterLab sends names the
 * cell (`metadata.cellId`), the kernel's execute_input says when it started (a cell queued behind
 * another has none yet) and its execute_reply when it ended. Times are the messages' header dates,
 * written by the kernel on the server's machine: the server's history is on that clock, the
 * browser's may not be.
 *
 * Kept free of JupyterLab imports (messages are read by shape) so that jest can use it in plain node.
 */

/** The parts of a Jupyter message read here. */
export interface IMessageLike {
  channel?: string;
  header: { msg_id: string; msg_type: string; date?: string };
  parent_header?: { msg_id?: string } | Record<string, never>;
  metadata?: { [key: string]: unknown };
  content?: { [key: string]: unknown };
}

export interface ICellRunEvent {
  kind: 'started' | 'ended';
  cellId: string;
  /** Unix seconds by the kernel's clock (the browser's when the message has no date). */
  time: number;
}

/** Requests waiting for their execute_input: a kernel that never answers must not grow this. */
export const MAX_PENDING = 1000;

/** A message's header date in unix seconds, or null. */
export function messageTime(msg: IMessageLike): number | null {
  const date = msg.header.date;
  if (typeof date !== 'string') {
    return null;
  }
  const ms = Date.parse(date);
  return Number.isFinite(ms) ? ms / 1000 : null;
}

export class CellRuns {
  /**
   * One message the kernel connection saw (`anyMessage`); the cell event it makes, if any.
   * `now` is the fallback clock, unix seconds.
   */
  onMessage(msg: IMessageLike, direction: 'send' | 'recv', now: number): ICellRunEvent | null {
    const type = msg.header.msg_type;
    if (direction === 'send') {
      const cellId = msg.metadata?.cellId;
      if (type === 'execute_request' && typeof cellId === 'string' && cellId) {
        this._pending.set(msg.header.msg_id, cellId);
        if (this._pending.size > MAX_PENDING) {
          this._pending.delete(this._pending.keys().next().value as string);
        }
      }
      return null;
    }
    const parent = (msg.parent_header as { msg_id?: string } | undefined)?.msg_id;
    if (!parent) {
      return null;
    }
    if (type === 'execute_input') {
      const cellId = this._pending.get(parent);
      if (cellId === undefined) {
        return null;
      }
      this._pending.delete(parent);
      this._running.set(parent, cellId);
      return { kind: 'started', cellId, time: messageTime(msg) ?? now };
    }
    if (type === 'execute_reply') {
      this._pending.delete(parent); // a request the kernel skipped (an error before it) never starts
      const cellId = this._running.get(parent);
      if (cellId === undefined) {
        return null;
      }
      this._running.delete(parent);
      return { kind: 'ended', cellId, time: messageTime(msg) ?? now };
    }
    return null;
  }

  /** The kernel restarted, died or was replaced: every cell still running ends now, none waits. */
  interrupted(now: number): ICellRunEvent[] {
    const ended = [...this._running.values()].map(cellId => ({ kind: 'ended' as const, cellId, time: now }));
    this._running.clear();
    this._pending.clear();
    return ended;
  }

  /** Cells started and not yet ended. */
  get running(): string[] {
    return [...this._running.values()];
  }

  private _pending = new Map<string, string>(); // execute_request msg_id -> cell id
  private _running = new Map<string, string>();
}
