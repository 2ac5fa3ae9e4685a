import type { BreakerSettings, ProbeSettings, RoutingSettings, RoutingStrategy } from '../config/types.js';

/** The YAML form of `routing` (global) and of a model's `routing` (README, "Routing and health"). */
export interface RawRouting {
  strategy?: RoutingStrategy;
  first_token_ms?: number;
  breaker?: {
    consecutive_failures?: number;
    error_rate?: number;
    min_requests?: number;
    window_seconds?: number;
    cooldown_seconds?: number;
    half_open_requests?: number;
  };
  degraded?: { error_rate?: number; ttfb_ms?: number };
}

export interface RawGlobalRouting extends RawRouting {
  probes?: { enabled?: boolean; interval_seconds?: number; idle_seconds?: number; timeout_ms?: number };
  history?: { max_entries?: number };
}

const DEFAULT_BREAKER: BreakerSettings = {
  consecutiveFailures: 5,
  errorRate: 0.5,
  minRequests: 20,
  windowMs: 30_000,
  cooldownMs: 15_000,
  halfOpenRequests: 1,
};

/** The model's settings: its own keys over the global ones over the defaults, key by key. */
export function buildRouting(global: RawRouting, own: RawRouting | undefined): RoutingSettings {
  const pick = <K extends keyof RawRouting>(key: K): RawRouting[K] => own?.[key] ?? global[key];
  const b = { ...global.breaker, ...own?.breaker };
  const d = { ...global.degraded, ...own?.degraded };
  const seconds = (value: number | undefined, fallback: number): number =>
    value === undefined ? fallback : Math.round(value * 1000);
  return {
    strategy: pick('strategy') ?? 'priority',
    firstTokenMs: pick('first_token_ms'),
    breaker: {
      consecutiveFailures: b.consecutive_failures ?? DEFAULT_BREAKER.consecutiveFailures,
      errorRate: b.error_rate ?? DEFAULT_BREAKER.errorRate,
      minRequests: b.min_requests ?? DEFAULT_BREAKER.minRequests,
      windowMs: seconds(b.window_seconds, DEFAULT_BREAKER.windowMs),
      cooldownMs: seconds(b.cooldown_seconds, DEFAULT_BREAKER.cooldownMs),
      halfOpenRequests: b.half_open_requests ?? DEFAULT_BREAKER.halfOpenRequests,
    },
    degraded: { errorRate: d.error_rate ?? 0.25, ttfbMs: d.ttfb_ms },
  };
}

export function buildProbes(raw: RawGlobalRouting['probes']): ProbeSettings {
  return {
    enabled: raw?.enabled ?? false,
    intervalMs: Math.round((raw?.interval_seconds ?? 10) * 1000),
    idleMs: Math.round((raw?.idle_seconds ?? 30) * 1000),
    timeoutMs: raw?.timeout_ms ?? 2_000,
  };
}
