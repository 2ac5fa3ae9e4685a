import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { JsonlUsageSink } from '../../src/usage/jsonl-sink.js';
import { LedgerThread, ThreadedUsageSink } from '../../src/usage/ledger-thread.js';
import { type UsageRecord, UsageRecordError } from '../../src/usage/record.js';
import { ensureConsumerGroup, readUsage, readUsageEntries } from '../../src/usage/redis-consumer.js';
import { RedisStreamSink } from '../../src/usage/redis-sink.js';
import type { UsageSink } from '../../src/usage/sink.js';
import { SqliteUsageSink } from '../../src/usage/sqlite-sink.js';
import { describeRedis, startRedis, type TestRedis } from '../helpers/redis.js';
import { byId, makeRecord, makeRecords, tempDir } from './fixtures.js';

interface Harness {
  sink: UsageSink;
  /** Everything the sink stored, in any order. */
  read(): Promise<UsageRecord[]>;
  done(): Promise<void>;
}

/** The same expectations for every UsageSink. */
function sinkContract(create: () => Promise<Harness>): void {
  let h: Harness;
  afterEach(async () => {
    await h?.done();
  });

  it('stores a batch and gives back the same records', async () => {
    h = await create();
    const records = [...makeRecords(6), makeRecord({ account_id: 'acct-b', media_units: null })];
    await h.sink.write(records);
    expect(byId(await h.read())).toEqual(byId(records));
  });

  it('keeps every value exactly: nulls, fractions, booleans, media units', async () => {
    h = await create();
    const record = makeRecord({
      cost: 0.1 + 0.2,
      credits: 1 / 3,
      media_units: { unit: 'second', quantity: 0.04 },
      error_id: null,
      ttft_ms: null,
      stream: false,
    });
    await h.sink.write([record]);
    expect(await h.read()).toEqual([record]);
  });

  it('keeps the safety fields: the flags in their order, the action, and none when the policy was off', async () => {
    h = await create();
    const blocked = makeRecord({ safety_flags: ['hate', 'jailbreak', 'pii'], safety_action: 'blocked' });
    const redacted = makeRecord({ safety_flags: ['pii'], safety_action: 'redacted' });
    const annotated = makeRecord({ safety_flags: [], safety_action: 'annotated' });
    const off = makeRecord({ safety_flags: [], safety_action: null });
    await h.sink.write([blocked, redacted, annotated, off]);
    expect(byId(await h.read())).toEqual(byId([blocked, redacted, annotated, off]));
  });

  it('refuses a record whose safety fields could carry text', async () => {
    h = await create();
    const bad = makeRecord({ safety_flags: ['violence', 'a user said: hello, world'] });
    await expect(h.sink.write([makeRecord(), bad])).rejects.toBeInstanceOf(UsageRecordError);
    const action = makeRecord({ safety_action: 'maybe' as never });
    await expect(h.sink.write([action])).rejects.toBeInstanceOf(UsageRecordError);
    expect(await h.read()).toEqual([]);
  });

  it('is idempotent by id: a rewritten batch, a partly new batch and in-batch repeats store each once', async () => {
    h = await create();
    const first = makeRecords(5);
    await h.sink.write(first);
    await h.sink.write(first);
    const more = makeRecords(3);
    await h.sink.write([...first.slice(2), ...more, more[0] as UsageRecord]);
    const stored = await h.read();
    expect(stored).toHaveLength(8);
    expect(byId(stored)).toEqual(byId([...first, ...more]));
  });

  it('writes a batch whole or not at all: one bad record rejects the batch and stores nothing', async () => {
    h = await create();
    const bad = { ...makeRecord(), input_tokens: -1 };
    const batch = [...makeRecords(3), bad, ...makeRecords(3)];
    await expect(h.sink.write(batch)).rejects.toBeInstanceOf(UsageRecordError);
    await expect(h.sink.write([makeRecord({ time: 'yesterday' })])).rejects.toThrow(/time/);
    expect(await h.read()).toEqual([]);
    const good = makeRecords(2);
    await h.sink.write(good);
    expect(byId(await h.read())).toEqual(byId(good));
  });

  it('stores large batches whole, repeats inside and across them once', async () => {
    h = await create();
    const first = makeRecords(130);
    await h.sink.write(first);
    const more = makeRecords(70);
    // Repeats land inside one multi-row statement of the SQLite sink and across two of them.
    await h.sink.write([
      ...more.slice(0, 60),
      ...first.slice(0, 45),
      more[0] as UsageRecord,
      ...more.slice(60),
    ]);
    const stored = await h.read();
    expect(stored).toHaveLength(200);
    expect(byId(stored)).toEqual(byId([...first, ...more]));
  });

  it('accepts an empty batch', async () => {
    h = await create();
    await h.sink.write([]);
    expect(await h.read()).toEqual([]);
  });
}

