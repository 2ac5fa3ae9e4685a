/**
 * The ledger thread (src/usage/ledger-thread.ts) on real SQLite files: answers paired with their calls,
 * errors carried back, a dying thread restarted, close(), the batcher's retry through a death, and the
 * credit cache of ThreadedCreditStore kept coherent by the thread's answers.
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import type { Worker } from 'node:worker_threads';
import { afterEach, describe, expect, it } from 'vitest';
import { UsageBatcher } from '../../src/usage/batcher.js';
import { type Debit, type DebitResult, fromMicros, toMicros } from '../../src/usage/credits.js';
import { CreditDebitSink } from '../../src/usage/credits-sink.js';
import { SqliteCreditStore } from '../../src/usage/credits-sqlite.js';
import { newUsageId } from '../../src/usage/id.js';
import { LedgerThread, ThreadedCreditStore, ThreadedUsageSink } from '../../src/usage/ledger-thread.js';
import { type UsageRecord, UsageRecordError } from '../../src/usage/record.js';
import { pushUsageRow, SqliteUsageSink, type UsageRowValues } from '../../src/usage/sqlite-sink.js';
import { until } from '../helpers/wait.js';
import { byId, makeRecord, makeRecords, tempDir } from './fixtures.js';

/** The thread's current worker (private): terminating it is a real death of the thread. */
function workerOf(thread: LedgerThread): Worker | undefined {
  return (thread as unknown as { worker: Worker | undefined }).worker;
}

/** Records as the thread takes them (ThreadedUsageSink flattens them the same way). */
function rowsOf(records: UsageRecord[]): UsageRowValues {
  const rows: UsageRowValues = [];
  for (const record of records) pushUsageRow(rows, record);
  return rows;
}

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

interface Setup {
  path: string;
  thread: LedgerThread;
  exits: Error[];
  /** Main-thread readers of the same file. */
  usage: SqliteUsageSink;
  reader: SqliteCreditStore;
  credits: ThreadedCreditStore;
}

function setup(): Setup {
  const tmp = tempDir();
  const path = join(tmp.dir, 'ledger.db');
  // The main thread opens the file (in WAL mode) before the thread starts, as services does: two
  // connections racing to create a new file can find it locked while its journal mode changes.
  const usage = new SqliteUsageSink(path);
  const reader = new SqliteCreditStore(path, { defaultBalance: 0, cache: true });
  const exits: Error[] = [];
  const thread = new LedgerThread({ path, defaultBalance: 0 }, (error) => exits.push(error));
  cleanups.push(
    tmp.remove,
    () => usage.close(),
    () => reader.close(),
    () => thread.close(),
  );
  return { path, thread, exits, usage, reader, credits: new ThreadedCreditStore(thread, reader) };
}

/** What the file holds for an account, read by a fresh connection (no cache). */
function fileBalance(path: string, accountId: string): number {
  const fresh = new SqliteCreditStore(path, { defaultBalance: 0 });
  try {
    return fresh.balance(accountId);
  } finally {
    fresh.close();
  }
}

