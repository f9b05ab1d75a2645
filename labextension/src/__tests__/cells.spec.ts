import { ICellGpu, ICellSummary } from '../api/tokens';
import { sortRows, totalText } from '../cells/bill';
import { CellCosts, ICellRecord, POLL_MS, SETTLE_TRIES } from '../cells/cellCosts';
import { CellRuns, MAX_PENDING } from '../cells/cellRuns';
import {
  cellLine,
  cellTitle,
  formatCellDuration,
  formatChange,
  formatElapsed,
  formatEnergy,
  readStored,
  runningLine,
  toStored
} from '../cells/cellText';
import type { IBillRow } from '../cells/notebookHost';

const GIB = 1024 ** 3;

function gpu(index: number, extra: Partial<ICellGpu> = {}): ICellGpu {
  return {
    index,
    uuid: `GPU-${index}`,
    name: 'NVIDIA H100 80GB HBM3',
    peak_memory_bytes: 12.3 * GIB,
    memory_change_bytes: 2.1 * GIB,
    memory_unknown: false,
    shared_with: 0,
    busy_percent: 87,
    sm_percent: 64,
    energy_j: 9800,
    slowdowns: [],
    lost: false,
    samples: 41,
    ...extra
  };
}

function summary(gpus: ICellGpu[], extra: Partial<ICellSummary> = {}): ICellSummary {
  return {
    kernel_id: 'k1',
    start: 1000,
    end: 1041,
    running: false,
    duration_s: 41,
    gpus,
    held_only: [],
    restarted: false,
    restarted_at: [],
    history_from: null,
    partial: false,
    final: true,
    server_time: 1042,
    ...extra
  };
}

describe('the cell line', () => {
  it('reads as the issue writes it for one GPU', () => {
    expect(cellLine(summary([gpu(0)]))).toBe('GPU 0 · 41 s · busy 87 % (SM 64 %) · peak 12.3 GiB (+2.1 GiB) · 9.8 kJ');
  });

  it('is absent for a cell that used no GPU', () => {
    expect(cellLine(summary([]))).toBeNull();
    expect(runningLine(summary([], { running: true }))).toBeNull();
  });

  it('has one part per GPU for two, and one sum for eight with each GPU on hover', () => {
    const two = cellLine(summary([gpu(0), gpu(1, { busy_percent: 40, sm_percent: null, memory_change_bytes: -512 * 1024 ** 2 })]));
    expect(two).toBe(
      '41 s · GPU 0: busy 87 % (SM 64 %) · peak 12.3 GiB (+2.1 GiB) · 9.8 kJ  |  GPU 1: busy 40 % · peak 12.3 GiB (-512 MiB) · 9.8 kJ'
    );
    const eight = summary([0, 1, 2, 3, 4, 5, 6, 7].map(i => gpu(i, { peak_memory_bytes: 10 * GIB, memory_change_bytes: GIB, energy_j: 1000 })));
    expect(cellLine(eight)).toBe('8 GPUs · 41 s · busy 87 % (SM 64 %) · peak 80 GiB (+8 GiB) · 8 kJ');
    const title = cellTitle(eight);
    expect(title.split('\n').filter(l => l.startsWith('GPU ')).length).toBe(8);
    expect(title).toContain('GPU 7 (NVIDIA H100 80GB HBM3): busy 87 %');
  });

  it('says when the GPU was shared, throttled, lost, unknown, or the kernel restarted', () => {
    expect(cellLine(summary([gpu(0, { shared_with: 2, slowdowns: ['sw_thermal_slowdown', 'hw_thermal_slowdown', 'sw_power_cap'] })]))).toBe(
      'GPU 0 · 41 s · busy 87 % (SM 64 %) · peak 12.3 GiB (+2.1 GiB) · 9.8 kJ · shared with 2 other processes · thermal slowdown · power capped'
    );
    expect(cellTitle(summary([gpu(0, { shared_with: 1 })]))).toContain('busy and energy are the whole GPU');
    expect(cellLine(summary([gpu(0, { lost: true })]))).toBe('GPU 0 · 41 s · lost during the cell (no figures)');
    const unknown = gpu(0, { memory_unknown: true, peak_memory_bytes: null, memory_change_bytes: null });
    expect(cellLine(summary([unknown]))).toBe('GPU 0 · 41 s · busy 87 % (SM 64 %) · memory unknown · 9.8 kJ');
    expect(cellLine(summary([gpu(0)], { restarted: true, restarted_at: [1020] }))).toMatch(/^kernel restarted during the cell · GPU 0/);
    const partial = summary([gpu(0)], { partial: true, history_from: 1030 });
    expect(cellLine(partial)).toMatch(/^≈ \(history from part of the cell\) · GPU 0/);
    expect(cellTitle(partial)).toContain('starts 30 s after the cell did');
  });

  it('while running: the clock, the busy mean so far and the peak', () => {
    const s = summary([gpu(0, { busy_percent: 94, peak_memory_bytes: 31.2 * GIB })], { running: true, duration_s: 83 });
    expect(runningLine(s)).toBe('running 1:23 · GPU 0 busy 94 % · peak 31.2 GiB');
  });

  it('formats durations, clocks, energy and changes', () => {
    expect([2.34, 41.4, 725, 4320, 7200].map(formatCellDuration)).toEqual(['2.3 s', '41 s', '12 min 5 s', '1 h 12 min', '2 h']);
    expect([7, 83, 3723].map(formatElapsed)).toEqual(['0:07', '1:23', '1:02:03']);
    expect([640, 9800, 1.2e6].map(formatEnergy)).toEqual(['640 J', '9.8 kJ', '1.2 MJ']);
    expect([0, 2.1 * GIB, -512 * 1024 ** 2].map(formatChange)).toEqual(['±0', '+2.1 GiB', '-512 MiB']);
  });
});

