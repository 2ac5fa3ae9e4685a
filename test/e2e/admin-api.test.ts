/**
 * The admin API through HTTP on a started Gantry, in the embedded default and with Redis: every
 * endpoint of accounts, keys, credits, predictions and the audit log; who may call it (admin keys, not
 * account keys); an owner's console session reaching only its own account; the audit entry of each change;
 * and no key or secret in audit entries or logs.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LOCAL_CONFIG, startGantry, type TestGantry } from '../helpers/gantry.js';
import { describeRedis, startRedis, type TestRedis } from '../helpers/redis.js';
import { type Res, restCall } from '../helpers/rest.js';
import { waitFor } from '../helpers/wait.js';
import { startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.js';

const ADMIN_KEY = 'gta_e2e-admin-api-0123456789abcdefghijklmnopqrstuvwxyz';
const IMAGE = 'gantry/local-image';
const CONFIG = `${LOCAL_CONFIG.replace('  default: {}', '  default: {}\n  pro: {}')}
  - { namespace: ${IMAGE}, name: Local image, type: image, vendor: { name: Gantry, slug: gantry }, serves: [predictions], routes: [{ provider: local, model: local-image }] }
usage: { flush_ms: 20 }
predictions: { webhooks: { allow_private: true, backoff_base_ms: 20, backoff_max_ms: 200 } }
`;

interface Account {
  id: string;
  name: string;
  tier: string;
  status: string;
  created_at: string;
  balance?: number | null;
}
interface Key {
  id: string;
  account_id: string;
  name: string;
  prefix: string;
  created_at: string;
  revoked_at: string | null;
  last_used_at: string | null;
  key?: string;
}
interface AuditEntry {
  id: string;
  at: string;
  actor: string;
  action: string;
  account_id: string | null;
  target: string;
  details: Record<string, unknown>;
}
interface Delivery {
  id: string;
  event: string;
  url: string | null;
  state: string;
  attempts: number;
  created_at: string;
  log: Array<{ at: string; outcome: string }>;
}
interface ErrorBody {
  error: { http_status: number; error_id: string; details: unknown };
}

function suite(mode: 'embedded' | 'redis') {
  let redis: TestRedis | undefined;
  let gantry: TestGantry;
  let receiver: WebhookReceiver;
  const logs: string[] = [];
  /** Every secret the tests handle: none may appear in an audit entry or a log line. */
  const secrets: string[] = [ADMIN_KEY];
  let test: Account;
  let other: Account;

  beforeAll(async () => {
    let yaml = CONFIG;
    if (mode === 'redis') {
      redis = await startRedis();
      yaml += `redis: { url: "${redis.url}" }\n`;
    }
    gantry = await startGantry(yaml, { GANTRY_ADMIN_KEY: ADMIN_KEY }, { onLog: (line) => logs.push(line) });
    secrets.push(gantry.key, gantry.otherKey);
    const secret = await restCall<{ key: string }>(gantry.origin, 'GET', '/v1/webhooks/secret', {
      key: gantry.key,
    });
    receiver = await startWebhookReceiver({ secret: secret.body.key });
    test = gantry.store.getAccountByName('test') as unknown as Account;
    other = gantry.store.getAccountByName('other') as unknown as Account;
  });
  afterAll(async () => {
    await receiver?.close();
    await gantry?.close();
    await redis?.close();
  });

  function admin<T>(method: string, path: string, body?: unknown, key = ADMIN_KEY): Promise<Res<T>> {
    return restCall<T>(gantry.origin, method, `/admin/v1${path}`, {
      key: null,
      headers: { authorization: `Bearer ${key}` },
      ...(body === undefined ? {} : { body }),
    });
  }

  function expectError(res: Res<unknown>, status: number, errorId: string, param?: string): void {
    expect(res.status, res.text).toBe(status);
    const body = res.body as ErrorBody;
    expect(body.error.error_id).toBe(errorId);
    // The REST envelope names the field in details.
    if (param !== undefined) expect(body.error.details).toBe(param);
  }

  /** A console session signed in with `key`; `call` sends its cookie, and the CSRF token unless told not to. */
  async function session(key: string) {
    const res = await restCall<{ csrf_token: string; role: string }>(
      gantry.origin,
      'POST',
      '/admin/v1/session',
      {
        key: null,
        body: { key },
      },
    );
    expect(res.status, res.text).toBe(200);
    const cookie = (res.headers.get('set-cookie') ?? '').split(';')[0] as string;
    const csrf = res.body.csrf_token;
    return {
      role: res.body.role,
      call<T>(method: string, path: string, body?: unknown, withCsrf = true): Promise<Res<T>> {
        return restCall<T>(gantry.origin, method, `/admin/v1${path}`, {
          key: null,
          headers: { cookie, ...(withCsrf ? { 'x-csrf-token': csrf } : {}) },
          ...(body === undefined ? {} : { body }),
        });
      },
    };
  }

  const models = (key: string) => restCall(gantry.origin, 'GET', '/v1/models', { key });

  describe('who may call it', () => {
    it('refuses no credentials, a wrong admin key and any account API key with 401', async () => {
      const none = await restCall(gantry.origin, 'GET', '/admin/v1/accounts', { key: null });
      expectError(none, 401, 'UNAUTHORIZED');
      expectError(await admin('GET', '/accounts', undefined, `${ADMIN_KEY}x`), 401, 'UNAUTHORIZED');
      expectError(await admin('GET', '/accounts', undefined, gantry.key), 401, 'UNAUTHORIZED');
      // As the /v1 API takes it: still not an admin credential.
      const asApiKey = await restCall(gantry.origin, 'GET', '/admin/v1/accounts', { key: gantry.key });
      expectError(asApiKey, 401, 'UNAUTHORIZED');
    });
  });

  describe('accounts', () => {
    let acme: Account;

    it('creates an account (201), refuses a second one of the same name (409) and bad fields (400)', async () => {
      const res = await admin<Account>('POST', '/accounts', { name: 'acme' });
      expect(res.status, res.text).toBe(201);
      acme = res.body;
      expect(acme).toEqual({
        id: expect.stringMatching(/^acct_/),
        name: 'acme',
        tier: 'default',
        status: 'active',
        created_at: expect.any(String),
      });
      expect(new Date(acme.created_at).toISOString()).toBe(acme.created_at);
      expectError(await admin('POST', '/accounts', { name: 'acme' }), 409, 'CONFLICT');
      expectError(
        await admin('POST', '/accounts', { name: 'x', tier: 'gold' }),
        400,
        'INVALID_PARAMETER',
        'tier',
      );
      expectError(await admin('POST', '/accounts', {}), 400, 'INVALID_PARAMETER', 'name');
      expectError(await admin('POST', '/accounts', { name: 'a\nb' }), 400, 'INVALID_PARAMETER', 'name');
    });

    it('lists every account and reads one with its balance (null: unlimited)', async () => {
      const list = await admin<{ data: Account[] }>('GET', '/accounts');
      expect(list.status).toBe(200);
      expect(list.body.data.map((a) => a.name)).toEqual(expect.arrayContaining(['test', 'other', 'acme']));
      const one = await admin<Account>('GET', `/accounts/${acme.id}`);
      expect(one.body).toEqual({ ...acme, balance: null });
      expectError(await admin('GET', '/accounts/acct_nope'), 404, 'NOT_FOUND');
    });

    it('moves an account to another tier and suspends it: its keys are refused until it is active again', async () => {
      const key = await admin<Key>('POST', `/accounts/${acme.id}/keys`, { name: 'ci' });
      expect(key.status, key.text).toBe(201);
      secrets.push(key.body.key as string);
      expect((await models(key.body.key as string)).status).toBe(200);

      const tier = await admin<Account>('PATCH', `/accounts/${acme.id}`, { tier: 'pro' });
      expect(tier.body).toMatchObject({ id: acme.id, tier: 'pro', status: 'active' });
      expectError(
        await admin('PATCH', `/accounts/${acme.id}`, { tier: 'gold' }),
        400,
        'INVALID_PARAMETER',
        'tier',
      );
      expectError(
        await admin('PATCH', `/accounts/${acme.id}`, { status: 'deleted' }),
        400,
        'INVALID_PARAMETER',
        'status',
      );

      const suspended = await admin<Account>('PATCH', `/accounts/${acme.id}`, { status: 'suspended' });
      expect(suspended.body.status).toBe('suspended');
      expectError(await models(key.body.key as string), 401, 'ACCOUNT_SUSPENDED');
      await admin('PATCH', `/accounts/${acme.id}`, { status: 'active' });
      expect((await models(key.body.key as string)).status).toBe(200);
    });
  });

  describe('keys', () => {
    it('creates a key shown once, lists it with its last use, revokes it (refused at once)', async () => {
      const created = await admin<Key>('POST', `/accounts/${test.id}/keys`, { name: 'deploy' });
      expect(created.status, created.text).toBe(201);
      const secret = created.body.key as string;
      secrets.push(secret);
      expect(secret).toMatch(/^gty_/);
      expect(created.body).toMatchObject({
        account_id: test.id,
        name: 'deploy',
        revoked_at: null,
        last_used_at: null,
      });
      expect(secret.startsWith(created.body.prefix.replace('…', ''))).toBe(true);
      expectError(
        await admin('POST', `/accounts/${test.id}/keys`, { name: '' }),
        400,
        'INVALID_PARAMETER',
        'name',
      );
      expectError(await admin('POST', '/accounts/acct_nope/keys', { name: 'x' }), 404, 'NOT_FOUND');

      expect((await models(secret)).status).toBe(200);
      const listed = await waitFor('the last use to be listed', async () => {
        const res = await admin<{ data: Key[] }>('GET', `/accounts/${test.id}/keys`);
        expect(res.text).not.toContain(secret);
        const key = res.body.data.find((k) => k.id === created.body.id);
        return key?.last_used_at ? key : undefined;
      });
      expect(Object.keys(listed).sort()).toEqual(
        ['account_id', 'created_at', 'id', 'last_used_at', 'name', 'prefix', 'revoked_at'].sort(),
      );

      const revoked = await admin<Key>('DELETE', `/keys/${created.body.id}`);
      expect(revoked.status, revoked.text).toBe(200);
      expect(revoked.body.revoked_at).not.toBeNull();
      expectError(await models(secret), 401, 'UNAUTHORIZED');
      const again = await admin<Key>('DELETE', `/keys/${created.body.id}`);
      expect(again.body.revoked_at).toBe(revoked.body.revoked_at);
      expectError(await admin('DELETE', '/keys/nope'), 404, 'NOT_FOUND');
    });
  });

  describe('credits', () => {
    it('grants credits, reads the balance and the movements, refuses a bad amount', async () => {
      expect((await admin<{ balance: number | null }>('GET', `/accounts/${test.id}/credits`)).body).toEqual({
        balance: null,
      });
      const granted = await admin<{ balance: number }>('POST', `/accounts/${test.id}/credits`, {
        amount: 12.5,
        note: 'welcome',
      });
      expect(granted.status, granted.text).toBe(200);
      expect(granted.body).toEqual({ balance: 12.5 });
      const corrected = await admin<{ balance: number }>('POST', `/accounts/${test.id}/credits`, {
        amount: -2.5,
      });
      expect(corrected.body).toEqual({ balance: 10 });
      expect((await admin<Account>('GET', `/accounts/${test.id}`)).body.balance).toBe(10);
      for (const amount of [0, 'ten', null, 1e12]) {
        expectError(
          await admin('POST', `/accounts/${test.id}/credits`, { amount }),
          400,
          'INVALID_PARAMETER',
          'amount',
        );
      }
      const movements = await admin<{ data: Array<Record<string, unknown>> }>(
        'GET',
        `/accounts/${test.id}/credits/movements?limit=2`,
      );
      expect(movements.status, movements.text).toBe(200);
      expect(movements.body.data).toEqual([
        {
          at: expect.any(String),
          amount: -2.5,
          kind: 'grant',
          note: null,
          balance_after: mode === 'redis' ? 10 : null,
        },
        {
          at: expect.any(String),
          amount: 12.5,
          kind: 'grant',
          note: 'welcome',
          balance_after: mode === 'redis' ? 12.5 : null,
        },
      ]);
      expectError(
        await admin('GET', `/accounts/${test.id}/credits/movements?limit=0`),
        400,
        'INVALID_PARAMETER',
        'limit',
      );
    });
  });

  describe('predictions', () => {
    let id: string;

    it("lists and reads an account's predictions in the public shape plus account_id", async () => {
      const created = await restCall<{ id: string }>(gantry.origin, 'POST', '/v1/predictions', {
        key: gantry.key,
        body: {
          model: IMAGE,
          input: { prompt: 'admin view' },
          webhook: { url: `${receiver.url}?token=hush` },
        },
      });
      expect(created.status, created.text).toBe(200);
      id = created.body.id;
      const done = await waitFor('the prediction to succeed', async () => {
        const res = await admin<Record<string, unknown>>('GET', `/predictions/${id}`);
        expect(res.status, res.text).toBe(200);
        return res.body.status === 'succeeded' ? res.body : undefined;
      });
      const publicView = await restCall<Record<string, unknown>>(
        gantry.origin,
        'GET',
        `/v1/predictions/${id}`,
        {
          key: gantry.key,
        },
      );
      expect(Object.keys(done).sort()).toEqual([...Object.keys(publicView.body), 'account_id'].sort());
      expect(done.account_id).toBe(test.id);
      expect(done.source).toBe('api');

      const list = await admin<{ data: Array<{ id: string; account_id: string }>; next: string | null }>(
        'GET',
        `/predictions?account=${test.id}&status=succeeded&source=api`,
      );
      expect(list.status, list.text).toBe(200);
      expect(list.body.data.map((p) => p.id)).toContain(id);
      expect(list.body.data.every((p) => p.account_id === test.id)).toBe(true);
      const failed = await admin<{ data: unknown[] }>('GET', `/predictions?account=${test.id}&status=failed`);
      expect(failed.body.data).toEqual([]);
      const ofOther = await admin<{ data: unknown[] }>('GET', `/predictions?account=${other.id}`);
      expect(ofOther.body.data).toEqual([]);
      expectError(await admin('GET', '/predictions'), 400, 'INVALID_PARAMETER', 'account');
      expectError(
        await admin('GET', `/predictions?account=${test.id}&status=odd`),
        400,
        'INVALID_PARAMETER',
        'status',
      );
      expectError(await admin('GET', '/predictions/p_nope'), 404, 'NOT_FOUND');
    });

    it('pages with limit and next', async () => {
      const second = await restCall<{ id: string }>(gantry.origin, 'POST', '/v1/predictions', {
        key: gantry.key,
        body: { model: IMAGE, input: { prompt: 'second' } },
      });
      expect(second.status, second.text).toBe(200);
      const page1 = await admin<{ data: Array<{ id: string }>; next: string | null }>(
        'GET',
        `/predictions?account=${test.id}&limit=1`,
      );
      expect(page1.body.data.map((p) => p.id)).toEqual([second.body.id]);
      expect(page1.body.next).not.toBeNull();
      const page2 = await admin<{ data: Array<{ id: string }>; next: string | null }>(
        'GET',
        `/predictions?account=${test.id}&limit=1&cursor=${page1.body.next}`,
      );
      expect(page2.body.data.map((p) => p.id)).toEqual([id]);
      expect(page2.body.next).toBeNull();
    });

    it('lists the deliveries (origin and path only) and redelivers one, signed anew', async () => {
      const [, succeeded] = await receiver.waitFor(2);
      const res = await waitFor('both deliveries to be delivered', async () => {
        const list = await admin<{ data: Delivery[] }>('GET', `/predictions/${id}/deliveries`);
        expect(list.status, list.text).toBe(200);
        return list.body.data.length === 2 && list.body.data.every((d) => d.state === 'delivered')
          ? list.body.data
          : undefined;
      });
      expect(res.map((d) => d.event)).toEqual(['prediction.started', 'prediction.succeeded']);
      for (const d of res) {
        expect(d.url).toBe(receiver.url);
        expect(d.attempts).toBe(1);
        expect(d.log[0]?.outcome).toBe('delivered');
      }
      expect(JSON.stringify(res)).not.toContain('hush');

      const original = res[1] as Delivery;
      const again = await admin<Delivery>('POST', `/predictions/${id}/deliveries/${original.id}/redeliver`);
      expect(again.status, again.text).toBe(202);
      expect(again.body).toMatchObject({ event: 'prediction.succeeded', state: 'pending', attempts: 0 });
      expect(again.body.id).not.toBe(original.id);
      const third = (await receiver.waitFor(3))[2];
      expect(third?.headers['webhook-id']).toBe(again.body.id);
      expect(third?.signatureValid, third?.signatureError).toBe(true);
      expect(third?.rawBody).toBe(succeeded?.rawBody);
      expectError(await admin('POST', `/predictions/${id}/deliveries/msg_nope/redeliver`), 404, 'NOT_FOUND');
    });
  });

  describe("an owner's console session", () => {
    it('reaches only its own account: 404 for any other, 403 for operator actions, 403 without CSRF', async () => {
      const owner = await session(gantry.otherKey);
      expect(owner.role).toBe('owner');
      const accounts = await owner.call<{ data: Account[] }>('GET', '/accounts');
      expect(accounts.body.data.map((a) => a.id)).toEqual([other.id]);
      expect((await owner.call<Account>('GET', `/accounts/${other.id}`)).status).toBe(200);

      const testKeyId = gantry.store.listKeys(test.id)[0]?.id as string;
      const predictionOfTest = (
        await admin<{ data: Array<{ id: string }> }>('GET', `/predictions?account=${test.id}`)
      ).body.data[0]?.id as string;
      const notFound: Array<[string, string, unknown?]> = [
        ['GET', `/accounts/${test.id}`],
        ['PATCH', `/accounts/${test.id}`, { status: 'suspended' }],
        ['GET', `/accounts/${test.id}/keys`],
        ['POST', `/accounts/${test.id}/keys`, { name: 'sneaky' }],
        ['DELETE', `/keys/${testKeyId}`],
        ['GET', `/accounts/${test.id}/credits`],
        ['POST', `/accounts/${test.id}/credits`, { amount: 5 }],
        ['GET', `/accounts/${test.id}/credits/movements`],
        ['GET', `/predictions?account=${test.id}`],
        ['GET', `/predictions/${predictionOfTest}`],
        ['GET', `/predictions/${predictionOfTest}/deliveries`],
        ['GET', `/audit?account=${test.id}`],
      ];
      for (const [method, path, body] of notFound) {
        const res = await owner.call(method, path, body);
        expect(res.status, `${method} ${path}: ${res.text}`).toBe(404);
        expect(res.text).not.toContain(test.name);
      }
      expect((await models(gantry.key)).status).toBe(200);
      expect(gantry.store.getAccount(test.id)?.status).toBe('active');

      expectError(await owner.call('POST', `/accounts/${other.id}/credits`, { amount: 5 }), 403, 'FORBIDDEN');
      expectError(await owner.call('PATCH', `/accounts/${other.id}`, { tier: 'pro' }), 403, 'FORBIDDEN');
      expectError(await owner.call('POST', '/accounts', { name: 'mine' }), 403, 'FORBIDDEN');
      expectError(
        await owner.call('POST', `/accounts/${other.id}/keys`, { name: 'x' }, false),
        403,
        'FORBIDDEN',
      );

      const own = await owner.call<Key>('POST', `/accounts/${other.id}/keys`, { name: 'laptop' });
      expect(own.status, own.text).toBe(201);
      secrets.push(own.body.key as string);
      const audit = await owner.call<{ data: AuditEntry[] }>('GET', '/audit');
      expect(audit.body.data.length).toBeGreaterThan(0);
      expect(audit.body.data.every((e) => e.account_id === other.id)).toBe(true);
      expect(audit.body.data[0]).toMatchObject({ action: 'key.create', target: own.body.id });
      expect(audit.body.data[0]?.actor).toMatch(/^key:/);
      const revoked = await owner.call<Key>('DELETE', `/keys/${own.body.id}`);
      expect(revoked.body.revoked_at).not.toBeNull();
    });
  });

  describe('the audit log', () => {
    it('has one entry per change, newest first, paged, and never a key or secret', async () => {
      const res = await admin<{ data: AuditEntry[] }>('GET', '/audit?limit=500');
      expect(res.status, res.text).toBe(200);
      const actions = res.body.data.map((e) => e.action);
      for (const action of [
        'account.create',
        'account.update',
        'key.create',
        'key.revoke',
        'credits.grant',
        'delivery.redeliver',
        'session.create',
      ]) {
        expect(actions).toContain(action);
      }
      const create = res.body.data.find((e) => e.action === 'account.create');
      expect(create).toMatchObject({
        actor: 'admin:env',
        target: create?.account_id,
        details: { name: 'acme' },
      });
      // Two grants on the test account, a tier change and two status changes on acme.
      expect(
        res.body.data.filter((e) => e.action === 'credits.grant' && e.account_id === test.id),
      ).toHaveLength(2);
      expect(res.body.data.filter((e) => e.action === 'account.update')).toHaveLength(3);
      const times = res.body.data.map((e) => Date.parse(e.at));
      expect([...times].sort((a, b) => b - a)).toEqual(times);

      const ofTest = await admin<{ data: AuditEntry[] }>('GET', `/audit?account=${test.id}&limit=2`);
      expect(ofTest.body.data).toHaveLength(2);
      expect(ofTest.body.data.every((e) => e.account_id === test.id)).toBe(true);
      const next = await admin<{ data: AuditEntry[] }>(
        'GET',
        `/audit?account=${test.id}&limit=2&before=${ofTest.body.data[1]?.id}`,
      );
      expect(next.body.data[0]?.id).not.toBe(ofTest.body.data[1]?.id);
      expectError(await admin('GET', '/audit?before=zz'), 400, 'INVALID_PARAMETER', 'before');

      for (const secret of secrets) expect(res.text).not.toContain(secret);
      expect(res.text).not.toContain('hush');
    });

    it('no key or secret was ever logged', () => {
      expect(logs.length).toBeGreaterThan(0);
      const all = logs.join('\n');
      for (const secret of secrets) expect(all).not.toContain(secret);
    });
  });
}

describe('admin API, embedded', () => suite('embedded'));
describeRedis('admin API, with Redis', () => suite('redis'));
