/**
 * A server in a container: the note the status carries, and how each process row says it was matched.
 */
import * as React from 'react';

import { CONTAINER_SUMMARY, ContainerPidsNote, matchTitle, pidText } from '../processes/containerPids';

const { renderToStaticMarkup } = jest.requireActual('react-dom/server') as {
  renderToStaticMarkup: (element: React.ReactElement) => string;
};

describe('processes of a server in a container', () => {
  it('shows the status note as one quiet line, whole on a click or hover', () => {
    const text = 'This server runs in a container and the NVIDIA driver reports host pids: ... run with --pid=host';
    const html = renderToStaticMarkup(React.createElement(ContainerPidsNote, { text }));
    expect(html).toContain('role="note"');
    expect(html).toContain('aria-label="GPU processes in a container"');
    expect(html).toContain(`title="${text}"`);
    expect(html).toContain('jp-GpuWidgets-containerNote');
    expect(html).toContain(`<summary class="jp-GpuWidgets-containerSummary">${CONTAINER_SUMMARY}</summary>`);
    expect(html).toMatch(/<details>.*<\/details>/);
  });

  it('says on hover how each entry was matched', () => {
    expect(matchTitle({ pid: 12, matched_by: 'pid', nvml_pid: 12 })).toBe('Process id');
    expect(matchTitle({ pid: 12, matched_by: 'device_files', nvml_pid: 9001 })).toBe(
      "Process id, found by the GPU device file it holds (the driver's pid: 9001): the server runs in a container and the driver reports host pids"
    );
    expect(matchTitle({ pid: 12, matched_by: 'device_files', nvml_pid: null })).not.toContain("driver's pid:");
    expect(matchTitle({ pid: null, matched_by: null, nvml_pid: 9001 })).toBe(
      "No process of this container: the driver's pid 9001, not matched (the driver reports host pids)"
    );
  });

  it('names an entry with no local process by the driver pid', () => {
    expect(pidText({ pid: 12, nvml_pid: 9001 })).toBe('12');
    expect(pidText({ pid: null, nvml_pid: 9001 })).toBe('host 9001');
  });
});
