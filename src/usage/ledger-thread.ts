import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { CreditMovement, CreditStore, Debit, DebitResult } from './credits.js';
import { checkDebit, checkGrant } from './credits.js';
import type { SqliteCreditStore } from './credits-sqlite.js';
import type { LedgerNotice, LedgerRequest, LedgerResponse, LedgerWorkerData } from './ledger-protocol.js';
import type { UsageRecord } from './record.js';
import type { UsageSink } from './sink.js';
import { usageRows } from './sqlite-sink.js';

/** Distributive Omit, so each variant of the request union keeps its own fields. */
type LedgerCall = LedgerRequest extends infer R ? (R extends LedgerRequest ? Omit<R, 'id'> : never) : never;

interface Waiting {
  resolve: (value: unknown) => void;
  reject: (error: Error) => void;
}

/** Starts the compiled worker next to this file, or (tests run the sources) the TypeScript one via tsx. */
function startWorker(data: LedgerWorkerData): Worker {
  const js = new URL('./ledger-worker.js', import.meta.url);
  if (existsSync(fileURLToPath(js))) return new Worker(js, { workerData: data });
  // A worker ignores --import in execArgv on Node 20, so it registers tsx's loader itself, through tsx's
  // ESM API (the .mjs twin of what require resolves), found from here rather than the working directory.
  const entry = new URL('./ledger-worker.ts', import.meta.url).href;
  const api = createRequire(import.meta.url)
    .resolve('tsx/esm/api')
    .replace(/\.cjs$/, '.mjs');
  const boot = `import(${JSON.stringify(pathToFileURL(api).href)}).then((tsx) => { tsx.register(); return import(${JSON.stringify(entry)}); })`;
  return new Worker(boot, { eval: true, workerData: data });
}

/** The error a call threw in the thread, as the main thread's class (a RangeError stays a RangeError). */
function rebuildError(response: Extract<LedgerResponse, { ok: false }>): Error {
  let error: Error;
  if (response.name === 'RangeError') error = new RangeError();
  else if (response.name === 'TypeError') error = new TypeError();
  else {
    error = new Error();
    error.name = response.name;
  }
  error.message = response.message;
  return error;
}

/**
 * The embedded ledger's writer: a worker thread that owns all in-process writes to the ledger file
 * (usage records, credit debits and grants). A SQLite insert costs ~10 µs a record in libsql, most of
 * it binding values; on the main thread that is CPU taken from every request and a stall of a
 * millisecond or more per batch. The thread does the same work beside the event loop.
 *
 * A thread that dies (a native crash, an out-of-memory) fails the calls in flight and is started again
 * on the next call: the usage batcher retries with the same ids and every write is idempotent by id.
 */
export class LedgerThread {
  private worker: Worker | undefined;
  private nextId = 1;
  private readonly waiting = new Map<number, Waiting>();
  private readonly inFlight = new Set<Promise<unknown>>();
  private closed = false;
  private exited: Promise<void> = Promise.resolve();

  /**
   * `onExit`: the thread stopped (it restarts on the next call). `onForeignWrite`: another process
   * committed to the file (see LedgerNotice).
   */
  constructor(
    private readonly data: LedgerWorkerData,
    private readonly onExit: (error: Error) => void = () => undefined,
    private readonly onForeignWrite: () => void = () => undefined,
  ) {
    this.worker = this.start();
  }

