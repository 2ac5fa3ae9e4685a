import type { UsageApi, UsageOutcome, UsageRecord, UsageSafetyAction } from './record.js';
import { assertUsageBatch } from './record.js';
import type { UsageSink } from './sink.js';
import { creditsMicros, type DailySums, dailyTotalsWriter, ensureDailySchema } from './sqlite-daily.js';
import { openDatabase, type SqliteDatabase } from './sqlite-db.js';

export const USAGE_SCHEMA = `
CREATE TABLE IF NOT EXISTS usage_records (
  id TEXT PRIMARY KEY,
  time TEXT NOT NULL,
  account_id TEXT NOT NULL,
  key_id TEXT NOT NULL,
  model TEXT NOT NULL,
  provider TEXT NOT NULL,
  api TEXT NOT NULL,
  outcome TEXT NOT NULL,
  status INTEGER NOT NULL,
  error_id TEXT,
  input_tokens INTEGER NOT NULL,
  cached_input_tokens INTEGER NOT NULL,
  output_tokens INTEGER NOT NULL,
  media_unit TEXT,
  media_quantity REAL,
  cost REAL NOT NULL,
  currency TEXT NOT NULL,
  credits REAL NOT NULL,
  latency_ms REAL NOT NULL,
  ttft_ms REAL,
  stream INTEGER NOT NULL,
  cache_write_input_tokens INTEGER NOT NULL DEFAULT 0,
  safety_flags TEXT NOT NULL DEFAULT '',
  safety_action TEXT
);
CREATE INDEX IF NOT EXISTS usage_records_account_time ON usage_records (account_id, time);
CREATE INDEX IF NOT EXISTS usage_records_model_time ON usage_records (model, time);
`;

/** Records per multi-row INSERT: libsql's per-statement cost is paid once for all of them. */
const ROWS_PER_INSERT = 50;

/** The columns of `usage_records`, in the order rows are bound (pushUsageRow). */
export const USAGE_COLUMNS = [
  'id',
  'time',
  'account_id',
  'key_id',
  'model',
  'provider',
  'api',
  'outcome',
  'status',
  'error_id',
  'input_tokens',
  'cached_input_tokens',
  'output_tokens',
  'media_unit',
  'media_quantity',
  'cost',
  'currency',
  'credits',
  'latency_ms',
  'ttft_ms',
  'stream',
  'cache_write_input_tokens',
  'safety_flags',
  'safety_action',
] as const;

/** Columns added after the first ledger schema, with their definitions (see ensureUsageSchema). */
const ADDED_COLUMNS: ReadonlyArray<readonly [string, string]> = [
  ['cache_write_input_tokens', 'INTEGER NOT NULL DEFAULT 0'],
  // Comma-separated category names ('' when none), and the action (NULL: off, or written before).
  ['safety_flags', "TEXT NOT NULL DEFAULT ''"],
  ['safety_action', 'TEXT'],
];

/**
 * Creates the usage table, or adds to an existing one the columns a newer Gantry writes (CREATE TABLE IF
 * NOT EXISTS leaves an older table as it was). Rows written before get the column's default. Then the
 * daily totals the usage queries read (sqlite-daily.ts), summed from the records already there, or
 * without the trigger an older ledger kept them with; `dailyTotals: false` leaves them as they are (a
 * connection that writes no usage, see openLedgerFile).
 */
export function ensureUsageSchema(db: SqliteDatabase, options: { dailyTotals?: boolean } = {}): void {
  db.exec(USAGE_SCHEMA);
  const have = new Set(
    (db.prepare('PRAGMA table_info(usage_records)').all() as Array<{ name: string }>).map((c) => c.name),
  );
  for (const [name, definition] of ADDED_COLUMNS) {
    if (!have.has(name)) db.exec(`ALTER TABLE usage_records ADD COLUMN ${name} ${definition}`);
  }
  if (options.dailyTotals ?? true) ensureDailySchema(db);
}

interface UsageRow {
  id: string;
  time: string;
  account_id: string;
  key_id: string;
  model: string;
  provider: string;
  api: string;
  outcome: string;
  status: number;
  error_id: string | null;
  input_tokens: number;
  cached_input_tokens: number;
  output_tokens: number;
  media_unit: string | null;
  media_quantity: number | null;
  cost: number;
  currency: string;
  credits: number;
  latency_ms: number;
  ttft_ms: number | null;
  stream: number;
  cache_write_input_tokens: number;
  safety_flags: string;
  safety_action: string | null;
}

