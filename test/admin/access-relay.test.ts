/**
 * A revocation made through the admin API while Redis stalls is relayed once Redis answers again, on a
 * retry timer: instance B refuses the key without its subscriber ever reconnecting. Two AccessChanges on
 * their own stores (as two instances with their own gantry.db), a real redis-server, and a publishing
 * connection whose commands time out during a CLIENT PAUSE.
 */
import { Redis } from 'ioredis';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { AccessChanges, CHANNEL } from '../../src/auth/changes.js';
import { hashKey } from '../../src/auth/keys.js';
import { SqliteStore } from '../../src/store/sqlite.js';
import { describeRedis, startRedis, type TestRedis } from '../helpers/redis.js';
import { until } from '../helpers/wait.js';

const KEY = 'gty_relay-retry-0123456789abcdefghijklmnopqrstuv';
const PAUSE_MS = 1_500;
/** After Redis answers again: the first retry comes within 1 s (RELAY_RETRY), the next within 2 s. */
const WITHIN_MS = 3_500;

function instanceStore(): SqliteStore {
  const store = new SqliteStore(':memory:');
  store.addAccountRecord({
    id: 'acct_relay',
    name: 'relay',
    tier: 'default',
    status: 'active',
    createdAt: new Date().toISOString(),
  });
  store.addKeyRecord(
    {
      id: 'key_relay',
      accountId: 'acct_relay',
      name: 'ci',
      prefix: KEY.slice(0, 12),
      createdAt: new Date().toISOString(),
      revokedAt: null,
      lastUsedAt: null,
    },
    hashKey(KEY),
  );
  return store;
}

describeRedis('access changes relayed while Redis stalls', () => {
  let redis: TestRedis;
  const clients: Redis[] = [];
  const stores: SqliteStore[] = [];
  const closers: Array<() => void> = [];
  beforeAll(async () => {
    redis = await startRedis();
  });
  afterAll(async () => {
    for (const close of closers) close();
    for (const client of clients) client.disconnect();
    for (const store of stores) store.close();
    await redis?.close();
  });

  it('retries a failed revocation until it is heard, without the subscriber reconnecting', async () => {
    // Instance A publishes with a short command timeout (a stalled Redis fails its relay).
    const publisher = new Redis(redis.url, { maxRetriesPerRequest: 1, commandTimeout: 300 });
    const storeA = instanceStore();
    const errors: Error[] = [];
    let recovered = 0;
    const a = new AccessChanges(storeA, publisher, {
      onRelayError: (error) => errors.push(error),
      onRelayRecovered: () => recovered++,
    });
    // Instance B hears the channel.
    const storeB = instanceStore();
    const b = new AccessChanges(storeB);
    const subscriber = new Redis(redis.url);
    let readies = 0;
    subscriber.on('ready', () => readies++);
    subscriber.on('message', (channel: string, message: string) => {
      if (channel === CHANNEL) b.receive(message);
    });
    await subscriber.subscribe(CHANNEL);
    const admin = new Redis(redis.url);
    clients.push(publisher, subscriber, admin);
    stores.push(storeA, storeB);
    closers.push(
      () => a.close(),
      () => b.close(),
    );
    await until('the subscriber to be ready', () => readies === 1);

    await admin.call('CLIENT', 'PAUSE', String(PAUSE_MS), 'WRITE');
    const pausedUntil = Date.now() + PAUSE_MS;
    storeA.revokeKeyByHash(hashKey(KEY));
    await a.keyRevoked(hashKey(KEY));
    // The relay failed (timed out) while Redis was paused: B has not heard.
    expect(storeB.findKeyByHash(hashKey(KEY))?.key.revokedAt).toBeNull();

    await until(
      'instance B to refuse the revoked key',
      () => storeB.findKeyByHash(hashKey(KEY))?.key.revokedAt !== null,
      PAUSE_MS + WITHIN_MS,
    );
    expect(Date.now() - pausedUntil).toBeLessThan(WITHIN_MS);
    // Heard through the retry, never through a reconnect's catch-up, and logged once.
    expect(readies).toBe(1);
    expect(errors).toHaveLength(1);
    await until('the relay to be reported working again', () => recovered === 1);
  }, 15_000);
});
