/**
 * The sidebar's own version against the server's: after `pip install -U gpu-widgets` one of
 * the two still runs the old code (the server until restarted, a page until reloaded), and the
 * API they speak may differ. Said plainly at once, instead of a failure later.
 *
 * The version is package.json's, built into the bundle; gpu_widgets/_version.py is kept equal
 * to it (tests/test_packaging.py), and the server answers that one in `status.version`.
 */
import pkg from '../../../package.json';

/** The gpu-widgets version this page's sidebar was built from. */
export const SIDEBAR_VERSION: string = pkg.version;

/**
 * What to tell the user when the server runs another gpu-widgets than the page, else null.
 * `status` is the server's status answer; one without `version` comes from an older server.
 */
export function versionMismatch(status: { version?: unknown }, page: string = SIDEBAR_VERSION): string | null {
  const server = typeof status.version === 'string' && status.version ? status.version : null;
  if (server === page) {
    return null;
  }
  const sidebar = `This page runs gpu-widgets ${page}'s sidebar`;
  if (server === null) {
    return `${sidebar}, the server an older gpu-widgets (it names no version): restart the Jupyter server.`;
  }
  const order = compareVersions(page, server);
  if (order < 0) {
    return `${sidebar}, the server ${server}: reload the page.`;
  }
  if (order > 0) {
    return `${sidebar}, the server ${server}: restart the Jupyter server.`;
  }
  return `${sidebar}, the server ${server}: reload the page (restart the Jupyter server if that does not help).`;
}

/**
 * -1, 0 or 1 as `a` is older than, as old as or newer than `b`, by their numeric parts
 * ("0.10.0" after "0.9.1"); 0 also when either is not `N.N.N…` (no order to tell).
 */
export function compareVersions(a: string, b: string): number {
  const parse = (v: string): number[] | null => (/^\d+(\.\d+)*$/.test(v) ? v.split('.').map(Number) : null);
  const pa = parse(a);
  const pb = parse(b);
  if (!pa || !pb) {
    return 0;
  }
  for (let i = 0; i < Math.max(pa.length, pb.length); i++) {
    const d = (pa[i] ?? 0) - (pb[i] ?? 0);
    if (d !== 0) {
      return d < 0 ? -1 : 1;
    }
  }
  return 0;
}
