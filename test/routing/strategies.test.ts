import { describe, expect, it } from 'vitest';
import type { RoutingStrategy } from '../../src/config/types.js';
import { NORMAL } from '../../src/routing/breaker.js';
import { Deployment } from '../../src/routing/health.js';
import { buildRouting } from '../../src/routing/settings.js';
import { deriveStatus, retryAfterSeconds } from '../../src/routing/status.js';
import { LATENCY_HALF_LIFE_MS, orderDeployments } from '../../src/routing/strategies.js';

const SETTINGS = buildRouting(
  { breaker: { consecutive_failures: 1, min_requests: 4, cooldown_seconds: 2 }, degraded: { ttfb_ms: 500 } },
  undefined,
);

interface Spec {
  weight?: number;
  inflight?: number;
  /** How long before `now` (1) its latency sample was taken. */
  ttfbAgoMs?: number;
  ttfbMs?: number;
  open?: boolean;
}

function deployments(specs: Spec[]): Deployment[] {
  return specs.map((spec, i) => {
    const d = new Deployment({ provider: `p${i}`, model: `m${i}`, weight: spec.weight ?? 1 }, i, SETTINGS, {
      onChange: () => {},
      ttfb: { observe: () => {} },
    });
    d.inflight = spec.inflight ?? 0;
    if (spec.ttfbMs !== undefined) d.ewmaTtfbMs = spec.ttfbMs;
    d.ttfbAt = 1 - (spec.ttfbAgoMs ?? 0);
    if (spec.open) d.failed(NORMAL, 0);
    return d;
  });
}

/** A fixed sequence of "random" numbers. */
function draws(...values: number[]): () => number {
  let i = 0;
  return () => values[i++ % values.length] as number;
}

const names = (list: readonly Deployment[]) => list.map((d) => d.provider);

