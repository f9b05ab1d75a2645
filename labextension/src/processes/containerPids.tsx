/**
 * A server in a container: the NVIDIA driver reports host pids, and the server matched its GPU
 * processes by the device files they hold (gpu_widgets/backends/pid_match.py). The status says so
 * once (`processes_note`); each process row says how it was matched, on hover.
 */
import * as React from 'react';

import { IProcess } from '../api/tokens';

/** What the collapsed note says: the rest (what works, what does not, the fix) is one click away. */
export const CONTAINER_SUMMARY = 'In a container: GPU processes are found by the device files they hold';

/** Above the GPU cards while the status carries a note: one line, the whole of it on a click or hover. */
export function ContainerPidsNote(props: { text: string }): JSX.Element {
  return (
    <div
      className="jp-GpuWidgets-message jp-mod-info jp-GpuWidgets-containerNote"
      role="note"
      aria-label="GPU processes in a container"
      title={props.text}
    >
      <details>
        <summary className="jp-GpuWidgets-containerSummary">{CONTAINER_SUMMARY}</summary>
        <div className="jp-GpuWidgets-messageBody">{props.text}</div>
      </details>
    </div>
  );
}

/** How a process entry was tied to a local process, for its pid's tooltip. */
export function matchTitle(proc: Pick<IProcess, 'pid' | 'matched_by' | 'nvml_pid'>): string {
  const host = proc.nvml_pid !== null && proc.nvml_pid !== undefined ? ` (the driver's pid: ${proc.nvml_pid})` : '';
  switch (proc.matched_by) {
    case 'device_files':
      return `Process id, found by the GPU device file it holds${host}: the server runs in a container and the driver reports host pids`;
    case 'pid':
    case undefined:
      return 'Process id';
    default:
      return `No process of this container: the driver's pid ${proc.nvml_pid ?? 'unknown'}, not matched (the driver reports host pids)`;
  }
}

/** The pid cell: the local pid, or the driver's for an entry with none. */
export function pidText(proc: Pick<IProcess, 'pid' | 'nvml_pid'>): string {
  return proc.pid !== null ? String(proc.pid) : `host ${proc.nvml_pid ?? '?'}`;
}
