/**
 * Usage queries in embedded mode: the ledger's daily totals (sqlite-daily.ts), read on a connection of
 * this module's own that never writes (`query_only`). The rows are a day's accounts × models, not its
 * records, so the read is short enough for the main thread; the writes stay on the ledger thread.
 */
import Database from 'libsql';
import type { SqliteStore } from '../store/sqlite.js';
import { fromMicros } from './credits.js';
import { ledgerPathFor } from './ledger-file.js';
import type { UsageDay, UsageQuery } from './query.js';
import { type DailyRow, dailyReader } from './sqlite-daily.js';
import type { SqliteDatabase } from './sqlite-db.js';

/** How long a read waits for a lock (a checkpoint, a WAL recovery) before it fails: it runs on the event loop. */
const READ_BUSY_MS = 250;

export function createSqliteUsageQuery(store: SqliteStore): UsageQuery {
  const path = ledgerPathFor(store.path);
  // An in-memory store keeps the ledger on its own connection (services.ts).
  let db: SqliteDatabase | undefined;
  let read: ReturnType<typeof dailyReader> | undefined;
  const open = (): ReturnType<typeof dailyReader> => {
    if (read) return read;
    if (path === undefined) {
      db = store.handle;
    } else {
      // Opened on first use: by then the server has created the file and its tables (services.ts).
      db = new Database(path);
      db.exec(`PRAGMA query_only = 1; PRAGMA busy_timeout = ${READ_BUSY_MS};`);
    }
    read = dailyReader(db);
    return read;
  };
  return {
    async daily(filter) {
      return open()(filter).map(toUsageDay);
    },
    async close() {
      if (path !== undefined && db?.open) db.close();
      db = undefined;
      read = undefined;
    },
  };
}

export function toUsageDay(row: DailyRow): UsageDay {
  return {
    day: row.day,
    accountId: row.account_id,
    model: row.model,
    requests: row.requests,
    inputTokens: row.input_tokens,
    outputTokens: row.output_tokens,
    cost: fromMicros(row.credits_micros),
  };
}