describe('orderDeployments', () => {
  it.each<{ name: string; strategy: RoutingStrategy; specs: Spec[]; random: number[]; order: string[] }>([
    {
      name: 'priority keeps the configured order',
      strategy: 'priority',
      specs: [{}, {}, {}],
      random: [0.9],
      order: ['p0', 'p1', 'p2'],
    },
    {
      name: 'weighted: a low draw picks the first',
      strategy: 'weighted',
      specs: [{ weight: 1 }, { weight: 3 }],
      random: [0.2],
      order: ['p0', 'p1'],
    },
    {
      name: 'weighted: a high draw picks the heavier',
      strategy: 'weighted',
      specs: [{ weight: 1 }, { weight: 3 }],
      random: [0.3],
      order: ['p1', 'p0'],
    },
    {
      name: 'weighted: weight 0 is only a fallback',
      strategy: 'weighted',
      specs: [{ weight: 0 }, { weight: 1 }],
      random: [0],
      order: ['p1', 'p0'],
    },
    {
      name: 'weighted: an open deployment is not drawn',
      strategy: 'weighted',
      specs: [{ weight: 1 }, { weight: 1, open: true }, { weight: 1 }],
      random: [0.6],
      order: ['p2', 'p0', 'p1'],
    },
    {
      name: 'least_inflight: fewest calls first',
      strategy: 'least_inflight',
      specs: [{ inflight: 3 }, { inflight: 1 }, { inflight: 2 }],
      random: [0],
      order: ['p1', 'p0', 'p2'],
    },
    {
      name: 'least_inflight: ties keep the configured order',
      strategy: 'least_inflight',
      specs: [{ inflight: 1 }, { inflight: 1 }],
      random: [0],
      order: ['p0', 'p1'],
    },
    {
      name: 'least_inflight: an open one is never first',
      strategy: 'least_inflight',
      specs: [{ inflight: 5 }, { inflight: 0, open: true }],
      random: [0],
      order: ['p0', 'p1'],
    },
    // Two draws pick p2 (0.9 → index 2) and p0 (0.0 → index 0): p0 is faster.
    {
      name: 'latency: the faster of the two drawn',
      strategy: 'latency',
      specs: [{ ttfbMs: 50 }, { ttfbMs: 10 }, { ttfbMs: 300 }],
      random: [0.9, 0],
      order: ['p0', 'p1', 'p2'],
    },
    // Draws pick p0 and p1 (the second draw skips the first's index): p1 is faster.
    {
      name: 'latency: picks p1 over p0',
      strategy: 'latency',
      specs: [{ ttfbMs: 50 }, { ttfbMs: 10 }, { ttfbMs: 300 }],
      random: [0, 0],
      order: ['p1', 'p0', 'p2'],
    },
    {
      name: 'latency: a fast one with nine calls in flight loses to an idle slower one',
      strategy: 'latency',
      specs: [{ ttfbMs: 10, inflight: 9 }, { ttfbMs: 50 }],
      random: [0, 0],
      order: ['p1', 'p0'],
    },
    {
      name: 'latency: a slow sample from four half-lives ago has faded, so it is tried again',
      strategy: 'latency',
      specs: [{ ttfbMs: 10 }, { ttfbMs: 100, ttfbAgoMs: 4 * LATENCY_HALF_LIFE_MS }],
      random: [0, 0],
      order: ['p1', 'p0'],
    },
    {
      name: 'latency: an open one is never drawn',
      strategy: 'latency',
      specs: [{ ttfbMs: 50 }, { ttfbMs: 1, open: true }, { ttfbMs: 40 }],
      random: [0, 0],
      order: ['p2', 'p0', 'p1'],
    },
    {
      name: 'latency: a deployment never measured counts as fastest',
      strategy: 'latency',
      specs: [{ ttfbMs: 50 }, {}],
      random: [0, 0],
      order: ['p1', 'p0'],
    },
  ])('$name', ({ strategy, specs, random, order }) => {
    expect(names(orderDeployments(strategy, deployments(specs), 1, draws(...random)))).toEqual(order);
  });

  it('weighted spreads the first choice by weight over many calls', () => {
    const list = deployments([{ weight: 1 }, { weight: 2 }, { weight: 7 }]);
    const firsts = new Map<string, number>();
    const n = 20_000;
    for (let i = 0; i < n; i++) {
      const first = orderDeployments('weighted', list, 1)[0]?.provider as string;
      firsts.set(first, (firsts.get(first) ?? 0) + 1);
    }
    expect((firsts.get('p0') ?? 0) / n).toBeCloseTo(0.1, 1);
    expect((firsts.get('p1') ?? 0) / n).toBeCloseTo(0.2, 1);
    expect((firsts.get('p2') ?? 0) / n).toBeCloseTo(0.7, 1);
  });
});

describe('deriveStatus', () => {
  it.each<{ name: string; specs: Spec[]; calls?: Array<[number, boolean, number?]>; status: string }>([
    { name: 'operational when every deployment is closed', specs: [{}, {}], status: 'operational' },
    { name: 'degraded when one is open', specs: [{ open: true }, {}], status: 'degraded' },
    { name: 'offline when all are open', specs: [{ open: true }, { open: true }], status: 'offline' },
    {
      name: 'degraded when the error rate is over the threshold',
      specs: [{}, {}],
      calls: [
        [0, false],
        [0, false],
        [1, true],
        [1, false],
        [1, true],
      ],
      status: 'degraded',
    },
    {
      name: 'degraded when the time to first byte is over the threshold',
      specs: [{}],
      calls: [
        [0, false, 900],
        [0, false, 800],
        [0, false, 700],
        [0, false, 600],
      ],
      status: 'degraded',
    },
    { name: 'not judged on too few calls', specs: [{}], calls: [[0, false, 900]], status: 'operational' },
  ])('$name', ({ specs, calls, status }) => {
    const list = deployments(specs);
    // Window outcomes only (not through the breaker), spread over the deployments.
    for (const [i, call] of (calls ?? []).entries()) {
      (list[i % list.length] as Deployment).window.add(10, call[1], call[2] ?? (call[1] ? undefined : 10));
    }
    expect(deriveStatus(list, SETTINGS, 20).status).toBe(status);
  });

  it('Retry-After is the wait until the first open deployment takes a trial, in whole seconds', () => {
    const list = deployments([{ open: true }, { open: true }]);
    expect(retryAfterSeconds(list, 100)).toBe(2);
    expect(retryAfterSeconds(list, 1_500)).toBe(1);
  });
});
