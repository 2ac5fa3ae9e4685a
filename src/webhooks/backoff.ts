/**
 * Retry timing for webhook deliveries: exponential backoff with jitter, so receivers that failed
 * together (an outage) are not hit again in lockstep, and a give-up rule based on elapsed time rather
 * than attempt count, so the promise to users is "we keep trying for N hours".
 */

export interface BackoffPolicy {
  /** Shortest delay, and the scale of the exponential: attempt n may wait up to baseMs·2^(n-1). */
  baseMs: number;
  /** Longest delay between two attempts. */
  maxMs: number;
}

/** Past this exponent the ceiling has long reached any sensible maxMs; avoids overflow to Infinity. */
const MAX_EXPONENT = 40;

/**
 * Delay before the next attempt, given how many attempts have failed so far (1 after the first).
 * "Full jitter" between baseMs and the exponential ceiling: uniformly random in
 * [baseMs, min(maxMs, baseMs·2^(attempt-1))]. The floor keeps a retry from following a failure at once.
 */
export function nextDelayMs(
  attempt: number,
  policy: BackoffPolicy,
  random: () => number = Math.random,
): number {
  const baseMs = Math.max(0, policy.baseMs);
  const maxMs = Math.max(baseMs, policy.maxMs);
  const exponent = Math.min(Math.max(0, Math.floor(attempt) - 1), MAX_EXPONENT);
  const ceiling = Math.min(maxMs, baseMs * 2 ** exponent);
  const r = Math.min(Math.max(random(), 0), 1);
  return Math.round(baseMs + r * (ceiling - baseMs));
}

/**
 * Delay honouring a receiver's Retry-After: never sooner than it asked, never sooner than our own
 * backoff, and never longer than maxMs, so a receiver cannot park a delivery indefinitely.
 */
export function retryDelayMs(
  attempt: number,
  policy: BackoffPolicy,
  retryAfterMs?: number,
  random: () => number = Math.random,
): number {
  const backoff = nextDelayMs(attempt, policy, random);
  if (retryAfterMs === undefined || !Number.isFinite(retryAfterMs)) return backoff;
  return Math.min(Math.max(backoff, retryAfterMs), Math.max(policy.maxMs, policy.baseMs));
}

/** True once deliveries for an event have been tried for `spanMs` since its first attempt (epoch ms). */
export function shouldGiveUp(firstAttemptAt: number, now: number, spanMs: number): boolean {
  return now - firstAttemptAt >= spanMs;
}
