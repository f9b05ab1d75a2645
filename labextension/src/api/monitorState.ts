/** The sidebar's state (a MonitorState) from a request failure or from a status answer. */
import { ApiError, IStatus, MonitorState } from './tokens';

/** Turn a request failure into the state the sidebar shows. */
export function stateFromError(error: unknown, retryInMs: number | null = null): MonitorState {
  if (error instanceof ApiError) {
    switch (error.kind) {
      case 'network':
        return { kind: 'network', message: error.message, retryInMs };
      case 'bad_response':
        return { kind: 'server_error', status: error.status, code: null, message: error.message };
      case 'http':
        // The server's own 404 page (not our JSON): the routes are not there at all.
        if (error.status === 404 && error.code === null) {
          return { kind: 'extension_missing' };
        }
        if (error.status === 403) {
          return { kind: 'forbidden', message: error.message };
        }
        return { kind: 'server_error', status: error.status, code: error.code, message: error.message };
    }
  }
  const message = error instanceof Error ? error.message : String(error);
  return { kind: 'server_error', status: null, code: null, message: `unexpected error in the sidebar: ${message}` };
}

/** The state for a status answer. */
export function stateFromStatus(status: IStatus): MonitorState {
  switch (status.status) {
    case 'starting':
      return { kind: 'starting', reason: status.reason };
    case 'no_gpu':
      return { kind: 'no_gpu', reason: status.reason };
    case 'stale':
      return { kind: 'stale', sampleAgeS: status.sample_age_s ?? null, reason: status.reason };
    default:
      return { kind: 'ok', backend: status.backend === 'simulated' ? 'simulated' : 'nvml' };
  }
}