describe('LedgerThread', () => {
  it('pairs every answer with its call when 200 writes, debits and grants are in flight at once', async () => {
    const { thread, usage, path } = setup();
    const records: UsageRecord[] = [];
    const calls: Array<Promise<void>> = [];
    let debitsSent = 0;
    for (let i = 0; i < 200; i++) {
      if (i % 3 === 0) {
        const record = makeRecord({ account_id: 'writer' });
        records.push(record);
        calls.push(
          thread.call({ op: 'write', rows: rowsOf([record]) }).then((v) => expect(v).toBeUndefined()),
        );
      } else if (i % 3 === 1) {
        // Its own account identifies the answer; the shared one shows the thread's order.
        const nth = ++debitsSent;
        const debits: Debit[] = [
          { accountId: `own-${i}`, credits: i, recordId: newUsageId() },
          { accountId: 'shared', credits: 0.25, recordId: newUsageId() },
        ];
        calls.push(
          thread.call({ op: 'debit', debits }).then((v) =>
            expect(v).toEqual([
              { applied: true, balance: -i },
              { applied: true, balance: -0.25 * nth },
            ]),
          ),
        );
      } else {
        calls.push(
          thread
            .call({ op: 'grant', accountId: `granted-${i}`, credits: i + 0.5, note: `n${i}` })
            .then((v) => {
              expect(v).toBe(i + 0.5);
            }),
        );
      }
    }
    await Promise.all(calls);
    expect(debitsSent).toBe(67);
    expect(byId(usage.list({ accountId: 'writer' }))).toEqual(byId(records));
    const fresh = new SqliteCreditStore(path, { defaultBalance: 0 });
    expect(fresh.balance('shared')).toBe(-0.25 * 67);
    expect(fresh.balance('own-199')).toBe(-199);
    expect(fresh.ledger('granted-2')).toMatchObject([{ kind: 'grant', credits: 2.5, note: 'n2' }]);
    fresh.close();
  });

  it('rejects a call that threw in the thread with the same error, and goes on serving the others', async () => {
    const { thread, usage, exits } = setup();
    const good = makeRecords(3);
    const partial = rowsOf([makeRecord()]).slice(0, -1);
    const [before, failed, grant, ranged, typed, after] = await Promise.allSettled([
      thread.call({ op: 'write', rows: rowsOf(good.slice(0, 2)) }),
      thread.call({ op: 'write', rows: [...rowsOf([makeRecord()]), ...partial] }),
      thread.call({ op: 'grant', accountId: 'a', credits: 4, note: 'x' }),
      thread.call({ op: 'grant', accountId: 'a', credits: Number.POSITIVE_INFINITY, note: 'x' }),
      thread.call({ op: 'debit', debits: undefined as unknown as Debit[] }),
      thread.call({ op: 'write', rows: rowsOf(good.slice(2)) }),
    ]);
    expect(before.status).toBe('fulfilled');
    expect(grant).toEqual({ status: 'fulfilled', value: 4 });
    expect(after.status).toBe('fulfilled');

    const partialError = (failed as PromiseRejectedResult).reason as Error;
    expect(partialError).toBeInstanceOf(RangeError);
    expect(partialError.message).toBe('usage rows: a partial row');
    const range = (ranged as PromiseRejectedResult).reason as Error;
    expect(range).toBeInstanceOf(RangeError);
    expect(range.message).toMatch(/finite/);
    expect((typed as PromiseRejectedResult).reason).toBeInstanceOf(TypeError);

    // The failed batch stored nothing; the thread is the same one and still answers.
    expect(byId(usage.list({ accountId: 'acct-a' }))).toEqual(byId(good));
    expect(await thread.call({ op: 'grant', accountId: 'a', credits: 1, note: 'y' })).toBe(5);
    expect(exits).toEqual([]);
  });

  it('the threaded sink refuses an invalid record on the main thread, before anything is sent', async () => {
    const { thread, usage } = setup();
    const sink = new ThreadedUsageSink(thread);
    const bad = { ...makeRecord(), input_tokens: -1 };
    const error = await sink.write([makeRecord(), bad]).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UsageRecordError);
    expect((error as UsageRecordError).recordId).toBe(bad.id);
    expect(usage.count()).toBe(0);
  });

  it('refuses a call it cannot send (not cloneable) without leaving it waiting, and goes on', async () => {
    const { thread, usage } = setup();
    const unsendable = [() => 1] as unknown as UsageRowValues;
    await expect(thread.call({ op: 'write', rows: unsendable })).rejects.toThrow(/could not be cloned/);
    expect((thread as unknown as { waiting: Map<number, unknown> }).waiting.size).toBe(0);
    const record = makeRecord();
    await thread.call({ op: 'write', rows: rowsOf([record]) });
    expect(usage.list({ accountId: 'acct-a' })).toEqual([record]);
  });

  it('a thread that dies fails the calls in flight, reports it, and the next call starts a new thread', async () => {
    const { thread, usage, exits } = setup();
    await thread.call({ op: 'write', rows: rowsOf([makeRecord()]) });
    const first = workerOf(thread) as Worker;
    const firstId = first.threadId;

    const bulk = makeRecords(500, { account_id: 'bulk' });
    // Calls sent behind the thread's end are in flight when it dies.
    const death = thread.call({ op: 'exit' });
    const inFlight = [
      thread.call({ op: 'write', rows: rowsOf(bulk) }),
      thread.call({ op: 'grant', accountId: 'a', credits: 1, note: 'lost' }),
    ];
    await expect(death).rejects.toThrow(/ledger thread exited/);
    for (const call of inFlight) await expect(call).rejects.toThrow(/ledger thread exited/);
    expect(exits).toHaveLength(1);
    expect(exits[0]?.message).toMatch(/ledger thread exited/);
    expect(workerOf(thread)).toBeUndefined();

    // The retry (same ids) goes to a new thread and stores each record once.
    await thread.call({ op: 'write', rows: rowsOf(bulk) });
    const second = workerOf(thread) as Worker;
    expect(second).not.toBe(first);
    expect(second.threadId).not.toBe(firstId);
    expect(usage.list({ accountId: 'bulk', limit: 100_000 })).toHaveLength(bulk.length);
    expect(usage.count()).toBe(bulk.length + 1);
    expect(exits).toHaveLength(1);
  });

  it('keeps the process alive while a call is in flight, and not once the thread is idle', async () => {
    const tmp = tempDir();
    const path = join(tmp.dir, 'ledger.db');
    new SqliteUsageSink(path).close();
    const record = makeRecord();
    // A script that writes through a thread it never closes: it must exit by itself, after the write.
    const script = [
      `import { LedgerThread, ThreadedUsageSink } from ${JSON.stringify(new URL('../../src/usage/ledger-thread.ts', import.meta.url).href)};`,
      `const thread = new LedgerThread({ path: ${JSON.stringify(path)}, defaultBalance: 0 });`,
      `void new ThreadedUsageSink(thread).write([${JSON.stringify(record)}]);`,
    ].join('\n');
    const started = Date.now();
    const child = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      encoding: 'utf8',
      timeout: 20_000,
    });
    expect(child.error).toBeUndefined();
    expect(child.status).toBe(0);
    expect(Date.now() - started).toBeLessThan(20_000);
    const usage = new SqliteUsageSink(path);
    expect(usage.list({ accountId: record.account_id })).toEqual([record]);
    usage.close();
  });

  it('close() lets the calls in flight finish, then stops the thread; later calls are refused', async () => {
    const { thread, usage, exits, path } = setup();
    const bulk = makeRecords(5_000, { account_id: 'bulk' });
    const calls = [
      thread.call({ op: 'write', rows: rowsOf(bulk) }),
      thread.call({ op: 'grant', accountId: 'a', credits: 3, note: 'last' }),
    ];
    const worker = workerOf(thread) as Worker;
    await thread.close();
    expect(await Promise.allSettled(calls)).toEqual([
      { status: 'fulfilled', value: undefined },
      { status: 'fulfilled', value: 3 },
    ]);
    expect(worker.threadId).toBe(-1);
    expect(workerOf(thread)).toBeUndefined();
    expect(exits).toEqual([]);
    await expect(thread.call({ op: 'write', rows: rowsOf([makeRecord()]) })).rejects.toThrow(/closed/);
    await thread.close();
    expect(usage.count()).toBe(bulk.length);
    expect(fileBalance(path, 'a')).toBe(3);
  });

  it('the batcher ends with every record stored and debited exactly once when the thread dies mid-batch', async () => {
    const { thread, usage, path, credits } = setup();
    const errors: unknown[] = [];
    const drops: number[] = [];
    const batcher = new UsageBatcher({
      sinks: [new ThreadedUsageSink(thread), new CreditDebitSink(credits)],
      flushIntervalMs: 10,
      maxBatch: 500,
      onError: (error) => errors.push(error),
      onDrop: (count) => drops.push(count),
    });
    await thread.call({ op: 'grant', accountId: 'acct-a', credits: 0, note: 'open' });
    const records = makeRecords(2_000);
    for (const record of records) batcher.add(record);
    const worker = workerOf(thread) as Worker;
    // The thread's end goes first, so flush()'s first batch of each sink is in flight when it dies.
    const death = thread.call({ op: 'exit' }).catch((error: unknown) => error);
    const flushing = batcher.flush();
    expect(String(await death)).toMatch(/ledger thread exited/);
    await flushing;
    await batcher.close();

    expect(errors.length).toBeGreaterThan(0);
    expect(String(errors[0])).toMatch(/ledger thread exited/);
    expect(drops).toEqual([]);
    expect(workerOf(thread)).not.toBe(worker);
    const stored = usage.list({ accountId: 'acct-a', limit: 10_000 });
    expect(stored).toHaveLength(records.length);
    expect(byId(stored)).toEqual(byId(records));
    const spent = records.reduce((sum, r) => sum + toMicros(r.credits), 0);
    expect(fileBalance(path, 'acct-a')).toBe(fromMicros(-spent));
    const fresh = new SqliteCreditStore(path, { defaultBalance: 0 });
    const debited = fresh.ledger('acct-a', 10_000).filter((e) => e.kind === 'debit');
    fresh.close();
    expect(debited).toHaveLength(records.length);
    expect(new Set(debited.map((e) => e.recordId))).toEqual(new Set(records.map((r) => r.id)));
  });
});