describe('the metadata copy', () => {
  it('round-trips without the server clock', () => {
    const s = summary([gpu(0), gpu(1)]);
    const stored = JSON.parse(JSON.stringify(toStored(s)));
    expect(stored.cell.summary.server_time).toBeUndefined();
    expect(readStored(stored)).toEqual({ ...s, server_time: s.end });
  });

  it('refuses what is not whole: a notebook is anyone’s file', () => {
    const good = JSON.parse(JSON.stringify(toStored(summary([gpu(0)]))));
    const broken = [
      null,
      'text',
      {},
      { cell: { v: 2, summary: good.cell.summary } },
      { cell: { v: 1, summary: { ...good.cell.summary, gpus: 'many' } } },
      { cell: { v: 1, summary: { ...good.cell.summary, duration_s: -1 } } },
      { cell: { v: 1, summary: { ...good.cell.summary, gpus: [{ ...good.cell.summary.gpus[0], busy_percent: '87' }] } } },
      { cell: { v: 1, summary: { ...good.cell.summary, gpus: [{ ...good.cell.summary.gpus[0], slowdowns: [1] }] } } },
      { cell: { v: 1, summary: { ...good.cell.summary, gpus: new Array(65).fill(good.cell.summary.gpus[0]) } } }
    ];
    for (const value of broken) {
      expect(readStored(value)).toBeNull();
    }
    expect(readStored(good)).not.toBeNull();
  });
});

describe('CellRuns', () => {
  const request = (id: string, cellId?: string) => ({
    header: { msg_id: id, msg_type: 'execute_request' },
    metadata: cellId ? { cellId } : {}
  });
  const reply = (type: string, parent: string, date: string) => ({
    header: { msg_id: `${type}-${parent}`, msg_type: type, date },
    parent_header: { msg_id: parent }
  });

  it('starts a cell at its execute_input and ends it at its reply, by the kernel’s dates', () => {
    const runs = new CellRuns();
    expect(runs.onMessage(request('m1', 'c1'), 'send', 0)).toBeNull();
    expect(runs.onMessage(request('m2', 'c2'), 'send', 0)).toBeNull();
    // the second is queued: nothing until its execute_input
    expect(runs.running).toEqual([]);
    expect(runs.onMessage(reply('execute_input', 'm1', '2026-12-07T12:00:00.250000Z'), 'recv', 0)).toEqual({
      kind: 'started',
      cellId: 'c1',
      time: Date.UTC(2026, 11, 7, 12, 0, 0, 250) / 1000
    });
    expect(runs.running).toEqual(['c1']);
    expect(runs.onMessage(reply('status', 'm1', '2026-12-07T12:00:01Z'), 'recv', 0)).toBeNull();
    expect(runs.onMessage(reply('execute_reply', 'm1', '2026-12-07T12:00:41Z'), 'recv', 0)).toEqual({
      kind: 'ended',
      cellId: 'c1',
      time: Date.UTC(2026, 11, 7, 12, 0, 41) / 1000
    });
    // a request without a cell (a console's, the kernel's comm) is not a cell's
    expect(runs.onMessage(request('m3'), 'send', 0)).toBeNull();
    expect(runs.onMessage(reply('execute_input', 'm3', '2026-12-07T12:00:42Z'), 'recv', 0)).toBeNull();
  });

  it('ends the running cells when the kernel goes, and stays bounded when it never answers', () => {
    const runs = new CellRuns();
    runs.onMessage(request('m1', 'c1'), 'send', 0);
    runs.onMessage(reply('execute_input', 'm1', 'not a date'), 'recv', 77);
    expect(runs.interrupted(99)).toEqual([{ kind: 'ended', cellId: 'c1', time: 99 }]);
    expect(runs.running).toEqual([]);
    for (let i = 0; i < MAX_PENDING + 50; i++) {
      runs.onMessage(request(`q${i}`, `c${i}`), 'send', 0);
    }
    expect(runs.onMessage(reply('execute_input', 'q0', '2026-12-07T12:00:00Z'), 'recv', 0)).toBeNull();
    expect(runs.onMessage(reply('execute_input', `q${MAX_PENDING + 49}`, '2026-12-07T12:00:00Z'), 'recv', 0)?.cellId).toBe(
      `c${MAX_PENDING + 49}`
    );
  });
});

