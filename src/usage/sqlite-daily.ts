import type { SqliteDatabase } from './sqlite-db.js';

/**
 * Per-day totals of the usage ledger (README, "Usage queries"): one row per UTC day, account and model,
 * kept by a trigger on `usage_records`, so the admin API's usage query reads a few hundred small rows
 * instead of summing millions of records on the main thread. The trigger runs in the writer's
 * transaction (the ledger thread's): a batch and its totals commit together, and an INSERT OR IGNORE
 * that skips a record already stored fires nothing, so totals stay exact under the batcher's retries.
 * Credits are summed as integer micro-credits (as balances are), so sums are exact.
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
CREATE TRIGGER IF NOT EXISTS usage_records_daily AFTER INSERT ON usage_records
BEGIN
  INSERT INTO usage_daily (day, account_id, model, requests, input_tokens, output_tokens, credits_micros)
  VALUES (substr(NEW.time, 1, 10), NEW.account_id, NEW.model, 1, NEW.input_tokens, NEW.output_tokens,
    CAST(round(NEW.credits * 1000000) AS INTEGER))
  ON CONFLICT (day, account_id, model) DO UPDATE SET
    requests = requests + 1,
    input_tokens = input_tokens + excluded.input_tokens,
    output_tokens = output_tokens + excluded.output_tokens,
    credits_micros = credits_micros + excluded.credits_micros;
END;
`;

/**
 * The records a ledger held before it had daily totals, summed once. `time` is toISOString() (UTC), so
 * its first ten characters are the UTC day.
 */
const BACKFILL = `
INSERT INTO usage_daily (day, account_id, model, requests, input_tokens, output_tokens, credits_micros)
SELECT substr(time, 1, 10), account_id, model, COUNT(*), SUM(input_tokens), SUM(output_tokens),
  SUM(CAST(round(credits * 1000000) AS INTEGER))
FROM usage_records GROUP BY 1, 2, 3
`;

/**
 * Creates the daily totals and their trigger on a ledger that lacks them, filled from the records already
 * there. One IMMEDIATE transaction, checked inside it: two connections opening the file at once (the
 * server and the CLI) cannot both fill it, and no record is written between the sum and the trigger.
 * Needs `usage_records` to exist.
 */
export function ensureDailySchema(db: SqliteDatabase): void {
  if (hasDailyTotals(db)) return;
  const create = db.transaction(() => {
    if (hasDailyTotals(db)) return;
    db.exec(DAILY_SCHEMA);
    db.exec(BACKFILL);
  });
  create.immediate();
}

function hasDailyTotals(db: SqliteDatabase): boolean {
  return (
    db
      .prepare(`SELECT 1 FROM sqlite_master WHERE type = 'trigger' AND name = 'usage_records_daily'`)
      .get() !== undefined
  );
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
