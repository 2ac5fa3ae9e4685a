/**
 * Usage queries (README, "Admin API" → usage): requests, tokens and cost per day, account and model, read
 * from the mode's usage store.
 *
 * STUB: replaced by the SQLite and Redis implementations.
 */
import type { PlaneDeps } from '../admin/plane.js';

export interface UsageDay {
  /** YYYY-MM-DD (UTC). */
  day: string;
  accountId: string;
  model: string;
  requests: number;
  inputTokens: number;
  outputTokens: number;
  /** Credits charged. */
  cost: number;
}

export interface UsageFilter {
  accountId?: string;
  model?: string;
  /** YYYY-MM-DD, inclusive. */
  from: string;
  to: string;
}

export interface UsageQuery {
  daily(filter: UsageFilter): Promise<UsageDay[]>;
  close(): Promise<void>;
}

export function createUsageQuery(_deps: PlaneDeps): UsageQuery {
  return { daily: async () => [], close: async () => {} };
}
