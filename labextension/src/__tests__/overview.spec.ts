/**
 * The GPU overview's rows: the catalogue's readings, owners, sorting and filtering.
 */
import { IGpu } from '../gpus/gpus';
import { filterRows, overviewRows, owners, shortName, SIMULATED_USER_TITLE, sortRows } from '../gpus/overview';
import { IAttributedProcess } from '../api/tokens';
import { catalogue, GIB, latest } from './utils';

function proc(pid: number, user: string | null): IAttributedProcess {
  return {
    pid,
    used_memory_bytes: GIB,
    name: user ? 'python' : null,
    uid: user ? 1000 : null,
    user,
    command: user ? 'python train.py' : null,
    unavailable: user ? {} : { user: 'belongs to another user (hidden)' },
    kernel_id: null,
    notebook_path: null
  } as unknown as IAttributedProcess;
}

function gpu(index: number, values: { [field: string]: number | null } = {}, extra: Partial<IGpu> = {}): IGpu {
  return {
    index,
    uuid: `GPU-${index}`,
    name: 'NVIDIA H100 80GB HBM3',
    lost: false,
    info: null,
    latest: latest(index, values),
    latestTimestamp: 1000,
    processes: [],
    processesUnavailable: null,
    unavailable: {},
    live: null,
    ...extra
  };
}

const metrics = catalogue().metrics;

describe('overviewRows', () => {
  it('reads busy, memory, temperature and power as the catalogue words them, with bar fills', () => {
    const [row] = overviewRows([gpu(3)], metrics);
    expect(row.index).toBe(3);
    expect(row.shortName).toBe('H100 80GB HBM3');
    expect(row.text).toEqual({ busy: '97 %', memory: '37/141 GiB', temperature: '71 °C', power: '612 W' });
    expect(row.fill.busy).toBeCloseTo(0.97);
    expect(row.fill.memory).toBeCloseTo(37 / 141);
    expect(row.fill.power).toBeCloseTo(612.5 / 700);
    expect(row.fill.temperature).toBeNull(); // no top known for this catalogue's temperature
    expect(row.owner).toBe('—');
  });

  it('shows a dash for a lost GPU and for a metric the catalogue lacks', () => {
    const [row] = overviewRows([gpu(0, {}, { lost: true, latest: latest(0, { lost: true }) })], metrics);
    expect(row.text.busy).toBe('—');
    expect(row.lost).toBe(true);
    const [bare] = overviewRows([gpu(0)], metrics.filter(m => m.id !== 'power'));
    expect(bare.text.power).toBe('—');
    expect(bare.readings.power).toBeNull();
  });
});

describe('owners', () => {
  it('names the users once each and counts hidden processes in the title', () => {
    const who = owners({ processes: [proc(1, 'alice'), proc(2, 'bob'), proc(3, 'alice'), proc(4, null)], processesUnavailable: null });
    expect(who.text).toBe('alice, bob');
    expect(who.title).toBe('Users: alice, bob; 1 process of another user (hidden)');
  });

  it('says "—" with no process, only hidden ones, or an unread list', () => {
    expect(owners({ processes: [], processesUnavailable: null })).toEqual({ text: '—', title: 'No processes' });
    expect(owners({ processes: [proc(1, null), proc(2, null)], processesUnavailable: null }).text).toBe('—');
    expect(owners({ processes: null, processesUnavailable: 'NVML: not supported' })).toEqual({
      text: '—',
      title: 'NVML: not supported'
    });
  });
});

describe('shortName', () => {
  it('drops the words every GPU of a node shares', () => {
    expect(shortName('Simulated NVIDIA H100 80GB HBM3')).toBe('H100 80GB HBM3');
    expect(shortName('NVIDIA GeForce RTX 4090')).toBe('RTX 4090');
    expect(shortName('NVIDIA')).toBe('NVIDIA');
    expect(shortName(null)).toBeNull();
  });
});

describe('sortRows and filterRows', () => {
  const rows = overviewRows(
    [
      gpu(0, { utilization_gpu_percent: 10, temperature_c: 50 }, { processes: [proc(1, 'alice')] }),
      gpu(1, { utilization_gpu_percent: 90, temperature_c: null }, { processes: [proc(2, 'bob')] }),
      gpu(2, { utilization_gpu_percent: 0, temperature_c: 80 }, { name: 'NVIDIA A100-SXM4-40GB' }),
      gpu(10, { utilization_gpu_percent: 90, temperature_c: 60 })
    ],
    metrics
  );
  const order = (r: { index: number }[]): number[] => r.map(x => x.index);

  it('sorts by a column either way, unknown values last and ties by index', () => {
    expect(order(sortRows(rows, 'busy', true))).toEqual([1, 10, 0, 2]);
    expect(order(sortRows(rows, 'busy', false))).toEqual([2, 0, 1, 10]);
    expect(order(sortRows(rows, 'temperature', true))).toEqual([2, 10, 0, 1]);
    expect(order(sortRows(rows, 'temperature', false))).toEqual([0, 10, 2, 1]);
    expect(order(sortRows(rows, 'index', true))).toEqual([10, 2, 1, 0]);
    expect(() => sortRows(rows, 'colour' as never, true)).toThrow('cannot sort the GPU overview by "colour"');
  });

  it('filters by index, name, owner and activity', () => {
    expect(order(filterRows(rows, '1', 'all'))).toEqual([1]); // not GPU 10, not "A100"
    expect(order(filterRows(rows, 'GPU 10', 'all'))).toEqual([10]);
    expect(order(filterRows(rows, 'a100', 'all'))).toEqual([2]);
    expect(order(filterRows(rows, 'BOB', 'all'))).toEqual([1]);
    expect(order(filterRows(rows, 'h100 alice', 'all'))).toEqual([0]);
    expect(order(filterRows(rows, '', 'busy'))).toEqual([0, 1, 10]);
    expect(order(filterRows(rows, '', 'idle'))).toEqual([2]);
    expect(order(filterRows(rows, 'nothing-like-it', 'all'))).toEqual([]);
  });
});

describe('owners of simulated processes', () => {
  it('marks the users as simulated (the backend gives them the server\'s login), never the hidden ones', () => {
    const procs = { processes: [proc(1, 'root'), proc(2, null)], processesUnavailable: null };
    const who = owners(procs, true);
    expect(who.text).toBe('root (simulated)');
    expect(who.title).toBe(`Users: root; 1 process of another user (hidden); ${SIMULATED_USER_TITLE}`);
    expect(owners(procs).text).toBe('root');
    expect(owners({ processes: [proc(2, null)], processesUnavailable: null }, true).text).toBe('—');
    const [row] = overviewRows([gpu(0, {}, { processes: procs.processes })], metrics, true);
    expect(row.owner).toBe('root (simulated)');
    expect(filterRows([row], 'root', 'all')).toHaveLength(1);
  });
});
