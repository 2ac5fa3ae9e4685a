import type { SqliteDatabase } from './sqlite-db.js';

/**
 * Per-day totals of the usage ledger (README, "Usage queries"): one row per UTC day, account and model,
 * so the admin API's usage query reads a few hundred small rows instead of summing millions of records on
 * the main thread. The sink adds a batch's records to them in the batch's own transaction, one upsert per
 * (day, account, model) of the batch (dailyTotalsWriter): a batch and its totals commit together, and only
 * the records that batch actually inserted count, so a record INSERT OR IGNORE skipped (already stored:
 * the batcher's retries) is not counted twice. Credits are summed as integer micro-credits (as balances
 * are), so sums are exact.
 */
const DAILY_SCHEMA = `
CREATE TABLE IF NOT EXISTS usage_daily (
  day TEXT NOT NULL,
  account_id TEXT NOT NULL,
  model TEXT NOT NULL,
  requests INTEGER NOT NULL,
  input_tokens INTEGER NOT NULL,
  output_tokens INTEGER NOT NULL,
  credits_micros INTEGER NOT NULL,
  PRIMARY KEY (day, account_id, model)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS usage_daily_account_day ON usage_daily (account_id, day);
`;

/**
 * Earlier ledgers kept the totals with this trigger, one upsert per record on the ledger thread: a third
 * more CPU per record than the insert itself (bench/ledger-daily.ts). Its totals are exact up to the
 * moment it is dropped, and the sink adds every batch after.
 */
const OLD_TRIGGER = 'usage_records_daily';

/**
 * The sums of the records of `usage_records` past a rowid, per (UTC day, account, model). `time` is
 * toISOString() (UTC), so its first ten characters are the UTC day. Each credit amount is rounded to
 * micro-credits before summing, as a balance's debit is.
 */
const SUMS_SINCE = (schema: string) => `
SELECT substr(time, 1, 10), account_id, model, COUNT(*), SUM(input_tokens), SUM(output_tokens),
  SUM(CAST(round(credits * 1000000) AS INTEGER))
FROM ${schema}.usage_records WHERE rowid > ? GROUP BY 1, 2, 3`;

const INSERT_SUMS = (schema: string) => `INSERT INTO ${schema}.usage_daily (day, account_id, model, requests,
  input_tokens, output_tokens, credits_micros)`;

const ON_CONFLICT_ADD = `ON CONFLICT (day, account_id, model) DO UPDATE SET
  requests = requests + excluded.requests,
  input_tokens = input_tokens + excluded.input_tokens,
  output_tokens = output_tokens + excluded.output_tokens,
  credits_micros = credits_micros + excluded.credits_micros`;

const ADD_SUMS = (schema: string) => `${INSERT_SUMS(schema)} ${SUMS_SINCE(schema)} ${ON_CONFLICT_ADD}`;

/** One (UTC day, account, model)'s sums over some records, as added to its row of the daily totals. */
export interface DailySums {
  day: string;
  account_id: string;
  model: string;
  requests: number;
  input_tokens: number;
  output_tokens: number;
  credits_micros: number;
}

export interface DailyTotalsWriter {
  /**
   * Adds the records past `rowid`, summed by SQLite. A record INSERT OR IGNORE inserts takes the rowid
   * max(rowid) + 1 (while no rowid reached 2^63 - 1; the ledger neither deletes records nor sets rowids),
   * a record it skips adds no row: so the rows past the largest rowid before a write are exactly those it
   * inserted, a repeat inside the batch or a record already stored (a retry) left out. That rowid is the
   * first statement that inserted anything's lastInsertRowid - changes: its rows took the rowids
   * just past it, one after the other.
   */
  addSince(rowid: number): void;
  /** Adds sums made by the caller, of records it knows were all inserted (see creditsMicros). */
  add(sums: Iterable<DailySums>): void;
}

/**
 * The daily totals' writes, for `usage_records` and `usage_daily` of `schema` (an attached ledger when
 * moving tables). Call them inside the transaction of the inserts they count, so both commit together.
 */
