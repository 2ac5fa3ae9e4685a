import type { RoutingSettings } from '../config/types.js';
import type { Deployment } from './health.js';

export type ModelStatus = 'operational' | 'degraded' | 'offline';

/**
 * A model degraded by its window's error rate or latency becomes operational again only once they are
 * below this share of their thresholds: one call either way does not flip the status back and forth.
 */
const LEAVE_DEGRADED = 0.8;

export interface DerivedStatus {
  status: ModelStatus;
  /** Why it is not operational; undefined when it is. */
  reason: string | undefined;
}

/**
 * A model's status from its deployments' health: `offline` when no circuit is closed (each is open, or
 * half-open with no successful trial yet: a deployment known to have failed and not known to work
 * again), `degraded` when some are open, or when the calls of the window fail or answer slowly over the
 * model's thresholds (`routing.degraded`, judged once `breaker.min_requests` calls were seen), else
 * `operational`. A half-open deployment next to a closed one counts as available but untried: it takes
 * a trial on its next call, and a fallback that gets no traffic under `priority` would otherwise keep
 * the model degraded for good after it recovered. `previous` (the status so far) gives the window's
 * thresholds their hysteresis.
 */
export function deriveStatus(
  deployments: readonly Deployment[],
  settings: RoutingSettings,
  now: number,
  previous: ModelStatus = 'operational',
): DerivedStatus {
  let open = 0;
  let closed = 0;
  let calls = 0;
  let failures = 0;
  let ttfbSum = 0;
  let ttfbCalls = 0;
  for (const d of deployments) {
    const state = d.breaker.state;
    if (state === 'open') open++;
    else if (state === 'closed') closed++;
    const c = d.counts(now);
    calls += c.calls;
    failures += c.failures;
    if (c.meanTtfbMs !== undefined) {
      // Weighted by the calls that reported it, close enough to the window's mean.
      ttfbSum += c.meanTtfbMs * (c.calls - c.failures);
      ttfbCalls += c.calls - c.failures;
    }
  }
  const total = deployments.length;
  if (total > 0 && closed === 0) {
    return {
      status: 'offline',
      reason:
        open === total
          ? `all ${total} deployments are unavailable (circuit open)`
          : `all ${total} deployments are unavailable (circuit open or awaiting a trial call)`,
    };
  }
  if (open > 0) {
    return { status: 'degraded', reason: `${open} of ${total} deployments unavailable (circuit open)` };
  }
  const { errorRate, ttfbMs } = settings.degraded;
  const scale = previous === 'operational' ? 1 : LEAVE_DEGRADED;
  if (calls >= settings.breaker.minRequests) {
    if (failures / calls >= errorRate * scale) {
      return {
        status: 'degraded',
        reason: `${Math.round((failures / calls) * 100)}% of recent calls failed`,
      };
    }
    if (ttfbMs !== undefined && ttfbCalls > 0 && ttfbSum / ttfbCalls > ttfbMs * scale) {
      return {
        status: 'degraded',
        reason: `recent calls took ${Math.round(ttfbSum / ttfbCalls)} ms to their first byte`,
      };
    }
  }
  return { status: 'operational', reason: undefined };
}

/** Whole seconds until the first open deployment lets a trial through (at least 1), for Retry-After. */
export function retryAfterSeconds(deployments: readonly Deployment[], now: number): number {
  let wait = Number.POSITIVE_INFINITY;
  for (const d of deployments) wait = Math.min(wait, d.breaker.waitMs(now));
  return Number.isFinite(wait) ? Math.max(1, Math.ceil(wait / 1000)) : 1;
}
