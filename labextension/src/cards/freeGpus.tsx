/**
 * "Copy CUDA_VISIBLE_DEVICES" for the GPUs free now, defined as the Cluster view defines them
 * (gpu_widgets/cluster/promql.py): busy under 10 % and under 10 % of its memory used.
 *
 * The indices are NVML's, which are in PCI bus order; CUDA numbers GPUs fastest first unless
 * told otherwise, so the copied text sets `CUDA_DEVICE_ORDER=PCI_BUS_ID` with them (as
 * `gpu_widgets.pick_gpus` does): on a machine of mixed GPUs the two orders differ.
 */
import * as React from 'react';

import { CLUSTER_BUSY_PERCENT, CLUSTER_FREE_MEMORY_FRACTION } from '../api/catalogue.generated';
import { IGpu } from '../gpus/gpus';
import { useFlash } from '../ui/useFlash';

export const FREE_BUSY_PERCENT = CLUSTER_BUSY_PERCENT;
export const FREE_MEMORY_FRACTION = CLUSTER_FREE_MEMORY_FRACTION;

export const FREE_RULE = `free: busy under ${FREE_BUSY_PERCENT} % and under ${FREE_MEMORY_FRACTION * 100} % of its memory used`;

/** The GPUs free now, by index; a lost GPU or one with a value missing is not free. */
export function freeGpuIndices(gpus: readonly IGpu[]): number[] {
  return gpus
    .filter(gpu => {
      const v = gpu.latest?.values;
      const util = v?.utilization_gpu_percent;
      const used = v?.memory_used_bytes;
      const total = v?.memory_total_bytes;
      if (gpu.lost || typeof util !== 'number' || typeof used !== 'number' || typeof total !== 'number' || !total) {
        return false;
      }
      return util < FREE_BUSY_PERCENT && used < FREE_MEMORY_FRACTION * total;
    })
    .map(gpu => gpu.index);
}

/** The text copied: `CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=2,5` (a shell prefix). */
export function cudaVisibleDevices(indices: readonly number[]): string {
  return `CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=${indices.join(',')}`;
}

/**
 * The button's words: what it copies ("Copy CUDA_VISIBLE_DEVICES=1,6"), never a bare list of
 * indices in brackets, which reads as a count. The button has a fixed width (CSS), so the header
 * does not move when the free GPUs change; where it is too narrow, the words "CUDA_VISIBLE_DEVICES="
 * are cut with an ellipsis, not the list; the title holds the full text.
 */
export function copyLabel(free: readonly number[], copied: boolean): string {
  if (copied) {
    return 'Copied';
  }
  return free.length ? `Copy CUDA_VISIBLE_DEVICES=${free.join(',')}` : 'No free GPU';
}

/** The header's button; "copied" for a moment after a click. */
export function CopyFreeGpus(props: { gpus: readonly IGpu[]; copy: (text: string) => void }): JSX.Element {
  const free = freeGpuIndices(props.gpus);
  const [copied, setCopied] = useFlash<string>(2000);
  const text = cudaVisibleDevices(free);
  const title = free.length
    ? `Copy ${text} for the ${free.length} GPU(s) free now (${FREE_RULE}), to put before a command`
    : `No GPU is free now (${FREE_RULE})`;
  return (
    <button
      className="jp-GpuWidgets-copyFree jp-mod-styled"
      disabled={!free.length}
      title={title}
      aria-label={free.length ? copyLabel(free, false) : 'No free GPU to copy'}
      onClick={() => {
        props.copy(text);
        setCopied(text);
      }}
    >
      {copied === null && free.length ? (
        // Two parts: a narrow panel cuts the words, never the list of GPUs, which is what matters.
        <>
          <span className="jp-GpuWidgets-copyFreeWhat">Copy CUDA_VISIBLE_DEVICES=</span>
          <span className="jp-GpuWidgets-copyFreeList">{free.join(',')}</span>
        </>
      ) : (
        copyLabel(free, copied !== null)
      )}
    </button>
  );
}
