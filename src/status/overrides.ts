/**
 * Model status overrides set by an operator (README, "Admin API" → models): shown on /v1/models, the status
 * page and the console instead of the status judged from traffic, until cleared.
 *
 * STUB: replaced by the SQLite and Redis implementations.
 */
import type { PlaneDeps } from '../admin/plane.js';

export interface StatusOverride {
  status: 'operational' | 'degraded' | 'offline';
  reason: string;
  setBy: string;
  at: number;
}

export interface ModelOverrides {
  /** Synchronous: read from a copy kept current in memory (never a store read on the request path). */
  get(namespace: string): StatusOverride | undefined;
  close(): Promise<void>;
}

export function createModelOverrides(_deps: PlaneDeps): ModelOverrides {
  return { get: () => undefined, close: async () => {} };
}
