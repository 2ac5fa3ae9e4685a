import { describe, expect, it } from 'vitest';
import { LimiterUnavailableError } from '../../src/limits/errors.js';
import { MemoryLimiter } from '../../src/limits/memory.js';
import { withFailurePolicy } from '../../src/limits/policy.js';
import type { AdmitRequest, Limiter } from '../../src/limits/types.js';
import { bucket, granted } from './harness.js';

function down(error: Error = new LimiterUnavailableError('rate limiter unavailable: test')): Limiter {
  return {
    admit: async () => {
      throw error;
    },
    release: async () => 'unavailable',
    extend: async () => 'unavailable',
    close: async () => {},
  };
}

const req: AdmitRequest = {
  accountId: 'a',
  buckets: [bucket('account', { requests: 1 })],
  inputTokens: 1,
  outputTokens: 1,
};

describe('withFailurePolicy', () => {
  it("'open' admits with a marker and an inert lease when the limiter is unavailable", async () => {
    const seen: LimiterUnavailableError[] = [];
    const limiter = withFailurePolicy(down(), 'open', (e) => seen.push(e));
    const admission = await limiter.admit(req);
    expect(admission).toMatchObject({ ok: true, failedOpen: true, quota: [] });
    expect(seen).toHaveLength(1);
    const lease = granted(admission);
    expect(lease.buckets).toEqual([]);
    const real = new MemoryLimiter();
    expect(await real.release(lease, { inputTokens: 9, outputTokens: 9 })).toBe('released');
  });

  it("'closed' rethrows the LimiterUnavailableError after reporting it", async () => {
    const seen: LimiterUnavailableError[] = [];
    const limiter = withFailurePolicy(down(), 'closed', (e) => seen.push(e));
    await expect(limiter.admit(req)).rejects.toBeInstanceOf(LimiterUnavailableError);
    expect(seen).toHaveLength(1);
  });

  it('passes other errors through in either mode', async () => {
    for (const policy of ['open', 'closed'] as const) {
      const limiter = withFailurePolicy(down(new TypeError('bad input')), policy);
      await expect(limiter.admit(req)).rejects.toBeInstanceOf(TypeError);
    }
  });

  it('is transparent while the limiter works', async () => {
    const limiter = withFailurePolicy(new MemoryLimiter(), 'open');
    const lease = granted(await limiter.admit(req));
    expect((await limiter.admit(req)).ok).toBe(false);
    expect(await limiter.release(lease)).toBe('released');
    expect(await limiter.extend(lease)).toBe('gone');
  });
});
