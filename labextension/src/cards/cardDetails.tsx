/**
 * A GPU card's details: its processes (with the notebook that owns each, and the share of the
 * GPU each uses), its MIG instances and its spec card.
 */
import { notebookIcon } from '@jupyterlab/ui-components';
import * as React from 'react';

import { IMigLabels, IMigRow, IShare, migLabels, migRows, processUse } from '../gpus/activity';
import { formatBandwidth, formatBytes, formatGiB, formatNumber, migText } from '../ui/format';
import { IGpu } from '../gpus/gpus';
import { SIMULATED_USER_MARK, SIMULATED_USER_TITLE } from '../gpus/overview';
import { IKernelActions } from '../processes/processActions';
import { KernelButtons } from '../processes/processActionsView';
import { orphanWords } from '../processes/orphanActions';
import { IAttributedProcess, IDeviceInfo, IMetricInfo } from '../api/tokens';
import { useFlash } from '../ui/useFlash';
import { matchTitle, pidText } from '../processes/containerPids';

/**
 * `actions` and `gpus` (all of them: a kernel's memory on each): the kernel buttons of its own
 * kernels' rows. `simulated`: the processes are the simulated backend's, and their users say so.
 */
export function ProcessList(props: {
  gpu: IGpu;
  openPath: (path: string) => void;
  actions?: IKernelActions | null;
  gpus?: readonly IGpu[];
  simulated?: boolean;
}): JSX.Element {
  const { gpu, openPath, actions } = props;
  const procs = gpu.processes;
  const total = Math.max(procs?.length ?? 0, gpu.processesTotal ?? 0);
  let body: React.ReactNode;
  if (gpu.lost) {
    body = <p className="jp-GpuWidgets-muted">Not available while the GPU is lost.</p>;
  } else if (procs === null) {
    body = <p className="jp-GpuWidgets-muted">{gpu.processesUnavailable ?? 'Reading the process list…'}</p>;
  } else if (!procs.length) {
    body = <p className="jp-GpuWidgets-muted">No processes on this GPU.</p>;
  } else {
    body = (
      <ul className="jp-GpuWidgets-processList" aria-label={`Processes on GPU ${gpu.index}`}>
        {procs.map(p => (
          <ProcessItem key={p.pid ?? `host-${p.nvml_pid}`} proc={p} openPath={openPath} simulated={props.simulated ?? false}>
            <KernelButtons proc={p} gpus={props.gpus ?? [gpu]} actions={actions} />
          </ProcessItem>
        ))}
        {total > procs.length ? (
          <li className="jp-GpuWidgets-muted" title="The largest by GPU memory are listed; the API's processes endpoint pages through the rest.">
            and {total - procs.length} more
          </li>
        ) : null}
      </ul>
    );
  }
  return (
    <div className="jp-GpuWidgets-processes">
      <h4 className="jp-GpuWidgets-subtitle">
        Processes{procs && procs.length ? <span className="jp-GpuWidgets-count">{total}</span> : null}
      </h4>
      {body}
    </div>
  );
}

/** A field the server did not give (another user's process): a short word, the reason on hover. */
function Hidden(props: { reason: string | undefined; long?: boolean }): JSX.Element {
  const reason = props.reason ?? 'not available';
  // "belongs to another user (hidden; set ... to show)" -> "belongs to another user"
  const short = props.long ? reason.split(' (')[0] : 'hidden';
  return (
    <span className="jp-GpuWidgets-hidden" title={reason}>
      {short}
    </span>
  );
}