export function dailyTotalsWriter(db: SqliteDatabase, schema = 'main'): DailyTotalsWriter {
  const since = db.prepare(ADD_SUMS(schema));
  const one = db.prepare(`${INSERT_SUMS(schema)} VALUES (?, ?, ?, ?, ?, ?, ?) ${ON_CONFLICT_ADD}`);
  return {
    addSince(rowid) {
      since.run(rowid);
    },
    add(sums) {
      for (const s of sums) {
        one.run([
          s.day,
          s.account_id,
          s.model,
          s.requests,
          s.input_tokens,
          s.output_tokens,
          s.credits_micros,
        ]);
      }
    },
  };
}

/**
 * A record's credits in micro-credits exactly as the SQL sums count them, CAST(round(credits * 1000000)
 * AS INTEGER): SQLite rounds half away from zero by truncating x + 0.5 (credits are never negative), for
 * any x up to 2^52; past that it keeps x, whose sums a double no longer holds exactly, so undefined:
 * let SQLite sum those (addSince).
 */
export function creditsMicros(credits: number): number | undefined {
  const x = credits * 1_000_000;
  return x >= 0 && x <= 2 ** 52 ? Math.trunc(x + 0.5) : undefined;
}

/**
 * Creates the daily totals on a ledger that lacks them, filled from the records already there (rowid
 * past 0: all of them); drops the trigger of a ledger that kept them with one (OLD_TRIGGER). One
 * IMMEDIATE transaction, checked inside it: two connections opening the file at once (the server and
 * its ledger thread) cannot both fill it, and no record is written between the sum and the first write
 * that adds its own. Needs `usage_records` to exist.
 */
export function ensureDailySchema(db: SqliteDatabase): void {
  if (dailyState(db) === 'current') return;
  const migrate = db.transaction(() => {
    const state = dailyState(db);
    if (state === 'missing') {
      db.exec(`${DAILY_SCHEMA} DROP TRIGGER IF EXISTS ${OLD_TRIGGER};`);
      db.prepare(ADD_SUMS('main')).run(0);
    } else if (state === 'trigger') {
      db.exec(`DROP TRIGGER ${OLD_TRIGGER}`);
    }
  });
  migrate.immediate();
}

function dailyState(db: SqliteDatabase): 'missing' | 'trigger' | 'current' {
  const row = db
    .prepare(
      `SELECT
        EXISTS (SELECT 1 FROM main.sqlite_master WHERE type = 'table' AND name = 'usage_daily') AS has_table,
        EXISTS (SELECT 1 FROM main.sqlite_master WHERE type = 'trigger' AND name = ?) AS has_trigger`,
    )
    .get(OLD_TRIGGER) as { has_table: number; has_trigger: number };
  if (row.has_table === 0) return 'missing';
  return row.has_trigger === 1 ? 'trigger' : 'current';
}

/** One row of the daily totals. */
export interface DailyRow {
  day: string;
  account_id: string;
  model: string;
  requests: number;
  input_tokens: number;
  output_tokens: number;
  credits_micros: number;
}

export interface DailyFilter {
  accountId?: string | undefined;
  model?: string | undefined;
  /** YYYY-MM-DD, inclusive. */
  from: string;
  to: string;
}

/**
 * Reads the daily totals of a range, in (day, account, model) order. One statement per combination of
 * filters, prepared on first use: with an account, its index bounds the scan to that account's days;
 * without, the primary key bounds it to the range's days.
 */
export function dailyReader(db: SqliteDatabase): (filter: DailyFilter) => DailyRow[] {
  const statements = new Map<string, ReturnType<SqliteDatabase['prepare']>>();
  return (filter) => {
    const where = ['day >= ?', 'day <= ?'];
    const values: string[] = [filter.from, filter.to];
    if (filter.accountId !== undefined) {
      where.push('account_id = ?');
      values.push(filter.accountId);
    }
    if (filter.model !== undefined) {
      where.push('model = ?');
      values.push(filter.model);
    }
    const sql = `SELECT day, account_id, model, requests, input_tokens, output_tokens, credits_micros
      FROM usage_daily WHERE ${where.join(' AND ')} ORDER BY day, account_id, model`;
    let statement = statements.get(sql);
    if (statement === undefined) {
      statement = db.prepare(sql);
      statements.set(sql, statement);
    }
    return statement.all(values) as DailyRow[];
  };
}