describe('SqliteUsageSink', () => {
  sinkContract(async () => {
    const tmp = tempDir();
    const sink = new SqliteUsageSink(join(tmp.dir, 'gantry.db'));
    return {
      sink,
      read: async () => ['acct-a', 'acct-b'].flatMap((accountId) => sink.list({ accountId })),
      done: async () => {
        await sink.close();
        tmp.remove();
      },
    };
  });

  it('lists an account by time range through its index, and survives a reopen', async () => {
    const tmp = tempDir();
    const path = join(tmp.dir, 'gantry.db');
    const sink = new SqliteUsageSink(path);
    const early = makeRecord({ time: '2025-01-01T00:00:00.000Z' });
    const late = makeRecord({ time: '2025-02-01T00:00:00.000Z' });
    await sink.write([late, early, makeRecord({ account_id: 'acct-b' })]);
    await sink.close();
    const again = new SqliteUsageSink(path);
    expect(again.list({ accountId: 'acct-a' }).map((r) => r.id)).toEqual([early.id, late.id]);
    expect(again.list({ accountId: 'acct-a', from: '2025-01-15T00:00:00.000Z' })).toEqual([late]);
    expect(again.list({ accountId: 'acct-a', to: '2025-01-15T00:00:00.000Z' })).toEqual([early]);
    expect(again.count()).toBe(3);
    await again.close();
    tmp.remove();
  });
});

describe('ThreadedUsageSink (the ledger thread)', () => {
  sinkContract(async () => {
    const tmp = tempDir();
    const path = join(tmp.dir, 'ledger.db');
    // Read back on the main thread, from its own connection to the file, as services does (which opens
    // the file, in WAL mode, before it starts the thread).
    const reader = new SqliteUsageSink(path);
    const thread = new LedgerThread({ path, defaultBalance: 0 });
    return {
      sink: new ThreadedUsageSink(thread),
      read: async () => ['acct-a', 'acct-b'].flatMap((accountId) => reader.list({ accountId })),
      done: async () => {
        await thread.close();
        await reader.close();
        tmp.remove();
      },
    };
  });
});

describe('JsonlUsageSink', () => {
  sinkContract(async () => {
    const tmp = tempDir();
    const path = join(tmp.dir, 'logs', 'usage.jsonl');
    const sink = new JsonlUsageSink(path);
    return {
      sink,
      read: async () => {
        let text = '';
        try {
          text = readFileSync(path, 'utf8');
        } catch {
          return [];
        }
        return text
          .split('\n')
          .filter((line) => line.length > 0)
          .map((line) => JSON.parse(line) as UsageRecord);
      },
      done: async () => {
        await sink.close();
        tmp.remove();
      },
    };
  });
});

