import type { IncomingHttpHeaders } from 'node:http';
import { GantryError } from '../errors.js';
import type { Account, ApiKeyRecord, Store } from '../store/types.js';
import { hashKey } from './keys.js';

export interface Principal {
  account: Account;
  key: ApiKeyRecord;
  /** `session`: a console session's call (README, "Console"), made with the session's key. */
  via?: 'session';
}

const FLUSH_EVERY_MS = 5_000;
/**
 * How long a key stays trusted without a store read. A change made by another process (the CLI, another
 * instance) empties the cache sooner, within a second (auth/changes.ts).
 */
const CACHE_MS = 5_000;
const CACHE_MAX = 10_000;

/** Where last-use times go besides this instance's store (distributed mode: Redis, auth/changes.ts). */
export interface LastUseRelay {
  shareLastUse(batch: ReadonlyMap<string, string>): void;
}

interface CachedKey {
  found: Principal | undefined;
  expiresAt: number;
}

/**
 * Resolves the caller from `x-api-key` or `Authorization: Bearer`. Last use is collected in memory and
 * written in one batch every few seconds, so the request path does no write.
 */
export class Authenticator {
  private pending = new Map<string, number>();
  private readonly timer: NodeJS.Timeout;
  private cache = new Map<string, CachedKey>();
  private cacheRevision = -1;

  constructor(
    private readonly store: Store,
    private readonly relay?: LastUseRelay,
  ) {
    this.timer = setInterval(() => this.flush(), FLUSH_EVERY_MS);
    this.timer.unref();
  }

  authenticate(request: { readonly headers: IncomingHttpHeaders }): Principal {
    const key = readKey(request);
    if (key === undefined) {
      throw new GantryError('UNAUTHORIZED', {
        message: 'Missing API key',
        details: 'Send your key as the x-api-key header or as Authorization: Bearer <key>.',
      });
    }
    const found = this.lookup(key);
    if (!found) {
      throw new GantryError('UNAUTHORIZED', {
        message: 'Invalid or revoked API key',
        details: 'Create a key with `gantry keys create` or ask your administrator for one.',
      });
    }
    if (found.account.status === 'suspended') {
      throw new GantryError('ACCOUNT_SUSPENDED', { details: 'Contact your administrator.' });
    }
    this.pending.set(found.key.id, Date.now());
    return found;
  }

  /** One indexed read per key every few seconds instead of per request; in-process changes apply at once. */
  private lookup(key: string): Principal | undefined {
    const now = Date.now();
    if (this.cacheRevision !== this.store.revision || this.cache.size >= CACHE_MAX) {
      this.cache = new Map();
      this.cacheRevision = this.store.revision;
    }
    const cached = this.cache.get(key);
    if (cached && cached.expiresAt > now) return cached.found;
    const found = this.store.findKeyByHash(hashKey(key));
    this.cache.set(key, { found, expiresAt: now + CACHE_MS });
    return found;
  }

  /** Writes the collected last-use times; called on a timer and on shutdown. */
  flush(): void {
    if (this.pending.size === 0) return;
    const batch = new Map<string, string>();
    for (const [id, at] of this.pending) batch.set(id, new Date(at).toISOString());
    this.pending = new Map();
    this.store.touchKeys(batch);
    this.relay?.shareLastUse(batch);
  }

  close(): void {
    clearInterval(this.timer);
    this.flush();
  }
}

function readKey(request: { readonly headers: IncomingHttpHeaders }): string | undefined {
  const header = request.headers['x-api-key'];
  if (typeof header === 'string' && header.length > 0) return header.trim();
  const auth = request.headers.authorization;
  if (typeof auth === 'string' && auth.length > 7 && auth.slice(0, 7).toLowerCase() === 'bearer ') {
    return auth.slice(7).trim();
  }
  return undefined;
}
