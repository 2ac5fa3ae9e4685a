import { describe, expect, it } from 'vitest';
import { MemoryLimiter } from '../../src/limits/memory.js';
import type { AdmitRequest } from '../../src/limits/types.js';
import { bucket, granted, refused } from './harness.js';

const MINUTE = 60_000;
/** 15 s into a one-minute window. */
const T0 = 28_333_334 * MINUTE + 15_000;

function clock(start = T0) {
  const c = { now: start, advance: (ms: number) => (c.now += ms) };
  return c;
}

describe('memory limiter', () => {
  it('gives the exact wait and reset on a fake clock', () => {
    const c = clock();
    const limiter = new MemoryLimiter({ now: () => c.now });
    const b = bucket('account', { requests: 10, windowSeconds: 60 });
    const req: AdmitRequest = { accountId: 'a', buckets: [b], inputTokens: 0, outputTokens: 0 };
    for (let i = 0; i < 10; i++) granted(limiter.admitSync(req));
    const refusal = refused(limiter.admitSync(req));
    // 45 s to the boundary, then until the 10 requests' share drops to 9: a tenth of the next window.
    expect(refusal.retryAfterMs).toBe(45_000 + 6_000);
    expect(refusal.resetAt).toBe(T0 - 15_000 + 2 * MINUTE);
    c.advance(50_999);
    refused(limiter.admitSync(req));
    c.advance(1);
    granted(limiter.admitSync(req));
  });

  it('frees expired slots exactly when their lease runs out', () => {
    const c = clock();
    const limiter = new MemoryLimiter({ now: () => c.now });
    const b = bucket('account', { concurrency: 2 });
    const req = (leaseMs: number): AdmitRequest => ({
      accountId: 'a',
      buckets: [b],
      inputTokens: 0,
      outputTokens: 0,
      leaseMs,
    });
    granted(limiter.admitSync(req(100)));
    granted(limiter.admitSync(req(1000)));
    const refusal = refused(limiter.admitSync(req(100)));
    expect(refusal).toMatchObject({ metric: 'concurrency', retryAfterMs: 100, resetAt: T0 + 100 });
    c.advance(99);
    refused(limiter.admitSync(req(100)));
    c.advance(1);
    granted(limiter.admitSync(req(100)));
    refused(limiter.admitSync(req(100)));
  });

  it('starts counting afresh when a bucket’s window length changes', () => {
    const c = clock();
    const limiter = new MemoryLimiter({ now: () => c.now });
    const req = (windowSeconds: number): AdmitRequest => ({
      accountId: 'a',
      buckets: [bucket('account', { requests: 1, windowSeconds })],
      inputTokens: 0,
      outputTokens: 0,
    });
    const old = granted(limiter.admitSync(req(60)));
    refused(limiter.admitSync(req(60)));
    granted(limiter.admitSync(req(30)));
    refused(limiter.admitSync(req(30)));
    // A lease admitted under the old config neither resets nor corrupts the new counters.
    expect(limiter.releaseSync(old, { inputTokens: 0, outputTokens: 0 })).toBe('released');
    refused(limiter.admitSync(req(30)));
  });

  it('sweeps idle buckets without a timer, keeping those with live leases', () => {
    const c = clock();
    const limiter = new MemoryLimiter({ now: () => c.now, sweepEveryMs: 1000, leaseMs: 10 * MINUTE });
    const limited = bucket('account', { requests: 5, windowSeconds: 60 });
    const slots = bucket('model:x', { concurrency: 5, windowSeconds: 60 });
    for (const accountId of ['a', 'b', 'c']) {
      granted(limiter.admitSync({ accountId, buckets: [limited], inputTokens: 0, outputTokens: 0 }));
    }
    const held = granted(
      limiter.admitSync({ accountId: 'd', buckets: [slots], inputTokens: 0, outputTokens: 0 }),
    );
    expect(limiter.bucketCount).toBe(4);
    c.advance(3 * MINUTE);
    granted(limiter.admitSync({ accountId: 'e', buckets: [limited], inputTokens: 0, outputTokens: 0 }));
    expect(limiter.bucketCount).toBe(2); // d's bucket (live lease) and e's new one
    limiter.releaseSync(held);
    c.advance(3 * MINUTE);
    granted(limiter.admitSync({ accountId: 'e', buckets: [limited], inputTokens: 0, outputTokens: 0 }));
    expect(limiter.bucketCount).toBe(1);
  });

  it('stays within the hot-path budget and starts no timers', () => {
    const limiter = new MemoryLimiter();
    const buckets = [
      bucket('account', {
        concurrency: 1000,
        requests: 1e9,
        inputTokens: 1e12,
        outputTokens: 1e12,
        windowSeconds: 60,
      }),
      bucket('model:m', { concurrency: 100, requests: 1e9, inputTokens: 1e12, windowSeconds: 60 }),
    ];
    const req: AdmitRequest = { accountId: 'acct', buckets, inputTokens: 500, outputTokens: 1000 };
    const timers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
    const before = timers();
    const cycle = () => {
      const admission = limiter.admitSync(req);
      if (!admission.ok) throw new Error('refused');
      limiter.releaseSync(admission.lease, { inputTokens: 400, outputTokens: 700 });
    };
    for (let i = 0; i < 20_000; i++) cycle();
    const n = 50_000;
    const started = performance.now();
    for (let i = 0; i < n; i++) cycle();
    const perCycleMs = (performance.now() - started) / n;
    expect(timers()).toBe(before);
    // The budget is 0.2 ms at the median for the whole gateway; an admission is a small part of it.
    expect(perCycleMs).toBeLessThan(0.02);
  });
});
