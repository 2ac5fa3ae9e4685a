/**
 * E-mail subscriptions, piece by piece: the subscriber store's contract, run against SQLite and Redis;
 * the mail queue (retries with backoff, permanent refusals, the cap on sends in flight, masked log lines);
 * the subscription service's rate limits, expiry and unsubscribe tokens, with a transport that records.
 */
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { PlaneDeps } from '../../src/admin/plane.js';
import type { IncidentEvent } from '../../src/status/incidents.js';
import { MailQueue, type MailTransport, type OutgoingMail, smtpSecrets } from '../../src/status/mailer.js';
import {
  hashToken,
  maskEmail,
  newToken,
  normaliseEmail,
  type SubscriberStore,
} from '../../src/status/subscribers.js';
import { RedisSubscriberStore } from '../../src/status/subscribers-redis.js';
import { SqliteSubscriberStore } from '../../src/status/subscribers-sqlite.js';
import {
  createSubscriptions,
  type SubscriptionOptions,
  type Subscriptions,
} from '../../src/status/subscriptions.js';
import { SqliteStore } from '../../src/store/sqlite.js';
import { describeRedis, startRedis, type TestRedis } from '../helpers/redis.js';
import { until, waitFor } from '../helpers/wait.js';

const HOUR = 3_600_000;

/** Everything a store holds, as text: to show no raw token sits in it. */
type Dump = () => Promise<string>;

interface Made {
  store: SubscriberStore;
  dump: Dump;
  close(): Promise<void>;
}

function storeContract(name: string, make: () => Promise<Made>) {
  describe(`subscriber store contract: ${name}`, () => {
    let store: SubscriberStore;
    let dump: Dump;
    let made: Made;
    beforeAll(async () => {
      made = await make();
      ({ store, dump } = made);
    });
    afterAll(() => made.close());

    it('a pending subscription: found by its token hash until it expires, then confirmed once', async () => {
      const now = Date.now();
      const { token, hash } = newToken();
      const pending = await store.upsertPending('one@example.com', hash, now + HOUR, now);
      expect(pending.state).toBe('pending');
      const found = await store.findPending(hash, now);
      expect(found).toMatchObject({ id: pending.id, email: 'one@example.com', confirmed: false });
      expect(found?.pendingUntil).toBe(now + HOUR);
      expect(await store.findPending(hash, now + HOUR)).toBeUndefined();
      expect(await store.confirm(hash, now + HOUR)).toBeUndefined();
      expect(await store.findPending(hashToken('another token'), now)).toBeUndefined();

      // Only the hash is stored.
      const stored = await dump();
      expect(stored).toContain(hash);
      expect(stored).not.toContain(token);

      const confirmed = await store.confirm(hash, now + 1);
      expect(confirmed).toMatchObject({
        id: pending.id,
        confirmed: true,
        confirmedAt: now + 1,
        pendingUntil: null,
      });
      expect(await store.confirm(hash, now + 2)).toBeUndefined();
      expect(await store.findPending(hash, now + 2)).toBeUndefined();
      expect((await store.listConfirmed()).map((s) => s.id)).toContain(pending.id);
      expect(await dump()).not.toContain(hash);

      // Subscribing a confirmed address changes nothing and stores no token.
      const again = newToken();
      expect(await store.upsertPending('one@example.com', again.hash, now + HOUR, now)).toEqual({
        id: pending.id,
        state: 'confirmed',
      });
      expect(await store.findPending(again.hash, now)).toBeUndefined();
      expect((await store.get(pending.id))?.confirmed).toBe(true);
    });

    it('subscribing a pending address again replaces its token', async () => {
      const now = Date.now();
      const first = newToken();
      const second = newToken();
      const a = await store.upsertPending('two@example.com', first.hash, now + HOUR, now);
      const b = await store.upsertPending('two@example.com', second.hash, now + 2 * HOUR, now);
      expect(b).toEqual({ id: a.id, state: 'pending' });
      expect(await store.findPending(first.hash, now)).toBeUndefined();
      expect((await store.findPending(second.hash, now))?.pendingUntil).toBe(now + 2 * HOUR);
      expect(await store.confirm(first.hash, now)).toBeUndefined();
      expect((await store.confirm(second.hash, now))?.id).toBe(a.id);
    });

    it('remove: the record, its token and its place among the confirmed go; the address may come back', async () => {
      const now = Date.now();
      const t = newToken();
      const { id } = await store.upsertPending('three@example.com', t.hash, now + HOUR, now);
      await store.confirm(t.hash, now);
      expect(await store.remove(id)).toBe(true);
      expect(await store.remove(id)).toBe(false);
      expect(await store.get(id)).toBeUndefined();
      expect((await store.listConfirmed()).map((s) => s.id)).not.toContain(id);
      expect(await dump()).not.toContain('three@example.com');
      const back = await store.upsertPending('three@example.com', newToken().hash, now + HOUR, now);
      expect(back.state).toBe('pending');
      expect(back.id).not.toBe(id);

      // A pending record can be removed too (the unsubscribe link of a confirmation mail).
      const p = newToken();
      const pending = await store.upsertPending('four@example.com', p.hash, now + HOUR, now);
      expect(await store.remove(pending.id)).toBe(true);
      expect(await store.findPending(p.hash, now)).toBeUndefined();
    });

    it('an expired pending record goes away', async () => {
      const t = newToken();
      const { id } = await store.upsertPending('five@example.com', t.hash, Date.now() + 200, Date.now());
      expect(await store.get(id)).toBeDefined();
      await until(
        'the expired pending record to go',
        async () => {
          await store.purgeExpired(Date.now());
          return (await store.get(id)) === undefined;
        },
        5_000,
        50,
      );
      expect(await store.findPending(t.hash, Date.now())).toBeUndefined();
    });

    it('hit counts attempts per bucket in fixed windows', async () => {
      const now = 10 * HOUR + 5;
      expect(await store.hit('ip:192.0.2.1', HOUR, now)).toBe(1);
      expect(await store.hit('ip:192.0.2.1', HOUR, now + 1)).toBe(2);
      expect(await store.hit('ip:192.0.2.2', HOUR, now + 1)).toBe(1);
      expect(await store.hit('ip:192.0.2.1', HOUR, now + HOUR)).toBe(1);
      expect(await dump()).not.toContain('192.0.2.1');
    });
  });
}

