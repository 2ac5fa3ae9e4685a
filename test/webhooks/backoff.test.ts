import { describe, expect, it } from 'vitest';
import { nextDelayMs, retryDelayMs, shouldGiveUp } from '../../src/webhooks/backoff.js';

const policy = { baseMs: 1000, maxMs: 60_000 };
const low = (): number => 0;
const high = (): number => 1;

describe('nextDelayMs', () => {
  it('waits at least baseMs, even with the smallest jitter', () => {
    for (let attempt = 1; attempt <= 12; attempt++) expect(nextDelayMs(attempt, policy, low)).toBe(1000);
  });

  it('doubles the ceiling per attempt up to maxMs', () => {
    const ceilings = [1, 2, 3, 4, 5, 6, 7, 8].map((attempt) => nextDelayMs(attempt, policy, high));
    expect(ceilings).toEqual([1000, 2000, 4000, 8000, 16_000, 32_000, 60_000, 60_000]);
  });

  it('spreads delays between the floor and the ceiling', () => {
    expect(nextDelayMs(4, policy, () => 0.5)).toBe(4500);
    const seen = new Set(Array.from({ length: 50 }, () => nextDelayMs(6, policy)));
    expect(seen.size).toBeGreaterThan(10);
    for (const delay of seen) {
      expect(delay).toBeGreaterThanOrEqual(1000);
      expect(delay).toBeLessThanOrEqual(32_000);
    }
  });

  it('stays finite and capped for absurd attempt numbers and odd inputs', () => {
    expect(nextDelayMs(10_000, policy, high)).toBe(60_000);
    expect(nextDelayMs(0, policy, high)).toBe(1000);
    expect(nextDelayMs(-3, policy, high)).toBe(1000);
    expect(nextDelayMs(3, policy, () => 7)).toBe(4000);
  });
});

describe('retryDelayMs', () => {
  it('is the backoff when the receiver gave no Retry-After', () => {
    expect(retryDelayMs(3, policy, undefined, high)).toBe(4000);
  });

  it('waits as long as Retry-After asks, but no longer than maxMs', () => {
    expect(retryDelayMs(1, policy, 30_000, low)).toBe(30_000);
    expect(retryDelayMs(1, policy, 86_400_000, low)).toBe(60_000);
  });

  it('never retries sooner than its own backoff', () => {
    expect(retryDelayMs(5, policy, 0, high)).toBe(16_000);
  });
});

describe('shouldGiveUp', () => {
  it('gives up once the span since the first attempt has passed', () => {
    const first = Date.parse('2026-01-01T00:00:00Z');
    const day = 86_400_000;
    expect(shouldGiveUp(first, first + day - 1, day)).toBe(false);
    expect(shouldGiveUp(first, first + day, day)).toBe(true);
  });
});
