/**
 * Usage queries (README, "Usage queries"): requests, tokens and cost per UTC day, account and model, read
 * from the mode's daily totals: the ledger's `usage_daily` table in embedded mode (query-sqlite.ts), the
 * stream's day hashes in distributed mode (query-redis.ts). Both are written with the records
 * themselves, idempotently, so they agree with the ledger and the stream.
 */
import type { PlaneDeps } from '../admin/plane.js';
import { createRedisUsageQuery } from './query-redis.js';
import { createSqliteUsageQuery } from './query-sqlite.js';

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
  /** The days of the range that have usage, in (day, account, model) order. */
  daily(filter: UsageFilter): Promise<UsageDay[]>;
  close(): Promise<void>;
}

export function createUsageQuery(deps: PlaneDeps): UsageQuery {
  if (deps.redis) return createRedisUsageQuery(deps.redis, deps.config.usage.stream);
  return createSqliteUsageQuery(deps.store);
}
