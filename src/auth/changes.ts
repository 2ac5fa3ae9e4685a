import type { Redis } from 'ioredis';
import { type BackoffPolicy, nextDelayMs } from '../backoff.js';
import type { Account, ApiKeyRecord } from '../store/types.js';

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
 * - A relay that fails (Redis stalled or away while the subscriber stays up) is retried on a timer, with
 *   backoff (RELAY_RETRY), until it succeeds: a revocation never waits for a reconnect to be heard.
 * - Keys and accounts created through the admin API, and accounts it suspends or moves to another tier,
 *   are relayed the same way (KEYS_HASH, ACCOUNTS_HASH), so every instance knows them by the same id.
 * - Last use: each instance's batched flush of last-use times also goes to LAST_USED_HASH, which the
 *   admin API reads when it lists keys, so a key used on one instance shows it on every other.
 */
export const CHANNEL = 'gantry:{auth}:changes';
export const REVOKED_SET = 'gantry:{auth}:revoked';
/**
 * Account id -> JSON `{ status, at, name?, tier?, created_at? }` (`at`: epoch ms of the relay). The
 * account's record comes along when the admin API made the change, so an instance that lacks the account
 * (created through the API elsewhere) adds it.
 */
export const ACCOUNTS_HASH = 'gantry:{auth}:accounts';
/** Key id -> JSON `{ id, account_id, name, prefix, hash, created_at }` of keys created through the admin API. */
export const KEYS_HASH = 'gantry:{auth}:keys';
/** Key id -> ISO time of its last use seen by any instance. */
export const LAST_USED_HASH = 'gantry:{auth}:last-used';

/*
 * KEYS[1] the last-use hash; ARGV: key id, ISO time, ... Keeps the latest time per key (ISO strings of the
 * same format compare as the times do), whichever instance writes last.
 */
const TOUCH_SCRIPT = `
for i = 1, #ARGV, 2 do
  local current = redis.call('HGET', KEYS[1], ARGV[i])
  if not current or current < ARGV[i + 1] then redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
end
return 0
`;

/** Retries of a failed relay: from 1 s, doubling (with jitter) up to 10 s, until Redis takes it. */
const RELAY_RETRY: BackoffPolicy = { baseMs: 1_000, maxMs: 10_000 };

/** The part of SqliteStore this needs. */
export interface AccessStore {
  revision: number;
  dataVersion(): number;
  revokedKeyHashes(): string[];
  suspendedAccountIds(): string[];
  revokeKeyByHash(keyHash: string): boolean;
  setAccountStatus(id: string, status: Account['status']): boolean;
  getAccount(id: string): Account | undefined;
  addAccountRecord(account: Account): boolean;
  setAccountTier(id: string, tier: string): boolean;
  addKeyRecord(key: ApiKeyRecord, keyHash: string): boolean;
}

/** An account as relayed: its status, and its record when the admin API made the change. */
interface RelayedAccount {
  id: string;
  status: Account['status'];
  name?: string;
  tier?: string;
  created_at?: string;
}

/** A key created through the admin API, as relayed (its hash, never the key). */
interface RelayedKey {
  id: string;
  account_id: string;
  name: string;
  prefix: string;
  hash: string;
  created_at: string;
}

interface AccessChange {
  revoked?: string[];
  accounts?: RelayedAccount[];
  keys?: RelayedKey[];
}

export interface AccessOptions {
  /**
   * Ids of the accounts the config declares: their status and tier at start are the config's, so a
   * change relayed before this instance started is not applied to them. Any other account (created
   * through the admin API) takes the last relayed state.
   */
  configured?: ReadonlySet<string>;
  /**
   * Told once when relaying starts failing (and again only after a relay succeeded): the changes are
   * kept and retried meanwhile.
   */
  onRelayError?: (error: Error) => void;
  /** Told when the relay works again after onRelayError. */
  onRelayRecovered?: () => void;
}

type Status = Account['status'];

