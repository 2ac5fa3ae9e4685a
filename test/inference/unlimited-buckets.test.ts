/**
 * A bucket with no ceiling is left out of admission: an unlimited tier costs no limiter work, and on
 * Redis no round trip at all (admission and release), while a tier with a ceiling still goes through the
 * shared limiter on every request.
 */
import { Redis } from 'ioredis';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/load.js';
import { bucketsFor } from '../../src/inference/quota.js';
import { RedisLimiter } from '../../src/limits/redis.js';
import { describeRedis, startRedis, type TestRedis } from '../helpers/redis.js';

const yaml = (tiers: string) => `
providers:
  local: { kind: local }
tiers:
${tiers}
accounts:
  - { name: test, tier: capped }
  - { name: other, tier: free }
models:
  - namespace: gantry/local-chat
    name: Local chat
    type: text
    apis: [chat]
    routes: [{ provider: local, model: local-chat }]
  - namespace: acme/limited-chat
    name: Limited chat
    type: text
    apis: [chat]
    limits: { concurrency: 3 }
    routes: [{ provider: local, model: local-chat }]
`;

const TIERS = `  default: {}
  free: {}
  capped:
    account: { requests: 1000 }`;

it('keeps only the buckets that have a ceiling', () => {
  const config = parseConfig(yaml(TIERS), 'test.yaml', {});
  const chat = config.models.find((m) => m.namespace === 'gantry/local-chat');
  const limited = config.models.find((m) => m.namespace === 'acme/limited-chat');
  if (!chat || !limited) throw new Error('models missing');
  expect(bucketsFor(config, 'free', chat)).toEqual([]);
  expect(bucketsFor(config, 'capped', chat).map((b) => b.key)).toEqual(['account']);
  expect(bucketsFor(config, 'capped', chat)[0]?.limits).toMatchObject({ requests: 1000 });
  // The model's own limits make a model bucket even on an unlimited tier.
  const free = bucketsFor(config, 'free', limited);
  expect(free).toHaveLength(1);
  expect(free[0]?.limits).toMatchObject({ concurrency: 3 });
  expect(free[0]?.key).not.toBe('account');
});

describeRedis('on Redis', () => {
  let redis: TestRedis;
  let admin: Redis;
  let limiter: RedisLimiter;

  beforeAll(async () => {
    redis = await startRedis();
    admin = new Redis(redis.url, { maxRetriesPerRequest: 1 });
    limiter = new RedisLimiter({ url: redis.url });
    await limiter.ready();
  });

  afterAll(async () => {
    await limiter?.close();
    admin?.disconnect();
    await redis?.close();
  });

  /** Script calls this Redis (used by nothing but the limiter) has run so far. */
  async function scriptCalls(): Promise<number> {
    const stats = await admin.info('commandstats');
    let calls = 0;
    for (const match of stats.matchAll(/^cmdstat_(?:evalsha|eval):calls=(\d+)/gm)) calls += Number(match[1]);
    return calls;
  }

  async function admitAndRelease(tier: string, model: string): Promise<void> {
    const config = parseConfig(yaml(TIERS), 'test.yaml', {});
    const entry = config.models.find((m) => m.namespace === model);
    if (!entry) throw new Error(`no model ${model}`);
    const admission = await limiter.admit({
      accountId: `acct-${tier}`,
      buckets: bucketsFor(config, tier, entry),
      inputTokens: 10,
      outputTokens: 10,
    });
    if (!admission.ok) throw new Error('refused');
    await limiter.release(admission.lease, { inputTokens: 10, outputTokens: 10 });
  }

  it('an unlimited tier makes no limiter round trip; a ceiling makes one per admission', async () => {
    const before = await scriptCalls();
    for (let i = 0; i < 5; i++) await admitAndRelease('free', 'gantry/local-chat');
    expect(await scriptCalls()).toBe(before);
    expect(await admin.keys('gantry:rl:*')).toEqual([]);

    // A request ceiling: one admission script per request (nothing to give back on release).
    for (let i = 0; i < 5; i++) await admitAndRelease('capped', 'gantry/local-chat');
    const capped = await scriptCalls();
    expect(capped - before).toBe(5);

    // A model's concurrency limit on an unlimited tier: admission and release both go to Redis.
    for (let i = 0; i < 4; i++) await admitAndRelease('free', 'acme/limited-chat');
    expect((await scriptCalls()) - capped).toBe(8);
  });
});
