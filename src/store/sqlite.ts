import { createHash, randomUUID } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'libsql';
import { checkpoint, dataVersionOf } from '../usage/sqlite-db.js';
import type { Account, ApiKeyRecord, Store, StoredResponse } from './types.js';

type Db = InstanceType<typeof Database>;

const SCHEMA = `
CREATE TABLE IF NOT EXISTS accounts (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  tier TEXT NOT NULL,
  status TEXT NOT NULL,
  created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS api_keys (
  id TEXT PRIMARY KEY,
  account_id TEXT NOT NULL REFERENCES accounts(id),
  name TEXT NOT NULL,
  prefix TEXT NOT NULL,
  key_hash TEXT NOT NULL UNIQUE,
  created_at TEXT NOT NULL,
  revoked_at TEXT,
  last_used_at TEXT
);
CREATE TABLE IF NOT EXISTS responses (
  id TEXT PRIMARY KEY,
  account_id TEXT NOT NULL,
  model TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  conversation TEXT NOT NULL,
  response TEXT NOT NULL
);
`;

interface AccountRow {
  id: string;
  name: string;
  tier: string;
  status: string;
  created_at: string;
}

interface KeyRow {
  id: string;
  account_id: string;
  name: string;
  prefix: string;
  created_at: string;
  revoked_at: string | null;
  last_used_at: string | null;
}

interface ResponseRow {
  id: string;
  account_id: string;
  model: string;
  created_at: number;
  conversation: string;
  response: string;
}

/** The embedded store: one SQLite file (WAL) under the data folder, or `:memory:` for tests. */
export class SqliteStore implements Store {
  private readonly db: Db;
  private readonly stmt: ReturnType<SqliteStore['prepare']>;
  revision = 0;
  /**
   * SQLite's `PRAGMA data_version` of this connection: it moves when another connection (the CLI, another
   * instance on the same file) commits a change, never for this connection's own writes.
   */
  readonly dataVersion: () => number;

  constructor(readonly path: string) {
    if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
    this.db = new Database(path);
    this.db.exec('PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA busy_timeout = 5000;');
    this.db.exec(SCHEMA);
    this.stmt = this.prepare();
    this.dataVersion = dataVersionOf(this.db);
  }

  /** The open database, shared with predictions (and, in memory, with the usage ledger and credits). */
  get handle(): Db {
    return this.db;
  }

  private prepare() {
    const db = this.db;
    return {
      upsertAccount: db.prepare(
        `INSERT INTO accounts (id, name, tier, status, created_at) VALUES (?, ?, ?, ?, ?)
         ON CONFLICT(name) DO UPDATE SET tier = excluded.tier, status = excluded.status`,
      ),
      accountById: db.prepare('SELECT * FROM accounts WHERE id = ?'),
      accountByName: db.prepare('SELECT * FROM accounts WHERE name = ?'),
      listAccounts: db.prepare('SELECT * FROM accounts ORDER BY created_at, rowid'),
      insertAccount: db.prepare(
        `INSERT INTO accounts (id, name, tier, status, created_at) VALUES (?, ?, ?, ?, ?)
         ON CONFLICT DO NOTHING`,
      ),
      setAccountTier: db.prepare('UPDATE accounts SET tier = ? WHERE id = ? AND tier <> ?'),
      countAccounts: db.prepare('SELECT COUNT(*) AS n FROM accounts'),
      addKey: db.prepare(
        `INSERT INTO api_keys (id, account_id, name, prefix, key_hash, created_at) VALUES (?, ?, ?, ?, ?, ?)
         ON CONFLICT(key_hash) DO UPDATE SET name = excluded.name`,
      ),
      keyByHash: db.prepare(
        `SELECT k.id, k.account_id, k.name, k.prefix, k.created_at, k.revoked_at, k.last_used_at,
                a.name AS a_name, a.tier AS a_tier, a.status AS a_status, a.created_at AS a_created_at
         FROM api_keys k JOIN accounts a ON a.id = k.account_id
         WHERE k.key_hash = ? AND k.revoked_at IS NULL`,
      ),
      keyById: db.prepare('SELECT * FROM api_keys WHERE id = ?'),
      keyIdByHash: db.prepare('SELECT id FROM api_keys WHERE key_hash = ?'),
      keyHashById: db.prepare('SELECT key_hash FROM api_keys WHERE id = ?'),
      insertKey: db.prepare(
        `INSERT INTO api_keys (id, account_id, name, prefix, key_hash, created_at) VALUES (?, ?, ?, ?, ?, ?)
         ON CONFLICT DO NOTHING`,
      ),
      listKeys: db.prepare('SELECT * FROM api_keys ORDER BY created_at, rowid'),
      listKeysOf: db.prepare('SELECT * FROM api_keys WHERE account_id = ? ORDER BY created_at, rowid'),
      revokeKey: db.prepare('UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL'),
      revokeKeyByHash: db.prepare(
        'UPDATE api_keys SET revoked_at = ? WHERE key_hash = ? AND revoked_at IS NULL',
      ),
      revokedHashes: db.prepare('SELECT key_hash FROM api_keys WHERE revoked_at IS NOT NULL'),
      suspendedAccounts: db.prepare("SELECT id FROM accounts WHERE status = 'suspended'"),
      setAccountStatus: db.prepare('UPDATE accounts SET status = ? WHERE id = ? AND status <> ?'),
      touchKey: db.prepare('UPDATE api_keys SET last_used_at = ? WHERE id = ?'),
      putResponse: db.prepare(
        `INSERT OR REPLACE INTO responses (id, account_id, model, created_at, conversation, response)
         VALUES (?, ?, ?, ?, ?, ?)`,
      ),
      getResponse: db.prepare('SELECT * FROM responses WHERE id = ? AND account_id = ?'),
      deleteResponse: db.prepare('DELETE FROM responses WHERE id = ? AND account_id = ?'),
    };
  }

