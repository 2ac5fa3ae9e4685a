import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { UsageBatcher, type UsageBatcherOptions, type UsageDropReason } from '../../src/usage/batcher.js';
import { CreditDebitSink } from '../../src/usage/credits-sink.js';
import { SqliteCreditStore } from '../../src/usage/credits-sqlite.js';
import type { UsageRecord } from '../../src/usage/record.js';
import { ensureConsumerGroup, readUsage } from '../../src/usage/redis-consumer.js';
import { RedisStreamSink } from '../../src/usage/redis-sink.js';
import type { UsageSink } from '../../src/usage/sink.js';
import { SqliteUsageSink } from '../../src/usage/sqlite-sink.js';
import { describeRedis, startRedis } from '../helpers/redis.js';
import { makeRecord, makeRecords, tempDir } from './fixtures.js';

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

function sqliteSink(): SqliteUsageSink {
  const tmp = tempDir();
  const sink = new SqliteUsageSink(join(tmp.dir, 'gantry.db'));
  cleanups.push(async () => {
    await sink.close();
    tmp.remove();
  });
  return sink;
}

function batcher(options: UsageBatcherOptions): UsageBatcher {
  const b = new UsageBatcher({ onError: () => {}, ...options });
  cleanups.push(() => b.close());
  return b;
}

/** Counts every record each write delivered, to prove nothing arrives twice. */
class RecordingSink implements UsageSink {
  readonly name = 'recording';
  readonly writes: UsageRecord[][] = [];
  async write(records: UsageRecord[]): Promise<void> {
    this.writes.push([...records]);
  }
  ids(): string[] {
    return this.writes.flat().map((r) => r.id);
  }
  async close(): Promise<void> {}
}

/** Fails while `down`; with `landThenFail` it stores the batch first, as a write whose reply was lost. */
class FlakySink implements UsageSink {
  readonly name = 'flaky';
  down = true;
  attempts = 0;
  constructor(
    private readonly inner: UsageSink,
    private readonly landThenFail = false,
  ) {}
  async write(records: UsageRecord[]): Promise<void> {
    this.attempts += 1;
    if (!this.down) return this.inner.write(records);
    if (this.landThenFail) await this.inner.write(records);
    throw new Error('sink down');
  }
  close(): Promise<void> {
    return this.inner.close();
  }
}

function drops(): { calls: Array<[number, UsageDropReason, string]>; onDrop: UsageBatcherOptions['onDrop'] } {
  const calls: Array<[number, UsageDropReason, string]> = [];
  return { calls, onDrop: (count, reason, sink) => calls.push([count, reason, sink]) };
}