export class AccessChanges {
  private version: number;
  private revoked: Set<string>;
  private suspended: Set<string>;
  /** Account changes made here whose relay failed (Redis was away): retried, and relayed by join(). */
  private readonly unshared = new Map<string, RelayedAccount>();
  /** Keys created here whose relay failed: retried, and relayed by join(). */
  private readonly unsharedKeys = new Map<string, RelayedKey>();
  /** Revocations made here whose relay failed: retried (join() shares every revocation of the store). */
  private readonly unsharedRevoked = new Set<string>();
  private retryTimer: ReturnType<typeof setTimeout> | undefined;
  private retrying = false;
  private retryAttempt = 0;
  /** Whether onRelayError was told about the current run of failures. */
  private failing = false;
  private closed = false;
  private readonly options: AccessOptions;
  private readonly configured: ReadonlySet<string>;
  /**
   * Account statuses relayed before this instance started are not applied: at start the store holds
   * the config's statuses (written at every start), and the command relays the config it applies.
   */
  private readonly since = Date.now();

  /** `redis`: the connection that publishes (distributed mode); absent in embedded mode. */
  constructor(
    private readonly store: AccessStore,
    private readonly redis?: Redis,
    options: AccessOptions = {},
  ) {
    this.options = options;
    this.configured = options.configured ?? new Set();
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
    if (this.unshared.size > 0 || this.unsharedKeys.size > 0) {
      await this.publish({ accounts: [...this.unshared.values()], keys: [...this.unsharedKeys.values()] });
    }
    const [shared, accounts, keys] = await Promise.all([
      redis.smembers(REVOKED_SET).then((hashes) => new Set(hashes)),
      redis.hgetall(ACCOUNTS_HASH),
      redis.hgetall(KEYS_HASH),
    ]);
    const relayed: RelayedAccount[] = [];
    for (const [id, value] of Object.entries(accounts)) {
      const entry = parseEntry(value);
      if (!entry) continue;
      // A config account's state at start is the config's; an account the API created elsewhere is
      // added when missing, and otherwise takes its last relayed state.
      const known = this.store.getAccount(id) !== undefined;
      if (entry.at >= this.since || !known || !this.configured.has(id)) relayed.push({ ...entry, id });
    }
    const relayedKeys: RelayedKey[] = [];
    for (const value of Object.values(keys)) {
      const key = parseKey(value);
      if (key) relayedKeys.push(key);
    }
    this.apply({ accounts: relayed, keys: relayedKeys, revoked: [...shared] });
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
    const accounts: RelayedAccount[] = [];
    for (const id of suspended) if (!this.suspended.has(id)) accounts.push(this.relayed(id, 'suspended'));
    for (const id of this.suspended) if (!suspended.has(id)) accounts.push(this.relayed(id, 'active'));
    this.suspended = suspended;
    if (accounts.length > 0) change.accounts = accounts;
    for (const account of accounts) this.unshared.set(account.id, account);
    // On failure the change is retried (the account changes stay in this.unshared).
    if (change.revoked || change.accounts) void this.relay(change);
  }

  /**
   * The admin API created this key here: relay it (with its hash, never the key) so every instance
   * accepts it. Resolves once relayed or failed; a failed relay is retried until Redis takes it.
   */
  async keyCreated(key: ApiKeyRecord, keyHash: string): Promise<void> {
    if (!this.redis) return;
    const relayed: RelayedKey = {
      id: key.id,
      account_id: key.accountId,
      name: key.name,
      prefix: key.prefix,
      hash: keyHash,
      created_at: key.createdAt,
    };
    this.unsharedKeys.set(key.id, relayed);
    await this.relay({ keys: [relayed] });
  }

  /** The admin API revoked the key with this hash here: refused on every instance as soon as they hear. */
  async keyRevoked(keyHash: string): Promise<void> {
    if (this.revoked.has(keyHash)) return;
    this.revoked.add(keyHash);
    // On failure it is retried on a timer, without waiting for the subscriber to reconnect.
    if (this.redis) await this.relay({ revoked: [keyHash] });
  }

