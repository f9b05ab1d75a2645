/**
 * The metric catalogue the server serves: what the sidebar draws and the throttle words.
 */
import { FALLBACK_ACTIVITY } from '../gpus/activity';
import { parseCatalogue } from '../api/catalogue';
import { CATALOGUE, GPM_FIELDS, METRIC, METRIC_IDS, SAMPLE_FIELDS } from '../api/catalogue.generated';
import { catalogue, catalogueBody, metricInfo } from './utils';

describe('Catalogue', () => {
  it('offers the sidebar the metrics whose views name it, in display order', () => {
    const fan = metricInfo('fan', 'fan_percent', 'Fan', '%', { views: ['dashboard'] });
    const c = catalogue([fan]);
    expect(c.metrics.map(m => m.id)).toContain('fan');
    expect(c.sidebar.map(m => m.id)).toEqual(['utilization', 'sm_active', 'tensor_active', 'memory', 'memory_controller', 'temperature', 'power']);
    // The columns the history keeps: each metric's field, the fields its chart top follows,
    // and what the status bar reads.
    expect(c.fields().sort()).toEqual(
      [
        'memory_total_bytes',
        'memory_used_bytes',
        'power_limit_w',
        'power_w',
        'sm_active_percent',
        'temperature_c',
        'temperature_slowdown_c', // the temperature chart's top follows it
        'tensor_active_percent',
        'utilization_gpu_percent',
        'utilization_memory_percent'
      ].sort()
    );
  });

  it('names throttle reasons with the server\'s words', () => {
    const c = catalogue();
    expect(c.throttleLabel('sw_power_cap')).toBe('power cap');
    expect(c.throttleLabel('hw_thermal_slowdown')).toBe('thermal (hardware)');
    expect(c.throttleLabel('other_0x400')).toBe('other 0x400');
    expect(c.throttleLabel('lost')).toBe('GPU lost');
    const renamed = parseCatalogue({
      ...catalogueBody(),
      throttle_reasons: [{ name: 'sw_power_cap', label: 'power limit reached', slowdown: true }]
    });
    expect(renamed.throttleLabel('sw_power_cap')).toBe('power limit reached');
  });

  it('colours slowdowns as power or thermal and everything else as other', () => {
    const c = catalogue();
    expect(c.episodeKind('sw_power_cap')).toBe('power');
    expect(c.episodeKind('hw_power_brake_slowdown')).toBe('power');
    expect(c.episodeKind('hw_slowdown')).toBe('thermal');
    expect(c.episodeKind('sw_thermal_slowdown')).toBe('thermal');
    expect(c.episodeKind('sync_boost')).toBe('other');
    expect(c.episodeKind('other_0x400')).toBe('other');
    expect(c.episodeKind('lost')).toBe('lost');
    expect(c.reasonOrder('sw_power_cap')).toBeLessThan(c.reasonOrder('hw_slowdown'));
    expect(c.reasonOrder('other_0x400')).toBe(c.throttleReasons.length);
  });
});

describe('parseCatalogue', () => {
  const body = catalogueBody();
  const withMetric = (patch: object): unknown => ({ ...body, metrics: [{ ...body.metrics[0], ...patch }] });

  it('accepts what the server serves', () => {
    expect(parseCatalogue(JSON.parse(JSON.stringify(body))).sidebar).toHaveLength(7);
  });

  it('names what is wrong with an answer it cannot use', () => {
    expect(() => parseCatalogue(null)).toThrow('the metric catalogue has no `metrics` and `throttle_reasons` lists');
    expect(() => parseCatalogue({ metrics: [] })).toThrow(/no `metrics` and `throttle_reasons`/);
    expect(() => parseCatalogue(withMetric({ label: 3 }))).toThrow('metric 0 of the catalogue: `label` is not a string');
    expect(() => parseCatalogue(withMetric({ scale: 0 }))).toThrow('`scale` of utilization is not a non-zero number');
    expect(() => parseCatalogue(withMetric({ y_max: '100' }))).toThrow('`y_min`/`y_max` of utilization');
    expect(() => parseCatalogue(withMetric({ y_max_field: 7 }))).toThrow('`y_max_field` of utilization');
    expect(() => parseCatalogue(withMetric({ views: 'sidebar' }))).toThrow('`views` of utilization');
    expect(() => parseCatalogue({ ...body, throttle_reasons: [{ name: 'x', label: 'x' }] })).toThrow(
      'throttle reason 0 of the catalogue needs a string name and label and a boolean slowdown'
    );
  });
});

describe('the generated catalogue (catalogue.generated.ts, `jlpm gen:catalogue`)', () => {
  // Its staleness against gpu_widgets/metrics/catalogue.py is checked by `jlpm check:catalogue`
  // and tests/test_catalogue_generated.py; here: that what the sidebar builds on it agrees.
  it('is a catalogue the sidebar accepts, every metric reading a sample field', () => {
    const c = parseCatalogue(JSON.parse(JSON.stringify(CATALOGUE)));
    expect(c.metrics.map(m => m.id)).toEqual([...METRIC_IDS]);
    for (const m of CATALOGUE.metrics) {
      expect(METRIC[m.id as keyof typeof METRIC]).toBe(m);
      expect(SAMPLE_FIELDS).toContain(m.field);
      if (m.y_max_field !== null) {
        expect(SAMPLE_FIELDS).toContain(m.y_max_field);
      }
    }
    expect(SAMPLE_FIELDS).toEqual(expect.arrayContaining([...GPM_FIELDS]));
  });

  it('is the test catalogue, the stand-in help sentences aside', () => {
    const words = (body: { metrics: readonly object[] }): object[] => body.metrics.map(m => ({ ...m, help: '' }));
    expect(words(catalogueBody())).toEqual(words(CATALOGUE));
    expect(catalogueBody().throttle_reasons).toEqual(CATALOGUE.throttle_reasons);
    // A server from before GPM: the metrics that read a GPM field are missing, nothing else.
    expect(catalogueBody([], false).metrics.map(m => m.id)).toEqual(
      CATALOGUE.metrics.filter(m => !GPM_FIELDS.some(f => f === m.field)).map(m => m.id)
    );
  });

  it('gives the cards their GPM rows for an older server, in the catalogue\'s words and units', () => {
    for (const row of FALLBACK_ACTIVITY) {
      const { help, views, ...rest } = row;
      const { help: served, views: all, ...want } = METRIC[row.id as keyof typeof METRIC];
      expect(rest).toEqual(want);
      expect(views).toEqual(['sidebar']);
      expect(all).toContain('sidebar');
      expect(help).not.toBe(served); // the card's own explanation (ACTIVITY_HELP)
    }
  });
});