export interface UsageQuery {
  accountId: string;
  /** Inclusive ISO lower bound. */
  from?: string;
  /** Exclusive ISO upper bound. */
  to?: string;
  limit?: number;
}

/**
 * The usage ledger of the embedded mode: table `usage_records` in the SQLite file. INSERT OR IGNORE on
 * the id makes rewrites no-ops; one transaction per batch makes a batch all-or-nothing and cheap, its
 * daily totals included.
 */
export class SqliteUsageSink implements UsageSink {
  readonly name = 'sqlite';
  private readonly db: SqliteDatabase;
  private readonly owned: boolean;
  private readonly insert;
  private readonly insertMany;
  private readonly byAccount;
  private readonly countAll;
  private readonly insertRows: (values: UsageRowValues) => void;

  /** `source`: a file path (opened and later closed here) or an open libsql Database (left open). */
  constructor(source: string | SqliteDatabase) {
    ({ db: this.db, owned: this.owned } = openDatabase(source));
    ensureUsageSchema(this.db);
    const row = `(${USAGE_COLUMNS.map(() => '?').join(', ')})`;
    const insertInto = `INSERT OR IGNORE INTO usage_records (${USAGE_COLUMNS.join(', ')}) VALUES `;
    this.insert = this.db.prepare(insertInto + row);
    this.insertMany = this.db.prepare(insertInto + Array(ROWS_PER_INSERT).fill(row).join(', '));
    this.byAccount = this.db.prepare(
      `SELECT * FROM usage_records WHERE account_id = ? AND time >= ? AND time < ? ORDER BY time, id LIMIT ?`,
    );
    this.countAll = this.db.prepare('SELECT COUNT(*) AS n FROM usage_records');
    const daily = dailyTotalsWriter(this.db);
    // Binding parameters dominates a small insert's cost in libsql; one statement per 50 rows cuts the
    // time per record by about a quarter. OR IGNORE still applies row by row. The values go as one array
    // argument, which libsql binds as it is: spread, they are gathered and flattened into a new array
    // first (a quarter of the cost again).
    this.insertRows = this.db.transaction((values: UsageRowValues) => {
      const width = USAGE_COLUMNS.length;
      const rows = values.length / width;
      let inserted = 0;
      // The largest rowid before the batch's first inserted row (see DailyTotalsWriter.addSince).
      let since = 0;
      const count = ({ changes, lastInsertRowid }: RunResult) => {
        if (inserted === 0 && changes > 0) since = Number(lastInsertRowid) - changes;
        inserted += changes;
      };
      let row = 0;
      for (; row + ROWS_PER_INSERT <= rows; row += ROWS_PER_INSERT) {
        count(this.insertMany.run(values.slice(row * width, (row + ROWS_PER_INSERT) * width)));
      }
      for (; row < rows; row++) {
        count(this.insert.run(values.slice(row * width, (row + 1) * width)));
      }
      // The daily totals, in the batch's transaction (sqlite-daily.ts). Every row inserted, the usual
      // case: summed here, one upsert per day, account and model. Else (a retry, a repeat) SQLite sums
      // just the rows inserted.
      const sums = inserted === rows ? dailySums(values) : undefined;
      if (sums !== undefined) daily.add(sums);
      else if (inserted > 0) daily.addSince(since);
    });
  }

  async write(records: UsageRecord[]): Promise<void> {
    this.writeNow(records);
  }

  /** write(), synchronously. */
  writeNow(records: UsageRecord[]): void {
    if (records.length > 0) this.insertRows(usageRows(records));
  }

  /**
   * Rows made by usageRows (so already checked): the ledger thread's form, since an array of plain values
   * crosses to a worker at half the cost of objects.
   */
  writeRows(values: UsageRowValues): void {
    if (values.length % USAGE_COLUMNS.length !== 0) throw new RangeError('usage rows: a partial row');
    if (values.length > 0) this.insertRows(values);
  }

  /** One account's records in time order (the (account_id, time) index). */
  list(query: UsageQuery): UsageRecord[] {
    const rows = this.byAccount.all(
      query.accountId,
      query.from ?? '',
      query.to ?? '\uffff',
      query.limit ?? 1000,
    ) as UsageRow[];
    return rows.map(fromRow);
  }

  count(): number {
    return (this.countAll.get() as { n: number }).n;
  }

  async close(): Promise<void> {
    if (this.owned && this.db.open) this.db.close();
  }
}

