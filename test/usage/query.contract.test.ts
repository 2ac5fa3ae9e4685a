/**
 * Usage queries (src/usage/query*.ts) against both modes' stores: records written through the real sinks
 * (the ledger thread into ledger.db, the in-memory store's ledger, the Redis Stream sink), then read back
 * as per-day totals. The same expectations for each, plus what is particular to each store: the SQLite
 * sink's per-batch sums against SQLite's own, a ledger that predates the daily totals, one that kept them
 * with a trigger, an old gantry.db moved over, the day hashes' TTL and type check.
 */
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { SqliteStore } from '../../src/store/sqlite.js';
import { ledgerPathFor, openLedgerFile } from '../../src/usage/ledger-file.js';
import { LedgerThread, ThreadedUsageSink } from '../../src/usage/ledger-thread.js';
import type { UsageDay, UsageQuery } from '../../src/usage/query.js';
import { addDays, daysBetween, isDay, MAX_USAGE_DAYS } from '../../src/usage/query-days.js';
import { createRedisUsageQuery } from '../../src/usage/query-redis.js';
import { createSqliteUsageQuery } from '../../src/usage/query-sqlite.js';
import { type UsageRecord, UsageRecordError } from '../../src/usage/record.js';
import { DEFAULT_DAY_TTL_SECONDS, RedisStreamSink, usageDayKey } from '../../src/usage/redis-sink.js';
import type { UsageSink } from '../../src/usage/sink.js';
import { openDatabase } from '../../src/usage/sqlite-db.js';
import {
  pushUsageRow,
  SqliteUsageSink,
  USAGE_COLUMNS,
  USAGE_SCHEMA,
  type UsageRowValues,
} from '../../src/usage/sqlite-sink.js';
import { describeRedis, startRedis, type TestRedis } from '../helpers/redis.js';
import { makeRecord, makeRecords, tempDir } from './fixtures.js';

interface Harness {
  sink: UsageSink;
  query: UsageQuery;
  done(): Promise<void>;
}

const DAY_1 = '2026-03-01';
const DAY_2 = '2026-03-02';
const DAY_3 = '2026-03-03';

/** A record of `day`, at `clock` (HH:MM:SS.mmm) UTC. */
function at(day: string, clock = '12:00:00.000'): string {
  return `${day}T${clock}Z`;
}

function usage(
  day: string,
  accountId: string,
  model: string,
  totals: Pick<UsageDay, 'requests' | 'inputTokens' | 'outputTokens' | 'cost'>,
): UsageDay {
  return { day, accountId, model, ...totals };
}

