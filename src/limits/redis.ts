/**
 * Redis limiter for the distributed mode: every Gantry instance shares one set of limits. One EVALSHA
 * per admission checks and consumes all buckets atomically on the server's clock; one more per release.
 * Concurrency slots are leases with an expiry, so an instance that dies holding them frees them once
 * they expire. Any Redis trouble becomes LimiterUnavailableError within the command timeout.
 */
import { randomUUID } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';
import { LimiterUnavailableError, unavailable } from './errors.js';
import { type BucketState, bucketQuota, pickRefusal } from './evaluate.js';
import { createLimiterRedis, type LimiterRedisOptions } from './redis-client.js';
import { ADMIT_LUA, EXTEND_LUA, RELEASE_LUA } from './redis-scripts.js';
import {
  claimRelease,
  DEFAULT_LEASE_MS,
  isReleased,
  leaseMsOr,
  newLease,
  normalizeAdmit,
  usageDelta,
} from './request.js';
import type {
  Admission,
  AdmitRequest,
  BucketSpec,
  ExtendOutcome,
  Lease,
  Limiter,
  ReleaseOutcome,
  Usage,
} from './types.js';
import { windowMsOf } from './window.js';

export const DEFAULT_KEY_PREFIX = 'gantry:rl:';

export interface RedisLimiterOptions extends LimiterRedisOptions {
  /** A connection URL: the limiter creates (and closes) its own client with limiterRedisOptions(). */
  url?: string;
  /**
   * Or an existing client, which the limiter neither configures nor closes: give it the settings of
   * limiterRedisOptions() or admissions may queue while Redis is down.
   */
  client?: Redis | Cluster;
  keyPrefix?: string;
  leaseMs?: number;
  /** Connection errors of an owned client (they also surface as LimiterUnavailableError). */
  onError?: (error: Error) => void;
}

type ScriptCall = (numberOfKeys: number, ...args: Array<string | number>) => Promise<unknown>;

function defineScript(client: Redis | Cluster, name: string, lua: string): ScriptCall {
  // defineCommand loads the script once per connection and then calls it by SHA (EVALSHA), falling
  // back to EVAL on NOSCRIPT, e.g. after a Redis restart.
  client.defineCommand(name, { lua });
  const command = (client as unknown as Record<string, ScriptCall>)[name];
  if (typeof command !== 'function') throw new Error(`ioredis did not define ${name}`);
  return command.bind(client);
}