describeRedis('RedisStreamSink', () => {
  let server: TestRedis;
  let redis: Redis;
  let streams = 0;

  beforeAll(async () => {
    server = await startRedis();
    redis = new Redis(server.url, { maxRetriesPerRequest: 1 });
  });

  afterAll(async () => {
    redis?.disconnect();
    await server?.close();
  });

  const fresh = (options: ConstructorParameters<typeof RedisStreamSink>[1] = {}) => {
    streams += 1;
    return new RedisStreamSink(redis, { stream: `test:{usage}:${streams}`, ...options });
  };

  sinkContract(async () => {
    const sink = fresh();
    await ensureConsumerGroup(redis, sink.stream, 'billing');
    const seen: UsageRecord[] = [];
    return {
      sink,
      // Through the consumer helper, as billing reads it; each call returns what is new, so keep a tally.
      read: async () => {
        seen.push(...(await readUsage(redis, sink.stream, 'billing', 'tests', 10_000)));
        return [...seen];
      },
      done: () => sink.close(),
    };
  });

  it('writes flat fields that billing can read without parsing JSON', async () => {
    const sink = fresh();
    const record = makeRecord({ error_id: 'UPSTREAM_ERROR', ttft_ms: null, media_units: null });
    await sink.write([record]);
    const [[, fields] = ['', []]] = (await redis.xrange(sink.stream, '-', '+')) as Array<[string, string[]]>;
    const map = Object.fromEntries(fields.map((v, i) => [v, fields[i + 1]]).filter((_, i) => i % 2 === 0));
    expect(map).toMatchObject({ id: record.id, account_id: 'acct-a', error_id: 'UPSTREAM_ERROR' });
    expect(map).not.toHaveProperty('ttft_ms');
    expect(await redis.exists(`${sink.stream}:seen:${record.id}`)).toBe(1);
    expect(await redis.ttl(`${sink.stream}:seen:${record.id}`)).toBeGreaterThan(3000);
  });

  it('consumer groups: consumers of one group share the records, each group gets them all, acked ones are done', async () => {
    const sink = fresh();
    const records = makeRecords(10);
    await ensureConsumerGroup(redis, sink.stream, 'billing');
    await ensureConsumerGroup(redis, sink.stream, 'billing');
    await sink.write(records);
    // A group created after the writes still starts at the beginning of the stream.
    await ensureConsumerGroup(redis, sink.stream, 'audit');

    const one = await readUsage(redis, sink.stream, 'billing', 'c1', 4);
    const two = await readUsage(redis, sink.stream, 'billing', 'c2', 100);
    expect(one).toHaveLength(4);
    expect(byId([...one, ...two])).toEqual(byId(records));
    expect(await readUsage(redis, sink.stream, 'billing', 'c1', 100)).toEqual([]);
    expect(byId(await readUsage(redis, sink.stream, 'audit', 'a1', 100))).toEqual(byId(records));
    const pending = (await redis.xpending(sink.stream, 'billing')) as [number, ...unknown[]];
    expect(pending[0]).toBe(0);
  });

  it('leaves entries pending without ack, and gives them back to the same consumer', async () => {
    const sink = fresh();
    await ensureConsumerGroup(redis, sink.stream, 'billing');
    const records = makeRecords(3);
    await sink.write(records);
    const entries = await readUsageEntries(redis, sink.stream, 'billing', 'c1', 10);
    expect(entries.map((e) => e.record)).toEqual(records);
    const again = await readUsageEntries(redis, sink.stream, 'billing', 'c1', 10, { startId: '0' });
    expect(again.map((e) => e.entryId)).toEqual(entries.map((e) => e.entryId));
    const blocked = Date.now();
    expect(await readUsageEntries(redis, sink.stream, 'billing', 'c1', 10, { blockMs: 50 })).toEqual([]);
    expect(Date.now() - blocked).toBeGreaterThanOrEqual(40);
  });

  it('trims the stream approximately to maxLen', async () => {
    const sink = fresh({ maxLen: 10 });
    for (let i = 0; i < 5; i++) await sink.write(makeRecords(200));
    expect(await redis.xlen(sink.stream)).toBeLessThan(250);
    const uncapped = fresh({ maxLen: null });
    for (let i = 0; i < 5; i++) await uncapped.write(makeRecords(200));
    expect(await redis.xlen(uncapped.stream)).toBe(1000);
  });

  it('refuses a stream key of another type before writing anything', async () => {
    const sink = fresh();
    await redis.set(sink.stream, 'not a stream');
    const record = makeRecord();
    await expect(sink.write([record])).rejects.toThrow(/WRONGTYPE/);
    expect(await redis.exists(`${sink.stream}:seen:${record.id}`)).toBe(0);
  });

  it('reloads its script after the server forgot it', async () => {
    const sink = fresh();
    await sink.write(makeRecords(1));
    await redis.script('FLUSH');
    await sink.write(makeRecords(1));
    expect(await redis.xlen(sink.stream)).toBe(2);
  });
});
