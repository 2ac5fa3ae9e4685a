import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { MemoryEventBus } from '../../src/predictions/bus-memory.js';
import { RedisEventBus } from '../../src/predictions/bus-redis.js';
import type { BusMessage, EventBus } from '../../src/predictions/types.js';
import { describeRedis, redisServerAvailable, startRedis, type TestRedis } from '../helpers/redis.js';

/** A way to make fresh buses of one implementation. */
interface Implementation {
  name: string;
  /** `describe`, or `describeRedis` for implementations that need redis-server. */
  describe: (name: string, body: () => void) => void;
  create(): Promise<EventBus>;
}

function memory(): Implementation {
  return { name: 'MemoryEventBus', describe, create: async () => new MemoryEventBus() };
}

/** One redis-server for the suite; each bus gets its own channel prefix. */
function redis(): Implementation & { server(): TestRedis } {
  let server: TestRedis | undefined;
  if (redisServerAvailable) {
    beforeAll(async () => {
      server = await startRedis();
    });
    afterAll(async () => {
      await server?.close();
    });
  }
  const running = () => {
    if (!server) throw new Error('redis-server not started');
    return server;
  };
  return {
    name: 'RedisEventBus',
    describe: describeRedis,
    server: running,
    async create() {
      return new RedisEventBus({ url: running().url, prefix: `test:${randomUUID()}:` });
    },
  };
}

/** Polls until `check` holds, or fails with `what` after `ms`. */
async function until(what: string, check: () => boolean, ms = 3000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(5);
  }
}

const status = (s: 'processing' | 'succeeded'): BusMessage => ({ type: 'status', status: s });

/** The same behaviour, whichever bus carries the messages. */
function contract(impl: Implementation): void {
  const open: EventBus[] = [];
  afterEach(async () => {
    await Promise.all(open.splice(0).map((b) => b.close()));
  });

  const fresh = async () => {
    const bus = await impl.create();
    open.push(bus);
    return bus;
  };

  it('delivers every message kind to a subscriber of that prediction, in order', async () => {
    const bus = await fresh();
    const got: BusMessage[] = [];
    await bus.subscribe('p-1', (m) => got.push(m));
    const messages: BusMessage[] = [
      { type: 'stream', event: { seq: 1, event: 'output', data: '["https://x/y.png"]' } },
      status('processing'),
      { type: 'cancel' },
      { type: 'stream', event: { seq: 2, event: 'done', data: '{}' } },
    ];
    for (const m of messages) await bus.publish('p-1', m);
    await until('all messages', () => got.length === messages.length);
    expect(got).toEqual(messages);
  });

  it("reaches only that prediction's subscribers", async () => {
    const bus = await fresh();
    const forA: BusMessage[] = [];
    const forB: BusMessage[] = [];
    await bus.subscribe('p-a', (m) => forA.push(m));
    await bus.subscribe('p-b', (m) => forB.push(m));
    await bus.publish('p-a', status('processing'));
    await bus.publish('p-b', status('succeeded'));
    // Messages arrive in publish order, so once B's is in, A's would have been too.
    await until('both messages', () => forA.length === 1 && forB.length === 1);
    expect(forA).toEqual([status('processing')]);
    expect(forB).toEqual([status('succeeded')]);
  });

  it('calls every listener of a prediction, and unsubscribe stops only that one', async () => {
    const bus = await fresh();
    const first: BusMessage[] = [];
    const second: BusMessage[] = [];
    const sentinel: BusMessage[] = [];
    const unsubscribeFirst = await bus.subscribe('p-1', (m) => first.push(m));
    await bus.subscribe('p-1', (m) => second.push(m));
    await bus.subscribe('p-sentinel', (m) => sentinel.push(m));
    await bus.publish('p-1', status('processing'));
    await until('both listeners', () => first.length === 1 && second.length === 1);

    unsubscribeFirst();
    unsubscribeFirst(); // twice is harmless
    await bus.publish('p-1', status('succeeded'));
    await bus.publish('p-sentinel', { type: 'cancel' });
    await until('the second listener and the sentinel', () => second.length === 2 && sentinel.length === 1);
    expect(first).toEqual([status('processing')]);
    expect(second).toEqual([status('processing'), status('succeeded')]);
  });

  it('after the last unsubscribe nothing arrives, and subscribing again works', async () => {
    const bus = await fresh();
    const got: BusMessage[] = [];
    const sentinel: BusMessage[] = [];
    await bus.subscribe('p-sentinel', (m) => sentinel.push(m));
    const unsubscribe = await bus.subscribe('p-1', (m) => got.push(m));
    unsubscribe();
    await bus.publish('p-1', status('processing'));
    await bus.publish('p-sentinel', { type: 'cancel' });
    await until('the sentinel', () => sentinel.length === 1);
    expect(got).toEqual([]);

    const again: BusMessage[] = [];
    await bus.subscribe('p-1', (m) => again.push(m));
    await bus.publish('p-1', status('succeeded'));
    await until('the new listener', () => again.length === 1);
    expect(got).toEqual([]);
  });

  it('publishing to a prediction nobody listens to is fine', async () => {
    const bus = await fresh();
    await expect(bus.publish(`p-${randomUUID()}`, { type: 'cancel' })).resolves.toBeUndefined();
  });
}

