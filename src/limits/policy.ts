/**
 * What to do when the shared limit store is down is a deployment decision: fail open (serve without
 * limits, keep the gateway up) or fail closed (refuse, protect upstream budgets). This wrapper applies
 * it so the request path only ever sees an admission or a refusal.
 */
import { LimiterUnavailableError } from './errors.js';
import { newLease } from './request.js';
import type { Admission, Limiter } from './types.js';

const NOTHING = { inputTokens: 0, outputTokens: 0, leaseMs: 0 };

export type FailurePolicy = 'open' | 'closed';

/**
 * 'open': an unavailable limiter admits, with `failedOpen: true`, an empty quota and an inert lease
 * (release/extend on it do nothing). 'closed': the LimiterUnavailableError is rethrown (the caller
 * answers 503 or 429). Either way `onUnavailable` sees the error first, e.g. to log and count it.
 */
export function withFailurePolicy(
  limiter: Limiter,
  policy: FailurePolicy,
  onUnavailable?: (error: LimiterUnavailableError) => void,
): Limiter {
  return {
    async admit(request): Promise<Admission> {
      try {
        return await limiter.admit(request);
      } catch (error) {
        if (!(error instanceof LimiterUnavailableError)) throw error;
        onUnavailable?.(error);
        if (policy === 'closed') throw error;
        const lease = newLease('fail-open', request.accountId, [], NOTHING, Date.now());
        return { ok: true, lease, quota: [], failedOpen: true };
      }
    },
    release: (lease, usage) => limiter.release(lease, usage),
    extend: (lease, leaseMs) => limiter.extend(lease, leaseMs),
    close: () => limiter.close(),
  };
}
