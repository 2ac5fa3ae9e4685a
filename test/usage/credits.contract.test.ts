import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type CreditStore, creditRefusal, type DefaultBalance } from '../../src/usage/credits.js';
import { RedisCreditStore } from '../../src/usage/credits-redis.js';
import { SqliteCreditStore } from '../../src/usage/credits-sqlite.js';
import { newUsageId } from '../../src/usage/id.js';
import { LedgerThread, ThreadedCreditStore } from '../../src/usage/ledger-thread.js';
import { describeRedis, startRedis, type TestRedis } from '../helpers/redis.js';
import { tempDir } from './fixtures.js';

type Create = (defaultBalance: DefaultBalance) => Promise<CreditStore>;

let accounts = 0;
const account = () => `acct-${++accounts}`;

/** The same expectations for every CreditStore. */
function creditContract(create: Create): void {
  it('grants return the new balance; balance reads it', async () => {
    const store = await create(0);
    const a = account();
    expect(await store.balance(a)).toBe(0);
    expect(await store.grant(a, 100, 'welcome')).toBe(100);
    expect(await store.grant(a, 25.5, 'top-up')).toBe(125.5);
    expect(await store.balance(a)).toBe(125.5);
    expect(await store.balance(account())).toBe(0);
  });

  it('debits are idempotent by record id', async () => {
    const store = await create(0);
    const a = account();
    await store.grant(a, 10, 'start');
    const id = newUsageId();
    expect(await store.debit(a, 3, id)).toEqual({ applied: true, balance: 7 });
    expect(await store.debit(a, 3, id)).toEqual({ applied: false, balance: 7 });
    expect(await store.debit(a, 5, id)).toEqual({ applied: false, balance: 7 });
    expect(await store.balance(a)).toBe(7);
  });

  it('lets a balance go negative (the real cost can exceed the estimate)', async () => {
    const store = await create(0);
    const a = account();
    await store.grant(a, 1, 'start');
    expect((await store.debit(a, 4, newUsageId())).balance).toBe(-3);
    expect(await store.balance(a)).toBe(-3);
    expect(await store.grant(a, 5, 'settle')).toBe(2);
  });

  it('sums fractional credits exactly (micro-credits)', async () => {
    const store = await create(0);
    const a = account();
    await store.grant(a, 1, 'start');
    for (let i = 0; i < 10; i++) await store.debit(a, 0.1, newUsageId());
    expect(await store.balance(a)).toBe(0);
  });

  it('debitMany applies a batch in order, with repeats in and across batches applied once', async () => {
    const store = await create(0);
    const [a, b] = [account(), account()];
    await store.grant(a, 10, 'start');
    await store.grant(b, 10, 'start');
    const [x, y] = [newUsageId(), newUsageId()];
    const results = await store.debitMany([
      { accountId: a, credits: 1, recordId: x },
      { accountId: b, credits: 2, recordId: y },
      { accountId: a, credits: 1, recordId: x },
      { accountId: a, credits: 0.5, recordId: newUsageId() },
    ]);
    expect(results).toEqual([
      { applied: true, balance: 9 },
      { applied: true, balance: 8 },
      { applied: false, balance: 9 },
      { applied: true, balance: 8.5 },
    ]);
    expect(await store.debitMany([{ accountId: b, credits: 2, recordId: y }])).toEqual([
      { applied: false, balance: 8 },
    ]);
    expect(await store.debitMany([])).toEqual([]);
  });

  it('a numeric default is the balance of an account without a row, and its first movement starts from it', async () => {
    const store = await create(5);
    const [a, b] = [account(), account()];
    expect(await store.balance(a)).toBe(5);
    expect((await store.debit(a, 2, newUsageId())).balance).toBe(3);
    expect(await store.balance(a)).toBe(3);
    expect(await store.grant(b, 1, 'bonus')).toBe(6);
  });

  it("'unlimited': no row means Infinity; debits do not meter it until a grant opens a balance", async () => {
    const store = await create('unlimited');
    const a = account();
    expect(await store.balance(a)).toBe(Number.POSITIVE_INFINITY);
    const id = newUsageId();
    expect(await store.debit(a, 1000, id)).toEqual({ applied: true, balance: Number.POSITIVE_INFINITY });
    expect(await store.debit(a, 1000, id)).toEqual({ applied: false, balance: Number.POSITIVE_INFINITY });
    expect(await store.grant(a, 50, 'plan')).toBe(50);
    expect((await store.debit(a, 20, newUsageId())).balance).toBe(30);
    expect(await store.balance(a)).toBe(30);
  });

  it('refuses a negative or non-finite debit, and a non-finite grant', async () => {
    const store = await create(0);
    const a = account();
    await expect(async () => store.debit(a, -1, newUsageId())).rejects.toThrow(RangeError);
    await expect(async () => store.debit(a, Number.NaN, newUsageId())).rejects.toThrow(RangeError);
    await expect(async () => store.grant(a, Number.POSITIVE_INFINITY, 'x')).rejects.toThrow(RangeError);
    expect(await store.balance(a)).toBe(0);
  });
}

