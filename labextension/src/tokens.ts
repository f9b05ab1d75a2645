/**
 * A typed mirror of the gpu-widgets server API (gpu_widgets/server/openapi.json), the
 * error type the request module throws, and the states the sidebar can be in.
 *
 * Kept free of JupyterLab imports so that jest can use it in plain node.
 * Field docs follow docs/fields.md; units are in the names. Any value the server could not
 * read is `null`, and the matching `unavailable` map says why.
 */

/** Where readings come from; `null` while the server's sampler is starting. */
export type BackendName = 'nvml' | 'simulated' | 'none';

/**
 * The server's overall state: `starting` until the GPU backend is opened; `stale` when the
 * newest sample is older than 3 intervals and 2 s (5 s before the first) because a driver call has
 * not returned (the reason names it).
 */
export type ServiceStatus = 'ok' | 'no_gpu' | 'starting' | 'stale';

/** `lost`: the GPU stopped answering NVML; the server asks again every 5 s. */
export type DeviceStatus = 'ok' | 'lost';

/** Field name -> why that field is null. */
export interface IUnavailable {
  [field: string]: string;
}

/** `GET status`: backend, driver, sampling interval, server time. */
export interface IStatus {
  backend: BackendName | null;
  status: ServiceStatus;
  /**
   * Why there is no GPU (NVML's own words), why the sampler is not ready yet, or (stale) the
   * call it waits on: "nvmlDeviceGetPowerUsage on GPU 3 has not returned".
   */
  reason: string | null;
  /** Seconds since the newest sample was taken, when the server answered; null before the first. */
  sample_age_s: number | null;
  driver_version: string | null;
  /** Like "13.0". */
  cuda_driver_version: string | null;
  nvml_version: string | null;
  /** Seconds between two samples on the server (one sampler serves every client). */
  interval_s: number;
  /** Seconds of history the server keeps. */
  window_s: number;
  /** Unix seconds on the server's clock. */
  server_time: number;
  /** gpu-widgets version of the server extension. */
  version: string;
  device_count: number;
}

/** Static facts of one GPU (the spec card), from `GET devices`. */
export interface IDeviceInfo {
  /** NVML index (PCI bus order). */
  index: number;
  uuid: string | null;
  /** Marketing name; simulated GPUs are named "Simulated ...". */
  name: string | null;
  status: DeviceStatus;
  memory_total_bytes: number | null;
  /** Enforced power limit, watts. */
  power_limit_w: number | null;
  power_default_limit_w: number | null;
  max_sm_clock_mhz: number | null;
  max_memory_clock_mhz: number | null;
  /** CUDA cores. */
  cores: number | null;
  memory_bus_width_bits: number | null;
  /** Peak: 2 x max memory clock (Hz) x bus width (bits) / 8. */
  memory_bandwidth_bytes_per_s: number | null;
  pcie_max_generation: number | null;
  pcie_max_width: number | null;
  /** Like "9.0". */
  compute_capability: string | null;
  mig_mode: 'enabled' | 'disabled' | null;
  /** UUIDs (MIG-...) of its MIG instances; empty when MIG is disabled. */
  mig_device_uuids: string[] | null;
  unavailable: IUnavailable;
}

/** `GET devices`. */
export interface IDevices {
  backend: BackendName | null;
  status: ServiceStatus;
  reason: string | null;
  devices: IDeviceInfo[];
}

/** A process using a GPU. Another user's process has null name/uid/user/command, with a reason. */
export interface IProcess {
  pid: number;
  /** Null where the platform does not say. */
  used_memory_bytes: number | null;
  name: string | null;
  /** Real uid of the owner: the server shows in full the processes of its own uid. */
  uid: number | null;
  /** The owner's passwd name, or the uid as text where it has no passwd entry. */
  user: string | null;
  /** At most 4096 bytes of UTF-8; a longer command line ends with `… (cut: N bytes in all)`. */
  command: string | null;
  unavailable: IUnavailable;
}

/** A process attributed to this Jupyter server's kernels (`GET processes`). */
export interface IAttributedProcess extends IProcess {
  /** This server's kernel that runs the process or is its ancestor. */
  kernel_id: string | null;
  /** The notebook (or console) of that kernel's session, relative to the server root. */
  notebook_path: string | null;
}

/** One GPU in `GET processes`. */
export interface IDeviceProcesses {
  index: number;
  uuid: string | null;
  name: string | null;
  status: DeviceStatus;
  /** Null when the list could not be read (the reason is in `unavailable.processes`). */
  processes: IAttributedProcess[] | null;
  unavailable: IUnavailable;
}

/** `GET processes`. */
export interface IProcesses {
  /** Unix seconds of the sample the list comes from; null before the first sample. */
  timestamp: number | null;
  devices: IDeviceProcesses[];
}

/** One series value per timestamp; null where the value could not be read. */
export type Series = (number | null)[];

/**
 * One GPU's history in `GET samples`; every list is aligned with `ISamples.timestamps`.
 * Downsampled points keep each bucket's min and max (peaks survive); `throttle_reasons`
 * and `lost` are OR-ed over a bucket so short episodes stay visible.
 */
