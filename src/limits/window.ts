/**
 * Sliding-window counter: each bucket keeps a counter for the current fixed window and the previous
 * one, and the usage of the rolling window ending now is `prev × (unexpired share of prev) + cur`.
 * It is O(1) in memory and time per metric (one or two hash reads in Redis), at the price of assuming
 * the previous window's traffic was spread evenly; a sliding log would be exact but costs one entry
 * per request. Windows are aligned to multiples of their length since the epoch, so every instance
 * (and the Redis script) computes the same window index from the same clock.
 *
 * The Lua script in redis-scripts.ts evaluates `fits` with the same expression in the same order, so
 * both implementations make identical decisions on identical numbers.
 */

export function windowMsOf(windowSeconds: number): number {
  return Math.max(1, Math.round(windowSeconds * 1000));
}

export function windowIndex(now: number, windowMs: number): number {
  return Math.floor(now / windowMs);
}

/** Weighted usage of the rolling window ending `elapsedMs` into the current fixed window. */
export function slidingUsage(prev: number, cur: number, elapsedMs: number, windowMs: number): number {
  return (prev * (windowMs - elapsedMs)) / windowMs + cur;
}

export function fits(
  prev: number,
  cur: number,
  amount: number,
  limit: number,
  elapsedMs: number,
  windowMs: number,
): boolean {
  return (prev * (windowMs - elapsedMs)) / windowMs + cur + amount <= limit;
}

/** Whether `amount` fits `waitMs` from now if nothing else is consumed: the windows roll meanwhile. */
export function fitsAfter(
  prev: number,
  cur: number,
  amount: number,
  limit: number,
  elapsedMs: number,
  windowMs: number,
  waitMs: number,
): boolean {
  const t = elapsedMs + waitMs;
  if (t < windowMs) return fits(prev, cur, amount, limit, t, windowMs);
  if (t < 2 * windowMs) return fits(cur, 0, amount, limit, t - windowMs, windowMs);
  return amount <= limit;
}

/**
 * Milliseconds until `amount` fits, assuming nothing else is consumed meanwhile. Only meaningful when
 * it does not fit now and `amount <= limit`.
 */
export function retryAfterMs(
  prev: number,
  cur: number,
  amount: number,
  limit: number,
  elapsedMs: number,
  windowMs: number,
): number {
  let wait: number;
  if (cur + amount > limit) {
    // Only after the boundary, once `cur` has become the previous window and decayed enough.
    wait = windowMs - elapsedMs + windowMs * (1 - (limit - amount) / cur);
  } else {
    // Within this window, as the previous window's share shrinks linearly.
    wait = windowMs * (1 - (limit - cur - amount) / prev) - elapsedMs;
  }
  // The closed form is exact in theory; float noise can put it a millisecond off either way, and
  // fits() decides admission, so settle on the first millisecond that fits() accepts.
  let ms = Math.max(1, Math.ceil(wait - 1e-6));
  if (ms > 1 && fitsAfter(prev, cur, amount, limit, elapsedMs, windowMs, ms - 1)) ms--;
  for (let i = 0; i < 3 && !fitsAfter(prev, cur, amount, limit, elapsedMs, windowMs, ms); i++) ms++;
  return ms;
}

/** Epoch ms when both counters stop counting: the whole budget is back. */
export function resetAt(prev: number, cur: number, now: number, windowMs: number): number {
  const start = windowIndex(now, windowMs) * windowMs;
  if (cur > 0) return start + 2 * windowMs;
  if (prev > 0) return start + windowMs;
  return now;
}

/** Whole units left; the epsilon keeps float noise from costing a unit. */
export function remaining(
  prev: number,
  cur: number,
  limit: number,
  elapsedMs: number,
  windowMs: number,
): number {
  return Math.max(0, Math.floor(limit - slidingUsage(prev, cur, elapsedMs, windowMs) + 1e-9));
}
