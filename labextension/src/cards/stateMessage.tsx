/**
 * What the sidebar says instead of (or above) the GPU cards: starting, no GPU, stale samples,
 * errors, each with what to do about it.
 */
import * as React from 'react';

import { formatDuration, staleTitle } from '../ui/format';
import { ENABLE_COMMAND, MonitorState, SIMULATED_HINT } from '../api/tokens';

export function StateMessage(props: { state: MonitorState; onRetry: () => void }): JSX.Element | null {
  const { state, onRetry } = props;
  const retry = (
    <button className="jp-GpuWidgets-button" onClick={onRetry}>
      Retry now
    </button>
  );
  switch (state.kind) {
    case 'ok':
      return null;
    case 'loading':
      return (
        <Message kind="info" title="Connecting to the GPU monitor…">
          Asking the gpu-widgets server extension for GPU readings.
        </Message>
      );
    case 'starting':
      // The server's reason says which step: opening the GPU backend, or waiting for its first sample.
      return (
        <Message kind="info" title="The GPU sampler is starting…">
          <span className="jp-GpuWidgets-reason">{sentence(state.reason ?? 'the server is opening the GPU backend')}</span>{' '}
          Readings appear in a moment.
        </Message>
      );
    case 'stale':
      return (
        <Message kind="warn" title={staleTitle(state.sampleAgeS)}>
          <p>
            <span className="jp-GpuWidgets-reason">{state.reason ?? 'The server has no new GPU sample'}</span>.
          </p>
          <p>
            {state.sampleAgeS === null
              ? 'No GPU has been read yet; the readings appear when the call returns.'
              : 'The numbers and charts below are from before then; they update again when the call returns.'}
          </p>
        </Message>
      );
    case 'no_gpu':
      return (
        <Message kind="warn" title="No NVIDIA GPU available">
          <p>
            NVML says: <q className="jp-GpuWidgets-reason">{state.reason ?? 'no reason given'}</q>
          </p>
          <p>
            gpu-widgets reads GPUs through the NVIDIA driver's NVML library (libnvidia-ml.so.1) on
            the machine that runs the Jupyter server. Install the NVIDIA driver there, or run the
            server where the GPUs are. For a demo without a GPU, start JupyterLab with{' '}
            <code>{SIMULATED_HINT}</code>.
          </p>
        </Message>
      );
    case 'extension_missing':
      return (
        <Message kind="error" title="The gpu-widgets server extension is not enabled">
          <p>The GPU readings come from a Jupyter server extension that this server did not load. Run:</p>
          <pre className="jp-GpuWidgets-command">
            <code>{ENABLE_COMMAND}</code>
          </pre>
          <p>and restart JupyterLab.</p>
        </Message>
      );
    case 'forbidden':
      return (
        <Message kind="error" title="The Jupyter server refused the request (403)">
          <p>{state.message}</p>
          <p>Your session may have expired: reload the page and log in again.</p>
        </Message>
      );
    case 'server_error':
      return (
        <Message kind="error" title="The gpu-widgets server extension reported an error">
          <p>
            {state.status !== null && `HTTP ${state.status}${state.code ? ` (${state.code})` : ''}: `}
            <span className="jp-GpuWidgets-reason">{state.message}</span>
          </p>
          <p>The Jupyter server's log has the details. Retrying automatically. {retry}</p>
        </Message>
      );
    case 'network':
      return (
        <Message kind="error" title="Cannot reach the Jupyter server">
          <p>{state.message}.</p>
          <p>
            Retrying automatically
            {state.retryInMs !== null && `, next try in about ${formatDuration(state.retryInMs / 1000)}`}
            ; the wait grows while the server does not answer. {retry}
          </p>
        </Message>
      );
  }
}

/** "waiting for the first GPU sample" as a sentence: "Waiting for the first GPU sample." */
function sentence(text: string): string {
  const capital = text.charAt(0).toUpperCase() + text.slice(1);
  return /[.!?…]$/.test(capital) ? capital : `${capital}.`;
}

function Message(props: {
  kind: 'info' | 'warn' | 'error';
  title: string;
  children: React.ReactNode;
}): JSX.Element {
  return (
    <div
      className={`jp-GpuWidgets-message jp-mod-${props.kind}`}
      role={props.kind === 'error' ? 'alert' : 'status'}
      aria-label={props.title}
    >
      <h3 className="jp-GpuWidgets-messageTitle">{props.title}</h3>
      <div className="jp-GpuWidgets-messageBody">{props.children}</div>
    </div>
  );
}

/** One GPU. */
