/**
 * The `samples` request a history query makes.
 */
import { requestAPI } from '../api/request';
import { ApiError, ISamples } from '../api/tokens';
import { ISamplesQuery } from './history';

/**
 * The samples `query` asks for. A server older than API 1.1 refuses `until` (400
 * bad_parameter): `refused` is called (the window is then asked for whole on the next tick) and
 * this tick brings nothing new (null).
 */
export async function requestSamples(query: ISamplesQuery, refused: () => void): Promise<ISamples | null> {
  const params = { since: query.since, max_points: query.max_points };
  if (query.until === undefined) {
    return requestAPI<ISamples>('samples', params);
  }
  try {
    return await requestAPI<ISamples>('samples', { ...params, until: query.until });
  } catch (error) {
    if (error instanceof ApiError && error.status === 400) {
      refused();
      return null;
    }
    throw error;
  }
}
