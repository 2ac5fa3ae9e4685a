/**
 * Exponential backoff, the one copy every retry in src/ uses (providers/ stand alone and keep their own):
 * the delay before attempt n, doubling from baseMs up to maxMs, with or without jitter; and a
 * receiver's Retry-After honoured for webhook deliveries. It imports nothing, so any layer can use it.
 */

/**
 * How the delay is spread below the exponential ceiling, min(maxMs, baseMs·2^(n-1)):
 * - 'full': uniformly random in [baseMs, ceiling]. Callers that failed together (an outage) do not
 *   retry in lockstep, and the floor keeps a retry from following a failure at once.
 * - 'equal': uniformly random in [ceiling/2, ceiling]: some spread, but never much shorter than the doubling.
 * - 'none': the ceiling itself, for a single caller whose retries nobody else shares.
 */
export type Jitter = 'full' | 'equal' | 'none';

export interface BackoffPolicy {
  /** Shortest delay, and the scale of the exponential: attempt n may wait up to baseMs·2^(n-1). */
  baseMs: number;
  /** Longest delay between two attempts; it wins over baseMs if set below it. */
  maxMs: number;
  /** Default 'full'. */
  jitter?: Jitter;
}

/** Past this exponent the ceiling has long reached any sensible maxMs; avoids overflow to Infinity. */
const MAX_EXPONENT = 40;

/**
 * Delay before the next attempt, given how many attempts have failed so far (1 after the first; below
 * 1 counts as 1). `random` is the source of the jitter, in [0, 1].
 */
export function nextDelayMs(
  attempt: number,
  policy: BackoffPolicy,
  random: () => number = Math.random,
): number {
  const maxMs = Math.max(0, policy.maxMs);
  const baseMs = Math.min(Math.max(0, policy.baseMs), maxMs);
  const exponent = Math.min(Math.max(0, Math.floor(attempt) - 1), MAX_EXPONENT) || 0;
  const ceiling = Math.min(maxMs, baseMs * 2 ** exponent);
  const jitter = policy.jitter ?? 'full';
  if (jitter === 'none') return Math.round(ceiling);
  const r = Math.min(Math.max(random(), 0), 1);
  const floor = jitter === 'full' ? baseMs : ceiling / 2;
  return Math.round(floor + r * (ceiling - floor));
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
  return Math.min(Math.max(backoff, retryAfterMs), Math.max(0, policy.maxMs));
}

/** True once deliveries for an event have been tried for `spanMs` since its first attempt (epoch ms). */
export function shouldGiveUp(firstAttemptAt: number, now: number, spanMs: number): boolean {
  return now - firstAttemptAt >= spanMs;
}