/** The same expectations for every UsageQuery, fed through its mode's sink. */
function queryContract(create: () => Promise<Harness>): void {
  let h: Harness;
  afterEach(async () => {
    await h?.done();
  });

  it('sums requests, tokens and cost per UTC day, account and model; streamed and JSON records alike', async () => {
    h = await create();
    await h.sink.write([
      makeRecord({
        time: at(DAY_1, '00:00:00.000'),
        input_tokens: 10,
        output_tokens: 5,
        credits: 0.25,
        stream: true,
      }),
      makeRecord({
        time: at(DAY_1, '23:59:59.999'),
        input_tokens: 7,
        output_tokens: 3,
        credits: 0.5,
        stream: false,
      }),
      // Every record is a request: errors and abandoned calls count, with what they used.
      makeRecord({
        time: at(DAY_1),
        input_tokens: 1,
        output_tokens: 0,
        credits: 0,
        outcome: 'client_aborted',
        status: 499,
        stream: true,
      }),
      makeRecord({ time: at(DAY_2, '00:00:00.000'), input_tokens: 100, output_tokens: 50, credits: 2 }),
      makeRecord({ time: at(DAY_1), model: 'other-model', input_tokens: 4, output_tokens: 4, credits: 1 }),
      makeRecord({ time: at(DAY_1), account_id: 'acct-b', input_tokens: 9, output_tokens: 9, credits: 3 }),
    ]);
    expect(await h.query.daily({ from: DAY_1, to: DAY_3 })).toEqual([
      usage(DAY_1, 'acct-a', 'gpt-test', { requests: 3, inputTokens: 18, outputTokens: 8, cost: 0.75 }),
      usage(DAY_1, 'acct-a', 'other-model', { requests: 1, inputTokens: 4, outputTokens: 4, cost: 1 }),
      usage(DAY_1, 'acct-b', 'gpt-test', { requests: 1, inputTokens: 9, outputTokens: 9, cost: 3 }),
      usage(DAY_2, 'acct-a', 'gpt-test', { requests: 1, inputTokens: 100, outputTokens: 50, cost: 2 }),
    ]);
  });

  it('filters by account, by model and by an inclusive day range', async () => {
    h = await create();
    const records = [DAY_1, DAY_2, DAY_3].flatMap((day) =>
      ['acct-a', 'acct-b'].flatMap((account_id) =>
        ['m-1', 'm-2'].map((model) =>
          makeRecord({ time: at(day), account_id, model, input_tokens: 1, output_tokens: 2, credits: 1 }),
        ),
      ),
    );
    await h.sink.write(records);
    const keys = (rows: UsageDay[]) => rows.map((r) => `${r.day} ${r.accountId} ${r.model}`);
    expect(keys(await h.query.daily({ from: DAY_1, to: DAY_3, accountId: 'acct-b' }))).toEqual([
      `${DAY_1} acct-b m-1`,
      `${DAY_1} acct-b m-2`,
      `${DAY_2} acct-b m-1`,
      `${DAY_2} acct-b m-2`,
      `${DAY_3} acct-b m-1`,
      `${DAY_3} acct-b m-2`,
    ]);
    expect(keys(await h.query.daily({ from: DAY_2, to: DAY_3, model: 'm-2' }))).toEqual([
      `${DAY_2} acct-a m-2`,
      `${DAY_2} acct-b m-2`,
      `${DAY_3} acct-a m-2`,
      `${DAY_3} acct-b m-2`,
    ]);
    expect(keys(await h.query.daily({ from: DAY_2, to: DAY_2, accountId: 'acct-a', model: 'm-1' }))).toEqual([
      `${DAY_2} acct-a m-1`,
    ]);
    expect(await h.query.daily({ from: DAY_1, to: DAY_3, accountId: 'acct-c' })).toEqual([]);
    expect(await h.query.daily({ from: DAY_1, to: DAY_3, model: 'm-3' })).toEqual([]);
    expect(await h.query.daily({ from: '2026-02-01', to: '2026-02-28' })).toEqual([]);
    expect(await h.query.daily({ from: DAY_3, to: DAY_1 })).toEqual([]);
  });

  it('sums cost exactly, in micro-credits', async () => {
    h = await create();
    await h.sink.write([
      makeRecord({ time: at(DAY_1), credits: 0.1 }),
      makeRecord({ time: at(DAY_1), credits: 0.2 }),
      ...makeRecords(3, { time: at(DAY_2), credits: 1 / 3 }),
    ]);
    const [first, second] = await h.query.daily({ from: DAY_1, to: DAY_2 });
    expect(first?.cost).toBe(0.3);
    expect(second?.cost).toBe(0.999999);
  });

  it('counts each record once: a rewritten batch, a partly new batch and repeats inside a batch', async () => {
    h = await create();
    const first = makeRecords(5, { time: at(DAY_1), input_tokens: 10, output_tokens: 1, credits: 1 });
    await h.sink.write(first);
    await h.sink.write(first);
    const more = makeRecords(3, { time: at(DAY_1), input_tokens: 10, output_tokens: 1, credits: 1 });
    await h.sink.write([...first.slice(2), ...more, ...more]);
    expect(await h.query.daily({ from: DAY_1, to: DAY_1 })).toEqual([
      usage(DAY_1, 'acct-a', 'gpt-test', { requests: 8, inputTokens: 80, outputTokens: 8, cost: 8 }),
    ]);
  });

  it('counts nothing of a refused batch', async () => {
    h = await create();
    const batch = [
      ...makeRecords(2, { time: at(DAY_1) }),
      { ...makeRecord({ time: at(DAY_1) }), input_tokens: -1 },
    ];
    await expect(h.sink.write(batch)).rejects.toBeInstanceOf(UsageRecordError);
    expect(await h.query.daily({ from: DAY_1, to: DAY_1 })).toEqual([]);
  });

  it('adds up large batches spanning midnight', async () => {
    h = await create();
    const records = Array.from({ length: 240 }, (_, i) =>
      makeRecord({
        time: at(i % 2 === 0 ? DAY_1 : DAY_2, i % 2 === 0 ? '23:59:59.999' : '00:00:00.000'),
        input_tokens: i,
        output_tokens: 1,
        credits: 0.001,
      }),
    );
    await h.sink.write(records);
    const rows = await h.query.daily({ from: DAY_1, to: DAY_2 });
    const sum = (parity: number) =>
      records.reduce((s, r, i) => s + (i % 2 === parity ? r.input_tokens : 0), 0);
    expect(rows).toEqual([
      usage(DAY_1, 'acct-a', 'gpt-test', {
        requests: 120,
        inputTokens: sum(0),
        outputTokens: 120,
        cost: 0.12,
      }),
      usage(DAY_2, 'acct-a', 'gpt-test', {
        requests: 120,
        inputTokens: sum(1),
        outputTokens: 120,
        cost: 0.12,
      }),
    ]);
  });
}

