/**
 * The status derived from the deployments' health around half-open circuits: a half-open circuit has
 * not shown the deployment works again, so a model whose every deployment is open or awaiting its
 * trial is offline; a half-open deployment next to a closed one is available (it takes its trial on its
 * next call), so a fallback that carries no traffic does not keep the model degraded after it recovered.
 */
import { describe, expect, it } from 'vitest';
import { Deployment } from '../../src/routing/health.js';
import { buildRouting } from '../../src/routing/settings.js';
import { deriveStatus } from '../../src/routing/status.js';

const SETTINGS = buildRouting({ breaker: { consecutive_failures: 1, cooldown_seconds: 1 } }, undefined);

function deployment(i: number): Deployment {
  return new Deployment({ provider: `p${i}`, model: 'm' }, i, SETTINGS, {
    onChange: () => {},
    ttfb: { observe: () => {} },
  });
}

/** One failed call at `now`: with consecutive_failures 1 the circuit opens for 1 s. */
function fail(d: Deployment, now: number): void {
  const permit = d.begin(now);
  d.failed(permit, now);
  d.end();
}

describe('derived status around half-open circuits', () => {
  it('every deployment open: offline', () => {
    const ds = [deployment(0), deployment(1)];
    for (const d of ds) fail(d, 0);
    expect(deriveStatus(ds, SETTINGS, 500).status).toBe('offline');
  });

  it('every deployment half-open after its cooldown, no trial yet: still offline', () => {
    const ds = [deployment(0), deployment(1)];
    for (const d of ds) fail(d, 0);
    // What the router's timer does when a cooldown ends with no call to ask.
    for (const d of ds) d.breaker.poll(1_001);
    expect(ds.map((d) => d.breaker.state)).toEqual(['half_open', 'half_open']);
    const status = deriveStatus(ds, SETTINGS, 5_000);
    expect(status.status).toBe('offline');
    expect(status.reason).toContain('awaiting a trial call');
  });

  it('one open, one half-open: offline (none known to work)', () => {
    const ds = [deployment(0), deployment(1)];
    fail(ds[0] as Deployment, 0);
    fail(ds[1] as Deployment, 900);
    ds[0]?.breaker.poll(1_001);
    expect(deriveStatus(ds, SETTINGS, 1_100).status).toBe('offline');
  });

  it('a fallback open while the primary serves: degraded', () => {
    const ds = [deployment(0), deployment(1)];
    fail(ds[1] as Deployment, 0);
    expect(deriveStatus(ds, SETTINGS, 500).status).toBe('degraded');
  });

  it('that fallback half-open once its cooldown ends with no traffic: operational again', () => {
    const ds = [deployment(0), deployment(1)];
    fail(ds[1] as Deployment, 0);
    ds[1]?.breaker.poll(1_001);
    expect(ds[1]?.breaker.state).toBe('half_open');
    expect(deriveStatus(ds, SETTINGS, 1_100)).toEqual({ status: 'operational', reason: undefined });
  });

  it('a successful trial closes the circuit: operational', () => {
    const ds = [deployment(0), deployment(1)];
    for (const d of ds) fail(d, 0);
    const d0 = ds[0] as Deployment;
    const trial = d0.begin(1_001);
    d0.succeeded(trial, 1_002, 10);
    d0.end();
    expect(d0.breaker.state).toBe('closed');
    // The other is still half-open (untried): available, not unwell.
    ds[1]?.breaker.poll(1_001);
    expect(deriveStatus(ds, SETTINGS, 1_100).status).toBe('operational');
  });
});

describe('hysteresis of the window-based degraded status', () => {
  const WINDOWED = buildRouting(
    { breaker: { consecutive_failures: 1000, min_requests: 10 }, degraded: { error_rate: 0.25 } },
    undefined,
  );

  /** One deployment whose window holds `calls` calls, `failures` of them failed. */
  function withCalls(calls: number, failures: number): Deployment {
    const d = new Deployment({ provider: 'p', model: 'm' }, 0, WINDOWED, {
      onChange: () => {},
      ttfb: { observe: () => {} },
    });
    for (let i = 0; i < calls; i++) {
      const permit = d.begin(0);
      if (i >= calls - failures) d.failed(permit, 0);
      else d.succeeded(permit, 0, 10);
      d.end();
    }
    return d;
  }

  it('enters degraded at the threshold, and leaves it only well below it', () => {
    // 22% of calls failed: under the 25% threshold.
    const d = withCalls(100, 22);
    expect(deriveStatus([d], WINDOWED, 1, 'operational').status).toBe('operational');
    // The same window while degraded: not yet below 80% of the threshold (20%), so it stays degraded.
    expect(deriveStatus([d], WINDOWED, 1, 'degraded').status).toBe('degraded');
    expect(deriveStatus([withCalls(100, 19)], WINDOWED, 1, 'degraded').status).toBe('operational');
  });
});
