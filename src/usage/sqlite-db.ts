import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'libsql';

export type SqliteDatabase = InstanceType<typeof Database>;

export interface OpenedDatabase {
  db: SqliteDatabase;
  /** true when we opened it and so must close it. */
  owned: boolean;
}

/** A path opens the file (WAL, as the store does); a Database handle is shared and left open by us. */
export function openDatabase(source: string | SqliteDatabase): OpenedDatabase {
  if (typeof source !== 'string') return { db: source, owned: false };
  if (source !== ':memory:') mkdirSync(dirname(source), { recursive: true });
  const db = new Database(source);
  // The busy timeout first: switching a new file to WAL takes a lock another connection may hold.
  db.exec('PRAGMA busy_timeout = 5000; PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;');
  return { db, owned: true };
}

/**
 * Copies everything in the file's write-ahead log into the file and empties the log
 * (`wal_checkpoint(TRUNCATE)`), so the database file alone holds every committed row: a copy of it made
 * after a shutdown is complete. Best effort: a reader still open elsewhere (the CLI) makes it partial,
 * and the next checkpoint finishes the work.
 */
export function checkpoint(db: SqliteDatabase): void {
  try {
    db.exec('PRAGMA wal_checkpoint(TRUNCATE);');
  } catch {
    // An in-memory or read-only database has no log to fold back.
  }
}

/**
 * A checkpoint that never waits: `wal_checkpoint(TRUNCATE)` with the busy timeout off, so a reader
 * holding the log (a backup, `gantry keys list`) makes it return at once instead of holding the event
 * loop. Returns false when it could not empty the log (a reader or writer was in the way): the caller
 * tries again later.
 */
export function checkpointNow(db: SqliteDatabase): boolean {
  const { timeout } = db.prepare('PRAGMA busy_timeout').get() as { timeout: number };
  db.exec('PRAGMA busy_timeout = 0');
  try {
    const row = db.prepare('PRAGMA wal_checkpoint(TRUNCATE)').get() as { busy: number } | undefined;
    return (row?.busy ?? 0) === 0;
  } catch {
    // SQLITE_BUSY from another checkpointer, or a database without a log.
    return false;
  } finally {
    db.exec(`PRAGMA busy_timeout = ${timeout}`);
  }
}

/**
 * Reads the connection's `PRAGMA data_version`, which moves when another connection (another process, or
 * the ledger thread) commits to the file: a change counter that costs one small statement to poll.
 */
export function dataVersionOf(db: SqliteDatabase): () => number {
  const statement = db.prepare('PRAGMA data_version');
  return () => (statement.get() as { data_version: number }).data_version;
}
