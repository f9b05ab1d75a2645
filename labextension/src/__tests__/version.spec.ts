/**
 * The sidebar's version against the server's `status.version`: nothing said when they agree,
 * which one to restart or reload when they differ, and an older server that names no version.
 */
import { GpuModel } from '../gpus/model';
import { requestAPI } from '../api/request';
import { statusText } from '../shell/statusbar';
import { compareVersions, SIDEBAR_VERSION, versionMismatch } from '../api/version';
import { serveModel, status } from './utils';

jest.mock('../api/request', () => ({ requestAPI: jest.fn() }));
// The status bar's widgets need a browser; its text does not.
jest.mock('@jupyterlab/ui-components', () => ({ ReactWidget: class {} }));
jest.mock('@jupyterlab/statusbar', () => ({}));
jest.mock('../shell/icons', () => ({ gpuIcon: {} }));

const mockedRequest = requestAPI as jest.MockedFunction<typeof requestAPI>;

afterEach(() => {
  mockedRequest.mockReset();
});

describe('versionMismatch', () => {
  it("is package.json's version", () => {
    expect(SIDEBAR_VERSION).toBe(require('../../../package.json').version);
  });

  it('says nothing when the server runs the same version', () => {
    expect(versionMismatch({ version: '0.2.0' }, '0.2.0')).toBeNull();
    expect(versionMismatch({ version: SIDEBAR_VERSION })).toBeNull();
  });

  it('asks for a reload when the page is older, a server restart when the server is', () => {
    expect(versionMismatch({ version: '0.3.0' }, '0.2.0')).toBe(
      "This page runs gpu-widgets 0.2.0's sidebar, the server 0.3.0: reload the page."
    );
    expect(versionMismatch({ version: '0.9.1' }, '0.10.0')).toBe(
      "This page runs gpu-widgets 0.10.0's sidebar, the server 0.9.1: restart the Jupyter server."
    );
    expect(versionMismatch({ version: '0.3.0.dev1+g1234' }, '0.3.0')).toBe(
      "This page runs gpu-widgets 0.3.0's sidebar, the server 0.3.0.dev1+g1234: reload the page (restart the Jupyter server if that does not help)."
    );
  });

  it('tells an older server without a version field to restart', () => {
    const words = "This page runs gpu-widgets 0.2.0's sidebar, the server an older gpu-widgets (it names no version): restart the Jupyter server.";
    expect(versionMismatch({}, '0.2.0')).toBe(words);
    expect(versionMismatch({ version: null }, '0.2.0')).toBe(words);
  });

  it('orders versions by their numbers', () => {
    expect(compareVersions('0.10.0', '0.9.9')).toBe(1);
    expect(compareVersions('1.0', '1.0.0')).toBe(0);
    expect(compareVersions('0.2.0', '0.2.1')).toBe(-1);
    expect(compareVersions('0.2.0rc1', '0.2.0')).toBe(0);
  });
});

describe('GpuModel: the version check', () => {
  function setup(version: string | undefined): { model: GpuModel; answer: (v: string | undefined) => void } {
    const { api, model, history } = serveModel(mockedRequest);
    let current = version;
    api.table.status = {
      body: () => {
        const body: { version?: string } = status({ server_time: history.serverTime });
        if (current === undefined) {
          delete body.version;
        } else {
          body.version = current;
        }
        return body;
      }
    };
    return { model, answer: v => (current = v) };
  }

  it('shows nothing for the same version, on the panel nor in the status bar', async () => {
    const { model } = setup(SIDEBAR_VERSION);
    await model.refresh();
    expect(model.state.kind).toBe('ok');
    expect(model.versionProblem).toBeNull();
    expect(statusText(model).title).not.toMatch(/gpu-widgets/);
    model.dispose();
  });

  it('says so with the first status answer, and in the status bar tooltip first', async () => {
    const { model } = setup('999.0.0');
    await model.refresh();
    const words = `This page runs gpu-widgets ${SIDEBAR_VERSION}'s sidebar, the server 999.0.0: reload the page.`;
    expect(model.versionProblem).toBe(words);
    expect(statusText(model).title.split('\n')[0]).toBe(words);
    model.dispose();
  });

  it('says so for a server whose status names no version', async () => {
    const { model } = setup(undefined);
    await model.refresh();
    expect(model.versionProblem).toMatch(/the server an older gpu-widgets \(it names no version\): restart the Jupyter server\.$/);
    model.dispose();
  });
});
