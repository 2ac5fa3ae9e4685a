/**
 * The audit log's contract, run against both implementations: the embedded mode's table and the
 * distributed mode's Redis stream (a real redis-server).
 */
import { Redis } from 'ioredis';
import Database from 'libsql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AuditLog, RedisAuditLog, SqliteAuditLog } from '../../src/admin/audit.js';
import { describeRedis, startRedis, type TestRedis } from '../helpers/redis.js';

type Make = () => Promise<AuditLog>;

function contract(make: Make): void {
  it('lists entries newest first, with what was recorded, an id and a time', async () => {
    const log = await make();
    const before = Date.now();
    const first = await log.record({
      actor: 'admin:ops',
      action: 'account.create',
      accountId: 'acct_a',
      target: 'acct_a',
      details: { name: 'a', tier: 'default' },
    });
    const second = await log.record({
      actor: 'key:k1',
      action: 'key.create',
      accountId: 'acct_a',
      target: 'k2',
      details: { name: 'ci' },
    });
    expect(first.id).not.toBe(second.id);
    expect(first.at).toBeGreaterThanOrEqual(before);
    const listed = await log.list({});
    expect(listed.map((e) => e.id)).toEqual([second.id, first.id]);
    expect(listed[1]).toEqual(first);
    expect(listed[0]).toEqual(second);
  });

  it('filters by account, keeps entries without one, and pages with before and limit', async () => {
    const log = await make();
    const ids: string[] = [];
    for (let i = 0; i < 7; i++) {
      const entry = await log.record({
        actor: 'admin:ops',
        action: 'credits.grant',
        accountId: i % 2 === 0 ? 'acct_even' : 'acct_odd',
        target: `t${i}`,
        details: { amount: i },
      });
      ids.push(entry.id);
    }
    const none = await log.record({
      actor: 'admin:ops',
      action: 'incident.open',
      accountId: null,
      target: 'inc_1',
      details: {},
    });
    const even = await log.list({ accountId: 'acct_even' });
    expect(even.map((e) => e.target)).toEqual(['t6', 't4', 't2', 't0']);
    const page1 = await log.list({ accountId: 'acct_even', limit: 2 });
    expect(page1.map((e) => e.target)).toEqual(['t6', 't4']);
    const page2 = await log.list({ accountId: 'acct_even', limit: 2, before: page1[1]?.id as string });
    expect(page2.map((e) => e.target)).toEqual(['t2', 't0']);
    const all = await log.list({ limit: 3 });
    expect(all.map((e) => e.id)).toEqual([none.id, ids[6], ids[5]]);
    expect(all[0]?.accountId).toBeNull();
  });

  it('refuses a before that is not one of its ids', async () => {
    const log = await make();
    await expect(log.list({ before: 'nope' })).rejects.toBeInstanceOf(RangeError);
  });
}

describe('SqliteAuditLog', () => {
  const dbs: Array<InstanceType<typeof Database>> = [];
  afterAll(() => {
    for (const db of dbs) db.close();
  });
  contract(async () => {
    const db = new Database(':memory:');
    dbs.push(db);
    return new SqliteAuditLog(db);
  });

  it('keeps its entries in the database, for the next start', async () => {
    const db = new Database(':memory:');
    dbs.push(db);
    await new SqliteAuditLog(db).record({
      actor: 'admin:ops',
      action: 'key.revoke',
      accountId: 'acct_a',
      target: 'k1',
      details: {},
    });
    expect((await new SqliteAuditLog(db).list({})).map((e) => e.action)).toEqual(['key.revoke']);
  });
});

describeRedis('RedisAuditLog', () => {
  let redis: TestRedis;
  const clients: Redis[] = [];
  let n = 0;
  beforeAll(async () => {
    redis = await startRedis();
  });
  afterAll(async () => {
    for (const client of clients) client.disconnect();
    await redis?.close();
  });
  contract(async () => {
    const client = new Redis(redis.url);
    clients.push(client);
    // One stream per test: the contract's tests each start from an empty log.
    return new RedisAuditLog(client, `gantry:{audit}:test${n++}`);
  });

  it('is one stream every instance writes and reads', async () => {
    const a = new Redis(redis.url);
    const b = new Redis(redis.url);
    clients.push(a, b);
    const key = `gantry:{audit}:shared${n++}`;
    await new RedisAuditLog(a, key).record({
      actor: 'admin:ops',
      action: 'account.update',
      accountId: 'acct_a',
      target: 'acct_a',
      details: { status: 'suspended' },
    });
    const seen = await new RedisAuditLog(b, key).list({ accountId: 'acct_a' });
    expect(seen.map((e) => e.details)).toEqual([{ status: 'suspended' }]);
    expect(await a.xlen(key)).toBe(1);
  });
});
