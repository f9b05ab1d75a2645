/**
 * The axes of a card's sparklines: the time span they cover and the words for their y range.
 *
 * Pure functions (no DOM): jest-tested.
 */
import { formatNumber } from '../ui/format';
import { IMetricInfo } from '../api/tokens';

/**
 * The x range of the charts: the data until it covers the history window, then the window.
 * A fresh panel draws its first minute across the whole width, not as a sliver at the right
 * edge of ten empty minutes. Null without data; a single point gets one second.
 */
export function timeSpan(times: readonly number[], windowS: number): [number, number] | null {
  if (!times.length) {
    return null;
  }
  if (!(windowS > 0)) {
    throw new Error(`the history window must be a positive number of seconds, not ${windowS}`);
  }
  const xMax = times[times.length - 1];
  const xMin = Math.max(times[0], xMax - windowS);
  return [xMax > xMin ? xMin : xMax - 1, xMax];
}

/**
 * The words at the bottom and the top of a chart's y axis, in the metric's unit: the top
 * carries the unit ("100 %", "80 GiB", "700 W"), the bottom only the number ("0", "20").
 */
export function rangeLabels(metric: IMetricInfo, yMin: number, yMax: number): { bottom: string; top: string } {
  // One decimal more than the card would be noise here; a whole number reads best.
  const digits = Math.min(metric.decimals, 1);
  return {
    bottom: formatNumber(yMin * metric.scale, digits),
    top: `${formatNumber(yMax * metric.scale, digits)} ${metric.unit}`
  };
}
