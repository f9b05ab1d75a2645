/**
 * The metric catalogue as the server serves it (`GET metrics`): which metrics the sidebar
 * draws, in which order, and the words for throttle reasons. The cards read these from the
 * server, so a metric added there shows up here without a front-end change (this version's
 * copy, catalogue.generated.ts, serves only what comes before or without that answer).
 *
 * Pure code (no DOM, no JupyterLab imports): jest-tested in plain node.
 */
// Types only: this module stays free of imports at run time (tests/test_adding_a_metric.py runs it
// alone); the names are checked against the generated catalogue when it compiles.
import type { SampleField, View } from './catalogue.generated';
import type { IMetricInfo, IMetricsCatalogue, IThrottleReason } from './tokens';

/** The catalogue's name for the views of this sidebar (`Metric.views`). */
export const SIDEBAR_VIEW: View = 'sidebar';

/** Fields the status-bar summary reads, kept whatever metrics the cards show. */
export const SUMMARY_FIELDS: readonly SampleField[] = [
  'utilization_gpu_percent',
  'memory_used_bytes',
  'memory_total_bytes'
];

/** Which colour family a chart band is drawn in. */
export type EpisodeKind = 'power' | 'thermal' | 'other' | 'lost';

export class Catalogue {
  constructor(body: IMetricsCatalogue) {
    this.metrics = body.metrics;
    this.sidebar = body.metrics.filter(m => m.views.includes(SIDEBAR_VIEW));
    this.throttleReasons = body.throttle_reasons;
    this._reasons = new Map(body.throttle_reasons.map((r, i) => [r.name, { ...r, order: i }]));
  }

  /** Every metric, in display order. */
  readonly metrics: readonly IMetricInfo[];
  /** The metrics a GPU card can show, in display order. */
  readonly sidebar: readonly IMetricInfo[];
  /** Every throttle reason, in display order. */
  readonly throttleReasons: readonly IThrottleReason[];

  /** The sample fields the cards and the status bar read (columns the history keeps). */
  fields(): string[] {
    const out = new Set<string>(SUMMARY_FIELDS);
    for (const m of this.sidebar) {
      out.add(m.field);
      if (m.y_max_field) {
        out.add(m.y_max_field);
      }
    }
    return [...out];
  }

  /** Words for a throttle reason; unknown NVML bits (`other_0x...`) are shown as they are. */
  throttleLabel(reason: string): string {
    if (reason === 'lost') {
      return 'GPU lost';
    }
    return this._reasons.get(reason)?.label ?? reason.replace(/_/g, ' ');
  }

  /**
   * The band colour of a reason: slowdowns are power or thermal (by name), anything else
   * (sync boost, clock settings, unknown bits) is `other`.
   */
  episodeKind(reason: string): EpisodeKind {
    if (reason === 'lost') {
      return 'lost';
    }
    if (!this._reasons.get(reason)?.slowdown) {
      return 'other';
    }
    return reason.includes('power') ? 'power' : 'thermal';
  }

  /** The display position of a reason (unknown ones last). */
  reasonOrder(reason: string): number {
    return this._reasons.get(reason)?.order ?? this._reasons.size;
  }

  private _reasons: Map<string, IThrottleReason & { order: number }>;
}

/**
 * Check a `GET metrics` answer and wrap it. Throws an Error that names the first entry that
 * is not what the API document says (the model reports it as a bad answer).
 */
export function parseCatalogue(body: unknown): Catalogue {
  const obj = body as { [key: string]: unknown } | null;
  if (!obj || typeof obj !== 'object' || !Array.isArray(obj.metrics) || !Array.isArray(obj.throttle_reasons)) {
    throw new Error('the metric catalogue has no `metrics` and `throttle_reasons` lists');
  }
  obj.metrics.forEach((m: unknown, i: number) => {
    const bad = badMetric(m);
    if (bad) {
      throw new Error(`metric ${i} of the catalogue: ${bad}`);
    }
  });
  obj.throttle_reasons.forEach((r: unknown, i: number) => {
    const x = r as { [key: string]: unknown } | null;
    if (!x || typeof x.name !== 'string' || typeof x.label !== 'string' || typeof x.slowdown !== 'boolean') {
      throw new Error(`throttle reason ${i} of the catalogue needs a string name and label and a boolean slowdown`);
    }
  });
  return new Catalogue(obj as unknown as IMetricsCatalogue);
}

const isNum = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);
const isNumOrNull = (v: unknown): boolean => v === null || isNum(v);

/** What is wrong with one metric entry, or null. */
function badMetric(m: unknown): string | null {
  const x = m as { [key: string]: unknown } | null;
  if (!x || typeof x !== 'object') {
    return 'not an object';
  }
  for (const key of ['id', 'field', 'label', 'title', 'unit', 'help']) {
    if (typeof x[key] !== 'string') {
      return `\`${key}\` is not a string`;
    }
  }
  if (!isNum(x.scale) || x.scale === 0) {
    return `\`scale\` of ${x.id} is not a non-zero number`;
  }
  if (!Number.isInteger(x.decimals) || (x.decimals as number) < 0 || (x.decimals as number) > 20) {
    return `\`decimals\` of ${x.id} is not an integer from 0 to 20`;
  }
  if (!isNumOrNull(x.y_min) || !isNumOrNull(x.y_max)) {
    return `\`y_min\`/\`y_max\` of ${x.id} are not numbers or null`;
  }
  if (x.y_max_field !== null && typeof x.y_max_field !== 'string') {
    return `\`y_max_field\` of ${x.id} is not a string or null`;
  }
  if (!Array.isArray(x.views) || !x.views.every(v => typeof v === 'string')) {
    return `\`views\` of ${x.id} is not a list of names`;
  }
  return null;
}