describe('SQLite: the ledger thread writing ledger.db, the query reading it on its own connection', () => {
  queryContract(async () => {
    const tmp = tempDir();
    const store = new SqliteStore(join(tmp.dir, 'gantry.db'));
    const path = ledgerPathFor(store.path) as string;
    // As services does: the main thread opens the file with its tables before the thread starts.
    const ledger = openLedgerFile(path, store.handle);
    const thread = new LedgerThread({ path, defaultBalance: 0 });
    const query = createSqliteUsageQuery(store);
    return {
      sink: new ThreadedUsageSink(thread),
      query,
      done: async () => {
        await thread.close();
        await query.close();
        ledger.close();
        store.close();
        tmp.remove();
      },
    };
  });
});

describe('SQLite: an in-memory store, whose ledger is its own connection', () => {
  queryContract(async () => {
    const store = new SqliteStore(':memory:');
    const sink = new SqliteUsageSink(store.handle);
    const query = createSqliteUsageQuery(store);
    return {
      sink,
      query,
      done: async () => {
        await query.close();
        await sink.close();
        store.close();
      },
    };
  });
});

describe('SQLite: ledgers written before the daily totals', () => {
  it('sums the records of a ledger that has none at its first open, and keeps counting after', async () => {
    const tmp = tempDir();
    const path = join(tmp.dir, 'ledger.db');
    const { db } = openDatabase(path);
    // Written by an older Gantry: records, no totals, no trigger.
    db.exec(USAGE_SCHEMA);
    const insert = db.prepare(
      `INSERT INTO usage_records (${USAGE_COLUMNS.join(', ')}) VALUES (${USAGE_COLUMNS.map(() => '?').join(', ')})`,
    );
    const before = [
      makeRecord({ time: at(DAY_1), input_tokens: 2, output_tokens: 1, credits: 0.5 }),
      makeRecord({ time: at(DAY_1), input_tokens: 3, output_tokens: 1, credits: 0.25 }),
    ];
    for (const record of before) {
      const values: UsageRowValues = [];
      pushUsageRow(values, record);
      insert.run(values);
    }
    db.close();

    const store = new SqliteStore(join(tmp.dir, 'gantry.db'));
    const ledger = openLedgerFile(path, store.handle);
    const sink = new SqliteUsageSink(ledger);
    // A second open (the CLI, the ledger thread) sums nothing again.
    const again = new SqliteUsageSink(path);
    await sink.write([
      makeRecord({ time: at(DAY_1), input_tokens: 5, output_tokens: 1, credits: 1 }),
      before[0] as UsageRecord,
    ]);
    const query = createSqliteUsageQuery(store);
    expect(await query.daily({ from: DAY_1, to: DAY_1 })).toEqual([
      usage(DAY_1, 'acct-a', 'gpt-test', { requests: 3, inputTokens: 10, outputTokens: 3, cost: 1.75 }),
    ]);
    await query.close();
    await again.close();
    ledger.close();
    store.close();
    tmp.remove();
  });

  it('counts the records moved over from an older gantry.db', async () => {
    const tmp = tempDir();
    const store = new SqliteStore(join(tmp.dir, 'gantry.db'));
    // An older Gantry kept its ledger in the store file.
    const inStore = new SqliteUsageSink(store.handle);
    await inStore.write(makeRecords(4, { time: at(DAY_2), input_tokens: 1, output_tokens: 2, credits: 0.5 }));
    const ledger = openLedgerFile(ledgerPathFor(store.path) as string, store.handle);
    const query = createSqliteUsageQuery(store);
    expect(await query.daily({ from: DAY_2, to: DAY_2 })).toEqual([
      usage(DAY_2, 'acct-a', 'gpt-test', { requests: 4, inputTokens: 4, outputTokens: 8, cost: 2 }),
    ]);
    await query.close();
    ledger.close();
    store.close();
    tmp.remove();
  });
});