describe('creditRefusal', () => {
  it('refuses a negative balance with PAYMENT_REQUIRED and an estimate above the balance with INSUFFICIENT_CREDITS', () => {
    expect(creditRefusal(-0.01, 0)).toBe('PAYMENT_REQUIRED');
    expect(creditRefusal(1, 2)).toBe('INSUFFICIENT_CREDITS');
    expect(creditRefusal(0, 0)).toBeUndefined();
    expect(creditRefusal(2, 2)).toBeUndefined();
    expect(creditRefusal(Number.POSITIVE_INFINITY, 1e12)).toBeUndefined();
  });
});

describe('SqliteCreditStore', () => {
  const stores: SqliteCreditStore[] = [];
  const tmp = tempDir();
  afterEach(() => {
    for (const s of stores.splice(0)) s.close();
  });
  afterAll(() => tmp.remove());

  describe('without cache', () => {
    creditContract(async (defaultBalance) => {
      const store = new SqliteCreditStore(join(tmp.dir, `${newUsageId()}.db`), { defaultBalance });
      stores.push(store);
      return store;
    });
  });

  describe('with the write-through cache', () => {
    creditContract(async (defaultBalance) => {
      const store = new SqliteCreditStore(join(tmp.dir, `${newUsageId()}.db`), {
        defaultBalance,
        cache: true,
      });
      stores.push(store);
      return store;
    });
  });

  it('keeps a ledger of every movement, and balances across a reopen', () => {
    const path = join(tmp.dir, 'ledger.db');
    const store = new SqliteCreditStore(path, { defaultBalance: 0 });
    const id = newUsageId();
    store.grant('a', 10, 'welcome');
    store.debit('a', 2.5, id);
    store.debit('a', 2.5, id);
    expect(
      store.ledger('a').map(({ recordId, kind, credits, note }) => ({ recordId, kind, credits, note })),
    ).toEqual([
      { recordId: null, kind: 'grant', credits: 10, note: 'welcome' },
      { recordId: id, kind: 'debit', credits: -2.5, note: null },
    ]);
    store.close();
    const again = new SqliteCreditStore(path, { defaultBalance: 0 });
    expect(again.balance('a')).toBe(7.5);
    again.close();
  });

  it('a cached balance is stale after another writer until forget()', () => {
    const path = join(tmp.dir, 'cache.db');
    const cached = new SqliteCreditStore(path, { defaultBalance: 0, cache: true });
    const other = new SqliteCreditStore(path, { defaultBalance: 0 });
    cached.grant('a', 10, 'start');
    other.grant('a', 5, 'cli');
    expect(cached.balance('a')).toBe(10);
    cached.forget('a');
    expect(cached.balance('a')).toBe(15);
    // Interleaved debits from two connections still sum: the balance moves relatively, in the database.
    cached.debit('a', 1, newUsageId());
    other.debit('a', 1, newUsageId());
    cached.forget();
    expect(cached.balance('a')).toBe(13);
    cached.close();
    other.close();
  });
});

describe('ThreadedCreditStore (the ledger thread)', () => {
  const tmp = tempDir();
  const opened: Array<{ thread: LedgerThread; reader: SqliteCreditStore }> = [];
  afterEach(async () => {
    for (const { thread, reader } of opened.splice(0)) {
      await thread.close();
      reader.close();
    }
  });
  afterAll(() => tmp.remove());

  // Writes on the thread; balances from a cached main-thread reader of the same file, as services does.
  creditContract(async (defaultBalance) => {
    const path = join(tmp.dir, `${newUsageId()}.db`);
    // The file is opened (in WAL mode) before the thread starts, as services does.
    const reader = new SqliteCreditStore(path, { defaultBalance, cache: true });
    const thread = new LedgerThread({ path, defaultBalance });
    opened.push({ thread, reader });
    return new ThreadedCreditStore(thread, reader);
  });
});