  upsertAccount(name: string, tier: string, status: Account['status']): Account {
    this.revision++;
    this.stmt.upsertAccount.run(accountIdFor(name), name, tier, status, new Date().toISOString());
    return this.getAccountByName(name) as Account;
  }

  getAccount(id: string): Account | undefined {
    const row = this.stmt.accountById.get(id) as AccountRow | undefined;
    return row && toAccount(row);
  }

  getAccountByName(name: string): Account | undefined {
    const row = this.stmt.accountByName.get(name) as AccountRow | undefined;
    return row && toAccount(row);
  }

  /** Every account, oldest first. */
  listAccounts(): Account[] {
    return (this.stmt.listAccounts.all() as AccountRow[]).map(toAccount);
  }

  /**
   * Adds an account exactly as another instance created it (same id and creation time); an account
   * with this id or name already here is left as it is. true when it was added.
   */
  addAccountRecord(account: Account): boolean {
    const { id, name, tier, status, createdAt } = account;
    const added = this.stmt.insertAccount.run(id, name, tier, status, createdAt).changes > 0;
    // Only a real change makes caches of keys forget (the relay applies the same record many times).
    if (added) this.revision++;
    return added;
  }

  /** Sets an existing account's tier; false if nothing changed. */
  setAccountTier(id: string, tier: string): boolean {
    const changed = this.stmt.setAccountTier.run(tier, id, tier).changes > 0;
    if (changed) this.revision++;
    return changed;
  }

  countAccounts(): number {
    return (this.stmt.countAccounts.get() as { n: number }).n;
  }

  addKey(accountId: string, name: string, keyHash: string, prefix: string): ApiKeyRecord {
    this.revision++;
    this.stmt.addKey.run(randomUUID(), accountId, name, prefix, keyHash, new Date().toISOString());
    const { id } = this.stmt.keyIdByHash.get(keyHash) as { id: string };
    return toKey(this.stmt.keyById.get(id) as KeyRow);
  }

  /**
   * Adds a key exactly as another instance created it (same id, so every instance lists and revokes it
   * by the same id); a key with this id or hash already here is left as it is. true when it was added.
   */
  addKeyRecord(key: ApiKeyRecord, keyHash: string): boolean {
    const { id, accountId, name, prefix, createdAt } = key;
    const added = this.stmt.insertKey.run(id, accountId, name, prefix, keyHash, createdAt).changes > 0;
    if (added) this.revision++;
    return added;
  }

  /** The stored hash of a key (what the relay of revocations carries), or undefined. */
  keyHash(id: string): string | undefined {
    return (this.stmt.keyHashById.get(id) as { key_hash: string } | undefined)?.key_hash;
  }

