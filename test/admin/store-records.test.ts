/**
 * What the admin API and its relay need of the SQLite store: accounts and keys added exactly as another
 * instance made them (same ids), tiers, listing, a key's hash by id; caches of keys forget only on a
 * real change.
 */
import { describe, expect, it } from 'vitest';
import { hashKey } from '../../src/auth/keys.js';
import { SqliteStore } from '../../src/store/sqlite.js';

describe('SqliteStore records for the admin API', () => {
  it('adds a key with the id another instance gave it, once, and finds it by hash', () => {
    const store = new SqliteStore(':memory:');
    try {
      const account = store.upsertAccount('acme', 'default', 'active');
      const hash = hashKey('gty_relayed-key');
      const record = {
        id: 'key-from-a',
        accountId: account.id,
        name: 'ci',
        prefix: 'gty_rel…',
        createdAt: '2026-01-10T12:00:00.000Z',
        revokedAt: null,
        lastUsedAt: null,
      };
      const before = store.revision;
      expect(store.addKeyRecord(record, hash)).toBe(true);
      expect(store.revision).toBeGreaterThan(before);
      expect(store.findKeyByHash(hash)?.key).toEqual(record);
      expect(store.keyHash('key-from-a')).toBe(hash);
      expect(store.keyHash('nope')).toBeUndefined();
      const after = store.revision;
      expect(store.addKeyRecord({ ...record, name: 'other name' }, hash)).toBe(false);
      expect(store.addKeyRecord({ ...record, id: 'another-id' }, hash)).toBe(false);
      expect(store.revision).toBe(after);
      expect(store.listKeys(account.id).map((k) => [k.id, k.name])).toEqual([['key-from-a', 'ci']]);
    } finally {
      store.close();
    }
  });

  it('adds an account as relayed unless it exists, lists accounts, and changes a tier', () => {
    const store = new SqliteStore(':memory:');
    try {
      const local = store.upsertAccount('local', 'default', 'active');
      const relayed = {
        id: 'acct_relayed',
        name: 'relayed',
        tier: 'pro',
        status: 'suspended' as const,
        createdAt: '2026-01-10T12:00:00.000Z',
      };
      expect(store.addAccountRecord(relayed)).toBe(true);
      expect(store.getAccount('acct_relayed')).toEqual(relayed);
      expect(store.addAccountRecord({ ...relayed, tier: 'default' })).toBe(false);
      expect(store.addAccountRecord({ ...relayed, id: 'acct_same_name' })).toBe(false);
      // Oldest first: the relayed account was created before this one.
      expect(store.listAccounts().map((a) => a.id)).toEqual([relayed.id, local.id]);
      const before = store.revision;
      expect(store.setAccountTier(local.id, 'default')).toBe(false);
      expect(store.revision).toBe(before);
      expect(store.setAccountTier(local.id, 'pro')).toBe(true);
      expect(store.revision).toBeGreaterThan(before);
      expect(store.getAccount(local.id)?.tier).toBe('pro');
    } finally {
      store.close();
    }
  });
});
