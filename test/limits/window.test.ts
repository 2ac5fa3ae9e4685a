import { describe, expect, it } from 'vitest';
import { fits, remaining, resetAt, retryAfterMs, slidingUsage, windowMsOf } from '../../src/limits/window.js';

describe('sliding-window counter', () => {
  it('weighs the previous window by its overlap with the rolling window', () => {
    expect(slidingUsage(100, 10, 0, 1000)).toBe(110);
    expect(slidingUsage(100, 10, 250, 1000)).toBe(85);
    expect(slidingUsage(100, 10, 999, 1000)).toBeCloseTo(10.1);
    expect(windowMsOf(60)).toBe(60_000);
    expect(windowMsOf(0.0001)).toBe(1);
  });

  it('restores the whole budget once both windows stop counting', () => {
    const now = 10_250;
    expect(resetAt(5, 1, now, 1000)).toBe(12_000);
    expect(resetAt(5, 0, now, 1000)).toBe(11_000);
    expect(resetAt(0, 0, now, 1000)).toBe(now);
    expect(remaining(100, 10, 200, 250, 1000)).toBe(115);
  });

  it('gives the exact wait within the window and across the boundary', () => {
    // prev 100 decays: 100×(1000−e)/1000 + 10 + 1 ≤ 100 from e = 110 on.
    expect(retryAfterMs(100, 10, 1, 100, 0, 1000)).toBe(110);
    // cur 100 at the limit: the next window, then until cur's share drops to 99: 10 ms in.
    expect(retryAfterMs(0, 100, 1, 100, 400, 1000)).toBe(610);
  });

  it('after retryAfterMs the amount fits, one millisecond earlier it does not (random cases)', () => {
    let seed = 42;
    const random = (n: number) => {
      seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
      return seed % n;
    };
    // Simulates time passing with no traffic: the windows roll, the counters shift.
    const fitsAfter = (
      prev: number,
      cur: number,
      amount: number,
      limit: number,
      e: number,
      w: number,
      dt: number,
    ) => {
      const t = e + dt;
      if (t < w) return fits(prev, cur, amount, limit, t, w);
      if (t < 2 * w) return fits(cur, 0, amount, limit, t - w, w);
      return amount <= limit;
    };
    let checked = 0;
    const wrong: object[] = [];
    for (let i = 0; i < 20_000; i++) {
      const w = 1 + random(5000);
      const limit = 1 + random(1000);
      const prev = random(1500);
      const cur = random(limit + 200);
      const amount = random(limit + 1);
      const e = random(w);
      if (fits(prev, cur, amount, limit, e, w)) continue;
      const wait = retryAfterMs(prev, cur, amount, limit, e, w);
      const exact =
        wait > 0 &&
        wait <= 2 * w &&
        fitsAfter(prev, cur, amount, limit, e, w, wait) &&
        (wait === 1 || !fitsAfter(prev, cur, amount, limit, e, w, wait - 1));
      if (!exact) wrong.push({ prev, cur, amount, limit, e, w, wait });
      checked++;
    }
    expect(wrong).toEqual([]);
    expect(checked).toBeGreaterThan(1000);
  });
});