  findKeyByHash(keyHash: string): { key: ApiKeyRecord; account: Account } | undefined {
    const row = this.stmt.keyByHash.get(keyHash) as
      | (KeyRow & { a_name: string; a_tier: string; a_status: string; a_created_at: string })
      | undefined;
    if (!row) return undefined;
    return {
      key: toKey(row),
      account: toAccount({
        id: row.account_id,
        name: row.a_name,
        tier: row.a_tier,
        status: row.a_status,
        created_at: row.a_created_at,
      }),
    };
  }

  getKey(id: string): ApiKeyRecord | undefined {
    const row = this.stmt.keyById.get(id) as KeyRow | undefined;
    return row && toKey(row);
  }

  listKeys(accountId?: string): ApiKeyRecord[] {
    const rows = (accountId ? this.stmt.listKeysOf.all(accountId) : this.stmt.listKeys.all()) as KeyRow[];
    return rows.map(toKey);
  }

  revokeKey(id: string): boolean {
    this.revision++;
    return this.stmt.revokeKey.run(new Date().toISOString(), id).changes > 0;
  }

  /** Revokes the key with this hash (a revocation made on another instance); false if none was active. */
  revokeKeyByHash(keyHash: string): boolean {
    this.revision++;
    return this.stmt.revokeKeyByHash.run(new Date().toISOString(), keyHash).changes > 0;
  }

  /** The hashes of every revoked key. */
  revokedKeyHashes(): string[] {
    return (this.stmt.revokedHashes.all() as Array<{ key_hash: string }>).map((r) => r.key_hash);
  }

  /** The ids of the suspended accounts. */
  suspendedAccountIds(): string[] {
    return (this.stmt.suspendedAccounts.all() as Array<{ id: string }>).map((r) => r.id);
  }

  /** Sets an existing account's status (a change made on another instance); false if nothing changed. */
  setAccountStatus(id: string, status: Account['status']): boolean {
    this.revision++;
    return this.stmt.setAccountStatus.run(status, id, status).changes > 0;
  }

  touchKeys(lastUsed: Map<string, string>): void {
    const touch = this.db.transaction((entries: Array<[string, string]>) => {
      for (const [id, at] of entries) this.stmt.touchKey.run(at, id);
    });
    touch([...lastUsed]);
  }

  putResponse(r: StoredResponse): void {
    this.stmt.putResponse.run(
      r.id,
      r.accountId,
      r.model,
      r.createdAt,
      JSON.stringify(r.conversation),
      JSON.stringify(r.response),
    );
  }

  getResponse(id: string, accountId: string): StoredResponse | undefined {
    const row = this.stmt.getResponse.get(id, accountId) as ResponseRow | undefined;
    if (!row) return undefined;
    return {
      id: row.id,
      accountId: row.account_id,
      model: row.model,
      createdAt: row.created_at,
      conversation: JSON.parse(row.conversation) as StoredResponse['conversation'],
      response: JSON.parse(row.response) as StoredResponse['response'],
    };
  }

  deleteResponse(id: string, accountId: string): boolean {
    return this.stmt.deleteResponse.run(id, accountId).changes > 0;
  }

  /** Folds the write-ahead log back into gantry.db first, so a copy of the file alone is complete. */
  close(): void {
    checkpoint(this.db);
    this.db.close();
  }
}

/**
 * Account ids derive from the account's name, so every instance sharing a Redis computes the same id for
 * the same account and their limits, credits and usage meet.
 */
export function accountIdFor(name: string): string {
  return `acct_${createHash('sha256').update(name).digest('hex').slice(0, 24)}`;
}

function toAccount(row: AccountRow): Account {
  return {
    id: row.id,
    name: row.name,
    tier: row.tier,
    status: row.status === 'suspended' ? 'suspended' : 'active',
    createdAt: row.created_at,
  };
}

function toKey(row: KeyRow): ApiKeyRecord {
  return {
    id: row.id,
    accountId: row.account_id,
    name: row.name,
    prefix: row.prefix,
    createdAt: row.created_at,
    revokedAt: row.revoked_at,
    lastUsedAt: row.last_used_at,
  };
}
