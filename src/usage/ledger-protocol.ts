import type { Debit, DefaultBalance } from './credits.js';
import type { UsageRowValues } from './sqlite-sink.js';

/** What the ledger thread is started with. */
export interface LedgerWorkerData {
  /** The ledger's SQLite file (never ':memory:': the thread opens its own connection to it). */
  path: string;
  defaultBalance: DefaultBalance;
  /** How often the thread looks for another process's writes to the file (see LedgerNotice); 250 ms. */
  watchMs?: number;
}

/** A call from the main thread; `id` pairs it with its answer. */
export type LedgerRequest =
  | { id: number; op: 'write'; rows: UsageRowValues }
  | { id: number; op: 'debit'; debits: Debit[] }
  | { id: number; op: 'grant'; accountId: string; credits: number; note: string }
  /**
   * Ends the thread at once, between two calls, as a crash would: what the restart path is tested with.
   * (worker.terminate() during a libsql call can bring the whole process down; this cannot.)
   */
  | { id: number; op: 'exit' };

/** The answer to one call: its value, or the error it threw (name and message survive the thread hop). */
export type LedgerResponse =
  | { id: number; ok: true; value: unknown }
  | { id: number; ok: false; name: string; message: string };

/**
 * Sent by the thread, unasked, when another process (the CLI granting credits, another instance on the
 * same data dir) committed to the file: the thread's own connection sees only those in its
 * `PRAGMA data_version`, never its own writes, so the main thread's cached balances are dropped for
 * nothing else. Also sent when the thread starts, as it cannot know what happened before.
 */
export interface LedgerNotice {
  changed: true;
}