describe('UsageBatcher', () => {
  it('flushes as soon as a batch is full, off the call to add()', async () => {
    const sink = sqliteSink();
    const b = batcher({ sinks: [sink], maxBatch: 10, flushIntervalMs: 60_000 });
    for (const r of makeRecords(9)) b.add(r);
    await sleep(20);
    expect(sink.count()).toBe(0);
    for (const r of makeRecords(16)) b.add(r);
    expect(sink.count()).toBe(0);
    await vi.waitFor(() => expect(sink.count()).toBe(25), { timeout: 2000, interval: 5 });
  });

  it('flushes on its timer', async () => {
    const sink = sqliteSink();
    const b = batcher({ sinks: [sink], flushIntervalMs: 40 });
    for (const r of makeRecords(3)) b.add(r);
    expect(sink.count()).toBe(0);
    await vi.waitFor(() => expect(sink.count()).toBe(3), { timeout: 2000, interval: 10 });
    expect(b.stats().sinks[0]).toMatchObject({ name: 'sqlite', pending: 0, written: 3, failures: 0 });
  });

  it('writes batches of at most maxBatch', async () => {
    const sink = new RecordingSink();
    const b = batcher({ sinks: [sink], maxBatch: 100, flushIntervalMs: 60_000 });
    for (const r of makeRecords(250)) b.add(r);
    await b.flush();
    expect(sink.writes.map((w) => w.length)).toEqual([100, 100, 50]);
  });

  it('keeps a failing sink’s records and retries them without loss or duplicates, apart from healthy sinks', async () => {
    const stored = sqliteSink();
    const flaky = new FlakySink(stored, true);
    const healthy = new RecordingSink();
    const errors: string[] = [];
    const b = batcher({
      sinks: [flaky, healthy],
      flushIntervalMs: 20,
      maxRetryDelayMs: 40,
      onError: (_, sink) => errors.push(sink),
    });
    const records = makeRecords(30);
    for (const r of records.slice(0, 10)) b.add(r);
    await vi.waitFor(() => expect(flaky.attempts).toBeGreaterThanOrEqual(3), { timeout: 2000 });
    for (const r of records.slice(10, 20)) b.add(r);
    await sleep(50);
    expect(b.stats().sinks[0]).toMatchObject({ name: 'flaky', pending: 20 });
    expect(b.stats().sinks[0]?.consecutiveFailures).toBeGreaterThanOrEqual(3);
    flaky.down = false;
    for (const r of records.slice(20)) b.add(r);
    await vi.waitFor(() => expect(stored.count()).toBe(30), { timeout: 2000 });
    await b.flush();
    expect(stored.count()).toBe(30);
    expect(stored.list({ accountId: 'acct-a' }).map((r) => r.id)).toEqual(records.map((r) => r.id));
    expect(healthy.ids()).toEqual(records.map((r) => r.id));
    expect(errors.every((s) => s === 'flaky')).toBe(true);
    expect(b.stats().sinks[0]).toMatchObject({ pending: 0, written: 30, consecutiveFailures: 0, dropped: 0 });
  });

  it('bounds what it keeps for a sink that stays down, and says so loudly', async () => {
    const { calls, onDrop } = drops();
    const down = new FlakySink(new RecordingSink());
    const b = batcher({
      sinks: [down],
      maxBuffered: 10,
      flushIntervalMs: 60_000,
      onDrop,
      closeTimeoutMs: 50,
    });
    for (const r of makeRecords(15)) b.add(r);
    await b.flush();
    expect(calls).toEqual([[5, 'buffer_full', 'flaky']]);
    expect(b.stats().sinks[0]).toMatchObject({ pending: 10, dropped: 5 });
  });

  it('close() flushes everything, stops the timer and closes the sinks', async () => {
    const tmp = tempDir();
    cleanups.push(() => tmp.remove());
    const path = join(tmp.dir, 'gantry.db');
    const { calls, onDrop } = drops();
    const b = new UsageBatcher({ sinks: [new SqliteUsageSink(path)], flushIntervalMs: 60_000, onDrop });
    for (const r of makeRecords(1234)) b.add(r);
    await b.close();
    await b.close();
    b.add(makeRecord());
    expect(calls).toEqual([[1, 'closed', 'batcher']]);
    const reopened = new SqliteUsageSink(path);
    expect(reopened.count()).toBe(1234);
    await reopened.close();
  });

  it('close() retries a sink that recovers during shutdown', async () => {
    const stored = sqliteSink();
    const flaky = new FlakySink(stored);
    const b = batcher({ sinks: [flaky], flushIntervalMs: 20, closeTimeoutMs: 3000 });
    for (const r of makeRecords(7)) b.add(r);
    setTimeout(() => {
      flaky.down = false;
    }, 150);
    await b.close();
    expect(stored.count()).toBe(7);
  });

  it('close() still takes records from requests that finish while it flushes', async () => {
    const stored = sqliteSink();
    const flaky = new FlakySink(stored);
    const b = batcher({ sinks: [flaky], flushIntervalMs: 20, closeTimeoutMs: 3000 });
    b.add(makeRecord());
    const closing = b.close();
    await sleep(60);
    b.add(makeRecord());
    flaky.down = false;
    await closing;
    expect(stored.count()).toBe(2);
  });

  it('close() gives up on a sink that stays down after closeTimeoutMs, and reports the loss', async () => {
    const { calls, onDrop } = drops();
    const b = batcher({ sinks: [new FlakySink(new RecordingSink())], onDrop, closeTimeoutMs: 200 });
    for (const r of makeRecords(4)) b.add(r);
    const started = Date.now();
    await b.close();
    expect(Date.now() - started).toBeLessThan(1000);
    expect(calls).toEqual([[4, 'shutdown_timeout', 'flaky']]);
  });

  it('close() does not wait forever on a write that never settles', async () => {
    const { calls, onDrop } = drops();
    const hanging: UsageSink = { name: 'hang', write: () => new Promise(() => {}), close: async () => {} };
    const b = batcher({ sinks: [hanging], onDrop, closeTimeoutMs: 150 });
    b.add(makeRecord());
    await b.close();
    expect(calls).toEqual([[1, 'shutdown_timeout', 'hang']]);
  });

  it('refuses an invalid record in add() without throwing, and never hands it to a sink', async () => {
    const { calls, onDrop } = drops();
    const sink = new RecordingSink();
    const errors: unknown[] = [];
    const b = batcher({ sinks: [sink], onDrop, onError: (e) => errors.push(e) });
    b.add({ ...makeRecord(), cost: Number.NaN });
    b.add(makeRecord());
    await b.flush();
    expect(sink.ids()).toHaveLength(1);
    expect(calls).toEqual([[1, 'invalid', 'batcher']]);
    expect(String(errors[0])).toMatch(/cost/);
  });

  it('feeds a CreditDebitSink: each record debited once, even when a batch is retried', async () => {
    const tmp = tempDir();
    const credits = new SqliteCreditStore(join(tmp.dir, 'gantry.db'), { defaultBalance: 0 });
    cleanups.push(() => {
      credits.close();
      tmp.remove();
    });
    credits.grant('acct-a', 100, 'start');
    const flaky = new FlakySink(new CreditDebitSink(credits), true);
    const b = batcher({ sinks: [flaky], flushIntervalMs: 20, maxRetryDelayMs: 20 });
    for (const r of makeRecords(10, { credits: 1.5 })) b.add(r);
    b.add(makeRecord({ credits: 0 }));
    await vi.waitFor(() => expect(flaky.attempts).toBeGreaterThanOrEqual(2), { timeout: 2000 });
    flaky.down = false;
    await b.close();
    expect(credits.balance('acct-a')).toBe(85);
    expect(credits.ledger('acct-a')).toHaveLength(11);
  });
});

