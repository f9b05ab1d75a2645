/**
 * The gpu-widgets server API as the sidebar uses it, the error type the request module throws,
 * and the states the sidebar can be in.
 *
 * The API's shapes are aliases of the types generated from gpu_widgets/server/openapi.json
 * (api/generated/, `jlpm gen:api`): the document is the one description of the API, and
 * `make test` fails when the generated files fall behind it. Field docs are in that document
 * and docs/fields.md. Any value the server could not read is `null`, and the matching
 * `unavailable` map says why.
 *
 * Kept free of JupyterLab imports so that jest can use it in plain node.
 */
import { components } from './generated';

type Schemas = components['schemas'];

/** `GET cells/summary`: what one cell of a kernel cost the GPU (docs/cells.md). */
export type ICellSummary = Schemas['CellSummary'];

/** One GPU of a cell's summary. */
export type ICellGpu = Schemas['CellGpu'];

/** `GET status`: backend, driver, sampling interval, server time. */
export type IStatus = Schemas['Status'];

/** Where readings come from; `null` while the server's sampler is starting. */
export type BackendName = NonNullable<IStatus['backend']>;

/**
 * The server's overall state: `starting` until the GPU backend is opened and its first sample
 * taken (never `ok` without a sample); `stale` when the newest sample (or, 5 s after the start,
 * the first one) is too old because a driver call has not returned (the reason names it).
 */
export type ServiceStatus = IStatus['status'];

/** `lost`: the GPU stopped answering NVML; the server asks again every 5 s. */
export type DeviceStatus = Schemas['DeviceInfo']['status'];

/** Field name -> why that field is null. */
export type IUnavailable = Schemas['DeviceInfo']['unavailable'];

/** Static facts of one GPU (the spec card), from `GET devices`. */
export type IDeviceInfo = Schemas['DeviceInfo'];

/** `GET devices`. */
export type IDevices = Schemas['Devices'];

/** A process using a GPU. Another user's process has null name/uid/user/command, with a reason. */
export type IProcess = Schemas['Process'];

/** A process attributed to this Jupyter server's kernels (`GET processes`). */
export type IAttributedProcess = Schemas['AttributedProcess'];

/** One GPU in `GET processes`. */
export type IDeviceProcesses = Schemas['DeviceProcesses'];

/** `GET processes`. */
export type IProcesses = Schemas['Processes'];

/** One GPU's history in `GET samples`; every list is aligned with `ISamples.timestamps`. */
export type IDeviceHistory = Schemas['DeviceHistory'];

/** One series value per timestamp; null where the value could not be read. */
export type Series = IDeviceHistory['utilization_gpu_percent'];

/** `GET samples?since=&max_points=`: bounded by `max_points` (min/max buckets keep peaks). */
export type ISamples = Schemas['Samples'];

/** `GET samples/latest`: one sample of every GPU (with `?gpm=1`, GPM figures and per-process use). */
export type ISnapshot = Schemas['Snapshot'];

/** One GPU in `GET samples/latest`: the latest values, its processes and MIG instances. */
export type IDeviceSample = Schemas['DeviceSample'];

/** One MIG instance of a GPU in MIG mode, with the pids that run in it. */
export type IMigInstance = Schemas['MigInstance'];

/** `GET metrics`: the metric catalogue and the throttle reasons' words. */
export type IMetricsCatalogue = Schemas['Metrics'];

/** One metric of the catalogue: the field it reads, its words, unit, digits and chart range. */
export type IMetricInfo = Schemas['Metric'];

/** One throttle reason: its name in samples, its words, whether it costs performance. */
export type IThrottleReason = Schemas['ThrottleReason'];

/** The body of every error answer of the API. */
export type IErrorBody = Schemas['Error'];

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
  /** The server's sampler is opening the GPU backend, or waiting for its first sample (`reason` says which). */
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

/** A reason that is normal for an idle GPU: never drawn as a throttle episode. */
export const IDLE_REASON = 'gpu_idle';