const TIME = USAGE_COLUMNS.indexOf('time');
const ACCOUNT = USAGE_COLUMNS.indexOf('account_id');
const MODEL = USAGE_COLUMNS.indexOf('model');
const INPUT = USAGE_COLUMNS.indexOf('input_tokens');
const OUTPUT = USAGE_COLUMNS.indexOf('output_tokens');
const CREDITS = USAGE_COLUMNS.indexOf('credits');

/**
 * The rows' sums per UTC day (`time` is toISOString(), so its first ten characters), account and model,
 * as the SQL sums make them; undefined when a sum would not be exact in a double (creditsMicros).
 */
function dailySums(values: UsageRowValues): DailySums[] | undefined {
  const sums: DailySums[] = [];
  // Day → account → model: lookups of the strings as they are, none built per row (a joined key cost
  // three times as much); a batch's records mostly share a day, looked up again only when it changes.
  const days = new Map<string, Map<string, Map<string, DailySums>>>();
  let day = '';
  let accounts: Map<string, Map<string, DailySums>> | undefined;
  for (let at = 0; at < values.length; at += USAGE_COLUMNS.length) {
    const micros = creditsMicros(values[at + CREDITS] as number);
    if (micros === undefined) return undefined;
    const time = values[at + TIME] as string;
    if (accounts === undefined || !time.startsWith(day)) {
      day = time.slice(0, 10);
      accounts = days.get(day);
      if (accounts === undefined) {
        accounts = new Map();
        days.set(day, accounts);
      }
    }
    const account = values[at + ACCOUNT] as string;
    let models = accounts.get(account);
    if (models === undefined) {
      models = new Map();
      accounts.set(account, models);
    }
    const model = values[at + MODEL] as string;
    const group = models.get(model);
    if (group === undefined) {
      const added: DailySums = {
        day,
        account_id: account,
        model,
        requests: 1,
        input_tokens: values[at + INPUT] as number,
        output_tokens: values[at + OUTPUT] as number,
        credits_micros: micros,
      };
      models.set(model, added);
      sums.push(added);
    } else {
      group.requests += 1;
      group.input_tokens += values[at + INPUT] as number;
      group.output_tokens += values[at + OUTPUT] as number;
      group.credits_micros += micros;
    }
  }
  for (const g of sums) {
    if (!Number.isSafeInteger(g.input_tokens + g.output_tokens + g.credits_micros)) return undefined;
  }
  return sums;
}

/** What libsql's run() answers. */
interface RunResult {
  changes: number;
  lastInsertRowid: number | bigint;
}

/** Usage records as their ledger columns, row after row (pushUsageRow). */
export type UsageRowValues = Array<string | number | null>;

/** Checks the whole batch (a batch is stored whole or not at all), then flattens it into rows. */
export function usageRows(records: readonly UsageRecord[]): UsageRowValues {
  assertUsageBatch(records);
  const values: UsageRowValues = [];
  for (const record of records) pushUsageRow(values, record);
  return values;
}

/** Appends a record's column values, in the ledger's column order. */
export function pushUsageRow(values: UsageRowValues, r: UsageRecord): void {
  values.push(
    r.id,
    r.time,
    r.account_id,
    r.key_id,
    r.model,
    r.provider,
    r.api,
    r.outcome,
    r.status,
    r.error_id,
    r.input_tokens,
    r.cached_input_tokens,
    r.output_tokens,
    r.media_units?.unit ?? null,
    r.media_units?.quantity ?? null,
    r.cost,
    r.currency,
    r.credits,
    r.latency_ms,
    r.ttft_ms,
    r.stream ? 1 : 0,
    r.cache_write_input_tokens,
    r.safety_flags.join(','),
    r.safety_action,
  );
}

function fromRow(row: UsageRow): UsageRecord {
  return {
    id: row.id,
    time: row.time,
    account_id: row.account_id,
    key_id: row.key_id,
    model: row.model,
    provider: row.provider,
    api: row.api as UsageApi,
    outcome: row.outcome as UsageOutcome,
    status: row.status,
    error_id: row.error_id,
    input_tokens: row.input_tokens,
    cached_input_tokens: row.cached_input_tokens,
    cache_write_input_tokens: row.cache_write_input_tokens,
    output_tokens: row.output_tokens,
    media_units: row.media_unit === null ? null : { unit: row.media_unit, quantity: row.media_quantity ?? 0 },
    cost: row.cost,
    currency: row.currency,
    credits: row.credits,
    latency_ms: row.latency_ms,
    ttft_ms: row.ttft_ms,
    stream: row.stream === 1,
    safety_flags: row.safety_flags === '' ? [] : row.safety_flags.split(','),
    safety_action: row.safety_action as UsageSafetyAction | null,
  };
}
