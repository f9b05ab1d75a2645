/** The GPUs as the sidebar's views show them, built from what the model has read. */
import { ILatestValues } from './format';
import { Timeline } from './series';
import { IAttributedProcess, IDeviceInfo, IProcesses, IUnavailable } from './tokens';

/** One GPU as the views show it. */
export interface IGpu {
  index: number;
  uuid: string | null;
  name: string | null;
  /** The GPU stopped answering (its newest point is lost, or its spec card says so). */
  lost: boolean;
  /** The spec card, once `devices` has been read. */
  info: IDeviceInfo | null;
  /** The newest values (null before the first sample). */
  latest: ILatestValues | null;
  /** Unix seconds of `latest`. */
  latestTimestamp: number | null;
  /** Its processes; null before the first read or when they could not be read. */
  processes: IAttributedProcess[] | null;
  /** Why `processes` is null (server's reason), when it is. */
  processesUnavailable: string | null;
  /**
   * Why a field of the latest sample is null (field name -> server's reason), from the
   * newest samples answer that included this GPU; empty when none is known.
   */
  unavailable: IUnavailable;
}

/**
 * The GPUs to show: every GPU in the history or the spec cards, by index, with its newest
 * values, processes and the reasons for its null fields.
 */
export function buildGpus(
  tl: Timeline,
  devices: ReadonlyMap<number, IDeviceInfo>,
  processes: IProcesses | null,
  unavailable: ReadonlyMap<number, IUnavailable>
): IGpu[] {
    const n = tl.length;
  const indices = new Set<number>([...tl.devices.keys(), ...devices.keys()]);
  const procs = new Map((processes?.devices ?? []).map(d => [d.index, d]));
  const out: IGpu[] = [];
  for (const index of [...indices].sort((a, b) => a - b)) {
    const cols = tl.devices.get(index);
    const info = devices.get(index) ?? null;
    let latest: ILatestValues | null = null;
    let lost = info?.status === 'lost';
    if (cols && n) {
      const i = n - 1;
      const v = cols.values;
      lost = cols.lost[i];
      latest = {
        index,
        lost,
        utilization_gpu_percent: v.utilization_gpu_percent[i],
        utilization_memory_percent: v.utilization_memory_percent[i],
        memory_used_bytes: v.memory_used_bytes[i],
        memory_total_bytes: v.memory_total_bytes[i] ?? info?.memory_total_bytes ?? null,
        temperature_c: v.temperature_c[i],
        power_w: v.power_w[i],
        power_limit_w: v.power_limit_w[i] ?? info?.power_limit_w ?? null
      };
    }
    const p = procs.get(index);
    out.push({
      index,
      uuid: cols?.uuid ?? info?.uuid ?? null,
      name: cols?.name ?? info?.name ?? null,
      lost,
      info,
      latest,
      latestTimestamp: latest ? tl.t[n - 1] : null,
      processes: p?.processes ?? null,
      processesUnavailable: p && p.processes === null ? p.unavailable['processes'] ?? 'not available' : null,
      unavailable: unavailable.get(index) ?? {}
    });
  }
  return out;
}
