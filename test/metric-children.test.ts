import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { counterChild, gaugeChild, histogramChild } from '../src/metric-children.js';

/** The same observations through prom-client's children and through ours must expose the same text. */
function pair() {
  const make = () => {
    const registry = new Registry();
    const histogram = new Histogram({
      name: 'h_seconds',
      help: 'h',
      labelNames: ['route', 'status'] as const,
      buckets: [0.001, 0.01, 0.1, 1],
      registers: [registry],
    });
    const counter = new Counter({
      name: 'c_total',
      help: 'c',
      labelNames: ['route', 'direction'] as const,
      registers: [registry],
    });
    const gauge = new Gauge({
      name: 'g_inflight',
      help: 'g',
      labelNames: ['route'] as const,
      registers: [registry],
    });
    return { registry, histogram, counter, gauge };
  };
  return { ours: make(), theirs: make() };
}

describe('metric children', () => {
  it('expose exactly what prom-client children do', async () => {
    const { ours, theirs } = pair();
    const values = [0.0005, 0.001, 0.005, 0.05, 0.5, 1, 7, 0.02];
    const oursA = histogramChild(ours.histogram, { route: '/a', status: '200' });
    const oursB = histogramChild(ours.histogram, { route: '/b', status: '500' });
    const theirsA = theirs.histogram.labels({ route: '/a', status: '200' });
    const theirsB = theirs.histogram.labels({ route: '/b', status: '500' });
    for (const v of values) {
      oursA.observe(v);
      theirsA.observe(v);
    }
    oursB.observe(0.3);
    theirsB.observe(0.3);

    const oursIn = counterChild(ours.counter, { route: '/a', direction: 'input' });
    const oursOut = counterChild(ours.counter, { route: '/a', direction: 'output' });
    const theirsIn = theirs.counter.labels({ route: '/a', direction: 'input' });
    for (const n of [3, 1, 40]) {
      oursIn.inc(n);
      theirsIn.inc(n);
    }
    oursIn.inc();
    theirsIn.inc();
    // A child never used adds no series, as with prom-client.
    void oursOut;

    const oursGauge = gaugeChild(ours.gauge, { route: 'chat' });
    const theirsGauge = theirs.gauge.labels({ route: 'chat' });
    for (const delta of [1, 1, -1, 1, -1, -1, 1]) {
      oursGauge.add(delta);
      if (delta < 0) theirsGauge.dec(-delta);
      else theirsGauge.inc(delta);
    }
    gaugeChild(ours.gauge, { route: 'embeddings' }).add(-1);
    theirs.gauge.labels({ route: 'embeddings' }).dec();

    expect(await ours.registry.metrics()).toBe(await theirs.registry.metrics());
  });

  it('share the stored value with prom-client’s own API', async () => {
    const { ours } = pair();
    const child = counterChild(ours.counter, { route: '/a', direction: 'input' });
    child.inc(2);
    ours.counter.inc({ route: '/a', direction: 'input' }, 3);
    child.inc(5);
    const h = histogramChild(ours.histogram, { route: '/a', status: '200' });
    h.observe(0.5);
    ours.histogram.observe({ route: '/a', status: '200' }, 0.005);
    h.observe(2);
    const g = gaugeChild(ours.gauge, { route: 'chat' });
    g.add(1);
    ours.gauge.inc({ route: 'chat' }, 2);
    g.add(-1);
    const text = await ours.registry.metrics();
    expect(text).toContain('g_inflight{route="chat"} 2');
    expect(text).toContain('c_total{route="/a",direction="input"} 10');
    expect(text).toContain('h_seconds_count{route="/a",status="200"} 3');
    expect(text).toContain('h_seconds_bucket{le="0.01",route="/a",status="200"} 1');
    expect(text).toContain('h_seconds_bucket{le="1",route="/a",status="200"} 2');
  });

  it('refuse what prom-client refuses', () => {
    const { ours } = pair();
    const c = counterChild(ours.counter, { route: '/a', direction: 'input' });
    c.inc(1);
    expect(() => c.inc(-1)).toThrow();
    const h = histogramChild(ours.histogram, { route: '/a', status: '200' });
    h.observe(1);
    expect(() => h.observe(Number.NaN)).toThrow();
  });
});