storeContract('SQLite', async () => {
  const sqlite = new SqliteStore(':memory:');
  const store = new SqliteSubscriberStore(sqlite.handle);
  const dump = async () => JSON.stringify(sqlite.handle.prepare('SELECT * FROM status_subscribers').all());
  return {
    store,
    dump,
    close: async () => {
      await store.close();
      sqlite.close();
    },
  };
});

describeRedis('with Redis', () => {
  let redis: TestRedis;
  let client: Redis;
  beforeAll(async () => {
    redis = await startRedis();
    client = new Redis(redis.url);
  });
  afterAll(async () => {
    client.disconnect();
    await redis.close();
  });
  storeContract('Redis', async () => {
    const store = new RedisSubscriberStore(client);
    // Every key with its value, whatever its type.
    const dump = async () => {
      const keys = await client.keys('*');
      const values = await Promise.all(
        keys.map(async (k) => {
          const type = await client.type(k);
          if (type === 'hash') return client.hgetall(k);
          if (type === 'set') return client.smembers(k);
          return client.get(k);
        }),
      );
      return JSON.stringify([keys, values]);
    };
    return { store, dump, close: () => store.close() };
  });
});

interface LogLine {
  level: string;
  obj: object;
  msg: string | undefined;
}

function recordingLog(lines: LogLine[]): PlaneDeps['log'] {
  const at = (level: string) => (obj: object, msg?: string) => lines.push({ level, obj, msg });
  return { info: at('info'), warn: at('warn'), error: at('error'), debug: at('debug') };
}

/** A transport that fails as told, records what it sent and how many sends overlapped. */
class FakeTransport implements MailTransport {
  sent: Array<OutgoingMail & { from: string }> = [];
  attempts = 0;
  inFlight = 0;
  maxInFlight = 0;
  /** Errors thrown by the next attempts, in order. */
  failures: Error[] = [];
  /** While set, sends wait for it. */
  gate: Promise<void> | undefined;
  closed = false;

  async sendMail(mail: OutgoingMail & { from: string }): Promise<unknown> {
    this.attempts += 1;
    this.inFlight += 1;
    this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
    try {
      if (this.gate) await this.gate;
      const failure = this.failures.shift();
      if (failure) throw failure;
      this.sent.push(mail);
      return {};
    } finally {
      this.inFlight -= 1;
    }
  }

  close(): void {
    this.closed = true;
  }
}

function smtpError(message: string, responseCode?: number): Error {
  return Object.assign(
    new Error(message),
    responseCode === undefined ? { code: 'ECONNECTION' } : { responseCode },
  );
}

function mail(to: string): OutgoingMail {
  return { to, subject: 's', text: 't', html: '<p>t</p>', headers: {} };
}