export interface IDeviceHistory {
  index: number;
  uuid: string | null;
  name: string | null;
  /** Percent of the sample period in which a kernel ran (NVML `gpu`). */
  utilization_gpu_percent: Series;
  /** Memory controller busy time, percent of the sample period (NVML `memory`); not used/total. */
  utilization_memory_percent: Series;
  memory_used_bytes: Series;
  memory_free_bytes: Series;
  memory_total_bytes: Series;
  /** GPU core temperature, degrees Celsius. */
  temperature_c: Series;
  /** Null on passively cooled GPUs. */
  fan_percent: Series;
  /** Power draw, watts. */
  power_w: Series;
  /** Enforced power limit, watts. */
  power_limit_w: Series;
  /** Energy since the driver was loaded, joules. */
  energy_j: Series;
  sm_clock_mhz: Series;
  memory_clock_mhz: Series;
  graphics_clock_mhz: Series;
  /** 0 (P0, fastest) to 15 (P15, slowest). */
  performance_state: Series;
  pcie_tx_bytes_per_s: Series;
  pcie_rx_bytes_per_s: Series;
  /**
   * Why the clocks were held down at each point (see THROTTLE_LABELS); `gpu_idle` is not a
   * problem. Null where unknown.
   */
  throttle_reasons: (string[] | null)[];
  /** True where the GPU did not answer (its values are null there). */
  lost: boolean[];
  /**
   * Why a field of this GPU's LATEST sample is null (field name -> reason), e.g.
   * `{"fan_percent": "not supported on this GPU (passively cooled)"}`. Only the newest sample:
   * older nulls in the series carry no reason.
   */
  unavailable: IUnavailable;
}

/** `GET samples?since=&max_points=`. */
export interface ISamples {
  backend: BackendName | null;
  status: ServiceStatus;
  interval_s: number;
  window_s: number;
  /**
   * The most points per GPU this answer holds: the `max_points` asked, lowered by the server so
   * that all GPUs together stay within its `max_response_points` (many GPUs: coarser charts).
   */
  max_points: number;
  server_time: number;
  /** Unix seconds, oldest first. */
  timestamps: number[];
  devices: IDeviceHistory[];
}

/** The body of every error answer of the API. */
export interface IErrorBody {
  /** bad_parameter, forbidden, not_found, server_error. */
  code: string;
  message: string;
}

/** What went wrong with a request. */
export type ApiErrorKind =
  /** The server could not be reached (no answer at all). */
  | 'network'
  /** The server answered with an HTTP error status. */
  | 'http'
  /** The server answered 200 with something that is not the expected JSON. */
  | 'bad_response';

/** The one error type the request module throws. */
export class ApiError extends Error {
  constructor(
    readonly kind: ApiErrorKind,
    /** The endpoint asked, e.g. `status` or `samples`. */
    readonly endpoint: string,
    message: string,
    /** HTTP status (null for network errors). */
    readonly status: number | null = null,
    /** The `code` of the JSON error body, when there was one. */
    readonly code: string | null = null
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

/** The exact command that enables the server extension. */
export const ENABLE_COMMAND = 'jupyter server extension enable gpu_widgets';

/** The environment variable that gives simulated GPUs (for demos without a GPU). */
export const SIMULATED_HINT = 'GPU_WIDGETS_BACKEND=simulated';

/**
 * What the sidebar shows, as one explicit union: each state tells the user what to do.
 */
export type MonitorState =
  /** Before the first answer. */
  | { kind: 'loading' }
  /** The server's sampler is opening the GPU backend. */
  | { kind: 'starting'; reason: string | null }
  /** No usable GPU; `reason` is NVML's explanation. */
  | { kind: 'no_gpu'; reason: string | null }
  /** Readings flow. */
  | { kind: 'ok'; backend: 'nvml' | 'simulated' }
  /** No new sample for over 3 intervals: the server's sampler waits on a driver call (`reason`). */
  | { kind: 'stale'; sampleAgeS: number | null; reason: string | null }
  /** The labextension is installed but the server extension is not enabled (404). */
  | { kind: 'extension_missing' }
  /** The Jupyter server refused us (403): the session expired or the token changed. */
  | { kind: 'forbidden'; message: string }
  /** The server extension answered with an error. */
  | { kind: 'server_error'; status: number | null; code: string | null; message: string }
  /** No answer from the Jupyter server; the poll backs off and retries. */
  | { kind: 'network'; message: string; retryInMs: number | null };

/** Throttle reason name -> words for people (gpu_widgets/throttle.py), display order. */
export const THROTTLE_LABELS: { readonly [name: string]: string } = {
  sw_power_cap: 'power cap',
  sw_thermal_slowdown: 'thermal (software)',
  hw_thermal_slowdown: 'thermal (hardware)',
  hw_power_brake_slowdown: 'power brake (hardware)',
  hw_slowdown: 'hardware slowdown',
  sync_boost: 'sync boost',
  applications_clocks_setting: 'application clocks setting',
  display_clock_setting: 'display clock setting',
  gpu_idle: 'idle'
};

/** A reason that is normal for an idle GPU: never drawn as a throttle episode. */
export const IDLE_REASON = 'gpu_idle';

/** The metrics a card can show (the `metrics` setting). */
export type MetricId =
  | 'utilization'
  | 'memory'
  | 'memory_controller'
  | 'temperature'
  | 'power';

/** Every metric, in display order. */
export const METRIC_IDS: readonly MetricId[] = [
  'utilization',
  'memory',
  'memory_controller',
  'temperature',
  'power'
];