const redisImpl = redis();
const implementations: Implementation[] = [memory(), redisImpl];

for (const impl of implementations) {
  impl.describe(`EventBus contract: ${impl.name}`, () => contract(impl));
}

/** What only a shared bus can do: instances (processes, in production) that hear each other. */
describeRedis('EventBus on Redis: between instances', () => {
  const open: EventBus[] = [];
  afterEach(async () => {
    await Promise.all(open.splice(0).map((b) => b.close()));
  });

  function pair(): [RedisEventBus, RedisEventBus] {
    const prefix = `test:${randomUUID()}:`;
    const url = redisImpl.server().url;
    const a = new RedisEventBus({ url, prefix });
    const b = new RedisEventBus({ url, prefix });
    open.push(a, b);
    return [a, b];
  }

  it("two instances see each other's messages", async () => {
    const [a, b] = pair();
    const atA: BusMessage[] = [];
    const atB: BusMessage[] = [];
    await a.subscribe('p-1', (m) => atA.push(m));
    await b.subscribe('p-1', (m) => atB.push(m));
    await a.publish('p-1', status('processing'));
    await b.publish('p-1', { type: 'cancel' });
    await until('both messages on both', () => atA.length === 2 && atB.length === 2);
    expect(atA).toContainEqual({ type: 'cancel' });
    expect(atB).toContainEqual(status('processing'));
  });

  it('instances with another prefix do not hear them', async () => {
    const [a] = pair();
    const stranger = new RedisEventBus({ url: redisImpl.server().url, prefix: `test:${randomUUID()}:` });
    open.push(stranger);
    const heard: BusMessage[] = [];
    const own: BusMessage[] = [];
    await stranger.subscribe('p-1', (m) => heard.push(m));
    await a.subscribe('p-1', (m) => own.push(m));
    await a.publish('p-1', { type: 'cancel' });
    await until('the own message', () => own.length === 1);
    await sleep(50);
    expect(heard).toEqual([]);
  });

  it('subscribes a channel once however many listeners, and unsubscribes it after the last', async () => {
    const prefix = `test:${randomUUID()}:`;
    const bus = new RedisEventBus({ url: redisImpl.server().url, prefix });
    open.push(bus);
    const probe = new Redis(redisImpl.server().url);
    const subscribers = async (id: string): Promise<number> => {
      const reply = (await probe.pubsub('NUMSUB', `${prefix}${id}`)) as [string, number];
      return Number(reply[1]);
    };
    try {
      const offs = await Promise.all([1, 2, 3].map(() => bus.subscribe('p-counted', () => {})));
      expect(await subscribers('p-counted')).toBe(1);
      offs[0]!();
      offs[1]!();
      await sleep(50);
      expect(await subscribers('p-counted')).toBe(1);
      offs[2]!();
      for (let i = 0; i < 100 && (await subscribers('p-counted')) !== 0; i++) await sleep(10);
      expect(await subscribers('p-counted')).toBe(0);

      // Unsubscribe and subscribe again in a row: it ends subscribed.
      const off = await bus.subscribe('p-flap', () => {});
      off();
      const got: BusMessage[] = [];
      await bus.subscribe('p-flap', (m) => got.push(m));
      expect(await subscribers('p-flap')).toBe(1);
      await bus.publish('p-flap', { type: 'cancel' });
      await until('the message after the flap', () => got.length === 1);
    } finally {
      await probe.quit();
    }
  });

  it('a listener that throws does not keep the others from their message', async () => {
    const errors: Error[] = [];
    const bus = new RedisEventBus({
      url: redisImpl.server().url,
      prefix: `test:${randomUUID()}:`,
      onError: (e) => errors.push(e),
    });
    open.push(bus);
    const got: BusMessage[] = [];
    await bus.subscribe('p-1', () => {
      throw new Error('listener bug');
    });
    await bus.subscribe('p-1', (m) => got.push(m));
    await bus.publish('p-1', { type: 'cancel' });
    await until('the healthy listener', () => got.length === 1);
    expect(errors.map((e) => e.message)).toEqual(['listener bug']);
  });
});
