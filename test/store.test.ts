import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { SqliteStore } from '../src/store/sqlite.js';
import type { Store } from '../src/store/types.js';

/** The Store contract; every implementation runs the same suite. */
const implementations: Array<[string, () => Store]> = [
  ['sqlite (memory)', () => new SqliteStore(':memory:')],
  ['sqlite (file)', () => new SqliteStore(join(mkdtempSync(join(tmpdir(), 'gantry-store-')), 'g.db'))],
];

describe.each(implementations)('Store contract: %s', (_name, make) => {
  it('upserts accounts by name', () => {
    const store = make();
    const a = store.upsertAccount('acme', 'pro', 'active');
    const again = store.upsertAccount('acme', 'free', 'suspended');
    expect(again.id).toBe(a.id);
    expect(store.getAccount(a.id)).toMatchObject({ name: 'acme', tier: 'free', status: 'suspended' });
    expect(store.countAccounts()).toBe(1);
    store.close();
  });

  it('finds live keys by hash only, and forgets revoked ones', () => {
    const store = make();
    const a = store.upsertAccount('acme', 'pro', 'active');
    const key = store.addKey(a.id, 'ci', 'hash-1', 'gty_abc…');
    expect(store.findKeyByHash('hash-1')).toMatchObject({
      key: { id: key.id, name: 'ci' },
      account: { name: 'acme' },
    });
    expect(store.findKeyByHash('hash-2')).toBeUndefined();
    expect(store.revokeKey(key.id)).toBe(true);
    expect(store.revokeKey(key.id)).toBe(false);
    expect(store.findKeyByHash('hash-1')).toBeUndefined();
    expect(store.listKeys(a.id)[0]?.revokedAt).not.toBeNull();
    store.close();
  });

  it('records last use in batches', () => {
    const store = make();
    const a = store.upsertAccount('acme', 'pro', 'active');
    const k1 = store.addKey(a.id, 'one', 'h1', 'p');
    const k2 = store.addKey(a.id, 'two', 'h2', 'p');
    store.touchKeys(
      new Map([
        [k1.id, '2026-01-01T00:00:00.000Z'],
        [k2.id, '2026-01-02T00:00:00.000Z'],
      ]),
    );
    expect(store.listKeys(a.id).map((k) => k.lastUsedAt)).toEqual([
      '2026-01-01T00:00:00.000Z',
      '2026-01-02T00:00:00.000Z',
    ]);
    store.close();
  });

  it('keeps responses per account', () => {
    const store = make();
    const response = {
      id: 'resp_1',
      accountId: 'acc-1',
      model: 'm',
      createdAt: 1,
      conversation: [{ role: 'user', content: 'hi' }],
      response: { id: 'resp_1', object: 'response' },
    };
    store.putResponse(response);
    expect(store.getResponse('resp_1', 'acc-1')).toEqual(response);
    expect(store.getResponse('resp_1', 'acc-2')).toBeUndefined();
    store.close();
  });
});

describe('account ids', () => {
  it('are the same for the same account name in every store, so instances on one Redis share limits', () => {
    const a = new SqliteStore(':memory:');
    const b = new SqliteStore(':memory:');
    const idA = a.upsertAccount('acme', 'pro', 'active').id;
    expect(b.upsertAccount('acme', 'free', 'active').id).toBe(idA);
    expect(a.upsertAccount('globex', 'pro', 'active').id).not.toBe(idA);
    a.close();
    b.close();
  });
});
