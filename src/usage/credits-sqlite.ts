import {
  type CreditMovement,
  type CreditStore,
  checkDebit,
  checkDefaultBalance,
  checkGrant,
  type Debit,
  type DebitResult,
  type DefaultBalance,
  fromMicros,
  toMicros,
} from './credits.js';
import { openDatabase, type SqliteDatabase } from './sqlite-db.js';

export const CREDIT_SCHEMA = `
CREATE TABLE IF NOT EXISTS credit_balances (
  account_id TEXT PRIMARY KEY,
  balance_micros INTEGER NOT NULL,
  updated_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS credit_ledger (
  id INTEGER PRIMARY KEY,
  record_id TEXT UNIQUE,
  account_id TEXT NOT NULL,
  kind TEXT NOT NULL,
  amount_micros INTEGER NOT NULL,
  note TEXT,
  time TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS credit_ledger_account_time ON credit_ledger (account_id, time);
`;

export interface SqliteCreditStoreOptions {
  defaultBalance: DefaultBalance;
  /**
   * Keep balances in memory, written through on every debit and grant (and, with the ledger thread
   * writing, set from its answers through remember()), so balance() costs a Map lookup. Another process
   * writing the file (the CLI granting credits) is seen after forget(); default false.
   */
  cache?: boolean;
}

export interface LedgerEntry {
  recordId: string | null;
  accountId: string;
  kind: 'debit' | 'grant';
  /** Signed: debits are negative. */
  credits: number;
  note: string | null;
  time: string;
}

/**
 * Credits in the embedded SQLite file: `credit_balances` holds the balance, `credit_ledger` every
 * movement; the ledger's unique record_id makes a debit idempotent (INSERT OR IGNORE, then move the
 * balance only if the row was new), in one IMMEDIATE transaction.
 */
export class SqliteCreditStore implements CreditStore {
  private readonly db: SqliteDatabase;
  private readonly owned: boolean;
  private readonly defaultMicros: number | null;
  private readonly cache: Map<string, number | null> | undefined;
  private readonly stmt;
  private readonly debitTx: (debits: readonly Debit[]) => DebitResult[];
  private readonly grantTx: (accountId: string, micros: number, note: string) => number;

  /** `source`: a file path (opened and later closed here) or an open libsql Database (left open). */
  constructor(source: string | SqliteDatabase, options: SqliteCreditStoreOptions) {
    checkDefaultBalance(options.defaultBalance);
    ({ db: this.db, owned: this.owned } = openDatabase(source));
    this.db.exec(CREDIT_SCHEMA);
    this.defaultMicros = options.defaultBalance === 'unlimited' ? null : toMicros(options.defaultBalance);
    this.cache = options.cache ? new Map() : undefined;
    const db = this.db;
    this.stmt = {
      balance: db.prepare('SELECT balance_micros AS b FROM credit_balances WHERE account_id = ?'),
      ledger: db.prepare(
        `INSERT OR IGNORE INTO credit_ledger (record_id, account_id, kind, amount_micros, note, time)
         VALUES (?, ?, ?, ?, ?, ?)`,
      ),
      // Seeds a missing row with `initial` (default + amount); otherwise adds `amount`.
      upsert: db.prepare(
        `INSERT INTO credit_balances (account_id, balance_micros, updated_at) VALUES (?, ?, ?)
         ON CONFLICT(account_id) DO UPDATE SET balance_micros = balance_micros + ?, updated_at = excluded.updated_at
         RETURNING balance_micros AS b`,
      ),
      update: db.prepare(
        `UPDATE credit_balances SET balance_micros = balance_micros + ?, updated_at = ? WHERE account_id = ?
         RETURNING balance_micros AS b`,
      ),
      entries: db.prepare(
        `SELECT record_id, account_id, kind, amount_micros, note, time FROM credit_ledger
         WHERE account_id = ? ORDER BY id LIMIT ?`,
      ),
      latest: db.prepare(
        `SELECT kind, amount_micros, note, time FROM credit_ledger
         WHERE account_id = ? ORDER BY id DESC LIMIT ?`,
      ),
    };
    const debitAll = db.transaction((debits: readonly Debit[]) => debits.map((d) => this.debitOne(d)));
    this.debitTx = (debits) => debitAll.immediate(debits);
    const grantOne = db.transaction((accountId: string, micros: number, note: string) => {
      const now = new Date().toISOString();
      this.stmt.ledger.run(null, accountId, 'grant', micros, note, now);
      const seed = (this.defaultMicros ?? 0) + micros;
      return (this.stmt.upsert.get(accountId, seed, now, micros) as { b: number }).b;
    });
    this.grantTx = (accountId, micros, note) => grantOne.immediate(accountId, micros, note);
  }

