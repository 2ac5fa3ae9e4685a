import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { AdminAuth } from '../../src/admin/scope.js';
import { SessionSigner } from '../../src/admin/session.js';
import { hashKey } from '../../src/auth/keys.js';
import { GantryError } from '../../src/errors.js';
import { SqliteStore } from '../../src/store/sqlite.js';
import { LOCAL_CONFIG, startGantry, type TestGantry } from '../helpers/gantry.js';

const ADMIN_KEY = 'admin-key-for-tests-0123456789abcdef';

interface SessionAnswer {
  role: string;
  account: { name: string } | null;
  key: { id: string } | null;
  csrf_token: string;
}

describe('SessionSigner', () => {
  const signer = new SessionSigner(Buffer.alloc(32, 7));

  it('reads back what it issued, and nothing tampered with, expired or signed by another secret', () => {
    const { value, claims } = signer.issue({
      role: 'owner',
      sub: 'k1',
      acct: 'a1',
      exp: Date.now() + 60_000,
    });
    expect(signer.read(value)).toEqual(claims);
    const [payload, mac] = value.split('.') as [string, string];
    const forged = Buffer.from(JSON.stringify({ ...claims, acct: 'a2' })).toString('base64url');
    expect(signer.read(`${forged}.${mac}`)).toBeUndefined();
    expect(signer.read(`${payload}.${mac.slice(0, -2)}xx`)).toBeUndefined();
    expect(signer.read(value, claims.exp)).toBeUndefined();
    expect(new SessionSigner(Buffer.alloc(32, 8)).read(value)).toBeUndefined();
    expect(signer.read('garbage')).toBeUndefined();
  });

  it('checks the CSRF token of the session it belongs to only', () => {
    const a = signer.issue({ role: 'operator', sub: 'ops', exp: Date.now() + 60_000 }).claims;
    const b = signer.issue({ role: 'operator', sub: 'ops', exp: Date.now() + 60_000 }).claims;
    expect(signer.checkCsrf(a, signer.csrfToken(a))).toBe(true);
    expect(signer.checkCsrf(a, signer.csrfToken(b))).toBe(false);
    expect(signer.checkCsrf(a, undefined)).toBe(false);
  });
});

describe('operator sessions', () => {
  const signer = new SessionSigner(Buffer.alloc(32, 9));
  const store = new SqliteStore(':memory:');
  const OLD_KEY = 'admin-key-before-rotation-0123456789';
  const NEW_KEY = 'admin-key-after-rotation-0123456789a';
  /** The admin keys of one start: GANTRY_ADMIN_KEY is always named `env`. */
  const authWith = (key: string) => new AdminAuth([{ name: 'env', sha256: hashKey(key) }], signer, store);
  const request = (cookie: string) => ({ method: 'GET', headers: { cookie: `gantry_session=${cookie}` } });

  it('end when the admin key is rotated under the same name, and hold while it is not', () => {
    const { cookie } = authWith(OLD_KEY).signIn(OLD_KEY, 60_000);
    expect(cookie).not.toContain(hashKey(OLD_KEY));
    // A restart with the same key keeps the session.
    expect(authWith(OLD_KEY).scope(request(cookie))).toMatchObject({ role: 'operator', actor: 'admin:env' });
    // A restart with another key under the same name ends it.
    let refused: unknown;
    try {
      authWith(NEW_KEY).scope(request(cookie));
    } catch (err) {
      refused = err;
    }
    expect(refused).toBeInstanceOf(GantryError);
    expect((refused as GantryError).errorId).toBe('UNAUTHORIZED');
  });

  it('refuse a session signed without the key MAC (issued before it existed, or forged by name)', () => {
    const { value } = signer.issue({ role: 'operator', sub: 'env', exp: Date.now() + 60_000 });
    expect(() => authWith(OLD_KEY).scope(request(value))).toThrow(GantryError);
  });
});

