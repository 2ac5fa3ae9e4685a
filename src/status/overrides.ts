/**
 * Model status overrides set by an operator (README, "Status page" → overrides): shown on /v1/models, the
 * status page and the console instead of the status judged from traffic, until cleared; an `offline`
 * override also refuses the model's calls. Kept in the mode's store (a SQLite table, or a Redis hash that
 * every instance reads), with a copy in memory so the request path never waits for a store.
 */
import type Database from 'libsql';
import type { PlaneDeps } from '../admin/plane.js';

export interface StatusOverride {
  status: 'operational' | 'degraded' | 'offline';
  reason: string;
  setBy: string;
  at: number;
}

export interface ModelOverrides {
  /** Synchronous: read from a copy kept current in memory (never a store read on the request path). */
  get(namespace: string): StatusOverride | undefined;
  set(namespace: string, override: StatusOverride): Promise<void>;
  /** true if there was one. */
  clear(namespace: string): Promise<boolean>;
  close(): Promise<void>;
}

/** How often the copy is read again (what another instance set shows here within this). */
export const OVERRIDES_REFRESH_MS = 1_000;
export const OVERRIDES_KEY = 'gantry:model-overrides';

interface OverrideStore {
  all(): Promise<Map<string, StatusOverride>>;
  set(namespace: string, override: StatusOverride): Promise<void>;
  clear(namespace: string): Promise<boolean>;
}

type Db = InstanceType<typeof Database>;

class SqliteOverrideStore implements OverrideStore {
  private readonly selectAll;
  private readonly upsert;
  private readonly remove;

  constructor(db: Db) {
    db.exec(`CREATE TABLE IF NOT EXISTS model_overrides (
      namespace TEXT PRIMARY KEY, status TEXT NOT NULL, reason TEXT NOT NULL, set_by TEXT NOT NULL, at INTEGER NOT NULL
    )`);
    this.selectAll = db.prepare('SELECT * FROM model_overrides');
    this.upsert = db.prepare(
      `INSERT INTO model_overrides (namespace, status, reason, set_by, at) VALUES (?, ?, ?, ?, ?)
       ON CONFLICT (namespace) DO UPDATE SET status = excluded.status, reason = excluded.reason,
       set_by = excluded.set_by, at = excluded.at`,
    );
    this.remove = db.prepare('DELETE FROM model_overrides WHERE namespace = ?');
  }

  async all(): Promise<Map<string, StatusOverride>> {
    const rows = this.selectAll.all() as Array<{
      namespace: string;
      status: StatusOverride['status'];
      reason: string;
      set_by: string;
      at: number;
    }>;
    return new Map(
      rows.map((r) => [r.namespace, { status: r.status, reason: r.reason, setBy: r.set_by, at: r.at }]),
    );
  }

  async set(namespace: string, o: StatusOverride): Promise<void> {
    this.upsert.run(namespace, o.status, o.reason, o.setBy, o.at);
  }

  async clear(namespace: string): Promise<boolean> {
    return this.remove.run(namespace).changes > 0;
  }
}

class RedisOverrideStore implements OverrideStore {
  constructor(private readonly redis: NonNullable<PlaneDeps['redis']>) {}

  async all(): Promise<Map<string, StatusOverride>> {
    const raw = await this.redis.hgetall(OVERRIDES_KEY);
    return new Map(Object.entries(raw).map(([ns, json]) => [ns, JSON.parse(json) as StatusOverride]));
  }

  async set(namespace: string, o: StatusOverride): Promise<void> {
    await this.redis.hset(OVERRIDES_KEY, namespace, JSON.stringify(o));
  }

  async clear(namespace: string): Promise<boolean> {
    return (await this.redis.hdel(OVERRIDES_KEY, namespace)) > 0;
  }
}

/**
 * The overrides, read again every OVERRIDES_REFRESH_MS (and at once here after a change made here). A
 * store that cannot be read leaves the last copy in place.
 */
export class CachedOverrides implements ModelOverrides {
  private copy = new Map<string, StatusOverride>();
  private readonly timer: NodeJS.Timeout;
  /** Bumped by every local change: a read begun before it must not put back the old copy. */
  private version = 0;

  constructor(
    private readonly store: OverrideStore,
    private readonly log: PlaneDeps['log'],
  ) {
    void this.refresh();
    this.timer = setInterval(() => void this.refresh(), OVERRIDES_REFRESH_MS);
    this.timer.unref();
  }

  get(namespace: string): StatusOverride | undefined {
    return this.copy.get(namespace);
  }

  async set(namespace: string, override: StatusOverride): Promise<void> {
    await this.store.set(namespace, override);
    this.version++;
    this.copy = new Map(this.copy).set(namespace, override);
  }

  async clear(namespace: string): Promise<boolean> {
    const had = await this.store.clear(namespace);
    this.version++;
    const next = new Map(this.copy);
    next.delete(namespace);
    this.copy = next;
    return had;
  }

  /** Reads the store into the copy (tests call it to skip the wait). */
  async refresh(): Promise<void> {
    const version = this.version;
    try {
      const all = await this.store.all();
      if (version === this.version) this.copy = all;
    } catch (err) {
      this.log.debug({ err: (err as Error).message }, 'could not read the model status overrides');
    }
  }

  async close(): Promise<void> {
    clearInterval(this.timer);
  }
}

export function createModelOverrides(deps: PlaneDeps): ModelOverrides {
  const store = deps.redis ? new RedisOverrideStore(deps.redis) : new SqliteOverrideStore(deps.store.handle);
  const overrides = new CachedOverrides(store, deps.log);
  // The catalogue answers every model's status (the /v1 routes, predictions and the status page read it
  // there), so it is handed the overrides as soon as they exist.
  deps.catalog.useOverrides(overrides);
  // The status history records what is shown: an override set or cleared is a change of the model's.
  deps.routing.useOverrides(overrides);
  return overrides;
}