function ProcessItem(props: {
  proc: IAttributedProcess;
  openPath: (path: string) => void;
  simulated: boolean;
  children?: React.ReactNode;
}): JSX.Element {
  const { proc, openPath } = props;
  const u = proc.unavailable ?? {};
  const path = proc.notebook_path;
  // Which process uses the GPU, not only holds memory on it (read while a card is on screen).
  const use = processUse(proc);
  const orphan = orphanWords(proc);
  return (
    <li className="jp-GpuWidgets-process" aria-label={`Process ${pidText(proc)}`}>
      <div className="jp-GpuWidgets-processMain">
        <span className="jp-GpuWidgets-pid" title={matchTitle(proc)}>
          {pidText(proc)}
        </span>
        {proc.user !== null && props.simulated ? (
          <span className="jp-GpuWidgets-user" title={`User ${proc.user}. ${SIMULATED_USER_TITLE}`}>
            {proc.user} <span className="jp-GpuWidgets-simUser">{SIMULATED_USER_MARK}</span>
          </span>
        ) : (
          <span className="jp-GpuWidgets-user" title="User">
            {proc.user ?? <Hidden reason={u['user']} />}
          </span>
        )}
        <span className="jp-GpuWidgets-procMem" title={u['used_memory_bytes'] ?? 'GPU memory used by this process'}>
          {proc.used_memory_bytes !== null ? formatBytes(proc.used_memory_bytes) : '—'}
        </span>
        {use && (
          // After the memory on a wide panel; a narrow one wraps it under the memory.
          <span className="jp-GpuWidgets-procUse">
            <Share label="SM" share={use.sm} className="jp-GpuWidgets-procSm" />
            <Share label="BW" share={use.bandwidth} className="jp-GpuWidgets-procBw" />
          </span>
        )}
      </div>
      <div className="jp-GpuWidgets-procCommand" title={proc.command ?? u['command'] ?? undefined}>
        {proc.command ?? <Hidden reason={u['command']} long />}
      </div>
      {orphan && (
        // Left by a kernel that ended and still holding GPU memory (orphanActions.ts).
        <div className="jp-GpuWidgets-orphan" title={`Kernel ${proc.orphan_of?.kernel_id} ended; this process outlived it`}>
          {orphan}
        </div>
      )}
      {path && (
        <button
          className="jp-GpuWidgets-notebook"
          onClick={() => openPath(path)}
          title={`Open ${path} (kernel ${proc.kernel_id ?? 'unknown'})`}
          aria-label={`Open notebook ${path}`}
        >
          <notebookIcon.react tag="span" className="jp-GpuWidgets-notebookIcon" />
          <span className="jp-GpuWidgets-notebookPath">{path}</span>
        </button>
      )}
      {props.children}
    </li>
  );
}

/** A share with its words: "SM 45 %", its meaning (or why it is missing) on hover. */
function Share(props: { label: string; share: IShare; className: string }): JSX.Element {
  const { label, share } = props;
  return (
    <span className={`${props.className}${share.value === null ? ' jp-GpuWidgets-muted' : ''}`} title={share.title}>
      {label} <span className="jp-GpuWidgets-shareValue">{share.text}</span>
    </span>
  );
}

/** The GPU's MIG instances (from `samples/latest`): memory, SM active and the processes in each. */
export function MigList(props: { gpu: IGpu; metrics?: readonly IMetricInfo[] }): JSX.Element | null {
  const { gpu } = props;
  const labels = migLabels(props.metrics);
  const rows = gpu.lost ? [] : migRows(gpu.live?.mig_instances, gpu.live?.processes ?? gpu.processes, labels);
  if (!rows.length) {
    return null;
  }
  return (
    <div className="jp-GpuWidgets-mig">
      <h4 className="jp-GpuWidgets-subtitle">
        MIG instances<span className="jp-GpuWidgets-count">{rows.length}</span>
      </h4>
      <ul className="jp-GpuWidgets-migList" aria-label={`MIG instances of GPU ${gpu.index}`}>
        {rows.map(row => (
          <MigItem key={row.index} row={row} labels={labels} />
        ))}
      </ul>
    </div>
  );
}

function MigItem(props: { row: IMigRow; labels: IMigLabels }): JSX.Element {
  const { row, labels } = props;
  return (
    <li className="jp-GpuWidgets-migItem" aria-label={`MIG instance ${row.index}`}>
      <div className="jp-GpuWidgets-processMain">
        <span className="jp-GpuWidgets-migName" title={row.uuid ?? 'UUID not available'}>
          MIG {row.index}
          {row.ids && <span className="jp-GpuWidgets-muted"> {row.ids}</span>}
        </span>
        <span className="jp-GpuWidgets-procMem" title="Memory used in this instance, of its total">
          {row.memory}
        </span>
      </div>
      <div className="jp-GpuWidgets-procUse">
        <Share label={labels.smActive} share={row.smActive} className="jp-GpuWidgets-migSm" />
        <Share label={labels.tensorActive} share={row.tensorActive} className="jp-GpuWidgets-migTensor" />
      </div>
      <div className="jp-GpuWidgets-procCommand" title="Processes in this instance (pid and name)">
        {row.processes.length ? row.processes.map(p => p.text).join(', ') : 'no processes'}
      </div>
    </li>
  );
}