describe('console sessions over HTTP', () => {
  let g: TestGantry;
  beforeAll(async () => {
    g = await startGantry(LOCAL_CONFIG, { GANTRY_ADMIN_KEY: ADMIN_KEY });
  });
  afterAll(async () => g.close());

  async function signIn(key: string) {
    const res = await fetch(`${g.origin}/admin/v1/session`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ key }),
    });
    const cookie = (res.headers.get('set-cookie') ?? '').split(';')[0] as string;
    return {
      res,
      cookie,
      setCookie: res.headers.get('set-cookie') ?? '',
      body: (await res.json()) as SessionAnswer,
    };
  }

  it('signs an owner in with an API key: an HttpOnly SameSite=Strict cookie, no key in the answer', async () => {
    const { res, setCookie, body } = await signIn(g.key);
    expect(res.status).toBe(200);
    expect(setCookie).toMatch(/^gantry_session=[^;]+; Path=\/; HttpOnly; SameSite=Strict; Max-Age=\d+/);
    expect(body.role).toBe('owner');
    expect(body.account?.name).toBe('test');
    expect(typeof body.csrf_token).toBe('string');
    expect(JSON.stringify(body)).not.toContain(g.key);
    expect(setCookie).not.toContain(g.key);
  });

  it('signs an operator in with the admin key, and refuses a wrong key with 401', async () => {
    expect((await signIn(ADMIN_KEY)).body.role).toBe('operator');
    const bad = await signIn('not-a-key');
    expect(bad.res.status).toBe(401);
    expect(bad.setCookie).toBe('');
  });

  it('lets the console call /v1 with the cookie and its CSRF token, and only with both', async () => {
    const { cookie, body } = await signIn(g.key);
    const withToken = await fetch(`${g.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { cookie, 'x-csrf-token': body.csrf_token, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gantry/local-chat', messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(withToken.status).toBe(200);
    expect(((await withToken.json()) as { object: string }).object).toBe('chat.completion');
    const noToken = await fetch(`${g.baseURL}/models`, { headers: { cookie } });
    expect(noToken.status).toBe(403);
    const otherToken = (await signIn(g.key)).body.csrf_token;
    const wrongToken = await fetch(`${g.baseURL}/models`, {
      headers: { cookie, 'x-csrf-token': otherToken },
    });
    expect(wrongToken.status).toBe(403);
  });

  it('refuses an operator session on /v1 (the API needs an account)', async () => {
    const { cookie, body } = await signIn(ADMIN_KEY);
    const res = await fetch(`${g.baseURL}/models`, { headers: { cookie, 'x-csrf-token': body.csrf_token } });
    expect(res.status).toBe(403);
  });

  it('takes an admin key, never an account key, as Bearer on /admin/v1', async () => {
    const owner = await fetch(`${g.origin}/admin/v1/session`, {
      headers: { authorization: `Bearer ${g.key}` },
    });
    expect(owner.status).toBe(401);
    const accounts = await fetch(`${g.origin}/admin/v1/accounts`, {
      headers: { authorization: `Bearer ${g.key}` },
    });
    expect(accounts.status).toBe(401);
  });

  it('ends the session when its key is revoked', async () => {
    const { addKey } = await import('../helpers/gantry.js');
    const key = addKey(g.store, 'test');
    const { cookie, body } = await signIn(key);
    const before = await fetch(`${g.origin}/admin/v1/session`, { headers: { cookie } });
    expect(before.status).toBe(200);
    const keyId = body.key?.id as string;
    expect(g.store.getKey(keyId)?.revokedAt).toBeNull();
    g.store.revokeKey(keyId);
    const after = await fetch(`${g.origin}/admin/v1/session`, { headers: { cookie } });
    expect(after.status).toBe(401);
    const v1 = await fetch(`${g.baseURL}/models`, { headers: { cookie, 'x-csrf-token': body.csrf_token } });
    expect(v1.status).toBe(401);
  });

  it('signs out: the cookie is cleared', async () => {
    const res = await fetch(`${g.origin}/admin/v1/session`, { method: 'DELETE' });
    expect(res.status).toBe(200);
    expect(res.headers.get('set-cookie')).toMatch(/^gantry_session=; .*Max-Age=0/);
  });

  it('refuses the 11th failed sign-in of a minute with 429', async () => {
    const statuses: number[] = [];
    for (let i = 0; i < 11; i++) statuses.push((await signIn(`wrong-${i}`)).res.status);
    expect(statuses.slice(0, 10).every((s) => s === 401 || s === 429)).toBe(true);
    expect(statuses[10]).toBe(429);
  });
});

describe('the sign-in throttle', () => {
  let g: TestGantry;
  // A fresh instance per test: each starts with no address counted.
  beforeEach(async () => {
    g = await startGantry(LOCAL_CONFIG, { GANTRY_ADMIN_KEY: ADMIN_KEY });
  });
  afterEach(async () => g.close());

  /** A sign-in from `address` (the connection's address: the throttle counts per client address). */
  const signInFrom = async (address: string, key: string): Promise<number> =>
    (
      await g.app.inject({
        method: 'POST',
        url: '/admin/v1/session',
        remoteAddress: address,
        payload: { key },
      })
    ).statusCode;

  it('is not reset by a success: a valid key buys no more guesses', async () => {
    const address = '10.1.0.1';
    for (let i = 0; i < 9; i++) expect(await signInFrom(address, `wrong-${i}`)).toBe(401);
    expect(await signInFrom(address, g.key)).toBe(200);
    expect(await signInFrom(address, 'wrong-9')).toBe(401);
    // Ten failures this minute: refused, the valid key included.
    expect(await signInFrom(address, 'wrong-10')).toBe(429);
    expect(await signInFrom(address, g.key)).toBe(429);
    // Another address is counted apart.
    expect(await signInFrom('10.1.0.2', g.key)).toBe(200);
  });

  it('counts the proxy as the client unless server.trust_proxy names it', async () => {
    const proxy = '10.9.0.1';
    const viaProxy = async (gantry: TestGantry, client: string, key: string) =>
      (
        await gantry.app.inject({
          method: 'POST',
          url: '/admin/v1/session',
          remoteAddress: proxy,
          headers: { 'x-forwarded-for': client },
          payload: { key },
        })
      ).statusCode;
    // Not trusted (the default): every client behind the proxy shares the proxy's count.
    for (let i = 0; i < 10; i++) expect(await viaProxy(g, `192.0.2.${i}`, 'wrong')).toBe(401);
    expect(await viaProxy(g, '192.0.2.200', g.key)).toBe(429);

    const trusting = await startGantry(
      `server:\n  trust_proxy: [${proxy}, "2001:db8::/32"]\n${LOCAL_CONFIG}`,
      {
        GANTRY_ADMIN_KEY: ADMIN_KEY,
      },
    );
    try {
      for (let i = 0; i < 10; i++) expect(await viaProxy(trusting, '192.0.2.1', 'wrong')).toBe(401);
      expect(await viaProxy(trusting, '192.0.2.1', 'wrong')).toBe(429);
      // Another client behind the trusted proxy is counted apart.
      expect(await viaProxy(trusting, '192.0.2.2', trusting.key)).toBe(200);
      // A connection that is not the proxy cannot pick its address with the header.
      const direct = async (key: string) =>
        (
          await trusting.app.inject({
            method: 'POST',
            url: '/admin/v1/session',
            remoteAddress: '198.51.100.7',
            headers: { 'x-forwarded-for': `192.0.2.${Math.floor(Math.random() * 250)}` },
            payload: { key },
          })
        ).statusCode;
      for (let i = 0; i < 10; i++) expect(await direct('wrong')).toBe(401);
      expect(await direct(trusting.key)).toBe(429);
    } finally {
      await trusting.close();
    }
  });

  it('forgets the oldest addresses past 10,000, never the recent ones', async () => {
    for (let i = 0; i < 10_000; i++) {
      expect(await signInFrom(`10.2.${i >> 8}.${i & 255}`, 'wrong')).toBe(401);
    }
    // The 10,001st address overflows the table at its first failure: its failures still all count.
    const address = '10.3.0.1';
    for (let i = 0; i < 10; i++) expect(await signInFrom(address, `wrong-${i}`)).toBe(401);
    expect(await signInFrom(address, 'wrong-10')).toBe(429);
  }, 60_000);
});
