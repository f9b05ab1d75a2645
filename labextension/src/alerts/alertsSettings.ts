/**
 * The `alerts` setting (labextension/schema/plugin.json): what stays in the tab (on/off, the
 * kinds shown) and what goes to the server (thresholds, the GPUs watched), which decides the
 * alerts once per sample for every tab and user.
 *
 * A threshold left unset in the Settings Editor is the server's own (`GpuWidgets.alert_*`), so
 * a tab never overwrites an administrator's configuration with schema defaults; one that is set
 * is sent when it differs from what the server answers.
 */
import { components } from '../api/generated';
import { ALERT_KINDS, AlertKind, IAlerts } from './alertsModel';
import { requestAPI } from '../api/request';

export type IAlertSettingsChange = components['schemas']['AlertSettingsChange'];

export interface IAlertsSetting {
  enabled: boolean;
  kinds: AlertKind[];
  /** Only what the user set; empty: the server's settings stand. */
  server: IAlertSettingsChange;
}

/** The Settings Editor's names -> the server's. */
const SERVER_FIELDS: { [name: string]: keyof IAlertSettingsChange } = {
  temperatureMarginC: 'temperature_margin_c',
  throttleS: 'throttle_s',
  memoryPercent: 'memory_percent',
  idleKernelMemoryGiB: 'idle_kernel_memory_gib',
  idleMinutes: 'idle_minutes'
};

/** Read a raw `alerts` setting; anything unusable falls back to "on, every kind, the server's". */
export function normalizeAlertsSetting(value: unknown): IAlertsSetting {
  const raw = value && typeof value === 'object' && !Array.isArray(value) ? (value as { [k: string]: unknown }) : {};
  const kinds = raw.kinds && typeof raw.kinds === 'object' ? (raw.kinds as { [k: string]: unknown }) : {};
  const server: { [k: string]: number | string } = {};
  for (const [name, field] of Object.entries(SERVER_FIELDS)) {
    const v = raw[name];
    if (typeof v === 'number' && Number.isFinite(v)) {
      server[field] = v;
    }
  }
  if (raw.gpus === 'all' || raw.gpus === 'mine') {
    server.gpus = raw.gpus;
  }
  return {
    enabled: typeof raw.enabled === 'boolean' ? raw.enabled : true,
    kinds: ALERT_KINDS.filter(kind => kinds[kind] !== false),
    server: server as IAlertSettingsChange
  };
}

/** The settings to send: those the user set that the server does not already apply; null if none. */
export function serverChanges(wanted: IAlertSettingsChange, current: IAlerts['settings']): IAlertSettingsChange | null {
  const out: { [k: string]: unknown } = {};
  for (const [field, value] of Object.entries(wanted)) {
    if ((current as { [k: string]: unknown })[field] !== value) {
      out[field] = value;
    }
  }
  return Object.keys(out).length ? (out as IAlertSettingsChange) : null;
}

/** `PUT alerts/settings`; the settings in force, or an `ApiError` with the server's words. */
export function putAlertSettings(changes: IAlertSettingsChange): Promise<IAlerts['settings']> {
  return requestAPI<IAlerts['settings']>('alerts/settings', {}, { method: 'PUT', body: changes });
}
