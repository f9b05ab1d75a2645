/** The GPUs as the sidebar's views show them, built from what the model has read. */
import { withLive } from './activity';
import { ILatestValues } from '../ui/format';
import { Timeline } from './series';
import { IAttributedProcess, IDeviceInfo, IDeviceSample, IProcesses, IUnavailable } from '../api/tokens';

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
   * How many processes the GPU has in all: `processes` is the server's first page of them, the
   * largest by GPU memory (a machine can run thousands). Absent: as many as `processes`.
   */
  processesTotal?: number | null;
  /**
   * Why a field of the latest sample is null (field name -> server's reason), from the
   * newest samples answer that included this GPU; empty when none is known.
   */
  unavailable: IUnavailable;
  /**
   * The GPU in the newest `samples/latest?gpm=1` answer (asked only while a card is on screen):
   * its MIG instances; its GPM figures are laid over `latest`. Null when not asked.
   */
  live: IDeviceSample | null;
}

/**
 * The GPUs to show: every GPU in the history or the spec cards, by index, with its newest
 * values, processes and the reasons for its null fields.
 */
export function buildGpus(
  tl: Timeline,
  devices: ReadonlyMap<number, IDeviceInfo>,
  processes: IProcesses | null,
  unavailable: ReadonlyMap<number, IUnavailable>,
  live: ReadonlyMap<number, IDeviceSample> = new Map()
): IGpu[] {
  const n = tl.length;
  const indices = new Set<number>([...tl.devices.keys(), ...devices.keys()]);
  const procs = new Map((processes?.devices ?? []).map(d => [d.index, d]));
  const out: IGpu[] = [];
  for (const index of [...indices].sort((a, b) => a - b)) {
    const cols = tl.devices.get(index);
    const info = devices.get(index) ?? null;
    const now = live.get(index) ?? null;
    let why = unavailable.get(index) ?? {};
    let latest: ILatestValues | null = null;
    let lost = info?.status === 'lost';
    if (cols && n) {
      const i = n - 1;
      lost = cols.lost[i];
      const values: { [field: string]: number | null } = {};
      for (const [field, column] of Object.entries(cols.values)) {
        // The spec card knows some limits (memory total, power limit) when a sample does not.
        values[field] = column[i] ?? infoValue(info, field);
      }
      const merged = withLive(values, why, now);
      why = merged.unavailable;
      latest = { index, lost, values: merged.values };
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
      processesTotal: p?.processes_total ?? null,
      unavailable: why,
      live: now
    });
  }
  return out;
}

/** A numeric field of the spec card with the same name as a sample field, if any. */
export function infoValue(info: IDeviceInfo | null, field: string): number | null {
  const v = info ? (info as unknown as { [key: string]: unknown })[field] : null;
  return typeof v === 'number' && Number.isFinite(v) ? v : null;
}
