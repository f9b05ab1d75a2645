/** Which process rows offer kernel actions, the confirmation's words, and the free GPUs copied. */
import { cudaVisibleDevices, freeGpuIndices } from '../cards/freeGpus';
import { IGpu } from '../gpus/gpus';
import { confirmation, kernelActionsFor, kernelMemory } from '../processes/processActions';
import { IAttributedProcess } from '../api/tokens';
import { GIB } from './utils';

function proc(pid: number, change: Partial<IAttributedProcess> = {}): IAttributedProcess {
  return { pid, used_memory_bytes: GIB, kernel_id: null, notebook_path: null, user: 'me', ...change } as IAttributedProcess;
}

function gpu(index: number, util: number | null, usedGiB: number, processes: IAttributedProcess[] = [], lost = false): IGpu {
  return {
    index, uuid: null, name: 'GPU', lost, info: null, latestTimestamp: 1, processes, processesUnavailable: null,
    unavailable: {}, live: null,
    latest: { index, lost, values: { utilization_gpu_percent: util, memory_used_bytes: usedGiB * GIB, memory_total_bytes: 80 * GIB } }
  } as IGpu;
}

describe('kernel actions of a process row', () => {
  it('are offered for this server\'s kernels only', () => {
    expect(kernelActionsFor(proc(1, { kernel_id: 'k1' }))).toEqual(['interrupt', 'restart', 'shutdown']);
    expect(kernelActionsFor(proc(2))).toEqual([]);
    expect(kernelActionsFor(proc(3, { user: null, kernel_id: null }))).toEqual([]);
  });

  it('name the notebook and the memory a shutdown frees, on every GPU', () => {
    const k = proc(1, { kernel_id: 'k1', notebook_path: 'train.ipynb', used_memory_bytes: 2 * GIB });
    const child = proc(5, { kernel_id: 'k1', used_memory_bytes: GIB });
    const gpus = [gpu(0, 0, 3, [k, proc(9)]), gpu(1, 0, 1, [child])];
    expect(kernelMemory(gpus, 'k1').total).toBe(3 * GIB);
    const words = confirmation('shutdown', k, gpus);
    expect(words.title).toBe('Shut down kernel?');
    expect(words.body).toContain('Shut down the kernel of train.ipynb? It frees 3 GiB of GPU memory (2 GiB on GPU 0, 1 GiB on GPU 1).');
    // from an alert before the panel read the processes: the alert's own figure
    expect(confirmation('restart', k, [], { gpu: 2, bytes: 4 * GIB }).body).toContain('It frees 4 GiB of GPU memory on GPU 2.');
  });
});

describe('free GPUs', () => {
  it('are those busy under 10 % with under 10 % of their memory used, lost ones never', () => {
    const gpus = [gpu(0, 50, 1), gpu(1, 5, 1), gpu(2, 5, 20), gpu(3, 0, 0, [], true), gpu(4, null, 0), gpu(5, 9, 7)];
    expect(freeGpuIndices(gpus)).toEqual([1, 5]);
    expect(cudaVisibleDevices([1, 5])).toBe('CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=1,5');
  });
});