  /** The admin API created this account, or changed its status or tier, here: relay its whole record. */
  async accountChanged(account: Account): Promise<void> {
    if (account.status === 'suspended') this.suspended.add(account.id);
    else this.suspended.delete(account.id);
    if (!this.redis) return;
    const relayed = this.relayed(account.id, account.status, account);
    this.unshared.set(account.id, relayed);
    await this.relay({ accounts: [relayed] });
  }

  /** Stops retrying failed relays (the server is closing). */
  close(): void {
    this.closed = true;
    clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
  }

  /** Publishes `change`; on failure keeps it (unshared*) and retries it on a timer. Never rejects. */
  private async relay(change: AccessChange): Promise<void> {
    try {
      await this.publish(change);
    } catch (error) {
      for (const hash of change.revoked ?? []) this.unsharedRevoked.add(hash);
      this.relayFailed(error as Error);
    }
  }

  private relayFailed(error: Error): void {
    if (!this.failing) {
      this.failing = true;
      this.options.onRelayError?.(error);
    }
    this.scheduleRetry();
  }

  private scheduleRetry(): void {
    if (this.closed || this.retryTimer !== undefined || this.retrying) return;
    this.retryAttempt++;
    this.retryTimer = setTimeout(() => void this.retry(), nextDelayMs(this.retryAttempt, RELAY_RETRY));
    this.retryTimer.unref();
  }

  private recovered(): void {
    if (!this.failing) return;
    this.failing = false;
    this.options.onRelayRecovered?.();
  }

  /** Relays everything still unshared, in one change; on failure schedules the next try. */
  private async retry(): Promise<void> {
    this.retryTimer = undefined;
    if (this.closed) return;
    if (this.unsharedRevoked.size === 0 && this.unshared.size === 0 && this.unsharedKeys.size === 0) {
      // Relayed meanwhile (by another change's relay, or join()).
      this.retryAttempt = 0;
      this.recovered();
      return;
    }
    const change: AccessChange = {
      revoked: [...this.unsharedRevoked],
      accounts: [...this.unshared.values()],
      keys: [...this.unsharedKeys.values()],
    };
    this.retrying = true;
    try {
      await this.publish(change);
    } catch (error) {
      this.retrying = false;
      this.relayFailed(error as Error);
      return;
    }
    this.retrying = false;
    this.retryAttempt = 0;
    this.recovered();
    // A change that failed while this one was in flight.
    if (this.unsharedRevoked.size > 0 || this.unshared.size > 0 || this.unsharedKeys.size > 0) {
      this.scheduleRetry();
    }
  }

  /** Distributed mode: shares last-use times (the Authenticator's batched flush). */
  shareLastUse(batch: ReadonlyMap<string, string>): void {
    if (!this.redis || batch.size === 0) return;
    const args = [...batch].flat();
    void this.redis.eval(TOUCH_SCRIPT, 1, LAST_USED_HASH, ...args).catch(() => undefined);
  }

  /** The last use of these keys seen by any instance (distributed mode; empty otherwise or on failure). */
  async lastUsed(ids: readonly string[]): Promise<Map<string, string>> {
    const found = new Map<string, string>();
    if (!this.redis || ids.length === 0) return found;
    try {
      const values = await this.redis.hmget(LAST_USED_HASH, ...ids);
      ids.forEach((id, i) => {
        const at = values[i];
        if (typeof at === 'string') found.set(id, at);
      });
    } catch {
      // Redis away: the listing shows this instance's own record of last use.
    }
    return found;
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
    // Accounts before keys (a key names its account), keys before revocations (a key created and revoked
    // while this instance was away is added, then revoked).
    for (const account of change.accounts ?? []) this.applyAccount(account);
    for (const key of change.keys ?? []) {
      if (!isRelayedKey(key)) continue;
      const record: ApiKeyRecord = {
        id: key.id,
        accountId: key.account_id,
        name: key.name,
        prefix: key.prefix,
        createdAt: key.created_at,
        revokedAt: null,
        lastUsedAt: null,
      };
      if (this.store.addKeyRecord(record, key.hash) && this.revoked.has(key.hash)) {
        this.store.revokeKeyByHash(key.hash);
      }
    }
    for (const hash of change.revoked ?? []) {
      if (typeof hash !== 'string' || this.revoked.has(hash)) continue;
      this.revoked.add(hash);
      this.store.revokeKeyByHash(hash);
    }
  }