  balance(accountId: string): number {
    return toCredits(this.readMicros(accountId));
  }

  debit(accountId: string, credits: number, recordId: string): DebitResult {
    return this.debitMany([{ accountId, credits, recordId }])[0] as DebitResult;
  }

  debitMany(debits: readonly Debit[]): DebitResult[] {
    if (debits.length === 0) return [];
    for (const d of debits) checkDebit(d);
    try {
      return this.debitTx(debits);
    } catch (error) {
      // The transaction rolled back, so cached values written inside it are wrong.
      this.cache?.clear();
      throw error;
    }
  }

  grant(accountId: string, credits: number, note: string): number {
    const micros = this.grantTx(accountId, checkGrant(accountId, credits), note);
    this.cache?.set(accountId, micros);
    return fromMicros(micros);
  }

  /** An account's movements, oldest first (for audits and tests). */
  ledger(accountId: string, limit = 1000): LedgerEntry[] {
    const rows = this.stmt.entries.all(accountId, limit) as Array<{
      record_id: string | null;
      account_id: string;
      kind: 'debit' | 'grant';
      amount_micros: number;
      note: string | null;
      time: string;
    }>;
    return rows.map((r) => ({
      recordId: r.record_id,
      accountId: r.account_id,
      kind: r.kind,
      credits: fromMicros(r.amount_micros),
      note: r.note,
      time: r.time,
    }));
  }

  movements(accountId: string, limit: number): CreditMovement[] {
    const rows = this.stmt.latest.all(accountId, limit) as Array<{
      kind: 'debit' | 'grant';
      amount_micros: number;
      note: string | null;
      time: string;
    }>;
    return rows.map((r) => ({
      at: r.time,
      amount: fromMicros(r.amount_micros),
      kind: r.kind,
      note: r.note,
      balanceAfter: null,
    }));
  }

  /** Bumped by every forget(): a balance computed before it may be older than what was read since. */
  generation = 0;

  /**
   * Caches a balance another connection wrote (the ledger thread's answer; Infinity is unlimited), unless
   * the cache was forgotten since `generation` was read: the file may then hold a newer balance (a grant
   * from the CLI) that a read has already cached.
   */
  remember(accountId: string, balance: number, generation: number): void {
    if (generation !== this.generation) return;
    this.cache?.set(accountId, balance === Number.POSITIVE_INFINITY ? null : toMicros(balance));
  }

  /** Drops cached balances (all, or one account's) after another writer changed the file. */
  forget(accountId?: string): void {
    this.generation++;
    if (accountId === undefined) this.cache?.clear();
    else this.cache?.delete(accountId);
  }

  close(): void {
    if (this.owned && this.db.open) this.db.close();
  }

  /** null: no row and the default is unlimited. */
  private readMicros(accountId: string): number | null {
    const cached = this.cache?.get(accountId);
    if (cached !== undefined) return cached;
    const row = this.stmt.balance.get(accountId) as { b: number } | undefined;
    const micros = row ? row.b : this.defaultMicros;
    this.cache?.set(accountId, micros);
    return micros;
  }

  /** Runs inside the debit transaction. */
  private debitOne(d: Debit): DebitResult {
    const micros = toMicros(d.credits);
    const now = new Date().toISOString();
    if (this.stmt.ledger.run(d.recordId, d.accountId, 'debit', -micros, null, now).changes === 0) {
      return { applied: false, balance: toCredits(this.readMicros(d.accountId)) };
    }
    let after: number | null;
    if (this.defaultMicros === null) {
      const row = this.stmt.update.get(-micros, now, d.accountId) as { b: number } | undefined;
      after = row ? row.b : null;
    } else {
      after = (this.stmt.upsert.get(d.accountId, this.defaultMicros - micros, now, -micros) as { b: number })
        .b;
    }
    this.cache?.set(d.accountId, after);
    return { applied: true, balance: toCredits(after) };
  }
}

function toCredits(micros: number | null): number {
  return micros === null ? Number.POSITIVE_INFINITY : fromMicros(micros);
}