/** The spec card: the static facts of one GPU (`devices`). */
export function SpecCard(props: { id: string; index: number; info: IDeviceInfo | null }): JSX.Element {
  const { id, index, info } = props;
  if (!info) {
    return (
      <div id={id} className="jp-GpuWidgets-spec jp-GpuWidgets-muted">
        Reading the specifications…
      </div>
    );
  }
  const u = info.unavailable ?? {};
  const na = (field: string): JSX.Element => (
    <span className="jp-GpuWidgets-muted" title={u[field] ?? 'not available'}>
      n/a
    </span>
  );
  const rows: [string, React.ReactNode][] = [
    ['Memory', info.memory_total_bytes !== null ? `${formatGiB(info.memory_total_bytes)} GiB` : na('memory_total_bytes')],
    [
      'Power limit',
      info.power_limit_w !== null
        ? `${formatNumber(info.power_limit_w)} W${
            info.power_default_limit_w !== null && info.power_default_limit_w !== info.power_limit_w
              ? ` (default ${formatNumber(info.power_default_limit_w)} W)`
              : ''
          }`
        : na('power_limit_w')
    ],
    ['Max SM clock', info.max_sm_clock_mhz !== null ? `${info.max_sm_clock_mhz} MHz` : na('max_sm_clock_mhz')],
    [
      'Max memory clock',
      info.max_memory_clock_mhz !== null ? `${info.max_memory_clock_mhz} MHz` : na('max_memory_clock_mhz')
    ],
    ['CUDA cores', info.cores !== null ? info.cores.toLocaleString('en-US') : na('cores')],
    ['Memory bus', info.memory_bus_width_bits !== null ? `${info.memory_bus_width_bits} bit` : na('memory_bus_width_bits')],
    [
      'Peak bandwidth',
      info.memory_bandwidth_bytes_per_s !== null
        ? formatBandwidth(info.memory_bandwidth_bytes_per_s)
        : na('memory_bandwidth_bytes_per_s')
    ],
    [
      'PCIe',
      info.pcie_max_generation !== null && info.pcie_max_width !== null
        ? `Gen ${info.pcie_max_generation} x${info.pcie_max_width}`
        : na('pcie_max_generation')
    ],
    ['Compute capability', info.compute_capability ?? na('compute_capability')],
    ['MIG mode', migText(info) ?? na('mig_mode')],
    ['UUID', info.uuid ?? na('uuid')]
  ];
  const uuid = info.uuid;
  return (
    <dl id={id} className="jp-GpuWidgets-spec" aria-label={`Specifications of GPU ${index}`}>
      {rows.map(([k, v]) => (
        <React.Fragment key={k}>
          <dt>{k}</dt>
          {k === 'UUID' && uuid ? (
            <dd className="jp-GpuWidgets-uuid">
              <span className="jp-GpuWidgets-uuidText" title={uuid}>
                {uuid}
              </span>
              <CopyButton text={uuid} what="UUID" />
            </dd>
          ) : (
            <dd>{v}</dd>
          )}
        </React.Fragment>
      ))}
    </dl>
  );
}

/** Copies a value to the clipboard and says so for a moment. */
function CopyButton(props: { text: string; what: string }): JSX.Element {
  const [done, setDone] = useFlash<'copied' | 'failed'>(1500);
  const copy = (): void => {
    // The clipboard needs a secure context (https or localhost); elsewhere say it failed.
    const clip = navigator.clipboard;
    if (!clip) {
      setDone('failed');
      return;
    }
    clip.writeText(props.text).then(
      () => setDone('copied'),
      () => setDone('failed')
    );
  };
  return (
    <button
      className="jp-GpuWidgets-button jp-GpuWidgets-copy"
      onClick={copy}
      title={`Copy the ${props.what}`}
      aria-label={`Copy the ${props.what}`}
    >
      {done === 'copied' ? 'Copied' : done === 'failed' ? 'Failed' : 'Copy'}
    </button>
  );
}
