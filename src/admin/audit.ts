/**
 * The audit log (README, "Admin API"): every change made through the admin API or the console, who made it
 * and on what. Never a key or any other secret: details name things (ids, names, amounts), nothing more.
 * Embedded mode keeps it in a table of the store's database; distributed mode in one Redis stream that
 * every instance writes, so any instance lists every instance's entries.
 */
import type { Redis } from 'ioredis';
import type Database from 'libsql';
import type { PlaneDeps } from './plane.js';

type Db = InstanceType<typeof Database>;

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
  /** Newest first. Throws a RangeError when `before` is not an id of this log. */
  list(query: AuditQuery): Promise<AuditEntry[]>;
  close(): Promise<void>;
}

export const DEFAULT_AUDIT_LIMIT = 100;
export const AUDIT_STREAM = 'gantry:{audit}';
/** Entries the Redis stream keeps (approximately: `MAXLEN ~` trims whole nodes, cheaply). */
const STREAM_MAX = 1_000_000;
/** Stream entries read per XREVRANGE while filtering by account. */
const PAGE = 500;

export function createAuditLog(deps: PlaneDeps): AuditLog {
  return deps.redis ? new RedisAuditLog(deps.redis) : new SqliteAuditLog(deps.store.handle);
}

const SCHEMA = `
CREATE TABLE IF NOT EXISTS audit_log (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  at INTEGER NOT NULL,
  actor TEXT NOT NULL,
  action TEXT NOT NULL,
  account_id TEXT,
  target TEXT NOT NULL,
  details TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_log_account ON audit_log (account_id, id);
`;

interface Row {
  id: number;
  at: number;
  actor: string;
  action: string;
  account_id: string | null;
  target: string;
  details: string;
}

/** Embedded mode: a table of the store's database; ids are the table's increasing row ids. */
export class SqliteAuditLog implements AuditLog {
  private readonly insert;
  private readonly all;
  private readonly ofAccount;

  constructor(db: Db) {
    db.exec(SCHEMA);
    this.insert = db.prepare(
      `INSERT INTO audit_log (at, actor, action, account_id, target, details) VALUES (?, ?, ?, ?, ?, ?)
       RETURNING id`,
    );
    this.all = db.prepare('SELECT * FROM audit_log WHERE id < ? ORDER BY id DESC LIMIT ?');
    this.ofAccount = db.prepare(
      'SELECT * FROM audit_log WHERE account_id = ? AND id < ? ORDER BY id DESC LIMIT ?',
    );
  }

  async record(entry: Omit<AuditEntry, 'id' | 'at'>): Promise<AuditEntry> {
    const at = Date.now();
    const { id } = this.insert.get(
      at,
      entry.actor,
      entry.action,
      entry.accountId,
      entry.target,
      JSON.stringify(entry.details),
    ) as { id: number };
    return { ...entry, id: String(id), at };
  }

  async list(query: AuditQuery): Promise<AuditEntry[]> {
    let before = Number.MAX_SAFE_INTEGER;
    if (query.before !== undefined) {
      if (!/^\d{1,15}$/.test(query.before)) throw new RangeError('not an audit entry id');
      before = Number(query.before);
    }
    const limit = query.limit ?? DEFAULT_AUDIT_LIMIT;
    const rows = (
      query.accountId === undefined
        ? this.all.all(before, limit)
        : this.ofAccount.all(query.accountId, before, limit)
    ) as Row[];
    return rows.map((r) => ({
      id: String(r.id),
      at: r.at,
      actor: r.actor,
      action: r.action,
      accountId: r.account_id,
      target: r.target,
      details: JSON.parse(r.details) as Record<string, unknown>,
    }));
  }

  async close(): Promise<void> {}
}

/** Distributed mode: one stream shared by every instance; ids are the stream's entry ids. */
export class RedisAuditLog implements AuditLog {
  constructor(
    private readonly redis: Redis,
    private readonly key = AUDIT_STREAM,
  ) {}

  async record(entry: Omit<AuditEntry, 'id' | 'at'>): Promise<AuditEntry> {
    const at = Date.now();
    const body = JSON.stringify({ ...entry, at });
    const id = await this.redis.xadd(this.key, 'MAXLEN', '~', String(STREAM_MAX), '*', 'entry', body);
    return { ...entry, id: id as string, at };
  }

  async list(query: AuditQuery): Promise<AuditEntry[]> {
    const limit = query.limit ?? DEFAULT_AUDIT_LIMIT;
    let end = '+';
    if (query.before !== undefined) {
      if (!/^\d{1,15}-\d{1,15}$/.test(query.before)) throw new RangeError('not an audit entry id');
      end = `(${query.before}`;
    }
    const found: AuditEntry[] = [];
    for (;;) {
      const page = await this.redis.xrevrange(this.key, end, '-', 'COUNT', PAGE);
      for (const [id, fields] of page) {
        const entry = parse(id, fields);
        if (!entry) continue;
        if (query.accountId !== undefined && entry.accountId !== query.accountId) continue;
        found.push(entry);
        if (found.length >= limit) return found;
      }
      if (page.length < PAGE) return found;
      end = `(${(page[page.length - 1] as [string, string[]])[0]}`;
    }
  }

  async close(): Promise<void> {}
}

function parse(id: string, fields: string[]): AuditEntry | undefined {
  const index = fields.indexOf('entry');
  if (index < 0 || index % 2 !== 0) return undefined;
  try {
    const e = JSON.parse(fields[index + 1] ?? '') as Omit<AuditEntry, 'id'>;
    return {
      id,
      at: e.at,
      actor: e.actor,
      action: e.action,
      accountId: e.accountId ?? null,
      target: e.target,
      details: e.details ?? {},
    };
  } catch {
    return undefined;
  }
}
