import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import { LimiterUnavailableError } from '../../src/limits/errors.js';
import { RedisLimiter } from '../../src/limits/redis.js';
import { limiterRedisOptions } from '../../src/limits/redis-client.js';
import type { Admission, AdmitRequest } from '../../src/limits/types.js';
import { describeRedis, startRedis, type TestRedis } from '../helpers/redis.js';
import { account, bucket, granted, refused } from './harness.js';

describeRedis('redis limiter', () => {
  let server: TestRedis;
  let admin: Redis;
  const opened: Array<{ close(): Promise<void> }> = [];

  beforeAll(async () => {
    server = await startRedis();
    admin = new Redis(server.url, { maxRetriesPerRequest: 1, retryStrategy: () => 100 });
    admin.on('error', () => {}); // it reconnects by itself after the outage test
  });

  afterEach(async () => {
    await Promise.all(opened.splice(0).map((l) => l.close()));
  });

  afterAll(async () => {
    admin.disconnect();
    await server.close();
  });

  async function limiter(
    options: { leaseMs?: number; commandTimeoutMs?: number } = {},
  ): Promise<RedisLimiter> {
    // Generous deadline by default: a cold, busy test machine must not turn a burst into timeouts.
    const l = new RedisLimiter({ url: server.url, commandTimeoutMs: 2000, ...options });
    opened.push(l);
    await l.ready();
    return l;
  }

  const req = (accountId: string, concurrency: number, leaseMs?: number): AdmitRequest => ({
    accountId,
    buckets: [bucket('account', { concurrency, requests: 10_000 }), bucket('model:m', { inputTokens: 1e9 })],
    inputTokens: 1,
    outputTokens: 1,
    leaseMs,
  });

  it('two instances sharing one Redis never admit more than the ceiling together', async () => {
    const a = await limiter();
    const b = await limiter();
    expect(a.client).not.toBe(b.client);
    const acct = account();
    const burst = (l: RedisLimiter) => Array.from({ length: 100 }, () => l.admit(req(acct, 10)));
    const results = await Promise.all([...burst(a), ...burst(b)]);
    expect(results.filter((r) => r.ok)).toHaveLength(10);
    // Slots freed by one instance are usable by the other.
    const mine = results.find((r): r is Extract<Admission, { ok: true }> => r.ok)!;
    refused(await b.admit(req(acct, 10)));
    await a.release(mine.lease);
    granted(await b.admit(req(acct, 10)));
  });

  it('a killed instance’s lease expires and frees the slot', async () => {
    const doomed = new RedisLimiter({ url: server.url });
    await doomed.ready();
    const acct = account();
    granted(await doomed.admit(req(acct, 1, 300)));
    doomed.client.disconnect(); // gone without release
    const survivor = await limiter();
    const refusal = refused(await survivor.admit(req(acct, 1)));
    expect(refusal.metric).toBe('concurrency');
    expect(refusal.retryAfterMs).toBeLessThanOrEqual(300);
    await sleep(refusal.retryAfterMs + 20);
    granted(await survivor.admit(req(acct, 1)));
  });

  it('uses exactly one round trip per admission and one per release', async () => {
    const l = await limiter();
    const acct = account();
    const monitor = await admin.monitor();
    const seen: string[] = [];
    monitor.on('monitor', (_time: string, args: string[], source: string) => {
      if (source !== 'lua') seen.push(String(args[0]).toLowerCase());
    });
    const settle = () => sleep(100);
    const expectCommands = async (expected: string[]) => {
      await settle();
      expect(seen.splice(0)).toEqual(expected);
    };
    await settle();
    seen.length = 0;
    // The first call on a connection carries the script itself; later ones only its SHA.
    granted(await l.admit(req(acct, 100)));
    await expectCommands(['eval']);
    const lease = granted(await l.admit(req(acct, 100)));
    await expectCommands(['evalsha']);
    refused(await l.admit(req(acct, 1)));
    await expectCommands(['evalsha']);
    await l.release(lease, { inputTokens: 5, outputTokens: 5 });
    await expectCommands(['eval']);
    const other = granted(await l.admit(req(acct, 100)));
    await l.release(other, { inputTokens: 5, outputTokens: 5 });
    await expectCommands(['evalsha', 'evalsha']);
    monitor.disconnect();
  });

  it('keeps working after the script cache is flushed (NOSCRIPT falls back to EVAL)', async () => {
    const l = await limiter();
    const acct = account();
    granted(await l.admit(req(acct, 100)));
    await admin.script('FLUSH');
    granted(await l.admit(req(acct, 100)));
  });

  it('keeps every key of an account in one hash slot, with TTLs', async () => {
    const l = await limiter();
    const acct = `weird{id}-${account()}`;
    const lease = granted(
      await l.admit({
        accountId: acct,
        buckets: [
          bucket('account', { concurrency: 5, requests: 10 }),
          bucket('model:org/model-{x}', { inputTokens: 100, windowSeconds: 60 }),
        ],
        inputTokens: 3,
        outputTokens: 1,
      }),
    );
    const prefix = l.keyPrefixOf(acct);
    expect(prefix).toMatch(/^gantry:rl:\{[^{}]+\}:$/);
    const keys = (await admin.keys(`${prefix.replace(/[{}]/g, '\\$&')}*`)).sort();
    expect(keys).toHaveLength(3);
    const windowMs = 60_000;
    expect(keys).toEqual(
      [
        `${prefix}c:account`,
        `${prefix}w:3600000:${Math.floor(lease.admittedAt / 3_600_000)}:account`,
        `${prefix}w:${windowMs}:${Math.floor(lease.admittedAt / windowMs)}:model:org/model-{x}`,
      ].sort(),
    );
    for (const key of keys) {
      const tag = key.slice(key.indexOf('{') + 1, key.indexOf('}'));
      expect(tag).toBe(prefix.slice(prefix.indexOf('{') + 1, prefix.indexOf('}')));
      const ttl = await admin.pttl(key);
      expect(ttl).toBeGreaterThan(0);
      expect(ttl).toBeLessThanOrEqual(2 * 3_600_000 + 1000);
    }
    const modelKey = keys.find((k) => k.includes(':w:60000:'))!;
    expect(await admin.hgetall(modelKey)).toEqual({ i: '3' });
    expect(await admin.zscore(`${prefix}c:account`, lease.id)).toBe(String(lease.admittedAt + lease.leaseMs));
    await l.release(lease, { inputTokens: 1, outputTokens: 1 });
    expect(await admin.hgetall(modelKey)).toEqual({ i: '1' });
    expect(await admin.exists(`${prefix}c:account`)).toBe(0);
  });

  it('a hung Redis makes admissions fail within the command timeout', async () => {
    const l = await limiter({ commandTimeoutMs: 150 });
    const acct = account();
    granted(await l.admit(req(acct, 100)));
    await admin.client('PAUSE', 600, 'ALL');
    const started = performance.now();
    await expect(l.admit(req(acct, 100))).rejects.toBeInstanceOf(LimiterUnavailableError);
    expect(performance.now() - started).toBeLessThan(500);
    await sleep(700);
    granted(await l.admit(req(acct, 100)));
  });

  it('fails fast while Redis is down and recovers by itself when it is back', async () => {
    const errors: Error[] = [];
    const l = new RedisLimiter({ url: server.url, onError: (e) => errors.push(e) });
    opened.push(l);
    await l.ready();
    const acct = account();
    const lease = granted(await l.admit(req(acct, 100)));
    await server.stop();
    for (let i = 0; i < 5; i++) {
      const started = performance.now();
      const failure = await l.admit(req(acct, 100)).catch((e: unknown) => e);
      expect(failure).toBeInstanceOf(LimiterUnavailableError);
      expect(performance.now() - started).toBeLessThan(1000);
      await sleep(50);
    }
    // Neither release nor extend rejects during the outage.
    expect(await l.extend(lease)).toBe('unavailable');
    expect(await l.release(lease)).toBe('unavailable');
    expect(await l.release(lease)).toBe('already-released');
    await server.start();
    let admission: Admission | undefined;
    const deadline = Date.now() + 5000;
    while (!admission && Date.now() < deadline) {
      admission = await l.admit(req(acct, 100)).catch(() => undefined);
      if (!admission) await sleep(100);
    }
    expect(admission?.ok).toBe(true);
    expect(errors.length).toBeGreaterThan(0);
  });

  it('an admission before the connection is ready fails fast instead of queueing', async () => {
    const l = new RedisLimiter({ url: server.url });
    opened.push(l);
    const started = performance.now();
    await expect(l.admit(req(account(), 1))).rejects.toBeInstanceOf(LimiterUnavailableError);
    expect(performance.now() - started).toBeLessThan(200);
    await l.ready();
    granted(await l.admit(req(account(), 1)));
  });

  it('can use a client it does not own, and leaves it open on close', async () => {
    const client = new Redis(server.url, limiterRedisOptions());
    const l = new RedisLimiter({ client, keyPrefix: 'other:rl:' });
    await l.ready();
    const acct = account();
    granted(await l.admit(req(acct, 1)));
    expect(await client.exists(`other:rl:{${acct}}:c:account`)).toBe(1);
    await l.close();
    expect(await client.ping()).toBe('PONG');
    client.disconnect();
  });
});
