/**
 * The ledger thread's program (see ledger-thread.ts): the only in-process writer of the ledger file.
 * Each call runs to completion before the next, so usage batches, debits and grants commit in the order
 * the main thread sent them, and their answers come back in that order.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { SqliteCreditStore } from './credits-sqlite.js';
import type { LedgerNotice, LedgerRequest, LedgerResponse, LedgerWorkerData } from './ledger-protocol.js';
import { dataVersionOf, openDatabase } from './sqlite-db.js';
import { SqliteUsageSink } from './sqlite-sink.js';

const port = parentPort;
if (!port) throw new Error('ledger-worker.ts runs as a worker thread (see ledger-thread.ts)');
const { path, defaultBalance, watchMs = 250 } = workerData as LedgerWorkerData;
const { db } = openDatabase(path);
const usage = new SqliteUsageSink(db);
const credits = new SqliteCreditStore(db, { defaultBalance });

const CHANGED: LedgerNotice = { changed: true };
const dataVersion = dataVersionOf(db);
let seen = dataVersion();
port.postMessage(CHANGED);
setInterval(() => {
  const version = dataVersion();
  if (version === seen) return;
  seen = version;
  port.postMessage(CHANGED);
}, watchMs);

function run(request: LedgerRequest): unknown {
  switch (request.op) {
    case 'write':
      return usage.writeRows(request.rows);
    case 'debit':
      return credits.debitMany(request.debits);
    case 'grant':
      return credits.grant(request.accountId, request.credits, request.note);
    case 'exit':
      return process.exit(1);
  }
}

port.on('message', (request: LedgerRequest) => {
  let response: LedgerResponse;
  try {
    response = { id: request.id, ok: true, value: run(request) };
  } catch (error) {
    const err = error instanceof Error ? error : new Error(String(error));
    response = { id: request.id, ok: false, name: err.name, message: err.message };
  }
  port.postMessage(response);
});