/** A clock and timers the test moves by hand. */
class Clock {
  now = 1000;
  timers = new Map<number, { at: number; fn: () => void }>();
  next = 1;
  set = (fn: () => void, ms: number): number => {
    this.timers.set(this.next, { at: this.now + ms / 1000, fn });
    return this.next++;
  };
  clear = (h: number): void => void this.timers.delete(h);
  async advance(seconds: number): Promise<void> {
    const until = this.now + seconds;
    for (;;) {
      await new Promise(r => setTimeout(r, 0)); // answers already in flight land first
      const due = [...this.timers.entries()].filter(([, t]) => t.at <= until).sort((a, b) => a[1].at - b[1].at)[0];
      if (!due) {
        break;
      }
      this.timers.delete(due[0]);
      this.now = due[1].at;
      due[1].fn();
      await new Promise(r => setTimeout(r, 0));
    }
    this.now = until;
    await new Promise(r => setTimeout(r, 0));
  }
}

describe('CellCosts', () => {
  function make(answer: (kernelId: string, start: number, end: number | null) => Promise<ICellSummary>) {
    const clock = new Clock();
    const drawn: string[] = [];
    const finished: ICellRecord[] = [];
    const asked: [number, number | null][] = [];
    const nexts: (number | null)[] = [];
    const costs = new CellCosts({
      host: {
        draw: r => drawn.push(r.summary ? (r.end === null ? runningLine(r.summary) : cellLine(r.summary)) ?? '-' : '-'),
        finished: r => finished.push(r),
        changed: () => undefined
      },
      request: (k, s, e, n) => (asked.push([s, e]), nexts.push(n), answer(k, s, e)),
      now: () => clock.now,
      setTimer: clock.set,
      clearTimer: clock.clear
    });
    return { clock, costs, drawn, finished, asked, nexts };
  }

  it('asks every 2 s while a cell runs, once when it ends, and nothing when idle', async () => {
    const t = make(async (_k, start, end) =>
      summary([gpu(0)], { start, end: end ?? 0, running: end === null, duration_s: (end ?? 1010) - start, final: end !== null })
    );
    t.costs.started('c1', 'k1', 1000);
    await t.clock.advance(9);
    expect(t.asked.length).toBe(Math.floor(9000 / POLL_MS));
    expect(t.asked.every(([s, e]) => s === 1000 && e === null)).toBe(true);
    expect(t.drawn[t.drawn.length - 1]).toMatch(/^running 0:10 · GPU 0 busy 87 %/);
    t.costs.ended('c1', 1009.5);
    await t.clock.advance(0);
    expect(t.asked[t.asked.length - 1]).toEqual([1000, 1009.5]);
    expect(t.finished.map(r => r.cellId)).toEqual(['c1']);
    const count = t.asked.length;
    await t.clock.advance(600);
    expect(t.asked.length).toBe(count);
    expect(t.costs.busy).toBe(0);
  });

  it('tells the server when the next cell began (Run All), so its memory is not this one’s', async () => {
    const t = make(async (_k, start, end) => summary([gpu(0)], { start, end: end ?? 0, final: false }));
    t.costs.started('c1', 'k1', 1000);
    t.costs.ended('c1', 1001);
    t.costs.started('c2', 'k1', 1001.01);
    await t.clock.advance(1.5);
    expect(t.nexts[0]).toBeNull(); // asked as it ended: nothing after it yet
    expect(t.nexts.slice(1).filter(n => n !== null)).toContain(1001.01);
  });

  it('asks again until the answer is final, a bounded number of times', async () => {
    const t = make(async (_k, start, end) => summary([gpu(0)], { start, end: end ?? 0, final: false }));
    t.costs.started('c1', 'k1', 1000);
    t.costs.ended('c1', 1001);
    await t.clock.advance(60);
    expect(t.asked.filter(([, e]) => e !== null).length).toBe(SETTLE_TRIES);
    expect(t.finished.length).toBe(1);
    expect(t.costs.busy).toBe(0);
  });

  it('drops an answer of an earlier run, and stops at a 404', async () => {
    let release: (s: ICellSummary) => void = () => undefined;
    const t = make(() => new Promise(r => (release = r)));
    t.costs.started('c1', 'k1', 1000);
    await t.clock.advance(2);
    const slow = release;
    t.costs.started('c1', 'k1', 1005); // run again before the answer came
    slow(summary([gpu(0)], { start: 1000, running: true }));
    await t.clock.advance(0);
    expect(t.costs.records.get('c1')!.summary).toBeNull();

    const debug = jest.spyOn(console, 'debug').mockImplementation(() => undefined);
    const gone = make(() => Promise.reject(Object.assign(new Error('no kernel'), { status: 404 })));
    gone.costs.started('c1', 'k9', 1000);
    await gone.clock.advance(10);
    expect(gone.asked.length).toBe(1);
    expect(gone.costs.busy).toBe(0);
    expect(debug).toHaveBeenCalledWith(expect.stringContaining('no GPU figures for cell c1: no kernel'));
    debug.mockRestore();
  });

  it('a notebook of 2,000 cells kept in its metadata asks nothing and sorts its bill at once', async () => {
    const t = make(() => Promise.reject(new Error('must not be asked')));
    for (let i = 0; i < 2000; i++) {
      t.costs.restore(`c${i}`, summary([gpu(i % 8)], { duration_s: (i * 7) % 600 }));
    }
    await t.clock.advance(60);
    expect(t.asked).toEqual([]);
    expect(t.costs.busy).toBe(0);
    const rows = [...t.costs.records.values()].map((r, position) => ({
      cellId: r.cellId,
      position,
      executionCount: position + 1,
      firstLine: 'x',
      summary: r.summary!,
      running: false
    }));
    const sorted = sortRows(rows, { key: 'duration', descending: true });
    expect(sorted.length).toBe(2000);
    expect(sorted[0].summary.duration_s).toBe(599);
    expect(totalText(rows)).toMatch(/^2000 cells · /);
  });

  it('keeps what the metadata says and never asks for it', async () => {
    const t = make(() => Promise.reject(new Error('must not be asked')));
    t.costs.restore('c1', summary([gpu(0)]));
    await t.clock.advance(30);
    expect(t.asked).toEqual([]);
    expect(t.drawn).toEqual(['GPU 0 · 41 s · busy 87 % (SM 64 %) · peak 12.3 GiB (+2.1 GiB) · 9.8 kJ']);
  });
});