describe('SQLite: the daily totals of a batch', () => {
  it("equal SQLite's own sums of the records stored, batch after batch, retries and repeats included", async () => {
    const store = new SqliteStore(':memory:');
    const sink = new SqliteUsageSink(store.handle);
    let seed = 7;
    const random = () => {
      seed = (seed * 48271) % 2147483647;
      return seed / 2147483647;
    };
    // Names that a key joined with a separator would confuse, credits at and around half a micro-credit,
    // and in one batch credits too large for a double to sum exactly (left to SQLite).
    const accounts = ['a', 'a\tb', 'a1:', 'a\t'];
    const models = ['b\tc', 'c', '1:c', 'bc'];
    const credits = (i: number) => (i % 3 === 0 ? (i + 0.5) / 1_000_000 : random() * 3);
    const batches: UsageRecord[][] = [];
    for (let b = 0; b < 8; b++) {
      batches.push(
        Array.from({ length: 120 }, (_, i) =>
          makeRecord({
            time: at(i % 7 === 0 ? DAY_2 : DAY_1, i % 2 === 0 ? '23:59:59.999' : '00:00:00.000'),
            account_id: accounts[(i + b) % accounts.length] as string,
            model: models[Math.floor(i / 4) % models.length] as string,
            input_tokens: Math.floor(random() * 1e6),
            output_tokens: Math.floor(random() * 1e4),
            credits: b === 3 && i === 5 ? 1e10 : credits(i + b * 120),
          }),
        ),
      );
    }
    for (const [b, batch] of batches.entries()) {
      await sink.write(batch);
      // A retry of the batch, and one of half of it with new records after.
      if (b % 2 === 1) await sink.write(batch);
      if (b % 3 === 2) await sink.write([...batch.slice(60), ...makeRecords(3, { time: at(DAY_3) })]);
    }
    const totals = store.handle.prepare('SELECT * FROM usage_daily ORDER BY day, account_id, model').all();
    const sums = store.handle
      .prepare(
        `SELECT substr(time, 1, 10) AS day, account_id, model, COUNT(*) AS requests,
          SUM(input_tokens) AS input_tokens, SUM(output_tokens) AS output_tokens,
          SUM(CAST(round(credits * 1000000) AS INTEGER)) AS credits_micros
        FROM usage_records GROUP BY 1, 2, 3 ORDER BY 1, 2, 3`,
      )
      .all();
    expect(sums).toHaveLength(2 * 16 + 1);
    expect(totals).toEqual(sums);
    await sink.close();
    store.close();
  });
});

/** How a ledger kept its daily totals before they were summed per batch: a trigger, one upsert a record. */
const TRIGGER_LEDGER = `
CREATE TABLE usage_daily (
  day TEXT NOT NULL, account_id TEXT NOT NULL, model TEXT NOT NULL, requests INTEGER NOT NULL,
  input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL, credits_micros INTEGER NOT NULL,
  PRIMARY KEY (day, account_id, model)
) WITHOUT ROWID;
CREATE INDEX usage_daily_account_day ON usage_daily (account_id, day);
CREATE TRIGGER usage_records_daily AFTER INSERT ON usage_records
BEGIN
  INSERT INTO usage_daily (day, account_id, model, requests, input_tokens, output_tokens, credits_micros)
  VALUES (substr(NEW.time, 1, 10), NEW.account_id, NEW.model, 1, NEW.input_tokens, NEW.output_tokens,
    CAST(round(NEW.credits * 1000000) AS INTEGER))
  ON CONFLICT (day, account_id, model) DO UPDATE SET
    requests = requests + 1,
    input_tokens = input_tokens + excluded.input_tokens,
    output_tokens = output_tokens + excluded.output_tokens,
    credits_micros = credits_micros + excluded.credits_micros;
END;
`;

