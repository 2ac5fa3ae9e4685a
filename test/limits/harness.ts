import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll } from 'vitest';
import { MemoryLimiter } from '../../src/limits/memory.js';
import { RedisLimiter } from '../../src/limits/redis.js';
import type { Admission, BucketLimits, BucketSpec, Lease, Limiter, Refusal } from '../../src/limits/types.js';
import { redisServerAvailable, startRedis, type TestRedis } from '../helpers/redis.js';

/** A limiter under test and a way to let its time pass. */
export interface Subject {
  limiter: Limiter;
  /** Advances the fake clock (memory) or sleeps (Redis, whose clock is the server's). */
  wait(ms: number): Promise<void>;
}

export interface Harness {
  name: string;
  redis: boolean;
  create(options?: { leaseMs?: number }): Promise<Subject>;
}

/** A start that is not aligned to any window, as a real clock would be. */
const FAKE_EPOCH = 1_700_000_000_000 + 123;

export function memoryHarness(): Harness {
  return {
    name: 'memory',
    redis: false,
    async create(options = {}) {
      let now = FAKE_EPOCH;
      const limiter = new MemoryLimiter({ now: () => now, leaseMs: options.leaseMs });
      return {
        limiter,
        async wait(ms) {
          now += ms;
        },
      };
    },
  };
}

/** Starts one redis-server for the suite (in beforeAll) and closes every limiter it made (afterAll). */
export function redisHarness(): Harness & { server(): TestRedis } {
  let server: TestRedis | undefined;
  const limiters: RedisLimiter[] = [];
  if (redisServerAvailable) {
    beforeAll(async () => {
      server = await startRedis();
    });
    afterAll(async () => {
      await Promise.all(limiters.map((l) => l.close()));
      await server?.close();
    });
  }
  return {
    name: 'redis',
    redis: true,
    server() {
      if (!server) throw new Error('redis-server not started');
      return server;
    },
    async create(options = {}) {
      if (!server) throw new Error('redis-server not started');
      // Generous deadline: a cold, busy test machine must not turn a burst into timeouts.
      const limiter = new RedisLimiter({ url: server.url, leaseMs: options.leaseMs, commandTimeoutMs: 2000 });
      limiters.push(limiter);
      await limiter.ready();
      return { limiter, wait: (ms) => sleep(ms) };
    },
  };
}

export function account(): string {
  return `acct-${randomUUID()}`;
}

export function bucket(key: string, limits: Partial<BucketLimits>): BucketSpec {
  return { key, limits: { windowSeconds: 3600, ...limits } };
}

export function granted(admission: Admission): Lease {
  if (!admission.ok)
    throw new Error(`expected an admission, got a refusal: ${JSON.stringify(admission.refusal)}`);
  return admission.lease;
}

export function refused(admission: Admission): Refusal {
  if (admission.ok) throw new Error('expected a refusal, got an admission');
  return admission.refusal;
}