describeRedis('UsageBatcher with the Redis stream sink', () => {
  it('survives a Redis restart: records added while it is down arrive exactly once', async () => {
    const server = await startRedis({ aof: true });
    const redis = new Redis(server.url, { maxRetriesPerRequest: 1, retryStrategy: () => 50 });
    redis.on('error', () => {});
    cleanups.push(async () => {
      redis.disconnect();
      await server.close();
    });
    const sink = new RedisStreamSink(redis, { stream: 'gantry:{usage}' });
    const b = batcher({ sinks: [sink], flushIntervalMs: 25, maxRetryDelayMs: 100, maxBatch: 50 });
    const added: string[] = [];
    const addSome = (n: number) => {
      for (const r of makeRecords(n)) {
        added.push(r.id);
        b.add(r);
      }
    };

    for (let i = 0; i < 5; i++) {
      addSome(20);
      await sleep(10);
    }
    await vi.waitFor(() => expect(b.stats().sinks[0]?.written).toBe(100), { timeout: 3000 });

    await server.stop();
    for (let i = 0; i < 10; i++) {
      addSome(15);
      await sleep(30);
    }
    await vi.waitFor(() => expect(b.stats().sinks[0]?.failures).toBeGreaterThan(0), { timeout: 3000 });
    expect(b.stats().sinks[0]?.pending).toBeGreaterThan(0);

    await server.start();
    for (let i = 0; i < 5; i++) {
      addSome(20);
      await sleep(10);
    }
    await vi.waitFor(() => expect(b.stats().sinks[0]?.pending).toBe(0), { timeout: 8000, interval: 50 });

    // A crash this time (SIGKILL) while records keep coming; AOF with fsync keeps what was written.
    const before = b.stats().sinks[0]?.failures ?? 0;
    addSome(20);
    await server.kill();
    for (let i = 0; i < 5; i++) {
      addSome(10);
      await sleep(30);
    }
    await vi.waitFor(() => expect(b.stats().sinks[0]?.failures).toBeGreaterThan(before), { timeout: 3000 });
    await server.start();
    addSome(30);
    await b.close();

    await ensureConsumerGroup(redis, 'gantry:{usage}', 'billing');
    const read = await readUsage(redis, 'gantry:{usage}', 'billing', 'test', 10_000);
    expect(read).toHaveLength(added.length);
    expect(new Set(read.map((r) => r.id)).size).toBe(450);
    expect(read.map((r) => r.id).sort()).toEqual([...added].sort());
  });
});

describeRedis('UsageBatcher with the Redis stream sink, lost replies', () => {
  it('retries a batch that landed but reported failure, and the stream holds each record once', async () => {
    const server = await startRedis();
    const redis = new Redis(server.url, { maxRetriesPerRequest: 1 });
    cleanups.push(async () => {
      redis.disconnect();
      await server.close();
    });
    const flaky = new FlakySink(new RedisStreamSink(redis, { stream: 'lost:{usage}' }), true);
    const b = batcher({ sinks: [flaky], flushIntervalMs: 20, maxRetryDelayMs: 20, maxBatch: 7 });
    const records = makeRecords(40);
    for (const r of records.slice(0, 20)) b.add(r);
    await vi.waitFor(() => expect(flaky.attempts).toBeGreaterThanOrEqual(3), { timeout: 2000 });
    flaky.down = false;
    for (const r of records.slice(20)) b.add(r);
    await b.close();
    expect(await redis.xlen('lost:{usage}')).toBe(40);
    await ensureConsumerGroup(redis, 'lost:{usage}', 'billing');
    const read = await readUsage(redis, 'lost:{usage}', 'billing', 'test', 100);
    expect(read.map((r) => r.id)).toEqual(records.map((r) => r.id));
  });
});
