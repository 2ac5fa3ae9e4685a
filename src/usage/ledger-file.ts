import { dirname, join } from 'node:path';
import { CREDIT_SCHEMA } from './credits-sqlite.js';
import { dailyTotalsWriter } from './sqlite-daily.js';
import { openDatabase, type SqliteDatabase } from './sqlite-db.js';
import { ensureUsageSchema, USAGE_COLUMNS } from './sqlite-sink.js';

/**
 * The tables of the ledger file, each with the columns carried over from an older store file (those of
 * them the older table has: columns added since take their defaults). `only`
 * keeps a re-run from copying a row twice where no unique key does: a grant has no record id.
 */
const MOVED_TABLES: ReadonlyArray<{
  table: string;
  columns: readonly string[];
  order: string;
  only?: string;
}> = [
  {
    table: 'usage_records',
    columns: USAGE_COLUMNS,
    order: 'time, id',
  },
  { table: 'credit_balances', columns: ['account_id', 'balance_micros', 'updated_at'], order: 'account_id' },
  // Without its integer id: the ledger file numbers the movements itself, in the same order.
  {
    table: 'credit_ledger',
    columns: ['record_id', 'account_id', 'kind', 'amount_micros', 'note', 'time'],
    order: 'id',
    only: `record_id IS NOT NULL OR NOT EXISTS (SELECT 1 FROM ledger.credit_ledger AS l
      WHERE l.account_id = m.account_id AND l.time = m.time AND l.record_id IS NULL AND l.kind = m.kind
        AND l.amount_micros = m.amount_micros AND l.note IS m.note)`,
  },
];

/**
 * The ledger file beside the store file (`data/ledger.db` next to `data/gantry.db`), or undefined for an
 * in-memory store, whose ledger stays in the store's own connection.
 */
export function ledgerPathFor(storePath: string): string | undefined {
  return storePath === ':memory:' ? undefined : join(dirname(storePath), 'ledger.db');
}

/**
 * Opens the ledger file with its tables. With `store` (the server, at start), first moves in (once; see
 * moveLedgerTables) any usage records and credits that an older Gantry kept in the store file, so an
 * upgrade loses no balance and no record. The CLI passes none: it must not pull the tables from under
 * an older server still running on the same data dir (see hasOldLedgerTables), nor change its daily totals.
 */
export function openLedgerFile(path: string, store?: SqliteDatabase): SqliteDatabase {
  const { db } = openDatabase(path);
  // The daily totals change shape only where usage is written (the server): an older server still
  // running beside the CLI keeps its totals with the trigger the migration drops (sqlite-daily.ts).
  ensureUsageSchema(db, { dailyTotals: store !== undefined });
  db.exec(CREDIT_SCHEMA);
  if (store) moveLedgerTables(store, path);
  return db;
}

/** Whether the store file still holds ledger tables of an older Gantry (not moved yet). */
export function hasOldLedgerTables(store: SqliteDatabase): boolean {
  return MOVED_TABLES.some(({ table }) => tableExists(store, table));
}

/**
 * Moves the ledger tables found in `store` into the ledger file at `path`; returns the rows copied.
 *
 * Two transactions, because SQLite does not commit two WAL files atomically (a crash inside a COMMIT can
 * keep one file's part and lose the other's, and the store file's part, the DROP, is committed first).
 * The copy commits, synced, in the ledger file first; only then are the old tables dropped. A crash in
 * between leaves the rows in both files, and the next open copies again without a duplicate (every row
 * has a unique key or the `only` check) and drops them.
 */
export function moveLedgerTables(store: SqliteDatabase, path: string): number {
  const present = MOVED_TABLES.filter(({ table }) => tableExists(store, table));
  if (present.length === 0) return 0;
  store.prepare('ATTACH DATABASE ? AS ledger').run(path);
  try {
    store.exec('PRAGMA ledger.synchronous = FULL');
    // The records copied count in the ledger's daily totals, those of a copy run again (already there)
    // do not: the same sum of the rows actually inserted as a usage batch's (sqlite-daily.ts).
    const daily = dailyTotalsWriter(store, 'ledger');
    const copy = store.transaction(() => {
      let copied = 0;
      for (const { table, columns: wanted, order, only } of present) {
        const columns = columnsOf(store, table, wanted);
        const { changes, lastInsertRowid } = store
          .prepare(
            `INSERT OR IGNORE INTO ledger.${table} (${columns}) SELECT ${columns} FROM main.${table} AS m` +
              `${only ? ` WHERE ${only}` : ''} ORDER BY ${order}`,
          )
          .run();
        if (table === 'usage_records' && changes > 0) daily.addSince(Number(lastInsertRowid) - changes);
        copied += changes;
      }
      return copied;
    });
    const copied = copy.immediate();
    const drop = store.transaction(() => {
      for (const { table } of present) store.exec(`DROP TABLE main.${table}`);
    });
    drop.immediate();
    return copied;
  } finally {
    store.exec('DETACH DATABASE ledger');
  }
}

/** The `wanted` columns that the store file's `table` has, as a column list. */
function columnsOf(db: SqliteDatabase, table: string, wanted: readonly string[]): string {
  const rows = db.prepare(`PRAGMA main.table_info(${table})`).all() as Array<{ name: string }>;
  const has = new Set(rows.map((r) => r.name));
  return wanted.filter((c) => has.has(c)).join(', ');
}

function tableExists(db: SqliteDatabase, table: string): boolean {
  return (
    db.prepare(`SELECT 1 FROM main.sqlite_master WHERE type = 'table' AND name = ?`).get(table) !== undefined
  );
}
