import type { Redis } from 'ioredis';
import type { Account } from '../store/types.js';

/**
 * Revocations and account status changes reach a running server within a second (README, "Keys"):
 *
 * - Another process writing this instance's gantry.db (the CLI, another instance on the same data dir)
 *   moves the connection's `PRAGMA data_version`; poll() reads it (on a timer, off the request path) and,
 *   when it moved, makes the Authenticator drop its cached keys (store.revision).
 * - In distributed mode each instance has its own gantry.db, so what changed here is relayed on Redis:
 *   newly revoked key hashes and account status changes are published on CHANNEL, and every instance
 *   applies them to its own store. Pub/sub loses what is published while a subscriber is disconnected,
 *   so the changes are also kept in Redis (revoked hashes in REVOKED_SET, the last status relayed for an
 *   account in ACCOUNTS_HASH) and join() reads them again each time the subscriber (re)connects. Only
 *   SHA-256 hashes of keys travel.
 */
export const CHANNEL = 'gantry:{auth}:changes';
export const REVOKED_SET = 'gantry:{auth}:revoked';
/** Account id -> JSON `{ status, at }` (epoch ms of the relay). */
export const ACCOUNTS_HASH = 'gantry:{auth}:accounts';

/** The part of SqliteStore this needs. */
export interface AccessStore {
  revision: number;
  dataVersion(): number;
  revokedKeyHashes(): string[];
  suspendedAccountIds(): string[];
  revokeKeyByHash(keyHash: string): boolean;
  setAccountStatus(id: string, status: Account['status']): boolean;
}

interface AccessChange {
  revoked?: string[];
  accounts?: Array<{ id: string; status: Account['status'] }>;
}

type Status = Account['status'];

export class AccessChanges {
  private version: number;
  private revoked: Set<string>;
  private suspended: Set<string>;
  /** Account changes made here whose relay failed (Redis was away): join() relays them again. */
  private readonly unshared = new Map<string, Status>();
  /**
   * Account statuses relayed before this instance started are not applied: at start the store holds
   * the config's statuses (written at every start), and the command relays the config it applies.
   */
  private readonly since = Date.now();

  /** `redis`: the connection that publishes (distributed mode); absent in embedded mode. */
  constructor(
    private readonly store: AccessStore,
    private readonly redis?: Redis,
  ) {
    this.version = store.dataVersion();
    this.revoked = new Set(store.revokedKeyHashes());
    this.suspended = new Set(store.suspendedAccountIds());
  }

  /**
   * Distributed mode, at start and each time the subscriber (re)connects (after it subscribed): relays
   * what this instance could not, applies what was relayed meanwhile, and shares this store's own
   * revocations (made while this instance was down).
   */
  async join(): Promise<void> {
    const redis = this.redis;
    if (!redis) return;
    if (this.unshared.size > 0) await this.publish({ accounts: this.accountsOf(this.unshared) });
    const [shared, accounts] = await Promise.all([
      redis.smembers(REVOKED_SET).then((hashes) => new Set(hashes)),
      redis.hgetall(ACCOUNTS_HASH),
    ]);
    const relayed: NonNullable<AccessChange['accounts']> = [];
    for (const [id, value] of Object.entries(accounts)) {
      const entry = parseEntry(value);
      if (entry && entry.at >= this.since) relayed.push({ id, status: entry.status });
    }
    this.apply({ revoked: [...shared], accounts: relayed });
    const mine = [...this.revoked].filter((hash) => !shared.has(hash));
    if (mine.length > 0) await this.publish({ revoked: mine });
  }

  /** Called on a timer: when another process changed the file, forget cached keys and relay the news. */
  poll(): void {
    const version = this.store.dataVersion();
    if (version === this.version) return;
    this.version = version;
    this.store.revision++;
    if (!this.redis) return;
    const change: AccessChange = {};
    const revoked = this.store.revokedKeyHashes().filter((hash) => !this.revoked.has(hash));
    for (const hash of revoked) this.revoked.add(hash);
    if (revoked.length > 0) change.revoked = revoked;
    const suspended = new Set(this.store.suspendedAccountIds());
    const accounts: NonNullable<AccessChange['accounts']> = [];
    for (const id of suspended) if (!this.suspended.has(id)) accounts.push({ id, status: 'suspended' });
    for (const id of this.suspended) if (!suspended.has(id)) accounts.push({ id, status: 'active' });
    this.suspended = suspended;
    if (accounts.length > 0) change.accounts = accounts;
    for (const { id, status } of accounts) this.unshared.set(id, status);
    // On failure the revocations are shared again by join() (they are in this.revoked, not in Redis),
    // and the account changes stay in this.unshared.
    if (change.revoked || change.accounts) void this.publish(change).catch(() => undefined);
  }

  /** A message from CHANNEL (any instance's, this one's included: applying twice changes nothing). */
  receive(message: string): void {
    let change: AccessChange;
    try {
      change = JSON.parse(message) as AccessChange;
    } catch {
      return;
    }
    this.apply(change);
  }

  private apply(change: AccessChange): void {
    for (const hash of change.revoked ?? []) {
      if (typeof hash !== 'string' || this.revoked.has(hash)) continue;
      this.revoked.add(hash);
      this.store.revokeKeyByHash(hash);
    }
    for (const account of change.accounts ?? []) {
      if (account.status !== 'active' && account.status !== 'suspended') continue;
      if ((account.status === 'suspended') === this.suspended.has(account.id)) continue;
      if (account.status === 'suspended') this.suspended.add(account.id);
      else this.suspended.delete(account.id);
      this.store.setAccountStatus(account.id, account.status);
    }
  }

  private async publish(change: AccessChange): Promise<void> {
    const redis = this.redis as Redis;
    if (change.revoked) await redis.sadd(REVOKED_SET, ...change.revoked);
    if (change.accounts) {
      const at = Date.now();
      const fields = change.accounts.flatMap(({ id, status }) => [id, JSON.stringify({ status, at })]);
      await redis.hset(ACCOUNTS_HASH, ...fields);
    }
    await redis.publish(CHANNEL, JSON.stringify(change));
    // Relayed: forget what was waiting, unless it changed again meanwhile.
    for (const { id, status } of change.accounts ?? []) {
      if (this.unshared.get(id) === status) this.unshared.delete(id);
    }
  }

  private accountsOf(statuses: Map<string, Status>): NonNullable<AccessChange['accounts']> {
    return [...statuses].map(([id, status]) => ({ id, status }));
  }
}

function parseEntry(value: string): { status: Status; at: number } | undefined {
  try {
    const entry = JSON.parse(value) as { status?: unknown; at?: unknown };
    if ((entry.status === 'active' || entry.status === 'suspended') && typeof entry.at === 'number') {
      return { status: entry.status, at: entry.at };
    }
  } catch {
    // Not ours: ignored.
  }
  return undefined;
}