  private applyAccount(account: RelayedAccount): void {
    if (typeof account?.id !== 'string') return;
    if (account.status !== 'active' && account.status !== 'suspended') return;
    if (
      this.store.getAccount(account.id) === undefined &&
      typeof account.name === 'string' &&
      typeof account.tier === 'string'
    ) {
      this.store.addAccountRecord({
        id: account.id,
        name: account.name,
        tier: account.tier,
        status: account.status,
        createdAt: typeof account.created_at === 'string' ? account.created_at : new Date().toISOString(),
      });
    }
    if (typeof account.tier === 'string') this.store.setAccountTier(account.id, account.tier);
    if ((account.status === 'suspended') === this.suspended.has(account.id)) return;
    if (account.status === 'suspended') this.suspended.add(account.id);
    else this.suspended.delete(account.id);
    this.store.setAccountStatus(account.id, account.status);
  }

  /** The relay of an account's status, with its record when the store has it. */
  private relayed(id: string, status: Status, known?: Account): RelayedAccount {
    const account = known ?? this.store.getAccount(id);
    if (!account) return { id, status };
    return { id, status, name: account.name, tier: account.tier, created_at: account.createdAt };
  }

  private async publish(change: AccessChange): Promise<void> {
    const redis = this.redis as Redis;
    if (change.revoked?.length) await redis.sadd(REVOKED_SET, ...change.revoked);
    if (change.accounts?.length) {
      const at = Date.now();
      const fields = change.accounts.flatMap(({ id, ...rest }) => [id, JSON.stringify({ ...rest, at })]);
      await redis.hset(ACCOUNTS_HASH, ...fields);
    }
    if (change.keys?.length) {
      await redis.hset(KEYS_HASH, ...change.keys.flatMap((key) => [key.id, JSON.stringify(key)]));
    }
    await redis.publish(CHANNEL, JSON.stringify(change));
    // Relayed: forget what was waiting, unless it changed again meanwhile.
    for (const hash of change.revoked ?? []) this.unsharedRevoked.delete(hash);
    for (const account of change.accounts ?? []) {
      if (this.unshared.get(account.id) === account) this.unshared.delete(account.id);
    }
    for (const key of change.keys ?? []) this.unsharedKeys.delete(key.id);
  }
}

function parseEntry(value: string): (Omit<RelayedAccount, 'id'> & { at: number }) | undefined {
  try {
    const entry = JSON.parse(value) as Omit<RelayedAccount, 'id'> & { at?: unknown };
    if ((entry.status === 'active' || entry.status === 'suspended') && typeof entry.at === 'number') {
      return { ...entry, at: entry.at };
    }
  } catch {
    // Not ours: ignored.
  }
  return undefined;
}

function parseKey(value: string): RelayedKey | undefined {
  try {
    const key = JSON.parse(value) as unknown;
    return isRelayedKey(key) ? key : undefined;
  } catch {
    return undefined;
  }
}

function isRelayedKey(value: unknown): value is RelayedKey {
  if (typeof value !== 'object' || value === null) return false;
  const key = value as Record<string, unknown>;
  return ['id', 'account_id', 'name', 'prefix', 'hash', 'created_at'].every(
    (field) => typeof key[field] === 'string',
  );
}
