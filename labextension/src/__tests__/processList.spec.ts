/**
 * A GPU card's process list on a big machine: the server sends a page of the largest processes,
 * and the card says how many it does not list.
 */
import * as React from 'react';

import { ProcessList } from '../cards/cardDetails';
import { IGpu } from '../gpus/gpus';
import { IAttributedProcess } from '../api/tokens';
import { GIB } from './utils';

jest.mock('@jupyterlab/ui-components', () => ({ notebookIcon: { react: () => null } }));
const { renderToStaticMarkup } = jest.requireActual('react-dom/server') as {
  renderToStaticMarkup: (element: React.ReactElement) => string;
};

function proc(pid: number): IAttributedProcess {
  return {
    pid,
    used_memory_bytes: GIB,
    name: 'python',
    uid: 1000,
    user: 'alice',
    command: 'python train.py',
    sm_percent: null,
    memory_bandwidth_percent: null,
    matched_by: 'pid',
    nvml_pid: pid,
    unavailable: {},
    kernel_id: null,
    notebook_path: null
  } as IAttributedProcess;
}

function gpu(procs: IAttributedProcess[], total: number | null | undefined): IGpu {
  return {
    index: 0,
    uuid: 'GPU-0',
    name: 'NVIDIA H200',
    lost: false,
    info: null,
    latest: null,
    latestTimestamp: null,
    processes: procs,
    processesUnavailable: null,
    processesTotal: total,
    unavailable: {},
    live: null
  };
}

function render(g: IGpu, simulated = false): string {
  return renderToStaticMarkup(React.createElement(ProcessList, { gpu: g, openPath: () => undefined, simulated }));
}

describe('ProcessList', () => {
  it('counts every process and says how many the page leaves out', () => {
    const html = render(gpu([proc(1), proc(2), proc(3)], 1000));
    expect(html).toContain('<span class="jp-GpuWidgets-count">1000</span>');
    expect(html).toContain('and 997 more');
  });

  it('says nothing more when the page holds them all (or the server does not say)', () => {
    for (const total of [2, null, undefined]) {
      const html = render(gpu([proc(1), proc(2)], total));
      expect(html).toContain('<span class="jp-GpuWidgets-count">2</span>');
      expect(html).not.toContain('more');
    }
  });
});

describe('ProcessList of simulated GPUs', () => {
  it('marks each user as simulated, and only there', () => {
    const other = { ...proc(2), uid: null, user: null, command: null, unavailable: { user: 'belongs to another user' } };
    const html = render(gpu([proc(1), other as IAttributedProcess], null), true);
    expect(html).toMatch(/class="jp-GpuWidgets-user" title="User alice\. A simulated process[^"]*">alice <span class="jp-GpuWidgets-simUser">\(simulated\)<\/span>/);
    expect(html.match(/\(simulated\)/g)).toHaveLength(1); // the hidden user stays "hidden"
    expect(render(gpu([proc(1)], null))).not.toContain('simulated');
  });
});

describe('ProcessList of a server in a container', () => {
  it('names a matched process by its pid, an unmatched entry by the driver pid, and says why memory is unknown', () => {
    const unknown = 'memory unknown (the driver reports host pids)';
    const matched = { ...proc(12), matched_by: 'device_files', nvml_pid: 9001 } as IAttributedProcess;
    const noMemory = { ...proc(13), used_memory_bytes: null, matched_by: 'device_files', nvml_pid: null,
      unavailable: { used_memory_bytes: unknown } } as IAttributedProcess;
    const outside = { ...proc(0), pid: null, nvml_pid: 9002, matched_by: null, name: null, uid: null, user: null,
      command: null, unavailable: { command: 'outside this container (the driver reports host pids)' } } as IAttributedProcess;
    const html = render(gpu([matched, noMemory, outside], null));
    expect(html).toContain(`title="Process id, found by the GPU device file it holds (the driver&#x27;s pid: 9001)`);
    expect(html).toContain(`<span class="jp-GpuWidgets-procMem" title="${unknown}">—</span>`);
    expect(html).toContain('aria-label="Process host 9002"');
    expect(html).toMatch(/title="No process of this container: the driver&#x27;s pid 9002, not matched[^"]*">host 9002<\/span>/);
    expect(html).toContain('outside this container');
  });
});
