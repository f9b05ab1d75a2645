/** The "copy free GPUs" button: its words say what it copies, and its width never changes. */
import * as fs from 'fs';
import * as path from 'path';
import * as React from 'react';

import { copyLabel, CopyFreeGpus } from '../cards/freeGpus';
import { IGpu } from '../gpus/gpus';
import { GIB } from './utils';

const { renderToStaticMarkup } = jest.requireActual('react-dom/server') as {
  renderToStaticMarkup: (element: React.ReactElement) => string;
};

function gpu(index: number, util: number): IGpu {
  return {
    index, uuid: null, name: 'GPU', lost: false, info: null, latestTimestamp: 1, processes: [], processesUnavailable: null,
    unavailable: {}, live: null,
    latest: { index, lost: false, values: { utilization_gpu_percent: util, memory_used_bytes: 0, memory_total_bytes: 80 * GIB } }
  } as unknown as IGpu;
}

function button(gpus: IGpu[]): string {
  return renderToStaticMarkup(React.createElement(CopyFreeGpus, { gpus, copy: () => undefined }));
}

describe('the copy-free-GPUs button', () => {
  it('names what it copies, not a count', () => {
    expect(copyLabel([1, 6], false)).toBe('Copy CUDA_VISIBLE_DEVICES=1,6');
    expect(copyLabel([0], false)).toBe('Copy CUDA_VISIBLE_DEVICES=0'); // was "Copy free GPUs (0)": read as none
    expect(copyLabel([], false)).toBe('No free GPU');
    expect(copyLabel([3], true)).toBe('Copied');
    const html = button([gpu(0, 90), gpu(1, 0), gpu(2, 95), gpu(3, 90), gpu(4, 90), gpu(5, 90), gpu(6, 2)]);
    // The words and the list in parts of their own: a narrow panel cuts the words, never the list.
    expect(html).toContain(
      '<span class="jp-GpuWidgets-copyFreeWhat">Copy CUDA_VISIBLE_DEVICES=</span>' +
        '<span class="jp-GpuWidgets-copyFreeList">1,6</span></button>'
    );
    expect(html).not.toContain('free GPUs (');
    expect(html).toContain('title="Copy CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=1,6 for the 2 GPU(s) free now');
    expect(button([gpu(0, 90)])).toContain('disabled=""');
  });

  it('keeps one width whatever it says, the words cut with an ellipsis before the list', () => {
    const css = fs.readFileSync(path.join(__dirname, '..', '..', 'style', 'alerts.css'), 'utf8');
    const rules = [...css.matchAll(/\.jp-GpuWidgets-copyFree\s*\{([^}]*)\}/g)].map(m => m[1]).join(';');
    expect(rules).toMatch(/(^|[;\s])width:\s*\d+ch/);
    expect(rules).toMatch(/text-overflow:\s*ellipsis/);
    expect(rules).toMatch(/white-space:\s*nowrap/);
    expect(rules).toMatch(/overflow:\s*hidden/);
    const what = css.match(/\.jp-GpuWidgets-copyFreeWhat\s*\{([^}]*)\}/)?.[1] ?? '';
    const list = css.match(/\.jp-GpuWidgets-copyFreeList\s*\{([^}]*)\}/)?.[1] ?? '';
    expect(what).toMatch(/text-overflow:\s*ellipsis/);
    expect(what).toMatch(/min-width:\s*0/);
    expect(list).toMatch(/flex:\s*none/);
  });
});
