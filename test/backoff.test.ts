import { describe, expect, it } from 'vitest';
import { type BackoffPolicy, nextDelayMs, retryDelayMs, shouldGiveUp } from '../src/backoff.js';
import { reconnectBackoff } from '../src/limits/redis-client.js';

const policy = { baseMs: 1000, maxMs: 60_000 };
const low = (): number => 0;
const high = (): number => 1;
const mid = (): number => 0.5;

describe('nextDelayMs, table', () => {
  const rows: Array<[string, BackoffPolicy, () => number, number[]]> = [
    ['full jitter, lowest draw: the floor', { baseMs: 1000, maxMs: 60_000 }, low, [1000, 1000, 1000, 1000]],
    [
      'full jitter, highest draw: the ceiling',
      { baseMs: 1000, maxMs: 60_000, jitter: 'full' },
      high,
      [1000, 2000, 4000, 8000],
    ],
    [
      'full jitter, middle draw',
      { baseMs: 1000, maxMs: 60_000, jitter: 'full' },
      mid,
      [1000, 1500, 2500, 4500],
    ],
    [
      'equal jitter, lowest draw: half the ceiling',
      { baseMs: 100, maxMs: 2000, jitter: 'equal' },
      low,
      [50, 100, 200, 400, 800, 1000, 1000],
    ],
    [
      'equal jitter, highest draw: the ceiling',
      { baseMs: 100, maxMs: 2000, jitter: 'equal' },
      high,
      [100, 200, 400, 800, 1600, 2000, 2000],
    ],
    [
      'equal jitter, middle draw',
      { baseMs: 100, maxMs: 2000, jitter: 'equal' },
      mid,
      [75, 150, 300, 600, 1200, 1500, 1500],
    ],
    [
      'no jitter ignores the draw',
      { baseMs: 500, maxMs: 30_000, jitter: 'none' },
      mid,
      [500, 1000, 2000, 4000, 8000, 16_000, 30_000, 30_000],
    ],
    [
      'no jitter, cap below the second step',
      { baseMs: 200, maxMs: 250, jitter: 'none' },
      low,
      [200, 250, 250],
    ],
    ['the cap wins over a larger base, jittered', { baseMs: 5000, maxMs: 1000 }, low, [1000, 1000, 1000]],
    [
      'the cap wins over a larger base, not jittered',
      { baseMs: 40, maxMs: 20, jitter: 'none' },
      low,
      [20, 20, 20],
    ],
    ['a zero base never waits', { baseMs: 0, maxMs: 1000, jitter: 'none' }, high, [0, 0, 0]],
    ['negative settings count as zero', { baseMs: -5, maxMs: -1 }, high, [0, 0]],
  ];
  it.each(rows)('%s', (_name, p, random, expected) => {
    expect(expected.map((_, i) => nextDelayMs(i + 1, p, random))).toEqual(expected);
  });

  it.each([
    ['zero', 0, 100],
    ['negative', -3, 100],
    ['fractional', 2.9, 200],
    ['NaN', Number.NaN, 100],
    ['huge', 1e9, 2000],
    ['Infinity', Number.POSITIVE_INFINITY, 2000],
  ])('an attempt that is %s stays in bounds', (_name, attempt, expected) => {
    expect(nextDelayMs(attempt, { baseMs: 100, maxMs: 2000, jitter: 'none' })).toBe(expected);
  });

  it.each(['full', 'equal'] as const)('%s jitter spreads delays within its band', (jitter) => {
    const p: BackoffPolicy = { baseMs: 100, maxMs: 60_000, jitter };
    const seen = new Set(Array.from({ length: 50 }, () => nextDelayMs(8, p)));
    expect(seen.size).toBeGreaterThan(10);
    const floor = jitter === 'full' ? 100 : 6400;
    for (const delay of seen) {
      expect(delay).toBeGreaterThanOrEqual(floor);
      expect(delay).toBeLessThanOrEqual(12_800);
    }
  });
});

describe('reconnectBackoff (ioredis retryStrategy, times from 1)', () => {
  it.each([
    [1000, [100, 200, 400, 800, 1000, 1000]],
    [250, [100, 200, 250, 250]],
  ])('doubles from 100 ms up to %i ms', (max, expected) => {
    const strategy = reconnectBackoff(max);
    expect(expected.map((_, i) => strategy(i + 1))).toEqual(expected);
  });
});

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

  it('caps Retry-After at maxMs even when baseMs is set above it', () => {
    expect(retryDelayMs(1, { baseMs: 5000, maxMs: 1000 }, 30_000, low)).toBe(1000);
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