describe('the bill', () => {
  const row = (position: number, s: ICellSummary): IBillRow => ({
    cellId: `c${position}`,
    position,
    executionCount: position + 1,
    firstLine: `cell ${position}`,
    summary: s,
    running: false
  });
  const rows = [
    row(0, summary([gpu(0, { energy_j: 100 })], { duration_s: 3600 })),
    row(3, summary([gpu(0), gpu(1)], { duration_s: 1800 })),
    row(5, summary([gpu(0, { peak_memory_bytes: 40 * GIB, energy_j: null })], { duration_s: 60 }))
  ];

  it('sorts by each column and keeps notebook order for ties', () => {
    expect(sortRows(rows, { key: 'cell', descending: false }).map(r => r.position)).toEqual([0, 3, 5]);
    expect(sortRows(rows, { key: 'duration', descending: true }).map(r => r.position)).toEqual([0, 3, 5]);
    expect(sortRows(rows, { key: 'peak', descending: true }).map(r => r.position)).toEqual([5, 3, 0]);
    expect(sortRows(rows, { key: 'energy', descending: true }).map(r => r.position)).toEqual([3, 0, 5]);
    expect(sortRows(rows, { key: 'gpus', descending: true }).map(r => r.position)).toEqual([3, 0, 5]);
  });

  it('totals GPU-hours and energy', () => {
    // 1 h on one GPU + 0.5 h on two + 1 min on one
    expect(totalText(rows)).toBe('3 cells · 2.02 GPU-hours · 19.7 kJ');
    expect(totalText([rows[2]])).toBe('1 cell · 1 GPU-minute');
    expect(totalText([row(6, summary([gpu(0)], { duration_s: 20 }))])).toBe('1 cell · 20 GPU-seconds · 9.8 kJ');
  });
});