describe('SQLite: ledgers whose daily totals a trigger kept', () => {
  const triggers = (db: ReturnType<typeof openDatabase>['db']) =>
    db.prepare(`SELECT name FROM sqlite_master WHERE type = 'trigger'`).all();

  it('the server drops the trigger at open, keeps the totals, and counts every later record once', async () => {
    const tmp = tempDir();
    const path = join(tmp.dir, 'ledger.db');
    const { db: older } = openDatabase(path);
    older.exec(USAGE_SCHEMA + TRIGGER_LEDGER);
    // An older Gantry's writes: each record counted by the trigger.
    const insert = older.prepare(
      `INSERT OR IGNORE INTO usage_records (${USAGE_COLUMNS.join(', ')}) VALUES (${USAGE_COLUMNS.map(() => '?').join(', ')})`,
    );
    const write = (record: UsageRecord) => {
      const values: UsageRowValues = [];
      pushUsageRow(values, record);
      insert.run(values);
    };
    const before = [
      makeRecord({ time: at(DAY_1), input_tokens: 2, output_tokens: 1, credits: 0.5 }),
      makeRecord({ time: at(DAY_1), input_tokens: 3, output_tokens: 1, credits: 0.25 }),
    ];
    for (const record of before) write(record);

    // The CLI opening the file beside that older server leaves its trigger: its next record still counts.
    const cli = openLedgerFile(path);
    expect(triggers(cli)).toEqual([{ name: 'usage_records_daily' }]);
    cli.close();
    const third = makeRecord({ time: at(DAY_1), input_tokens: 5, output_tokens: 0, credits: 0.125 });
    write(third);
    older.close();

    const store = new SqliteStore(join(tmp.dir, 'gantry.db'));
    const ledger = openLedgerFile(path, store.handle);
    expect(triggers(ledger)).toEqual([]);
    const query = createSqliteUsageQuery(store);
    expect(await query.daily({ from: DAY_1, to: DAY_1 })).toEqual([
      usage(DAY_1, 'acct-a', 'gpt-test', { requests: 3, inputTokens: 10, outputTokens: 2, cost: 0.875 }),
    ]);

    // The ledger thread's sink, as the server writes: a new record and a retried one.
    const thread = new LedgerThread({ path, defaultBalance: 0 });
    const sink = new ThreadedUsageSink(thread);
    const later = makeRecord({ time: at(DAY_2), input_tokens: 7, output_tokens: 7, credits: 1 });
    await sink.write([later, before[0] as UsageRecord, third]);
    await sink.write([later]);
    expect(await query.daily({ from: DAY_1, to: DAY_2 })).toEqual([
      usage(DAY_1, 'acct-a', 'gpt-test', { requests: 3, inputTokens: 10, outputTokens: 2, cost: 0.875 }),
      usage(DAY_2, 'acct-a', 'gpt-test', { requests: 1, inputTokens: 7, outputTokens: 7, cost: 1 }),
    ]);
    await thread.close();
    await query.close();
    ledger.close();
    store.close();
    tmp.remove();
  });
});