describe('ThreadedCreditStore: the balance cache follows the thread', () => {
  it('a debit shows in the synchronous balance() as soon as it is awaited, from the cache', async () => {
    const { credits, path } = setup();
    expect(credits.balance('a')).toBe(0);
    expect(await credits.grant('a', 10, 'start')).toBe(10);
    expect(credits.balance('a')).toBe(10);
    const result = await credits.debit('a', 3, newUsageId());
    expect(result).toEqual({ applied: true, balance: 7 });
    const balance = credits.balance('a');
    expect(typeof balance).toBe('number');
    expect(balance).toBe(7);

    // Served from memory: another writer's grant stays unseen until forget().
    const other = new SqliteCreditStore(path, { defaultBalance: 0 });
    other.grant('a', 100, 'cli');
    other.close();
    expect(credits.balance('a')).toBe(7);
    credits.forget('a');
    expect(credits.balance('a')).toBe(107);
  });

  it('an answer computed before a refresh does not hide what the refresh read (a grant from the CLI)', async () => {
    const { credits, reader, path } = setup();
    await credits.grant('a', 10, 'start');
    const pending = credits.debit('a', 1, newUsageId());
    // Meanwhile the CLI grants in another process, and the periodic refresh reads the file again.
    const other = new SqliteCreditStore(path, { defaultBalance: 0 });
    other.grant('a', 100, 'cli');
    other.close();
    reader.forget();
    const read = credits.balance('a');
    expect(read).toBeGreaterThanOrEqual(109);
    // The thread's answer (computed before or after the grant) must not replace the fresher read.
    await pending;
    expect(credits.balance('a')).toBe(read);
    reader.forget();
    expect(credits.balance('a')).toBe(109);
  });

  it('a grant followed by many debits in flight ends on the right balance', async () => {
    const { credits, path } = setup();
    expect(credits.balance('a')).toBe(0);
    const grant = credits.grant('a', 100, 'start');
    const debits = Array.from({ length: 50 }, () => credits.debit('a', 0.5, newUsageId()));
    const batch = credits.debitMany(
      Array.from({ length: 10 }, () => ({ accountId: 'a', credits: 1, recordId: newUsageId() })),
    );
    // Nothing answered yet: the cache still holds what was read before.
    expect(credits.balance('a')).toBe(0);
    expect(await grant).toBe(100);
    const results: DebitResult[] = await Promise.all(debits);
    expect(results.map((r) => r.balance)).toEqual(Array.from({ length: 50 }, (_, i) => 100 - 0.5 * (i + 1)));
    expect((await batch).at(-1)).toEqual({ applied: true, balance: 65 });
    expect(credits.balance('a')).toBe(65);
    expect(fileBalance(path, 'a')).toBe(65);
  });

  it('after a call failed in the thread, the next balance() reads the file again', async () => {
    const { credits, path } = setup();
    expect(credits.balance('a')).toBe(0);
    const other = new SqliteCreditStore(path, { defaultBalance: 0 });
    other.grant('a', 50, 'cli');
    expect(credits.balance('a')).toBe(0);
    // Passes the main-thread checks, and fails converting to micro-credits in the thread.
    await expect(credits.debit('a', 1e300, newUsageId())).rejects.toThrow(/out of range/);
    expect(credits.balance('a')).toBe(50);

    other.grant('a', 5, 'cli');
    expect(credits.balance('a')).toBe(50);
    await expect(
      credits.debitMany([{ accountId: 'a', credits: 1e300, recordId: newUsageId() }]),
    ).rejects.toThrow(RangeError);
    expect(credits.balance('a')).toBe(55);
    other.close();
  });

  it('after the thread died under a debit or a grant, the next balance() reads the file again', async () => {
    const { credits, path, thread } = setup();
    await credits.grant('a', 10, 'start');
    await credits.grant('b', 20, 'start');
    const other = new SqliteCreditStore(path, { defaultBalance: 0 });
    other.grant('a', 1, 'cli');
    other.grant('b', 2, 'cli');
    other.close();
    expect([credits.balance('a'), credits.balance('b')]).toEqual([10, 20]);

    // Queued behind the thread's end, so it dies before running them.
    const death = thread.call({ op: 'exit' });
    const grant = credits.grant('b', 5, 'lost');
    await expect(death).rejects.toThrow(/exited/);
    await expect(grant).rejects.toThrow(/exited/);
    expect(credits.balance('b')).toBe(22);
    expect(credits.balance('a')).toBe(10);

    const death2 = thread.call({ op: 'exit' });
    const debit = credits.debit('a', 1, newUsageId());
    await expect(death2).rejects.toThrow(/exited/);
    await expect(debit).rejects.toThrow(/exited/);
    expect(credits.balance('a')).toBe(11);
  });
});

