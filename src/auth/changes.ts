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
 *   applies them to its own store. Revoked hashes are also kept in REVOKED_SET, which an instance
 *   applies at start, so one that was down misses none. Only SHA-256 hashes of keys travel.
 */
export const CHANNEL = 'gantry:{auth}:changes';
export const REVOKED_SET = 'gantry:{auth}:revoked';

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

export class AccessChanges {
  private version: number;
  private revoked: Set<string>;
  private suspended: Set<string>;

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
   * Distributed mode, at start: applies the revocations made elsewhere, and shares this store's own (made
   * while this instance was down).
   */
  async join(): Promise<void> {
    const redis = this.redis;
    if (!redis) return;
    const shared = new Set(await redis.smembers(REVOKED_SET));
    this.apply({ revoked: [...shared] });
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
      if (account.status === 'suspended') this.suspended.add(account.id);
      else this.suspended.delete(account.id);
      this.store.setAccountStatus(account.id, account.status);
    }
  }

  private async publish(change: AccessChange): Promise<void> {
    const redis = this.redis as Redis;
    if (change.revoked) await redis.sadd(REVOKED_SET, ...change.revoked);
    await redis.publish(CHANNEL, JSON.stringify(change));
  }
}