  call(request: LedgerCall): Promise<unknown> {
    if (this.closed) return Promise.reject(new Error('the ledger thread is closed'));
    this.worker ??= this.start();
    const id = this.nextId++;
    const worker = this.worker;
    const answer = new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      try {
        worker.postMessage({ ...request, id });
      } catch (error) {
        // Not cloneable: nothing was sent, so no answer will come.
        this.waiting.delete(id);
        reject(error);
      }
    });
    // An idle thread does not keep the process alive; one with calls in flight does, so no write is
    // lost to an exit that did not wait for it.
    if (this.inFlight.size === 0) worker.ref();
    this.inFlight.add(answer);
    const done = () => {
      this.inFlight.delete(answer);
      if (this.inFlight.size === 0) this.worker?.unref();
    };
    answer.then(done, done);
    return answer;
  }

  /** Lets the calls already sent finish, then stops the thread. */
  async close(): Promise<void> {
    if (this.closed) return this.exited;
    this.closed = true;
    const worker = this.worker;
    if (!worker) return this.exited;
    await Promise.allSettled(this.inFlight);
    await worker.terminate();
    return this.exited;
  }

  private start(): Worker {
    const worker = startWorker(this.data);
    worker.unref();
    worker.on('message', (response: LedgerResponse | LedgerNotice) => {
      if ('changed' in response) return this.onForeignWrite();
      const waiting = this.waiting.get(response.id);
      if (!waiting) return;
      this.waiting.delete(response.id);
      if (response.ok) waiting.resolve(response.value);
      else waiting.reject(rebuildError(response));
    });
    let failure: Error | undefined;
    worker.on('error', (error) => {
      failure = error;
    });
    this.exited = new Promise((resolve) => {
      worker.once('exit', (code) => {
        if (this.worker === worker) this.worker = undefined;
        const error = failure ?? new Error(`the ledger thread exited (code ${code})`);
        for (const waiting of this.waiting.values()) waiting.reject(error);
        this.waiting.clear();
        if (!this.closed) this.onExit(error);
        resolve();
      });
    });
    return worker;
  }
}

/** The usage ledger as a batcher sink, written by the ledger thread. */
export class ThreadedUsageSink implements UsageSink {
  readonly name = 'sqlite';

  constructor(private readonly thread: LedgerThread) {}

  /** Checked here, whole, as every sink does; sent as rows of plain values (see writeRows). */
  async write(records: UsageRecord[]): Promise<void> {
    if (records.length === 0) return;
    await this.thread.call({ op: 'write', rows: usageRows(records) });
  }

  async close(): Promise<void> {}
}

/**
 * Credits in the ledger file with the writes on the ledger thread: balances are read here, from the
 * `reader` store's cache (one Map lookup on the request path), and every debit or grant the thread
 * answers sets that cache. The thread answers in the order it was called, so the cache ends on the
 * latest balance this process wrote; an answer computed before a forget() (the periodic refresh that
 * picks up the CLI's grants) is not cached, since a read since then may have seen a newer one.
 */
export class ThreadedCreditStore implements CreditStore {
  constructor(
    private readonly thread: LedgerThread,
    private readonly reader: SqliteCreditStore,
  ) {}

  balance(accountId: string): number {
    return this.reader.balance(accountId);
  }

  async debit(accountId: string, credits: number, recordId: string): Promise<DebitResult> {
    const [result] = await this.debitMany([{ accountId, credits, recordId }]);
    return result as DebitResult;
  }

  async debitMany(debits: readonly Debit[]): Promise<DebitResult[]> {
    if (debits.length === 0) return [];
    for (const d of debits) checkDebit(d);
    const generation = this.reader.generation;
    try {
      const results = (await this.thread.call({ op: 'debit', debits: [...debits] })) as DebitResult[];
      for (let i = 0; i < results.length; i++) {
        this.reader.remember((debits[i] as Debit).accountId, (results[i] as DebitResult).balance, generation);
      }
      return results;
    } catch (error) {
      // Whether the thread committed is unknown: read the balances afresh.
      this.reader.forget();
      throw error;
    }
  }

  async grant(accountId: string, credits: number, note: string): Promise<number> {
    checkGrant(accountId, credits);
    const generation = this.reader.generation;
    try {
      const balance = (await this.thread.call({ op: 'grant', accountId, credits, note })) as number;
      this.reader.remember(accountId, balance, generation);
      return balance;
    } catch (error) {
      this.reader.forget(accountId);
      throw error;
    }
  }

  /** Drops cached balances after another process (the CLI) changed the file. */
  forget(accountId?: string): void {
    this.reader.forget(accountId);
  }

  /** Read through the main thread's connection: the thread's committed writes are visible to it. */
  movements(accountId: string, limit: number): CreditMovement[] {
    return this.reader.movements(accountId, limit);
  }

  /** The reader is the caller's, and so is the thread. */
  close(): void {}
}