describe('LedgerThread: writes by another process', () => {
  it("announces another connection's commits (and its own start), never its own writes", async () => {
    const tmp = tempDir();
    const path = join(tmp.dir, 'ledger.db');
    const cli = new SqliteCreditStore(path, { defaultBalance: 0 });
    let notices = 0;
    const thread = new LedgerThread({ path, defaultBalance: 0, watchMs: 50 }, undefined, () => notices++);
    cleanups.push(
      tmp.remove,
      () => cli.close(),
      () => thread.close(),
    );
    await until('the notice sent at start', () => notices === 1, 5_000, 10);

    // The thread's own commits over many of its 50 ms looks: none is announced.
    const reader = new SqliteCreditStore(path, { defaultBalance: 0 });
    cleanups.push(() => reader.close());
    const credits = new ThreadedCreditStore(thread, reader);
    await credits.grant('acct-a', 1000, 'start');
    const until500 = Date.now() + 500;
    while (Date.now() < until500) {
      await credits.debit('acct-a', 0.01, newUsageId());
      await thread.call({ op: 'write', rows: rowsOf([makeRecord()]) });
    }
    // Another process's grant is.
    cli.grant('acct-a', 5, 'cli');
    await until('the notice of the CLI grant', () => notices >= 2, 5_000, 10);
    expect(notices).toBe(2);
  });
});