// Braces in an account id would move the hash tag; escaping keeps every key of an account in one slot.
function escapeTag(accountId: string): string {
  return accountId.replace(/[%{}]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

function parseReply(reply: unknown, length: number): number[] {
  if (!Array.isArray(reply) || reply.length !== length || !reply.every((v) => typeof v === 'number')) {
    throw new LimiterUnavailableError('rate limiter unavailable: unexpected reply from the admission script');
  }
  return reply as number[];
}

function stateAt(reply: number[], bucket: number): BucketState {
  const at = 2 + bucket * 8;
  const n = (i: number) => reply[at + i]!;
  return {
    leases: n(0),
    oldestLeaseExpiry: n(1),
    cur: { requests: n(2), inputTokens: n(3), outputTokens: n(4) },
    prev: { requests: n(5), inputTokens: n(6), outputTokens: n(7) },
  };
}

export class RedisLimiter implements Limiter {
  readonly client: Redis | Cluster;
  private readonly owned: boolean;
  private readonly keyPrefix: string;
  private readonly leaseMs: number;
  private readonly admitScript: ScriptCall;
  private readonly releaseScript: ScriptCall;
  private readonly extendScript: ScriptCall;
  private readonly onError: ((error: Error) => void) | undefined;

  constructor(options: RedisLimiterOptions) {
    if (options.client) {
      this.client = options.client;
      this.owned = false;
    } else if (options.url) {
      this.client = createLimiterRedis(options.url, options);
      this.owned = true;
      // Without a listener ioredis logs every failed reconnect attempt to stderr.
      this.client.on('error', (error: Error) => options.onError?.(error));
    } else {
      throw new TypeError('RedisLimiter needs a url or a client');
    }
    this.keyPrefix = options.keyPrefix ?? DEFAULT_KEY_PREFIX;
    this.leaseMs = options.leaseMs ?? DEFAULT_LEASE_MS;
    this.onError = options.onError;
    this.admitScript = defineScript(this.client, 'gantryRateLimitAdmit', ADMIT_LUA);
    this.releaseScript = defineScript(this.client, 'gantryRateLimitRelease', RELEASE_LUA);
    this.extendScript = defineScript(this.client, 'gantryRateLimitExtend', EXTEND_LUA);
  }

  /**
   * Resolves once connected. Admissions before that fail fast with LimiterUnavailableError (nothing is
   * queued), so call this at start-up; it rejects after `timeoutMs` while the client keeps trying.
   */
  async ready(timeoutMs = 5000): Promise<void> {
    if (this.client.status === 'ready') return;
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.client.off('ready', onReady);
        reject(
          new LimiterUnavailableError(`rate limiter unavailable: Redis not ready after ${timeoutMs} ms`),
        );
      }, timeoutMs);
      const onReady = () => {
        clearTimeout(timer);
        resolve();
      };
      this.client.once('ready', onReady);
    });
  }

  /** `gantry:rl:{<accountId>}:`: the braces are the Redis Cluster hash tag shared by all its keys. */
  keyPrefixOf(accountId: string): string {
    return `${this.keyPrefix}{${escapeTag(accountId)}}:`;
  }

  async admit(request: AdmitRequest): Promise<Admission> {
    const amounts = normalizeAdmit(request, this.leaseMs);
    const specs = request.buckets;
    const id = randomUUID();
    if (specs.length === 0) {
      return { ok: true, lease: newLease(id, request.accountId, specs, amounts, Date.now()), quota: [] };
    }
    const prefix = this.keyPrefixOf(request.accountId);
    const args: Array<string | number> = [];
    for (const spec of specs) args.push(`${prefix}c:${spec.key}`);
    args.push(prefix, id, amounts.leaseMs, amounts.inputTokens, amounts.outputTokens);
    for (const spec of specs) {
      const limits = spec.limits;
      args.push(
        spec.key,
        windowMsOf(limits.windowSeconds),
        limits.concurrency ?? -1,
        limits.requests ?? -1,
        limits.inputTokens ?? -1,
        limits.outputTokens ?? -1,
      );
    }
    let raw: unknown;
    try {
      raw = await this.admitScript(specs.length, ...args);
    } catch (error) {
      throw unavailable(error);
    }
    const reply = parseReply(raw, 2 + specs.length * 8);
    const now = reply[1]!;
    const states = specs.map((_, i) => stateAt(reply, i));
    if (reply[0] === 1) {
      return {
        ok: true,
        lease: newLease(id, request.accountId, specs, amounts, now),
        quota: specs.map((spec, i) => bucketQuota(spec, states[i]!, now)),
      };
    }
    const refusal = pickRefusal(specs, states, amounts, now);
    if (!refusal) {
      throw new LimiterUnavailableError('rate limiter unavailable: refusal without a refusing bucket');
    }
    return { ok: false, refusal };
  }

  async release(lease: Lease, usage?: Usage): Promise<ReleaseOutcome> {
    if (!claimRelease(lease)) return 'already-released';
    const delta = usageDelta(lease, usage);
    const needed = (spec: BucketSpec) =>
      spec.limits.concurrency !== undefined ||
      (spec.limits.inputTokens !== undefined && delta.inputTokens !== 0) ||
      (spec.limits.outputTokens !== undefined && delta.outputTokens !== 0);
    if (!lease.buckets.some(needed)) return 'released';
    const prefix = this.keyPrefixOf(lease.accountId);
    const args: Array<string | number> = [];
    for (const spec of lease.buckets) args.push(`${prefix}c:${spec.key}`);
    args.push(prefix, lease.id, lease.admittedAt, delta.inputTokens, delta.outputTokens);
    for (const spec of lease.buckets) {
      const limits = spec.limits;
      args.push(
        spec.key,
        windowMsOf(limits.windowSeconds),
        limits.inputTokens === undefined ? 0 : 1,
        limits.outputTokens === undefined ? 0 : 1,
      );
    }
    try {
      await this.releaseScript(lease.buckets.length, ...args);
      return 'released';
    } catch (error) {
      // The slots expire by themselves; the reservation stands (the conservative side).
      this.onError?.(unavailable(error));
      return 'unavailable';
    }
  }

  async extend(lease: Lease, leaseMs?: number): Promise<ExtendOutcome> {
    if (isReleased(lease)) return 'gone';
    const prefix = this.keyPrefixOf(lease.accountId);
    const keys = lease.buckets
      .filter((s) => s.limits.concurrency !== undefined)
      .map((s) => `${prefix}c:${s.key}`);
    if (keys.length === 0) return 'extended';
    try {
      const held = await this.extendScript(keys.length, ...keys, lease.id, leaseMsOr(lease, leaseMs));
      return held === keys.length ? 'extended' : 'gone';
    } catch (error) {
      this.onError?.(unavailable(error));
      return 'unavailable';
    }
  }

  async close(): Promise<void> {
    if (!this.owned) return;
    try {
      await this.client.quit();
    } catch {
      // Not connected: nothing to say goodbye to.
    }
    this.client.disconnect();
  }
}
