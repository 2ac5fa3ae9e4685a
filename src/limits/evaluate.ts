/**
 * Decisions and reports from a bucket's counters, shared by both limiters so a refusal or a quota means
 * the same thing whichever one produced it. The Redis limiter decides inside Lua and uses these only to
 * describe the outcome from the counters the script returns.
 */
import type { BucketQuota, BucketSpec, LimitMetric, MetricQuota, Refusal, WindowMetric } from './types.js';
import { fits, remaining, resetAt, retryAfterMs, windowMsOf } from './window.js';

/** Suggested wait after a concurrency refusal when no lease expires sooner: slots free up on release. */
export const CONCURRENCY_RETRY_HINT_MS = 1000;

export interface Counts {
  requests: number;
  inputTokens: number;
  outputTokens: number;
}

/** A bucket as seen at `now`: counters of the current and previous fixed windows, and its leases. */
export interface BucketState {
  leases: number;
  /** Expiry (epoch ms) of the oldest live lease; 0 when unknown or none. Only needed to refuse. */
  oldestLeaseExpiry: number;
  cur: Counts;
  prev: Counts;
}

/** What one admission consumes besides one request and one slot. */
export interface Amounts {
  inputTokens: number;
  outputTokens: number;
}

export const WINDOW_METRICS: readonly WindowMetric[] = ['requests', 'inputTokens', 'outputTokens'];

function amountOf(metric: WindowMetric, amounts: Amounts): number {
  return metric === 'requests' ? 1 : amounts[metric];
}

export function bucketFits(spec: BucketSpec, state: BucketState, amounts: Amounts, now: number): boolean {
  const limits = spec.limits;
  if (limits.concurrency !== undefined && state.leases >= limits.concurrency) return false;
  const windowMs = windowMsOf(limits.windowSeconds);
  const elapsed = now % windowMs;
  for (const metric of WINDOW_METRICS) {
    const limit = limits[metric];
    if (limit === undefined) continue;
    if (!fits(state.prev[metric], state.cur[metric], amountOf(metric, amounts), limit, elapsed, windowMs)) {
      return false;
    }
  }
  return true;
}

function worse(a: Refusal | undefined, b: Refusal): Refusal {
  if (!a) return b;
  if (a.neverFits !== b.neverFits) return a.neverFits ? a : b;
  return b.retryAfterMs > a.retryAfterMs ? b : a;
}

/** The refusal with the longest wait in this bucket, or undefined when it accepts. */
export function bucketRefusal(
  spec: BucketSpec,
  state: BucketState,
  amounts: Amounts,
  now: number,
): Refusal | undefined {
  const limits = spec.limits;
  const windowMs = windowMsOf(limits.windowSeconds);
  const elapsed = now % windowMs;
  let refusal: Refusal | undefined;
  const concurrency = limits.concurrency;
  if (concurrency !== undefined && state.leases >= concurrency) {
    const untilOldest = state.oldestLeaseExpiry > now ? state.oldestLeaseExpiry - now : Infinity;
    const wait = Math.min(CONCURRENCY_RETRY_HINT_MS, untilOldest);
    refusal = {
      bucket: spec.key,
      metric: 'concurrency',
      limit: concurrency,
      windowSeconds: limits.windowSeconds,
      retryAfterMs: wait,
      resetAt: now + wait,
      neverFits: concurrency <= 0,
    };
  }
  for (const metric of WINDOW_METRICS) {
    const limit = limits[metric];
    if (limit === undefined) continue;
    const prev = state.prev[metric];
    const cur = state.cur[metric];
    const amount = amountOf(metric, amounts);
    if (fits(prev, cur, amount, limit, elapsed, windowMs)) continue;
    const reset = resetAt(prev, cur, now, windowMs);
    const neverFits = amount > limit;
    refusal = worse(refusal, {
      bucket: spec.key,
      metric,
      limit,
      windowSeconds: limits.windowSeconds,
      retryAfterMs: neverFits
        ? Math.max(0, reset - now)
        : retryAfterMs(prev, cur, amount, limit, elapsed, windowMs),
      resetAt: reset,
      neverFits,
    });
  }
  return refusal;
}

/** The refusal to report for a refused admission: never-fits first, then the longest wait. */
export function pickRefusal(
  specs: readonly BucketSpec[],
  states: readonly BucketState[],
  amounts: Amounts,
  now: number,
): Refusal | undefined {
  let refusal: Refusal | undefined;
  for (let i = 0; i < specs.length; i++) {
    const found = bucketRefusal(specs[i]!, states[i]!, amounts, now);
    if (found) refusal = worse(refusal, found);
  }
  return refusal;
}

/** Quota of a bucket after consumption, for the response headers. */
export function bucketQuota(spec: BucketSpec, state: BucketState, now: number): BucketQuota {
  const limits = spec.limits;
  const windowMs = windowMsOf(limits.windowSeconds);
  const elapsed = now % windowMs;
  const quota: BucketQuota = { bucket: spec.key, windowSeconds: limits.windowSeconds };
  if (limits.concurrency !== undefined) {
    quota.concurrency = {
      limit: limits.concurrency,
      remaining: Math.max(0, limits.concurrency - state.leases),
      resetAt: now,
    };
  }
  for (const metric of WINDOW_METRICS) {
    const limit = limits[metric];
    if (limit === undefined) continue;
    const prev = state.prev[metric];
    const cur = state.cur[metric];
    quota[metric] = {
      limit,
      remaining: remaining(prev, cur, limit, elapsed, windowMs),
      resetAt: resetAt(prev, cur, now, windowMs),
    };
  }
  return quota;
}

/**
 * The most constrained bucket for a metric (fewest remaining; on a tie the later reset), e.g. for
 * `X-RateLimit-*` (requests) and the token header families.
 */
export function tightest(
  quota: readonly BucketQuota[],
  metric: LimitMetric,
): (MetricQuota & { bucket: string; windowSeconds: number }) | undefined {
  // One object at the end, not one per better bucket: this runs three times on every admitted request.
  let best: MetricQuota | undefined;
  let owner: BucketQuota | undefined;
  for (const bucket of quota) {
    const m = bucket[metric];
    if (!m) continue;
    if (
      !best ||
      m.remaining < best.remaining ||
      (m.remaining === best.remaining && m.resetAt > best.resetAt)
    ) {
      best = m;
      owner = bucket;
    }
  }
  if (!best || !owner) return undefined;
  return {
    limit: best.limit,
    remaining: best.remaining,
    resetAt: best.resetAt,
    bucket: owner.bucket,
    windowSeconds: owner.windowSeconds,
  };
}
