import type { Debit, DefaultBalance } from './credits.js';
import type { UsageRowValues } from './sqlite-sink.js';

/** What the ledger thread is started with. */
export interface LedgerWorkerData {
  /** The ledger's SQLite file (never ':memory:': the thread opens its own connection to it). */
  path: string;
  defaultBalance: DefaultBalance;
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
