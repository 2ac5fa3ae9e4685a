/**
 * The audit log (README, "Admin API"): every change made through the admin API or the console, who made it
 * and on what. Never a key or any other secret: details name things (ids, names, amounts), nothing more.
 *
 * STUB: replaced by the SQLite and Redis implementations.
 */
import type { PlaneDeps } from './plane.js';

export interface AuditEntry {
  id: string;
  /** Epoch ms. */
  at: number;
  /** `admin:<key name>` or `key:<api key id>` (a console session of an account's owner). */
  actor: string;
  /** e.g. `account.create`, `key.revoke`, `credits.grant`, `incident.open`. */
  action: string;
  /** The account the action concerns, when there is one (owners read their account's entries). */
  accountId: string | null;
  /** What was acted on: an id or a name. */
  target: string;
  details: Record<string, unknown>;
}

export interface AuditQuery {
  accountId?: string;
  /** Entries before this id (paging), newest first. */
  before?: string;
  limit?: number;
}

export interface AuditLog {
  record(entry: Omit<AuditEntry, 'id' | 'at'>): Promise<AuditEntry>;
  list(query: AuditQuery): Promise<AuditEntry[]>;
  close(): Promise<void>;
}

export function createAuditLog(_deps: PlaneDeps): AuditLog {
  const entries: AuditEntry[] = [];
  return {
    async record(entry) {
      const full = { ...entry, id: String(entries.length + 1), at: Date.now() };
      entries.push(full);
      return full;
    },
    async list(query) {
      return entries
        .filter((e) => query.accountId === undefined || e.accountId === query.accountId)
        .reverse()
        .slice(0, query.limit ?? 100);
    },
    async close() {},
  };
}
