/**
 * In-process limiter for the embedded default (one Gantry process). Same semantics as the Redis one,
 * but synchronous inside: no timers and no per-request structures beyond the lease itself. Expired
 * leases are purged lazily, only once the earliest expiry has passed, so a forgotten release cannot
 * hold a slot forever and the common case costs nothing.
 */
import {
  type Amounts,
  type BucketState,
  bucketFits,
  bucketQuota,
  type Counts,
  pickRefusal,
  WINDOW_METRICS,
} from './evaluate.js';
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
  BucketQuota,
  BucketSpec,
  ExtendOutcome,
  Lease,
  Limiter,
  ReleaseOutcome,
  Usage,
} from './types.js';
import { windowIndex, windowMsOf } from './window.js';

export interface MemoryLimiterOptions {
  /** Clock in epoch ms; injectable for tests. */
  now?: () => number;
  leaseMs?: number;
  /** How often idle buckets are dropped (checked on admission, no timer). */
  sweepEveryMs?: number;
}

interface MemoryBucket extends BucketState {
  windowMs: number;
  /** Index of the fixed window `cur` counts. */
  index: number;
  /** Lease id → expiry (epoch ms), for buckets with a concurrency ceiling. */
  expiries: Map<string, number>;
  /** Lower bound of the earliest expiry: nothing can have expired before it. */
  minExpiry: number;
}

function zero(counts: Counts): void {
  counts.requests = 0;
  counts.inputTokens = 0;
  counts.outputTokens = 0;
}

function newBucket(windowMs: number, index: number): MemoryBucket {
  return {
    leases: 0,
    oldestLeaseExpiry: 0,
    cur: { requests: 0, inputTokens: 0, outputTokens: 0 },
    prev: { requests: 0, inputTokens: 0, outputTokens: 0 },
    windowMs,
    index,
    expiries: new Map(),
    minExpiry: Infinity,
  };
}

function roll(bucket: MemoryBucket, now: number): void {
  const index = windowIndex(now, bucket.windowMs);
  if (index === bucket.index) return;
  if (index === bucket.index + 1) {
    // Swap instead of allocating: the old previous window becomes the new (empty) current one.
    const old = bucket.prev;
    bucket.prev = bucket.cur;
    bucket.cur = old;
    zero(old);
  } else {
    zero(bucket.cur);
    zero(bucket.prev);
  }
  bucket.index = index;
}

function purge(bucket: MemoryBucket, now: number): void {
  if (now < bucket.minExpiry) return;
  let min = Infinity;
  for (const [id, expiry] of bucket.expiries) {
    if (expiry <= now) bucket.expiries.delete(id);
    else if (expiry < min) min = expiry;
  }
  bucket.minExpiry = min;
  bucket.leases = bucket.expiries.size;
}

function oldestExpiry(bucket: MemoryBucket): number {
  let min = Infinity;
  for (const expiry of bucket.expiries.values()) if (expiry < min) min = expiry;
  return min === Infinity ? 0 : min;
}

/**
 * Usage beyond the reservation in a metric the bucket limits. Unlimited metrics are never counted, so
 * their reservation (0 when the caller skipped counting input tokens, see AdmitRequest) cannot matter.
 */
function overage(spec: BucketSpec, delta: Amounts): boolean {
  const limits = spec.limits;
  return (
    (limits.inputTokens !== undefined && delta.inputTokens > 0) ||
    (limits.outputTokens !== undefined && delta.outputTokens > 0)
  );
}

export class MemoryLimiter implements Limiter {
  private readonly now: () => number;
  private readonly leaseMs: number;
  private readonly sweepEveryMs: number;
  private readonly accounts = new Map<string, Map<string, MemoryBucket>>();
  private readonly scratch: MemoryBucket[] = [];
  private sequence = 0;
  private lastSweep: number;

  constructor(options: MemoryLimiterOptions = {}) {
    this.now = options.now ?? Date.now;
    this.leaseMs = options.leaseMs ?? DEFAULT_LEASE_MS;
    this.sweepEveryMs = options.sweepEveryMs ?? 60_000;
    this.lastSweep = this.now();
  }

  /** Buckets held in memory (idle ones are swept away). */
  get bucketCount(): number {
    let count = 0;
    for (const buckets of this.accounts.values()) count += buckets.size;
    return count;
  }

  async admit(request: AdmitRequest): Promise<Admission> {
    return this.admitSync(request);
  }

  /** The same as admit(), without the promise. */
  admitSync(request: AdmitRequest): Admission {
    const amounts = normalizeAdmit(request, this.leaseMs);
    const now = this.now();
    if (now - this.lastSweep >= this.sweepEveryMs) this.sweep(now);
    const specs = request.buckets;
    // Reused across calls (admission is synchronous); only the first specs.length entries are read.
    const states = this.scratch;
    let ok = true;
    for (let i = 0; i < specs.length; i++) {
      const spec = specs[i]!;
      const bucket = this.bucket(request.accountId, spec, now);
      if (spec.limits.concurrency !== undefined) purge(bucket, now);
      states[i] = bucket;
      if (ok && !bucketFits(spec, bucket, amounts, now)) ok = false;
    }
    if (!ok) {
      for (let i = 0; i < specs.length; i++) states[i]!.oldestLeaseExpiry = oldestExpiry(states[i]!);
      const refusal = pickRefusal(specs, states, amounts, now);
      if (!refusal) throw new Error('limiter refused without a refusing bucket');
      return { ok: false, refusal };
    }
    const lease = newLease(`m${++this.sequence}`, request.accountId, specs, amounts, now);
    const quota: BucketQuota[] = [];
    for (let i = 0; i < specs.length; i++) {
      const spec = specs[i]!;
      const bucket = states[i]!;
      this.consume(spec, bucket, lease, amounts, now);
      quota.push(bucketQuota(spec, bucket, now));
    }
    return { ok: true, lease, quota };
  }

