/** The words of an orphan row and of its Kill confirmation. */
import { IGpu } from '../gpus/gpus';
import { killConfirmation, killOffered, orphanWords } from '../processes/orphanActions';
import { IAttributedProcess } from '../api/tokens';
import { GIB } from './utils';

const ended = new Date(2026, 11, 4, 13, 2).getTime() / 1000;

function proc(change: Partial<IAttributedProcess> = {}): IAttributedProcess {
  return {
    pid: 4242, used_memory_bytes: GIB, name: 'python', uid: 1000, kernel_id: null, notebook_path: null,
    orphan_of: { kernel_id: 'abcdef12-3456', notebook_path: 'experiments/train.ipynb', ended }, ...change
  } as IAttributedProcess;
}

describe('orphan rows', () => {
  it('name the notebook and when its kernel ended', () => {
    expect(orphanWords(proc())).toBe('orphan of train.ipynb, kernel ended 13:02');
    expect(orphanWords(proc({ orphan_of: { kernel_id: 'abcdef12-3456', notebook_path: null, ended } })))
      .toBe('orphan of kernel abcdef12, kernel ended 13:02');
    expect(orphanWords(proc({ orphan_of: null }))).toBeNull();
  });

  it('offer Kill for the user\'s own orphans only', () => {
    expect(killOffered(proc())).toBe(true);
    expect(killOffered(proc({ uid: null }))).toBe(false);
    expect(killOffered(proc({ orphan_of: null }))).toBe(false);
  });

  it('confirm naming what Kill frees', () => {
    const p = proc();
    const gpus = [{ index: 1, processes: [p] }] as unknown as IGpu[];
    const words = killConfirmation(p, gpus);
    expect(words.body).toContain('Kill python (pid 4242), orphan of train.ipynb, kernel ended 13:02?');
    expect(words.body).toContain('frees 1 GiB of GPU memory on GPU 1.');
    expect(words.button).toBe('Kill');
    const two = [{ index: 0, processes: [{ ...p, used_memory_bytes: 2 * GIB }] }, { index: 1, processes: [p] }];
    expect(killConfirmation(p, two as unknown as IGpu[]).body)
      .toContain('frees 3 GiB of GPU memory (2 GiB on GPU 0, 1 GiB on GPU 1).');
    expect(killConfirmation(p, []).body).toBe('Kill python (pid 4242), orphan of train.ipynb, kernel ended 13:02? SIGTERM first, SIGKILL after 5 s.');
  });
});
