/**
 * What each metric's chart draws: which column, on which y range, and how a value reads.
 *
 * Pure functions (no DOM): jest-tested.
 */
import { formatGiB, formatNumber } from './format';
import { IDeviceColumns, KeptField } from './series';
import { IDeviceInfo, MetricId, Series } from './tokens';

export interface IMetricSpec {
  id: MetricId;
  /** The column drawn. */
  field: KeptField;
  /** A value as the tooltip prints it. */
  format: (value: number) => string;
  /** The y range for this GPU's history. */
  range: (cols: IDeviceColumns, info: IDeviceInfo | null) => [number, number];
}

function maxOf(values: Series): number | null {
  let m: number | null = null;
  for (const v of values) {
    if (v !== null && (m === null || v > m)) {
      m = v;
    }
  }
  return m;
}

function lastOf(values: Series): number | null {
  for (let i = values.length - 1; i >= 0; i--) {
    const v = values[i];
    if (v !== null) {
      return v;
    }
  }
  return null;
}

const percent = (v: number): string => `${formatNumber(v, 0)} %`;

/**
 * Percentages are drawn on 0-100, memory on 0-total, power on 0-limit (so a full chart
 * means "at the limit"), temperature on 0-100 °C (or up to the hottest point).
 */
export const METRIC_SPECS: { readonly [K in MetricId]: IMetricSpec } = {
  utilization: {
    id: 'utilization',
    field: 'utilization_gpu_percent',
    format: percent,
    range: () => [0, 100]
  },
  memory_controller: {
    id: 'memory_controller',
    field: 'utilization_memory_percent',
    format: percent,
    range: () => [0, 100]
  },
  memory: {
    id: 'memory',
    field: 'memory_used_bytes',
    format: v => `${formatGiB(v)} GiB`,
    range: (cols, info) => {
      const total = lastOf(cols.values.memory_total_bytes) ?? info?.memory_total_bytes ?? null;
      const used = maxOf(cols.values.memory_used_bytes) ?? 0;
      return [0, Math.max(total ?? used * 1.1, used, 1)];
    }
  },
  temperature: {
    id: 'temperature',
    field: 'temperature_c',
    format: v => `${formatNumber(v, 0)} °C`,
    range: cols => [0, Math.max(100, maxOf(cols.values.temperature_c) ?? 0)]
  },
  power: {
    id: 'power',
    field: 'power_w',
    format: v => `${formatNumber(v)} W`,
    range: (cols, info) => {
      const limit = lastOf(cols.values.power_limit_w) ?? info?.power_limit_w ?? null;
      const peak = maxOf(cols.values.power_w) ?? 0;
      return [0, Math.max(limit ?? peak * 1.1, peak, 1)];
    }
  }
};