describeRedis('RedisCreditStore', () => {
  let server: TestRedis;
  let redis: Redis;
  let prefixes = 0;

  beforeAll(async () => {
    server = await startRedis();
    redis = new Redis(server.url, { maxRetriesPerRequest: 1 });
  });

  afterAll(async () => {
    redis?.disconnect();
    await server?.close();
  });

  creditContract(
    async (defaultBalance) =>
      new RedisCreditStore(redis, { defaultBalance, prefix: `test:{credits}:${++prefixes}` }),
  );

  it('sums concurrent debits from two clients exactly, and applies a shared record id once', async () => {
    const other = new Redis(server.url, { maxRetriesPerRequest: 1 });
    const prefix = `test:{credits}:${++prefixes}`;
    const one = new RedisCreditStore(redis, { defaultBalance: 0, prefix });
    const two = new RedisCreditStore(other, { defaultBalance: 0, prefix });
    await one.grant('a', 1000, 'start');
    const shared = Array.from({ length: 50 }, () => newUsageId());
    const own = (n: number) => Array.from({ length: n }, () => newUsageId());
    const debitAll = (store: RedisCreditStore, ids: string[]) =>
      Promise.all(ids.map((id) => store.debit('a', 0.25, id)));
    const batch = (store: RedisCreditStore, ids: string[]) =>
      store.debitMany(ids.map((recordId) => ({ accountId: 'a', credits: 0.25, recordId })));
    const results = await Promise.all([
      debitAll(one, [...own(200), ...shared]),
      debitAll(two, [...shared, ...own(200)]),
      batch(one, own(100)),
      batch(two, shared),
    ]);
    const applied = results.flat().filter((r) => r.applied).length;
    expect(applied).toBe(200 + 200 + 100 + 50);
    expect(await one.balance('a')).toBe(1000 - 550 * 0.25);
    expect(await two.balance('a')).toBe(1000 - 550 * 0.25);
    other.disconnect();
  });

  it('stores integer micro-credits in one hash, a marker per debit with a TTL, and a ledger of grants', async () => {
    const prefix = `test:{credits}:${++prefixes}`;
    const store = new RedisCreditStore(redis, { defaultBalance: 0, prefix, dedupeTtlSeconds: 120 });
    const id = newUsageId();
    await store.grant('a', 2, 'welcome');
    await store.debit('a', 0.000001, id);
    expect(await redis.hget(`${prefix}:balances`, 'a')).toBe('1999999');
    expect(await redis.ttl(`${prefix}:debited:${id}`)).toBeGreaterThan(100);
    const ledger = (await redis.xrange(`${prefix}:ledger`, '-', '+')) as Array<[string, string[]]>;
    expect(ledger[0]?.[1]).toEqual(
      expect.arrayContaining(['kind', 'grant', 'amount_micros', '2000000', 'welcome']),
    );
  });

  it('balanceCacheMs serves reads from memory, written through by its own debits, stale for others', async () => {
    const prefix = `test:{credits}:${++prefixes}`;
    const cached = new RedisCreditStore(redis, { defaultBalance: 0, prefix, balanceCacheMs: 200 });
    const other = new RedisCreditStore(redis, { defaultBalance: 0, prefix });
    expect(await cached.grant('a', 10, 'start')).toBe(10);
    expect(cached.balance('a')).toBe(10);
    await cached.debit('a', 1, newUsageId());
    expect(cached.balance('a')).toBe(9);
    await other.debit('a', 4, newUsageId());
    expect(cached.balance('a')).toBe(9);
    await sleep(250);
    expect(await cached.balance('a')).toBe(5);
    expect(cached.balancesKey).toBe(`${prefix}:balances`);
  });

  it('a grant whose announcement fails is still applied once, and reported as applied', async () => {
    // A user that may do everything but PUBLISH: the grant script runs, the announcement is refused.
    await redis.acl('SETUSER', 'nopublish', 'on', 'nopass', '~*', '&*', '+@all', '-publish');
    const limited = new Redis(server.url, { maxRetriesPerRequest: 1, username: 'nopublish', password: 'x' });
    try {
      await expect(limited.publish('any', 'x')).rejects.toThrow(/NOPERM/);
      const prefix = `test:{credits}:${++prefixes}`;
      const store = new RedisCreditStore(limited, { defaultBalance: 0, prefix });
      expect(await store.grant('a', 7, 'x')).toBe(7);
      expect(await redis.hget(`${prefix}:balances`, 'a')).toBe('7000000');
    } finally {
      limited.disconnect();
    }
  });

  it('reloads its scripts after the server forgot them', async () => {
    const store = new RedisCreditStore(redis, { defaultBalance: 0, prefix: `test:{credits}:${++prefixes}` });
    await store.grant('a', 3, 'x');
    await redis.script('FLUSH');
    expect((await store.debit('a', 1, newUsageId())).balance).toBe(2);
  });
});