describe('MailQueue', () => {
  const FAST = { baseMs: 5, maxMs: 20 };

  it('retries temporary failures with backoff; log lines mask the address and hide the credentials', async () => {
    const transport = new FakeTransport();
    const lines: LogLine[] = [];
    const secrets = smtpSecrets('smtp://relay:p%40ss-w0rd-secret@127.0.0.1:2525');
    expect(secrets).toContain('p@ss-w0rd-secret');
    const queue = new MailQueue({
      from: 'status@x.test',
      transport,
      log: recordingLog(lines),
      backoff: FAST,
      secrets,
    });
    transport.failures = [
      smtpError('connect failed for relay with p@ss-w0rd-secret'),
      smtpError('451 <alice@example.com> greylisted', 451),
    ];
    expect(queue.enqueue(mail('alice@example.com'))).toBe(true);
    await queue.whenIdle();
    expect(transport.attempts).toBe(3);
    expect(transport.sent.map((m) => [m.to, m.from])).toEqual([['alice@example.com', 'status@x.test']]);
    const text = JSON.stringify(lines);
    expect(lines.filter((l) => l.msg === 'status mail not sent: retrying')).toHaveLength(2);
    expect(text).toContain(maskEmail('alice@example.com'));
    expect(text).toContain('"smtp_code":451');
    expect(text).not.toContain('alice@example.com');
    expect(text).not.toContain('p@ss-w0rd-secret');
    expect(text).not.toContain('relay');
    await queue.close();
    expect(transport.closed).toBe(true);
  });

  it('gives up at once on a permanent refusal (5xx), and after maxAttempts on temporary ones', async () => {
    const transport = new FakeTransport();
    const lines: LogLine[] = [];
    const queue = new MailQueue({
      from: 'f@x.test',
      transport,
      log: recordingLog(lines),
      backoff: FAST,
      maxAttempts: 3,
    });
    transport.failures = [smtpError('550 no such user', 550)];
    queue.enqueue(mail('a@example.com'));
    await queue.whenIdle();
    expect(transport.attempts).toBe(1);
    expect(lines.map((l) => l.msg)).toContain('status mail refused by the relay');

    transport.failures = [smtpError('down'), smtpError('down'), smtpError('down'), smtpError('down')];
    queue.enqueue(mail('b@example.com'));
    await queue.whenIdle();
    expect(transport.attempts).toBe(4);
    expect(lines.map((l) => l.msg)).toContain('status mail not sent: giving up');
    expect(transport.sent).toHaveLength(0);
    await queue.close();
  });

  it('never has more sends in flight than its concurrency; a full queue drops and says so', async () => {
    const transport = new FakeTransport();
    let open = () => {};
    transport.gate = new Promise<void>((resolve) => {
      open = resolve;
    });
    const lines: LogLine[] = [];
    const queue = new MailQueue({
      from: 'f@x.test',
      transport,
      log: recordingLog(lines),
      concurrency: 3,
      maxQueued: 5,
    });
    const accepted = Array.from({ length: 10 }, (_, i) => queue.enqueue(mail(`u${i}@example.com`)));
    // 3 in flight, 5 waiting, 2 dropped.
    expect(accepted.filter(Boolean)).toHaveLength(8);
    expect(lines.filter((l) => l.msg === 'status mail dropped: the send queue is full')).toHaveLength(2);
    await until('three sends in flight', () => transport.inFlight === 3);
    open();
    await queue.whenIdle();
    expect(transport.sent).toHaveLength(8);
    expect(transport.maxInFlight).toBe(3);
    await queue.close();
  });
});

describe('normaliseEmail', () => {
  it('keeps one plain address, lower case, and refuses anything a header could be built from', () => {
    expect(normaliseEmail('  Bob.Smith+status@Example.ORG ')).toBe('bob.smith+status@example.org');
    for (const bad of [
      'a@b',
      'no-at.example.com',
      'a@example.com\r\nBcc: x@example.com',
      'a@example.com, b@example.com',
      '"A" <a@example.com>',
      `${'a'.repeat(65)}@example.com`,
      42,
      undefined,
    ]) {
      expect(normaliseEmail(bad)).toBeUndefined();
    }
  });
});

