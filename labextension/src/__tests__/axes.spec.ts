/**
 * A sparkline's time span and the words of its y range.
 */
import { rangeLabels, timeSpan } from '../charts/axes';
import { GIB, metricOf } from './utils';

describe('timeSpan', () => {
  it('spans the data until it covers the window, then the window', () => {
    expect(timeSpan([100, 101, 130], 600)).toEqual([100, 130]);
    expect(timeSpan([100, 400, 800], 600)).toEqual([200, 800]);
    expect(timeSpan([100, 700], 600)).toEqual([100, 700]);
  });

  it('gives one point a second and no data nothing', () => {
    expect(timeSpan([50], 600)).toEqual([49, 50]);
    expect(timeSpan([], 600)).toBeNull();
    expect(() => timeSpan([1, 2], 0)).toThrow('the history window must be a positive number of seconds, not 0');
  });
});

describe('rangeLabels', () => {
  it('writes the bottom as a number and the top with the unit, in the metric\'s scale', () => {
    expect(rangeLabels(metricOf('utilization'), 0, 100)).toEqual({ bottom: '0', top: '100 %' });
    expect(rangeLabels(metricOf('memory'), 0, 80 * GIB)).toEqual({ bottom: '0', top: '80 GiB' });
    expect(rangeLabels(metricOf('memory'), 0, 141.5 * GIB)).toEqual({ bottom: '0', top: '141.5 GiB' });
    expect(rangeLabels(metricOf('power'), 0, 700)).toEqual({ bottom: '0', top: '700 W' });
    expect(rangeLabels(metricOf('temperature'), 20, 87)).toEqual({ bottom: '20', top: '87 °C' });
  });
});