describeRedis('Redis: the stream sink keeping day hashes beside the stream', () => {
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

  const fresh = () => {
    streams += 1;
    const stream = `test:{usage}:${streams}`;
    return {
      stream,
      sink: new RedisStreamSink(redis, { stream }),
      query: createRedisUsageQuery(redis, stream),
    };
  };

  queryContract(async () => {
    const { sink, query } = fresh();
    return { sink, query, done: async () => query.close() };
  });

  it('keys a day `<stream>:day:<YYYY-MM-DD>` with `<account>\\t<model>\\t<measure>` fields and a TTL', async () => {
    const { stream, sink } = fresh();
    await sink.write([makeRecord({ time: at(DAY_1), input_tokens: 3, output_tokens: 4, credits: 0.5 })]);
    expect(await redis.hgetall(usageDayKey(stream, DAY_1))).toEqual({
      'acct-a\tgpt-test\trequests': '1',
      'acct-a\tgpt-test\tinput_tokens': '3',
      'acct-a\tgpt-test\toutput_tokens': '4',
      'acct-a\tgpt-test\tcost_micros': '500000',
    });
    const ttl = await redis.ttl(usageDayKey(stream, DAY_1));
    expect(ttl).toBeGreaterThan(DEFAULT_DAY_TTL_SECONDS - 60);
    expect(ttl).toBeLessThanOrEqual(DEFAULT_DAY_TTL_SECONDS);
    expect(usageDayKey('gantry:{usage}', DAY_1)).toBe(`gantry:{usage}:day:${DAY_1}`);
  });

  it('refuses a batch whose day key holds another type before writing anything', async () => {
    const { stream, sink, query } = fresh();
    await redis.set(usageDayKey(stream, DAY_2), 'not a hash');
    const records = [makeRecord({ time: at(DAY_1) }), makeRecord({ time: at(DAY_2) })];
    await expect(sink.write(records)).rejects.toThrow(/WRONGTYPE/);
    expect(await redis.xlen(stream)).toBe(0);
    expect(await redis.exists(`${stream}:seen:${records[0]?.id}`)).toBe(0);
    await redis.del(usageDayKey(stream, DAY_2));
    await sink.write(records);
    expect((await query.daily({ from: DAY_1, to: DAY_2 })).map((r) => r.requests)).toEqual([1, 1]);
  });

  it('ignores fields that are not its measures (a day hash shared with a newer writer)', async () => {
    const { stream, sink, query } = fresh();
    await sink.write([makeRecord({ time: at(DAY_1), credits: 1 })]);
    await redis.hset(usageDayKey(stream, DAY_1), 'acct-a\tgpt-test\tcached_tokens', '9', 'junk', '1');
    expect(await query.daily({ from: DAY_1, to: DAY_1 })).toHaveLength(1);
  });
});

describe('UTC days', () => {
  it('takes real calendar days written YYYY-MM-DD only', () => {
    for (const day of ['2026-03-01', '2024-02-29', '1999-12-31']) expect(isDay(day)).toBe(true);
    for (const day of ['2026-02-29', '2026-13-01', '2026-3-1', '2026-03-01T00:00:00Z', '20260301', '']) {
      expect(isDay(day)).toBe(false);
    }
  });

  it('moves across months, years and leap days, and lists a range with both ends', () => {
    expect(addDays('2024-02-28', 1)).toBe('2024-02-29');
    expect(addDays('2026-01-01', -1)).toBe('2025-12-31');
    expect(addDays('2026-03-30', -29)).toBe('2026-03-01');
    expect(daysBetween('2025-12-30', '2026-01-02')).toEqual([
      '2025-12-30',
      '2025-12-31',
      '2026-01-01',
      '2026-01-02',
    ]);
    expect(daysBetween('2026-01-02', '2026-01-01')).toEqual([]);
  });

  it('takes only years whose every reachable day keeps four digits, and bounds a listing', () => {
    expect(isDay('9998-12-31')).toBe(true);
    for (const day of ['9999-01-01', '9999-12-31', '+10000-01-01', '1899-12-31'])
      expect(isDay(day)).toBe(false);
    expect(daysBetween('9998-12-30', '9998-12-31')).toEqual(['9998-12-30', '9998-12-31']);
    expect(addDays('9998-12-31', 1)).toBe('9999-01-01');
    expect(daysBetween('2025-01-01', addDays('2025-01-01', MAX_USAGE_DAYS - 1))).toHaveLength(MAX_USAGE_DAYS);
    // Past the cap, or past year 9999, a listing throws rather than looping.
    expect(() => daysBetween('2025-01-01', addDays('2025-01-01', MAX_USAGE_DAYS))).toThrow(RangeError);
    expect(daysBetween('9998-11-27', '9999-12-31')).toHaveLength(MAX_USAGE_DAYS);
    expect(() => daysBetween('9998-11-26', '10000-01-01')).toThrow(RangeError);
  });
});