  async release(lease: Lease, usage?: Usage): Promise<ReleaseOutcome> {
    return this.releaseSync(lease, usage);
  }

  releaseSync(lease: Lease, usage?: Usage): ReleaseOutcome {
    if (!claimRelease(lease)) return 'already-released';
    const now = this.now();
    const delta = usageDelta(lease, usage);
    for (const spec of lease.buckets) {
      // A swept bucket had both windows over: only an overage still has somewhere to go.
      const bucket =
        this.lookup(lease.accountId, spec.key) ??
        (overage(spec, delta) ? this.bucket(lease.accountId, spec, now) : undefined);
      if (!bucket) continue;
      if (bucket.expiries.delete(lease.id)) bucket.leases = bucket.expiries.size;
      // Counters kept under another window length (the config changed since) are not comparable.
      if (bucket.windowMs !== windowMsOf(spec.limits.windowSeconds)) continue;
      roll(bucket, now);
      this.reconcile(spec, bucket, lease.admittedAt, delta);
    }
    return 'released';
  }

  async extend(lease: Lease, leaseMs?: number): Promise<ExtendOutcome> {
    if (isReleased(lease)) return 'gone';
    const now = this.now();
    const expiry = now + leaseMsOr(lease, leaseMs);
    let outcome: ExtendOutcome = 'extended';
    for (const spec of lease.buckets) {
      if (spec.limits.concurrency === undefined) continue;
      const bucket = this.lookup(lease.accountId, spec.key);
      const current = bucket?.expiries.get(lease.id);
      // An expired lease may already have been replaced by another admission: reviving it could
      // exceed the ceiling, so it stays gone.
      if (!bucket || current === undefined || current <= now) {
        outcome = 'gone';
        continue;
      }
      bucket.expiries.set(lease.id, expiry);
    }
    return outcome;
  }

  async close(): Promise<void> {
    this.accounts.clear();
  }

  private lookup(accountId: string, key: string): MemoryBucket | undefined {
    return this.accounts.get(accountId)?.get(key);
  }

  /** The bucket as of `now` under this spec, created or reset to the spec's window length as needed. */
  private bucket(accountId: string, spec: BucketSpec, now: number): MemoryBucket {
    let buckets = this.accounts.get(accountId);
    if (!buckets) {
      buckets = new Map();
      this.accounts.set(accountId, buckets);
    }
    const windowMs = windowMsOf(spec.limits.windowSeconds);
    let bucket = buckets.get(spec.key);
    if (!bucket) {
      bucket = newBucket(windowMs, windowIndex(now, windowMs));
      buckets.set(spec.key, bucket);
    } else if (bucket.windowMs !== windowMs) {
      // The window length changed (new config): old counters are in other units of time.
      bucket.windowMs = windowMs;
      bucket.index = windowIndex(now, windowMs);
      zero(bucket.cur);
      zero(bucket.prev);
    } else {
      roll(bucket, now);
    }
    return bucket;
  }

  private consume(spec: BucketSpec, bucket: MemoryBucket, lease: Lease, amounts: Amounts, now: number): void {
    const limits = spec.limits;
    if (limits.concurrency !== undefined) {
      const expiry = now + lease.leaseMs;
      bucket.expiries.set(lease.id, expiry);
      bucket.leases = bucket.expiries.size;
      if (expiry < bucket.minExpiry) bucket.minExpiry = expiry;
    }
    // Only limited metrics are counted, as in Redis, where each counter is a write.
    if (limits.requests !== undefined) bucket.cur.requests += 1;
    if (limits.inputTokens !== undefined) bucket.cur.inputTokens += amounts.inputTokens;
    if (limits.outputTokens !== undefined) bucket.cur.outputTokens += amounts.outputTokens;
  }

  /**
   * Moves the reservation's window by the difference. When that window no longer counts (older than the
   * previous one), a refund is moot but an overage is still usage, so it lands in the current window.
   */
  private reconcile(spec: BucketSpec, bucket: MemoryBucket, admittedAt: number, delta: Amounts): void {
    const reserved = windowIndex(admittedAt, bucket.windowMs);
    for (const metric of WINDOW_METRICS) {
      if (metric === 'requests' || spec.limits[metric] === undefined) continue;
      const d = delta[metric];
      if (d === 0) continue;
      let counts: Counts | undefined;
      if (reserved >= bucket.index) counts = bucket.cur;
      else if (reserved === bucket.index - 1) counts = bucket.prev;
      else if (d > 0) counts = bucket.cur;
      if (counts) counts[metric] = Math.max(0, counts[metric] + d);
    }
  }

  private sweep(now: number): void {
    this.lastSweep = now;
    for (const [accountId, buckets] of this.accounts) {
      for (const [key, bucket] of buckets) {
        purge(bucket, now);
        // Both windows over and no live lease: the bucket is back to its initial state.
        if (bucket.leases === 0 && windowIndex(now, bucket.windowMs) > bucket.index + 1) buckets.delete(key);
      }
      if (buckets.size === 0) this.accounts.delete(accountId);
    }
  }
}
