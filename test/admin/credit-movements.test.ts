/**
 * Credit movements as the admin API lists them, newest first, from both credit stores: every grant and
 * debit in SQLite; the grants, with the balance after each, on Redis.
 */
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisCreditStore } from '../../src/usage/credits-redis.js';
import { SqliteCreditStore } from '../../src/usage/credits-sqlite.js';
import { describeRedis, startRedis, type TestRedis } from '../helpers/redis.js';

describe('SqliteCreditStore.movements', () => {
  it('lists grants and debits newest first, signed, with their notes, limited', () => {
    const store = new SqliteCreditStore(':memory:', { defaultBalance: 0 });
    try {
      store.grant('acct_a', 10, 'welcome');
      store.debit('acct_a', 1.5, 'rec_1');
      store.grant('acct_b', 99, 'another account');
      store.grant('acct_a', -2, 'correction');
      const all = store.movements('acct_a', 10);
      expect(all.map((m) => [m.kind, m.amount, m.note, m.balanceAfter])).toEqual([
        ['grant', -2, 'correction', null],
        ['debit', -1.5, null, null],
        ['grant', 10, 'welcome', null],
      ]);
      for (const m of all) expect(new Date(m.at).toISOString()).toBe(m.at);
      expect(store.movements('acct_a', 1).map((m) => m.note)).toEqual(['correction']);
      expect(store.movements('acct_none', 10)).toEqual([]);
    } finally {
      store.close();
    }
  });
});

describeRedis('RedisCreditStore.movements', () => {
  let redis: TestRedis;
  let client: Redis;
  beforeAll(async () => {
    redis = await startRedis();
    client = new Redis(redis.url);
  });
  afterAll(async () => {
    client?.disconnect();
    await redis?.close();
  });

  it("lists one account's grants newest first with the balance after each", async () => {
    const store = new RedisCreditStore(client, { defaultBalance: 5, prefix: 'test:{credits}' });
    await store.grant('acct_a', 10, 'welcome');
    await store.debit('acct_a', 1, 'rec_1');
    await store.grant('acct_b', 7, '');
    await store.grant('acct_a', -3, 'correction');
    const all = await store.movements('acct_a', 10);
    expect(all.map((m) => [m.kind, m.amount, m.note, m.balanceAfter])).toEqual([
      ['grant', -3, 'correction', 11],
      ['grant', 10, 'welcome', 15],
    ]);
    expect((await store.movements('acct_a', 1)).map((m) => m.amount)).toEqual([-3]);
    expect((await store.movements('acct_b', 10)).map((m) => m.note)).toEqual([null]);
  });
});
