/**
 * How a metric of the catalogue reads on a card and in its chart: the number and its text,
 * why it is missing, and the chart's y range. Everything comes from the metric's catalogue
 * entry (unit, scale, digits, range), so a metric the sidebar has never heard of works too.
 *
 * Pure functions (no DOM): jest-tested.
 */
import { formatNumber, ILatestValues } from '../ui/format';
import { infoValue } from './gpus';
import { IDeviceColumns } from './series';
import { IDeviceInfo, IMetricInfo, Series } from '../api/tokens';

/** How a metric is shown: its label, the numbers and the text. */
export interface IMetricReading {
  label: string;
  /** The number as the server sent it (null when unknown): `aria-valuenow`. */
  value: number | null;
  /** The largest value the meter can show, in the server's unit: `aria-valuemax`. */
  max: number | null;
  /** What the card prints, e.g. "37 / 141 GiB"; "—" when unknown. */
  text: string;
  /** A one-line explanation (tooltip). */
  help: string;
}

const DASH = '—';

/** What a card prints for a value that is null with a known reason. */
export const NOT_AVAILABLE = 'n/a';

const finite = (x: unknown): number | null => (typeof x === 'number' && Number.isFinite(x) ? x : null);

/** A field value in the metric's unit, without the unit: "37", "54.6". */
function shown(metric: IMetricInfo, raw: number): string {
  return formatNumber(raw * metric.scale, metric.decimals);
}

/** A field value as people read it: "54.6 GiB", "97 %" (the charts' tooltips). */
export function formatValue(metric: IMetricInfo, raw: number): string {
  return `${shown(metric, raw)} ${metric.unit}`;
}

/**
 * The reading of one metric from a GPU's latest values. A metric whose chart top follows
 * another field (memory total, power limit) reads against it: "37 / 141 GiB".
 */
export function metricReading(metric: IMetricInfo, v: ILatestValues | null): IMetricReading {
  const num = (field: string | null): number | null => (v && !v.lost && field ? finite(v.values[field]) : null);
  const value = num(metric.field);
  const limit = num(metric.y_max_field);
  const max = limit ?? (metric.y_max !== null ? metric.y_max / metric.scale : null);
  let text = DASH;
  if (value !== null) {
    text = limit !== null ? `${shown(metric, value)} / ${shown(metric, limit)} ${metric.unit}` : formatValue(metric, value);
  }
  return { label: metric.label, help: metric.help, value, max, text };
}

/**
 * The widest text the metric's number can take up to the top of its range, every digit a "0"
 * (the card's digits are tabular, so this is as wide as any value): "000 %", "00.0 / 80 GiB".
 * The card keeps the value's box this wide, so its label wraps the same whatever the number.
 * Empty when the range has no known top.
 */
export function widestText(metric: IMetricInfo, reading: IMetricReading): string {
  if (reading.max === null || !Number.isFinite(reading.max)) {
    return '';
  }
  const top = Math.abs(reading.max * metric.scale);
  const digits = Math.max(1, String(Math.round(top)).length);
  const number = '0'.repeat(digits) + (metric.decimals > 0 ? `.${'0'.repeat(metric.decimals)}` : '');
  // A top that follows another field is printed beside the value: "37 / 141 GiB".
  return metric.y_max_field !== null ? `${number} / ${shown(metric, reading.max)} ${metric.unit}` : `${number} ${metric.unit}`;
}

/**
 * Why a metric has no value: the server's reasons for its field (and the field its chart
 * top follows), distinct, joined with "; ". Null when the reading has a value or no reason
 * is known.
 */
export function unavailableReason(
  metric: IMetricInfo,
  reading: IMetricReading,
  unavailable: { readonly [field: string]: string } | null | undefined
): string | null {
  if (reading.value !== null || !unavailable) {
    return null;
  }
  const reasons = [metric.field, metric.y_max_field]
    .map(field => (field ? unavailable[field] : undefined))
    .filter((r): r is string => typeof r === 'string' && r.length > 0);
  return reasons.length ? [...new Set(reasons)].join('; ') : null;
}

function lastOf(values: Series | undefined): number | null {
  for (let i = (values?.length ?? 0) - 1; i >= 0; i--) {
    const v = values![i];
    if (v !== null) {
      return v;
    }
  }
  return null;
}

/**
 * The y range of a metric's chart for one GPU's history, in the server's unit. The catalogue
 * gives a fixed bottom and top, or a field the top follows (a full chart means "at the
 * limit"); null ends fit the data with a margin. The data is never clipped.
 */
export function chartRange(metric: IMetricInfo, cols: IDeviceColumns, info: IDeviceInfo | null): [number, number] {
  let lo: number | null = null;
  let hi: number | null = null;
  for (const v of cols.values[metric.field] ?? []) {
    if (v !== null) {
      lo = lo === null || v < lo ? v : lo;
      hi = hi === null || v > hi ? v : hi;
    }
  }
  let bottom = metric.y_min !== null ? metric.y_min / metric.scale : null;
  let top = metric.y_max !== null ? metric.y_max / metric.scale : null;
  if (top === null && metric.y_max_field) {
    top = lastOf(cols.values[metric.y_max_field]) ?? infoValue(info, metric.y_max_field);
  }
  if (lo !== null && hi !== null) {
    const pad = hi > lo ? (hi - lo) * 0.1 : Math.max(Math.abs(hi) * 0.1, 1 / Math.abs(metric.scale));
    bottom = bottom === null ? lo - pad : Math.min(bottom, lo);
    top = top === null ? hi + pad : Math.max(top, hi);
  }
  bottom = bottom ?? 0;
  top = top ?? bottom + 1;
  return [bottom, top > bottom ? top : bottom + 1];
}
