/**
 * Test data for the GPM parts of the sidebar: `samples/latest` answers as the server gives them
 * (GPM figures, per-process use, MIG instances), built from a few values a test dictates.
 */
import { IDeviceSample, IMigInstance, IProcess, ISnapshot } from '../api/tokens';
import { GIB } from './utils';

export const NOBODY = 'not read: nobody is looking (read only while a view, the API or a snapshot asks for it)';
export const HOPPER = 'needs a Hopper or newer GPU (NVML GPM)';

/** A process of the GPU's list with its use (null with `reason` when not given). */
export function proc(pid: number, sm: number | null, bw: number | null, reason = NOBODY): IProcess {
  const unavailable: { [field: string]: string } = {};
  if (sm === null) {
    unavailable.sm_percent = reason;
  }
  if (bw === null) {
    unavailable.memory_bandwidth_percent = reason;
  }
  return {
    pid,
    used_memory_bytes: 2 * GIB,
    name: 'python',
    uid: 1000,
    user: 'alice',
    command: 'python train.py',
    sm_percent: sm,
    memory_bandwidth_percent: bw,
    matched_by: 'pid',
    nvml_pid: pid,
    unavailable
  };
}

export function mig(index: number, overrides: Partial<IMigInstance> = {}): IMigInstance {
  return {
    index,
    uuid: `MIG-${index}`,
    gpu_instance_id: index + 1,
    compute_instance_id: 0,
    memory_used_bytes: 3 * GIB,
    memory_total_bytes: 10 * GIB,
    sm_active_percent: 40,
    sm_occupancy_percent: 20,
    tensor_active_percent: 10,
    dram_active_percent: 15,
    pids: [],
    unavailable: {},
    ...overrides
  };
}

/** One GPU of a `samples/latest` answer: busy 98 %, SM active and tensor as given. */
export function liveDevice(index: number, overrides: Partial<IDeviceSample> = {}): IDeviceSample {
  return {
    index,
    uuid: `GPU-${index}`,
    name: 'NVIDIA H200',
    status: 'ok',
    utilization_gpu_percent: 98,
    utilization_memory_percent: 10,
    memory_used_bytes: 37 * GIB,
    memory_free_bytes: 104 * GIB,
    memory_total_bytes: 141 * GIB,
    temperature_c: 60,
    fan_percent: null,
    power_w: 300,
    power_limit_w: 700,
    energy_j: 1000,
    sm_clock_mhz: 1980,
    memory_clock_mhz: 2619,
    graphics_clock_mhz: 1980,
    performance_state: 0,
    throttle_reasons: [],
    pcie_tx_bytes_per_s: 0,
    pcie_rx_bytes_per_s: 0,
    temperature_slowdown_c: 90,
    processes: [],
    sm_active_percent: 6,
    sm_occupancy_percent: 2,
    tensor_active_percent: 0.5,
    dram_active_percent: 2,
    mig_instances: [],
    unavailable: { fan_percent: 'not supported on this GPU (passively cooled)' },
    ...overrides
  };
}

export function snapshot(devices: IDeviceSample[]): ISnapshot {
  return {
    backend: 'nvml',
    status: 'ok',
    reason: null,
    sample_age_s: 0.2,
    timestamp: 1000,
    driver_version: '580.65.06',
    cuda_driver_version: '13.0',
    nvml_version: '13.580.65.06',
    cuda_visible_devices: null,
    devices
  };
}
