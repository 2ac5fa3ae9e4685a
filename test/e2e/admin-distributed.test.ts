/**
 * The admin API in distributed mode: instances sharing one Redis, each with its own SQLite store. What the
 * API changes on one instance (a new account, a new key, a suspension, a tier) holds on every other
 * within a second; a revoked key is refused everywhere right after; a key's last use on one instance is
 * listed by the others; the audit log is one; an instance started later catches up.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { LOCAL_CONFIG, startGantry, type TestGantry } from '../helpers/gantry.js';
import { describeRedis, startRedis, type TestRedis } from '../helpers/redis.js';
import { type Res, restCall } from '../helpers/rest.js';
import { until, waitFor } from '../helpers/wait.js';

const ADMIN_KEY = 'gta_e2e-admin-distributed-0123456789abcdefghijklmnopqrs';
/** What the API promises: a change is seen on every instance within a second. */
const WITHIN_MS = 1_000;

interface Account {
  id: string;
  name: string;
  tier: string;
  status: string;
}
interface Key {
  id: string;
  account_id: string;
  last_used_at: string | null;
  revoked_at: string | null;
  key?: string;
}

describeRedis('admin API across instances sharing Redis', () => {
  let redis: TestRedis;
  let yaml: string;
  let a: TestGantry;
  let b: TestGantry;
  let c: TestGantry | undefined;
  let globex: Account;
  let key: Key;

  beforeAll(async () => {
    redis = await startRedis();
    yaml = `${LOCAL_CONFIG.replace('  default: {}', '  default: {}\n  pro: {}')}
redis: { url: "${redis.url}" }
`;
    a = await startGantry(yaml, { GANTRY_ADMIN_KEY: ADMIN_KEY });
    b = await startGantry(yaml, { GANTRY_ADMIN_KEY: ADMIN_KEY });
  });
  afterAll(async () => {
    await Promise.all([a?.close(), b?.close(), c?.close()]);
    await redis?.close();
  });

  function admin<T>(on: TestGantry, method: string, path: string, body?: unknown): Promise<Res<T>> {
    return restCall<T>(on.origin, method, `/admin/v1${path}`, {
      key: null,
      headers: { authorization: `Bearer ${ADMIN_KEY}` },
      ...(body === undefined ? {} : { body }),
    });
  }
  const models = (on: TestGantry, apiKey: string) =>
    restCall(on.origin, 'GET', '/v1/models', { key: apiKey });

  /** Waits until `check` holds, and fails if that took longer than WITHIN_MS from `since`. */
  async function within(what: string, since: number, check: () => Promise<boolean>): Promise<void> {
    await until(what, check, 5_000, 10);
    expect(Date.now() - since, what).toBeLessThanOrEqual(WITHIN_MS);
  }

  it('an account created on A exists on B, and a key created on A works on B, within a second', async () => {
    const created = await admin<Account>(a, 'POST', '/accounts', { name: 'globex' });
    expect(created.status, created.text).toBe(201);
    globex = created.body;
    const keyRes = await admin<Key>(a, 'POST', `/accounts/${globex.id}/keys`, { name: 'ci' });
    expect(keyRes.status, keyRes.text).toBe(201);
    key = keyRes.body;
    const since = Date.now();
    await within(
      'the key to work on B',
      since,
      async () => (await models(b, key.key as string)).status === 200,
    );
    const onB = await admin<Account>(b, 'GET', `/accounts/${globex.id}`);
    expect(onB.body).toMatchObject({ id: globex.id, name: 'globex', tier: 'default', status: 'active' });
    // The same key, by the same id, on both.
    const listed = await admin<{ data: Key[] }>(b, 'GET', `/accounts/${globex.id}/keys`);
    expect(listed.body.data.map((k) => k.id)).toEqual([key.id]);
  });

  it("A key's last use on B is listed by A", async () => {
    expect((await models(b, key.key as string)).status).toBe(200);
    const listed = await waitFor(
      "B's use to be listed on A",
      async () => {
        const res = await admin<{ data: Key[] }>(a, 'GET', `/accounts/${globex.id}/keys`);
        const found = res.body.data.find((k) => k.id === key.id);
        return found?.last_used_at ? found : undefined;
      },
      15_000,
    );
    expect(Date.parse(listed.last_used_at as string)).toBeGreaterThan(0);
    // A itself never saw the key used.
    expect(a.store.getKey(key.id)?.lastUsedAt).toBeNull();
  });

  it('a tier change and a suspension on A hold on B within a second; reactivation too', async () => {
    let since = Date.now();
    await admin(a, 'PATCH', `/accounts/${globex.id}`, { tier: 'pro' });
    await within('the tier to reach B', since, async () => b.store.getAccount(globex.id)?.tier === 'pro');

    since = Date.now();
    const suspended = await admin<Account>(a, 'PATCH', `/accounts/${globex.id}`, { status: 'suspended' });
    expect(suspended.body.status).toBe('suspended');
    await within('B to refuse the suspended account', since, async () => {
      const res = await models(b, key.key as string);
      return res.status === 401 && res.text.includes('ACCOUNT_SUSPENDED');
    });

    since = Date.now();
    await admin(a, 'PATCH', `/accounts/${globex.id}`, { status: 'active' });
    await within(
      'B to accept the account again',
      since,
      async () => (await models(b, key.key as string)).status === 200,
    );
  });

  it('a key revoked on A is refused on B right after', async () => {
    // B has just accepted it (and cached it).
    expect((await models(b, key.key as string)).status).toBe(200);
    const revoked = await admin<Key>(a, 'DELETE', `/keys/${key.id}`);
    expect(revoked.status, revoked.text).toBe(200);
    const since = Date.now();
    await within(
      'B to refuse the revoked key',
      since,
      async () => (await models(b, key.key as string)).status === 401,
    );
    const onB = await admin<{ data: Key[] }>(b, 'GET', `/accounts/${globex.id}/keys`);
    expect(onB.body.data[0]?.revoked_at).not.toBeNull();
  });

  it('the audit log is one: a change made on A is listed on B', async () => {
    const res = await admin<{ data: Array<{ action: string; target: string }> }>(
      b,
      'GET',
      `/audit?account=${globex.id}`,
    );
    expect(res.body.data.map((e) => e.action)).toEqual([
      'key.revoke',
      'account.update',
      'account.update',
      'account.update',
      'key.create',
      'account.create',
    ]);
  });

  it('an instance started later knows the accounts and keys created before, and the revocations', async () => {
    const fresh = await admin<Key>(a, 'POST', `/accounts/${globex.id}/keys`, { name: 'later' });
    expect(fresh.status).toBe(201);
    c = await startGantry(yaml, { GANTRY_ADMIN_KEY: ADMIN_KEY });
    expect((await models(c, fresh.body.key as string)).status).toBe(200);
    expect((await models(c, key.key as string)).status).toBe(401);
    expect(c.store.getAccount(globex.id)).toMatchObject({ name: 'globex', tier: 'pro', status: 'active' });
    const keys = await admin<{ data: Key[] }>(c, 'GET', `/accounts/${globex.id}/keys`);
    expect(keys.body.data.map((k) => [k.id, k.revoked_at !== null])).toEqual([
      [key.id, true],
      [fresh.body.id, false],
    ]);
  });
});
