import { describe, expect, it } from 'vitest';
import { tightest } from '../../src/limits/evaluate.js';
import type { AdmitRequest, BucketSpec } from '../../src/limits/types.js';
import { describeRedis } from '../helpers/redis.js';
import { account, bucket, granted, type Harness, memoryHarness, redisHarness, refused } from './harness.js';

/** The same behaviour, whichever limiter holds the counters. */
function contract(h: Harness): void {
  const request = (
    accountId: string,
    buckets: BucketSpec[],
    tokens: { in?: number; out?: number; leaseMs?: number } = {},
  ): AdmitRequest => ({
    accountId,
    buckets,
    inputTokens: tokens.in ?? 0,
    outputTokens: tokens.out ?? 0,
    leaseMs: tokens.leaseMs,
  });

  it('reports limit, remaining and reset per bucket and metric', async () => {
    const { limiter } = await h.create();
    const acct = account();
    const accountB = bucket('account', {
      requests: 10,
      inputTokens: 1000,
      outputTokens: 500,
      concurrency: 5,
    });
    const modelB = bucket('model:a', { requests: 3 });
    const admission = await limiter.admit(request(acct, [accountB, modelB], { in: 100, out: 50 }));
    const lease = granted(admission);
    expect(lease.inputTokens).toBe(100);
    expect(lease.outputTokens).toBe(50);
    if (!admission.ok) return;
    const [a, m] = admission.quota;
    expect(a).toMatchObject({
      bucket: 'account',
      windowSeconds: 3600,
      requests: { limit: 10, remaining: 9 },
      inputTokens: { limit: 1000, remaining: 900 },
      outputTokens: { limit: 500, remaining: 450 },
      concurrency: { limit: 5, remaining: 4 },
    });
    expect(m).toMatchObject({ bucket: 'model:a', requests: { limit: 3, remaining: 2 } });
    expect(m?.inputTokens).toBeUndefined();
    expect(m?.concurrency).toBeUndefined();
    // Used in the current window: the budget is whole again once that window stops counting.
    expect(a?.requests?.resetAt).toBe((Math.floor(lease.admittedAt / 3_600_000) + 2) * 3_600_000);
    expect(tightest(admission.quota, 'requests')).toMatchObject({
      bucket: 'model:a',
      remaining: 2,
      limit: 3,
    });
    expect(tightest(admission.quota, 'inputTokens')).toMatchObject({ bucket: 'account', remaining: 900 });
  });

  describe('refuses each metric with its name, wait and reset', () => {
    it('requests', async () => {
      const { limiter } = await h.create();
      const acct = account();
      const b = bucket('account', { requests: 2 });
      granted(await limiter.admit(request(acct, [b])));
      const lease = granted(await limiter.admit(request(acct, [b])));
      const refusal = refused(await limiter.admit(request(acct, [b])));
      expect(refusal).toMatchObject({ bucket: 'account', metric: 'requests', limit: 2, windowSeconds: 3600 });
      expect(refusal.neverFits).toBe(false);
      expect(refusal.retryAfterMs).toBeGreaterThan(0);
      expect(refusal.retryAfterMs).toBeLessThanOrEqual(2 * 3_600_000);
      expect(refusal.resetAt % 3_600_000).toBe(0);
      expect(refusal.resetAt).toBeGreaterThan(lease.admittedAt + 3_600_000);
    });

    it('input tokens', async () => {
      const { limiter } = await h.create();
      const acct = account();
      const b = bucket('account', { inputTokens: 100 });
      granted(await limiter.admit(request(acct, [b], { in: 60 })));
      const refusal = refused(await limiter.admit(request(acct, [b], { in: 50 })));
      expect(refusal).toMatchObject({
        bucket: 'account',
        metric: 'inputTokens',
        limit: 100,
        neverFits: false,
      });
      expect(refusal.retryAfterMs).toBeGreaterThan(0);
      expect(refusal.resetAt % 3_600_000).toBe(0);
      granted(await limiter.admit(request(acct, [b], { in: 40 })));
    });

    it('output tokens', async () => {
      const { limiter } = await h.create();
      const acct = account();
      const b = bucket('model:x', { outputTokens: 100, inputTokens: 1000 });
      granted(await limiter.admit(request(acct, [b], { in: 10, out: 90 })));
      const refusal = refused(await limiter.admit(request(acct, [b], { in: 10, out: 20 })));
      expect(refusal).toMatchObject({ bucket: 'model:x', metric: 'outputTokens', limit: 100 });
      expect(refusal.retryAfterMs).toBeGreaterThan(0);
    });

    it('concurrency, with a short hint', async () => {
      const { limiter } = await h.create();
      const acct = account();
      const b = bucket('model:x', { concurrency: 1 });
      granted(await limiter.admit(request(acct, [b])));
      const refusal = refused(await limiter.admit(request(acct, [b])));
      expect(refusal).toMatchObject({ bucket: 'model:x', metric: 'concurrency', limit: 1, neverFits: false });
      expect(refusal.retryAfterMs).toBeGreaterThan(0);
      expect(refusal.retryAfterMs).toBeLessThanOrEqual(1000);
    });

    it('a request larger than the window allows never fits', async () => {
      const { limiter } = await h.create();
      const acct = account();
      const b = bucket('account', { inputTokens: 100 });
      const refusal = refused(await limiter.admit(request(acct, [b], { in: 150 })));
      expect(refusal).toMatchObject({ metric: 'inputTokens', neverFits: true });
      expect(refused(await limiter.admit(request(acct, [bucket('m', { concurrency: 0 })]))).neverFits).toBe(
        true,
      );
    });

    it('reports the longest wait when several metrics refuse', async () => {
      const { limiter } = await h.create();
      const acct = account();
      const b = bucket('account', { concurrency: 1, requests: 1 });
      granted(await limiter.admit(request(acct, [b])));
      const refusal = refused(await limiter.admit(request(acct, [b])));
      // The window wait (about an hour) outlasts the concurrency hint.
      expect(refusal.metric).toBe('requests');
    });
  });

  describe('admission is all or nothing across buckets', () => {
    it('a model refusal consumes nothing in the account bucket', async () => {
      const { limiter } = await h.create();
      const acct = account();
      const accountB = bucket('account', { requests: 100, inputTokens: 1000, concurrency: 10 });
      const modelA = bucket('model:a', { requests: 1 });
      granted(await limiter.admit(request(acct, [accountB, modelA], { in: 10 })));
      const refusal = refused(await limiter.admit(request(acct, [accountB, modelA], { in: 10 })));
      expect(refusal).toMatchObject({ bucket: 'model:a', metric: 'requests' });
      const admission = await limiter.admit(request(acct, [accountB, bucket('model:b', {})], { in: 10 }));
      granted(admission);
      if (!admission.ok) return;
      expect(admission.quota[0]).toMatchObject({
        requests: { remaining: 98 },
        inputTokens: { remaining: 980 },
        concurrency: { remaining: 8 },
      });
    });

    it('an account refusal consumes nothing in the model bucket', async () => {
      const { limiter } = await h.create();
      const acct = account();
      const accountB = bucket('account', { inputTokens: 100 });
      const modelA = bucket('model:a', { requests: 10, concurrency: 10, outputTokens: 1000 });
      granted(await limiter.admit(request(acct, [accountB, modelA], { in: 80, out: 100 })));
      const refusal = refused(await limiter.admit(request(acct, [accountB, modelA], { in: 30, out: 100 })));
      expect(refusal).toMatchObject({ bucket: 'account', metric: 'inputTokens' });
      const admission = await limiter.admit(request(acct, [accountB, modelA], { in: 10, out: 100 }));
      granted(admission);
      if (!admission.ok) return;
      expect(admission.quota[1]).toMatchObject({
        requests: { remaining: 8 },
        concurrency: { remaining: 8 },
        outputTokens: { remaining: 800 },
      });
    });
  });

  it("one model's burst does not spend another model's bucket", async () => {
    const { limiter } = await h.create();
    const acct = account();
    const accountB = bucket('account', { requests: 100 });
    const modelA = bucket('model:a', { requests: 2, concurrency: 2 });
    const modelB = bucket('model:b', { requests: 2, concurrency: 2 });
    granted(await limiter.admit(request(acct, [accountB, modelA])));
    granted(await limiter.admit(request(acct, [accountB, modelA])));
    expect(refused(await limiter.admit(request(acct, [accountB, modelA]))).bucket).toBe('model:a');
    granted(await limiter.admit(request(acct, [accountB, modelB])));
    granted(await limiter.admit(request(acct, [accountB, modelB])));
    // Another account's identical buckets are separate too.
    granted(await limiter.admit(request(account(), [accountB, modelA])));
  });

  describe('reconciliation', () => {
    it('gives back what was reserved but not used', async () => {
      const { limiter } = await h.create();
      const acct = account();
      const b = bucket('account', { inputTokens: 100, outputTokens: 100 });
      const lease = granted(await limiter.admit(request(acct, [b], { in: 80, out: 80 })));
      refused(await limiter.admit(request(acct, [b], { in: 30, out: 10 })));
      expect(await limiter.release(lease, { inputTokens: 20, outputTokens: 5 })).toBe('released');
      const admission = await limiter.admit(request(acct, [b], { in: 30, out: 10 }));
      granted(admission);
      if (!admission.ok) return;
      expect(admission.quota[0]).toMatchObject({
        inputTokens: { remaining: 50 },
        outputTokens: { remaining: 85 },
      });
    });

    it('charges what was used beyond the reservation', async () => {
      const { limiter } = await h.create();
      const acct = account();
      const b = bucket('account', { outputTokens: 100 });
      const lease = granted(await limiter.admit(request(acct, [b], { out: 10 })));
      await limiter.release(lease, { inputTokens: 0, outputTokens: 95 });
      const refusal = refused(await limiter.admit(request(acct, [b], { out: 10 })));
      expect(refusal.metric).toBe('outputTokens');
      const admission = await limiter.admit(request(acct, [b], { out: 5 }));
      granted(admission);
      if (!admission.ok) return;
      expect(admission.quota[0]?.outputTokens?.remaining).toBe(0);
    });

    it('without usage, the reservation stands', async () => {
      const { limiter } = await h.create();
      const acct = account();
      const b = bucket('account', { inputTokens: 100 });
      const lease = granted(await limiter.admit(request(acct, [b], { in: 80 })));
      expect(await limiter.release(lease)).toBe('released');
      refused(await limiter.admit(request(acct, [b], { in: 30 })));
    });

    it('a refund after the window rolled goes to the window that was charged', async () => {
      const { limiter, wait } = await h.create();
      const acct = account();
      const b = bucket('account', { inputTokens: 100, windowSeconds: 1 });
      const lease = granted(await limiter.admit(request(acct, [b], { in: 50 })));
      await wait(1000);
      // The reservation now sits in the previous window; without the refund 100 more would not fit.
      await limiter.release(lease, { inputTokens: 0, outputTokens: 0 });
      granted(await limiter.admit(request(acct, [b], { in: 100 })));
    });

    it('an overage reported after the charged window expired lands in the current window', async () => {
      const { limiter, wait } = await h.create();
      const acct = account();
      const b = bucket('account', { inputTokens: 100, windowSeconds: 1 });
      const lease = granted(await limiter.admit(request(acct, [b], { in: 50 })));
      await wait(2000);
      await limiter.release(lease, { inputTokens: 80, outputTokens: 0 });
      refused(await limiter.admit(request(acct, [b], { in: 80 })));
      granted(await limiter.admit(request(acct, [b], { in: 70 })));
    });
  });

  describe('release', () => {
    it('is idempotent: the second call changes nothing', async () => {
      const { limiter } = await h.create();
      const acct = account();
      const b = bucket('account', { inputTokens: 100, concurrency: 2 });
      const first = granted(await limiter.admit(request(acct, [b], { in: 50 })));
      granted(await limiter.admit(request(acct, [b], { in: 40 })));
      expect(await limiter.release(first, { inputTokens: 10, outputTokens: 0 })).toBe('released');
      expect(await limiter.release(first, { inputTokens: 10, outputTokens: 0 })).toBe('already-released');
      expect(await limiter.release(first)).toBe('already-released');
      const admission = await limiter.admit(request(acct, [b], { in: 10 }));
      granted(admission);
      if (!admission.ok) return;
      // 10 + 40 + 10 used; a double refund would leave 80.
      expect(admission.quota[0]?.inputTokens?.remaining).toBe(40);
      expect(admission.quota[0]?.concurrency?.remaining).toBe(0);
      refused(await limiter.admit(request(acct, [b])));
    });

    it('frees the concurrency slot', async () => {
      const { limiter } = await h.create();
      const acct = account();
      const b = bucket('account', { concurrency: 1 });
      const lease = granted(await limiter.admit(request(acct, [b])));
      refused(await limiter.admit(request(acct, [b])));
      await limiter.release(lease);
      granted(await limiter.admit(request(acct, [b])));
    });
  });

  it('never admits more than the concurrency ceiling in a burst', async () => {
    const { limiter } = await h.create();
    const acct = account();
    const b = [
      bucket('account', { concurrency: 10, requests: 1000 }),
      bucket('model:a', { concurrency: 50 }),
    ];
    const results = await Promise.all(Array.from({ length: 200 }, () => limiter.admit(request(acct, b))));
    const admitted = results.filter((r) => r.ok);
    expect(admitted).toHaveLength(10);
    for (const r of results)
      if (!r.ok) expect(r.refusal).toMatchObject({ bucket: 'account', metric: 'concurrency' });
  });

  it('windows roll over: the refused request fits after retryAfterMs, the whole budget after resetAt', async () => {
    const { limiter, wait } = await h.create();
    const acct = account();
    const b = bucket('account', { requests: 3, windowSeconds: 1 });
    let last = granted(await limiter.admit(request(acct, [b])));
    granted(await limiter.admit(request(acct, [b])));
    const admission = await limiter.admit(request(acct, [b]));
    granted(admission);
    if (!admission.ok) return;
    const resetAt = admission.quota[0]?.requests?.resetAt ?? 0;
    const refusal = refused(await limiter.admit(request(acct, [b])));
    expect(refusal.metric).toBe('requests');
    expect(refusal.retryAfterMs).toBeGreaterThan(0);
    expect(refusal.retryAfterMs).toBeLessThanOrEqual(2000);
    expect(refusal.resetAt % 1000).toBe(0);
    expect(refusal.resetAt).toBeGreaterThanOrEqual(resetAt);
    await wait(refusal.retryAfterMs + (h.redis ? 20 : 0));
    last = granted(await limiter.admit(request(acct, [b])));
    await wait(
      Math.max(0, (Math.floor(last.admittedAt / 1000) + 2) * 1000 - last.admittedAt) + (h.redis ? 20 : 0),
    );
    for (let i = 0; i < 3; i++) granted(await limiter.admit(request(acct, [b])));
    refused(await limiter.admit(request(acct, [b])));
  });

  describe('leases', () => {
    it('expire, freeing the slot of a lease nobody released', async () => {
      const { limiter, wait } = await h.create({ leaseMs: 200 });
      const acct = account();
      const b = bucket('account', { concurrency: 1, inputTokens: 100 });
      const forgotten = granted(await limiter.admit(request(acct, [b], { in: 10 })));
      expect(forgotten.leaseMs).toBe(200);
      const refusal = refused(await limiter.admit(request(acct, [b])));
      expect(refusal.retryAfterMs).toBeLessThanOrEqual(200);
      await wait(250);
      const next = granted(await limiter.admit(request(acct, [b], { in: 10 })));
      // A late release still reconciles, and does not free the new holder's slot.
      expect(await limiter.release(forgotten, { inputTokens: 0, outputTokens: 0 })).toBe('released');
      refused(await limiter.admit(request(acct, [b])));
      expect(await limiter.extend(forgotten)).toBe('gone');
      await limiter.release(next);
    });

    it('extend pushes the expiry of a long request forward', async () => {
      const { limiter, wait } = await h.create();
      const acct = account();
      const b = bucket('account', { concurrency: 1 });
      const lease = granted(await limiter.admit(request(acct, [b], { leaseMs: 500 })));
      await wait(200);
      expect(await limiter.extend(lease)).toBe('extended');
      await wait(400); // past the first expiry, within the extended one
      refused(await limiter.admit(request(acct, [b])));
      expect(await limiter.extend(lease, 1000)).toBe('extended');
      await wait(600);
      refused(await limiter.admit(request(acct, [b])));
      await limiter.release(lease);
      expect(await limiter.extend(lease)).toBe('gone');
      granted(await limiter.admit(request(acct, [b])));
    });

    it('an expired lease is not revived by extend', async () => {
      const { limiter, wait } = await h.create({ leaseMs: 100 });
      const acct = account();
      const b = bucket('account', { concurrency: 1 });
      const lease = granted(await limiter.admit(request(acct, [b])));
      await wait(150);
      expect(await limiter.extend(lease)).toBe('gone');
      granted(await limiter.admit(request(acct, [b])));
    });
  });

  it('rejects invalid input with a TypeError', async () => {
    const { limiter } = await h.create();
    const acct = account();
    const b = bucket('account', { requests: 1 });
    await expect(limiter.admit(request(acct, [b], { in: Number.NaN }))).rejects.toThrow(TypeError);
    await expect(limiter.admit(request(acct, [b], { out: -1 }))).rejects.toThrow(TypeError);
    await expect(limiter.admit(request(acct, [b, bucket('account', {})]))).rejects.toThrow(TypeError);
    await expect(limiter.admit(request(acct, [bucket('x', { windowSeconds: 0 })]))).rejects.toThrow(
      TypeError,
    );
    await expect(limiter.admit(request('', [b]))).rejects.toThrow(TypeError);
    // Nothing was consumed by the invalid calls.
    granted(await limiter.admit(request(acct, [b])));
  });

  it('admits with no buckets at all (nothing to limit)', async () => {
    const { limiter } = await h.create();
    const admission = await limiter.admit(request(account(), []));
    const lease = granted(admission);
    expect(admission.ok && admission.quota).toEqual([]);
    expect(await limiter.release(lease, { inputTokens: 5, outputTokens: 5 })).toBe('released');
  });
}

describe('limiter contract: memory', () => contract(memoryHarness()));

describeRedis('limiter contract: redis', () => contract(redisHarness()));
