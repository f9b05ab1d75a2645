/**
 * The one way the front end talks to the gpu-widgets server extension.
 *
 * Every failure becomes an `ApiError` (tokens.ts) that says what kind it is: no answer
 * (`network`), an HTTP error with the server's `{code, message}` when it sent one (`http`),
 * or a 200 that is not JSON (`bad_response`). The model turns those into sidebar states.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { ApiError, IErrorBody } from './tokens';

/** The API's path below the server's base URL. */
export const API_PATH = 'gpu-widgets/api/v1';

/** Query parameters; undefined ones are left out. */
export type Query = { [name: string]: string | number | undefined };

/** What a call other than a plain GET needs. */
export interface IRequestInit {
  /** Default GET. */
  method?: 'GET' | 'PUT' | 'POST' | 'DELETE';
  /** Sent as JSON. */
  body?: unknown;
  settings?: ServerConnection.ISettings;
}

/**
 * `{method}` `{baseUrl}gpu-widgets/api/v1/{endpoint}?{query}` with the server's token (and the
 * body as JSON) and return the parsed JSON answer. Throws `ApiError` for anything else.
 */
export async function requestAPI<T>(endpoint: string, query: Query = {}, init: IRequestInit = {}): Promise<T> {
  const settings = init.settings ?? ServerConnection.makeSettings();
  const params: { [name: string]: string } = {};
  for (const [name, value] of Object.entries(query)) {
    if (value !== undefined) {
      params[name] = String(value);
    }
  }
  const search = Object.keys(params).length ? URLExt.objectToQueryString(params) : '';
  const url = URLExt.join(settings.baseUrl, API_PATH, endpoint) + search;
  // `cache: 'no-cache'`: with JupyterLab's default ('no-store') makeRequest appends a
  // cache-busting `?<timestamp>` parameter, which the API rejects as unknown (400). The
  // server answers `Cache-Control: no-store`, so nothing is cached either way.
  const request: RequestInit = { method: init.method ?? 'GET', cache: 'no-cache' };
  if (init.body !== undefined) {
    request.body = JSON.stringify(init.body);
  }

  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, request, settings);
  } catch (error) {
    // ServerConnection.NetworkError: the request never got an answer.
    const reason = error instanceof Error ? error.message : String(error);
    throw new ApiError('network', endpoint, `the Jupyter server did not answer (${reason})`);
  }

  const text = await response.text().catch(() => '');
  if (!response.ok) {
    const body = parseErrorBody(text);
    const message = body?.message || response.statusText || `HTTP ${response.status}`;
    throw new ApiError('http', endpoint, message, response.status, body?.code ?? null);
  }
  if (response.status === 204) {
    return undefined as T; // an action with nothing to say
  }
  try {
    return JSON.parse(text) as T;
  } catch {
    throw new ApiError(
      'bad_response',
      endpoint,
      `the answer to ${endpoint} is not JSON (is a proxy in the way?)`,
      response.status
    );
  }
}

/** The API's `{code, message}` error body, or null when the body is something else. */
function parseErrorBody(text: string): IErrorBody | null {
  try {
    const body = JSON.parse(text);
    if (body && typeof body.code === 'string' && typeof body.message === 'string') {
      return { code: body.code, message: body.message };
    }
  } catch {
    // not JSON (e.g. the server's HTML 404 page when the extension is missing)
  }
  return null;
}
