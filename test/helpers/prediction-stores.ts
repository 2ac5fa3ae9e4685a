import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import Database from 'libsql';
import { afterAll, beforeAll, describe } from 'vitest';
import { RedisPredictionStore } from '../../src/predictions/store-redis.js';
import { SqlitePredictionStore } from '../../src/predictions/store-sqlite.js';
import type { PredictionStore } from '../../src/predictions/types.js';
import { describeRedis, redisServerAvailable, startRedis, type TestRedis } from './redis.js';

/** A way to make fresh, isolated stores of one PredictionStore implementation (contract suites). */
export interface StoreImplementation {
  name: string;
  /** `describe`, or `describeRedis` for implementations that need redis-server. */
  describe: (name: string, body: () => void) => void;
  create(): Promise<PredictionStore>;
}

/** In-memory SQLite stores, closed after the suite. Call at the top level of a test file. */
export function sqliteStores(): StoreImplementation {
  const dbs: Array<InstanceType<typeof Database>> = [];
  afterAll(() => {
    for (const db of dbs) db.close();
  });
  return {
    name: 'SqlitePredictionStore',
    describe,
    async create() {
      const db = new Database(':memory:');
      dbs.push(db);
      return new SqlitePredictionStore(db);
    },
  };
}

/** One redis-server for the suite; each store gets its own key prefix. Call at the top level. */
export function redisStores(): StoreImplementation & { client(): Redis } {
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
  const connected = (): Redis => {
    if (!client) throw new Error('redis-server not started');
    return client;
  };
  return {
    name: 'RedisPredictionStore',
    describe: describeRedis,
    client: connected,
    async create() {
      return new RedisPredictionStore(connected(), { prefix: `test:${randomUUID()}:` });
    },
  };
}