describe('createSubscriptions', () => {
  let sqlite: SqliteStore;
  let transport: FakeTransport;
  let subscriptions: Subscriptions;
  let lines: LogLine[];

  function make(options: SubscriptionOptions, key = 'k') {
    sqlite = new SqliteStore(':memory:');
    transport = new FakeTransport();
    lines = [];
    const deps = {
      config: {
        web: { statusPage: { email: { smtpUrl: 'smtp://u:secret-pass@127.0.0.1:1', from: 'f@x.test' } } },
      },
      store: sqlite,
      redis: undefined,
      log: recordingLog(lines),
      publicUrl: () => 'https://status.example.test',
    } as unknown as PlaneDeps;
    subscriptions = createSubscriptions(deps, Buffer.from(key.repeat(32)), { ...options, transport });
    return subscriptions;
  }

  afterEach(async () => {
    await subscriptions.close();
    sqlite.close();
  });

  function tokenIn(m: OutgoingMail, path: string): string {
    const match = new RegExp(`${path}\\?token=([A-Za-z0-9._%-]+)`).exec(m.text);
    if (!match?.[1]) throw new Error(`no ${path} link in ${m.text}`);
    return decodeURIComponent(match[1]);
  }

  it('limits subscribe requests per IP (refused) and confirmation mails per address (silently)', async () => {
    make({ limits: { perIp: 3, perAddress: 2 } });
    expect(await subscriptions.subscribe('a@example.com', '192.0.2.1')).toBe('accepted');
    expect(await subscriptions.subscribe('a@example.com', '192.0.2.2')).toBe('accepted');
    // The address's third: the same answer, no mail.
    expect(await subscriptions.subscribe('a@example.com', '192.0.2.3')).toBe('accepted');
    expect(await subscriptions.subscribe('b@example.com', '192.0.2.1')).toBe('accepted');
    expect(await subscriptions.subscribe('c@example.com', '192.0.2.1')).toBe('accepted');
    expect(await subscriptions.subscribe('d@example.com', '192.0.2.1')).toBe('rate_limited');
    expect(await subscriptions.subscribe('not an address', '192.0.2.9')).toBe('invalid');
    await subscriptions.idle();
    expect(transport.sent.map((m) => m.to)).toEqual([
      'a@example.com',
      'a@example.com',
      'b@example.com',
      'c@example.com',
    ]);
  });

  it('a confirmation link stops working once the pending subscription expires', async () => {
    make({ limits: { pendingMs: 300 } });
    await subscriptions.subscribe('late@example.com', '192.0.2.1');
    const sent = await waitFor('the confirmation mail', () => transport.sent[0]);
    const token = tokenIn(sent, '/status/subscribe/confirm');
    expect(await subscriptions.checkConfirm(token)).toBe(true);
    await until('the link to expire', async () => !(await subscriptions.checkConfirm(token)), 5_000, 50);
    expect(await subscriptions.confirm(token)).toBe(false);
  });

  it('mails confirmed subscribers only; unsubscribe tokens hold only under their own secret key', async () => {
    make({});
    await subscriptions.subscribe('yes@example.com', '192.0.2.1');
    await subscriptions.subscribe('no@example.com', '192.0.2.1');
    await subscriptions.idle();
    const [yes, no] = transport.sent;
    if (!yes || !no) throw new Error('two confirmation mails expected');
    expect(await subscriptions.confirm(tokenIn(yes, '/status/subscribe/confirm'))).toBe(true);
    const unsubscribe = tokenIn(yes, '/status/unsubscribe');
    expect(yes.headers['List-Unsubscribe']).toBe(
      `<https://status.example.test/status/unsubscribe?token=${encodeURIComponent(unsubscribe)}>`,
    );

    const event: IncidentEvent = {
      kind: 'opened',
      incident: {
        id: 'inc',
        title: 'Slow',
        components: ['api'],
        impact: 'degraded',
        status: 'investigating',
        source: 'auto',
        openedAt: 0,
        resolvedAt: null,
        updates: [{ at: 0, status: 'investigating', message: 'Looking' }],
      },
    };
    subscriptions.notify(event);
    await waitFor('the incident mail', () => transport.sent[2]);
    await subscriptions.idle();
    expect(transport.sent.slice(2).map((m) => m.to)).toEqual(['yes@example.com']);
    expect(JSON.stringify(lines)).not.toContain('secret-pass');

    // The same id with a MAC from another key is not a token.
    const [id] = unsubscribe.split('.');
    expect(await subscriptions.checkUnsubscribe(`${id}.${'A'.repeat(32)}`)).toBe('invalid');
    expect(await subscriptions.checkUnsubscribe(unsubscribe)).toBe('subscribed');
    expect(await subscriptions.unsubscribe(unsubscribe)).toBe('subscribed');
    expect(await subscriptions.unsubscribe(unsubscribe)).toBe('gone');
  });
});
