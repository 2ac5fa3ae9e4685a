import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import Database from 'libsql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { StatusChange, StatusHistory } from '../../src/routing/history.js';
import { RedisStatusHistory } from '../../src/routing/history-redis.js';
import { SqliteStatusHistory } from '../../src/routing/history-sqlite.js';
import { describeRedis, redisServerAvailable, startRedis, type TestRedis } from '../helpers/redis.js';

interface Implementation {
  name: string;
  describe: (name: string, body: () => void) => void;
  create(maxEntries: number): StatusHistory;
}

const dbs: Array<InstanceType<typeof Database>> = [];
afterAll(() => {
  for (const db of dbs) db.close();
});

let server: TestRedis | undefined;
let client: Redis | undefined;
if (redisServerAvailable) {
  beforeAll(async () => {
    server = await startRedis();
    client = new Redis(server.url);
  });
  afterAll(async () => {
    await client?.quit();
    await server?.close();
  });
}

const implementations: Implementation[] = [
  {
    name: 'SqliteStatusHistory',
    describe,
    create(maxEntries) {
      const db = new Database(':memory:');
      dbs.push(db);
      return new SqliteStatusHistory(db, maxEntries);
    },
  },
  {
    name: 'RedisStatusHistory',
    describe: describeRedis,
    create(maxEntries) {
      if (!client) throw new Error('redis-server not started');
      return new RedisStatusHistory(client, maxEntries, `test:${randomUUID()}:history`);
    },
  },
];

function change(overrides: Partial<StatusChange> = {}): StatusChange {
  return {
    at: 1_700_000_000_000,
    model: 'acme/chat',
    deployment: 'up/model-a',
    from: 'closed',
    to: 'open',
    reason: '5 consecutive failures',
    instance: 'host:1',
    ...overrides,
  };
}

for (const impl of implementations) {
  impl.describe(impl.name, () => {
    it('reads back what was recorded, newest first, deployment and model changes alike', async () => {
      const history = impl.create(100);
      const first = change({ at: 1 });
      const second = change({
        at: 2,
        deployment: undefined,
        from: 'operational',
        to: 'degraded',
        reason: 'why',
      });
      await history.record(first);
      await history.record(second);
      expect(await history.list()).toEqual([second, first]);
    });

    it('filters by model and time, and honours the limit', async () => {
      const history = impl.create(100);
      for (let i = 1; i <= 6; i++)
        await history.record(change({ at: i, model: i % 2 ? 'acme/odd' : 'acme/even' }));
      expect((await history.list({ model: 'acme/odd' })).map((c) => c.at)).toEqual([5, 3, 1]);
      expect((await history.list({ since: 4 })).map((c) => c.at)).toEqual([6, 5, 4]);
      expect((await history.list({ limit: 2 })).map((c) => c.at)).toEqual([6, 5]);
      expect((await history.list({ model: 'acme/even', since: 3, limit: 1 })).map((c) => c.at)).toEqual([6]);
      expect(await history.list({ model: 'acme/none' })).toEqual([]);
    });

    it('keeps only the newest max entries', async () => {
      const history = impl.create(10);
      for (let i = 1; i <= 25; i++) await history.record(change({ at: i }));
      const all = await history.list({ limit: 100 });
      expect(all.map((c) => c.at)).toEqual([25, 24, 23, 22, 21, 20, 19, 18, 17, 16]);
    });
  });
}
