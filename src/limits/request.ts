/**
 * Validation of what callers pass in. Bad numbers would poison shared counters (NaN in Redis, or a
 * negative reservation that refunds someone else's budget), so they are refused with a TypeError.
 */
import type { Amounts } from './evaluate.js';
import type { AdmitRequest, BucketSpec, Lease, Usage } from './types.js';

/** Long enough for most non-streamed calls; long streams extend() their lease periodically. */
export const DEFAULT_LEASE_MS = 60_000;

const LIMIT_METRICS = ['concurrency', 'requests', 'inputTokens', 'outputTokens'] as const;

// Specs are built once per config and reused, so each is checked once.
const validSpecs = new WeakSet<BucketSpec>();

function checkSpec(spec: BucketSpec): void {
  if (validSpecs.has(spec)) return;
  if (typeof spec.key !== 'string' || spec.key === '')
    throw new TypeError('bucket key must be a non-empty string');
  const { windowSeconds } = spec.limits;
  if (!Number.isFinite(windowSeconds) || windowSeconds <= 0) {
    throw new TypeError(`bucket ${spec.key}: windowSeconds must be a positive number`);
  }
  for (const metric of LIMIT_METRICS) {
    const limit = spec.limits[metric];
    if (limit !== undefined && !(Number.isFinite(limit) && limit >= 0)) {
      throw new TypeError(`bucket ${spec.key}: ${metric} must be a non-negative number`);
    }
  }
  validSpecs.add(spec);
}

function tokenCount(value: number, name: string): number {
  if (!Number.isFinite(value) || value < 0) throw new TypeError(`${name} must be a non-negative number`);
  return Math.ceil(value);
}

export interface NormalizedAdmit extends Amounts {
  leaseMs: number;
}

export function normalizeAdmit(request: AdmitRequest, defaultLeaseMs: number): NormalizedAdmit {
  if (typeof request.accountId !== 'string' || request.accountId === '') {
    throw new TypeError('accountId must be a non-empty string');
  }
  const buckets = request.buckets;
  for (let i = 0; i < buckets.length; i++) {
    const spec = buckets[i]!;
    checkSpec(spec);
    for (let j = 0; j < i; j++) {
      if (buckets[j]!.key === spec.key) throw new TypeError(`bucket ${spec.key} appears twice`);
    }
  }
  const leaseMs = request.leaseMs ?? defaultLeaseMs;
  if (!Number.isFinite(leaseMs) || leaseMs <= 0) throw new TypeError('leaseMs must be a positive number');
  return {
    inputTokens: tokenCount(request.inputTokens, 'inputTokens'),
    outputTokens: tokenCount(request.outputTokens, 'outputTokens'),
    leaseMs: Math.ceil(leaseMs),
  };
}

function actual(value: number, reserved: number): number {
  return Number.isFinite(value) ? Math.max(0, Math.ceil(value)) : reserved;
}

/**
 * Token differences (actual − reserved) to apply on release. Release never throws, so a missing or
 * non-finite figure keeps that reservation (the conservative choice) instead of failing.
 */
export function usageDelta(lease: Lease, usage: Usage | undefined): Amounts {
  if (!usage) return { inputTokens: 0, outputTokens: 0 };
  return {
    inputTokens: actual(usage.inputTokens, lease.inputTokens) - lease.inputTokens,
    outputTokens: actual(usage.outputTokens, lease.outputTokens) - lease.outputTokens,
  };
}

export function leaseMsOr(lease: Lease, leaseMs: number | undefined): number {
  return leaseMs !== undefined && Number.isFinite(leaseMs) && leaseMs > 0
    ? Math.ceil(leaseMs)
    : lease.leaseMs;
}

// Release must count once per lease whatever the outcome, including when the store was unreachable:
// retrying a release whose first attempt may have landed could apply the reconciliation twice. The
// mark lives on the lease itself (set from creation so the object keeps one shape): a WeakSet would
// cost more than the rest of an in-process admission.
const RELEASED = Symbol('released');

type Marked = Lease & { [RELEASED]?: boolean };

export function newLease(
  id: string,
  accountId: string,
  buckets: readonly BucketSpec[],
  amounts: NormalizedAdmit,
  admittedAt: number,
): Lease {
  const lease: Marked = {
    id,
    accountId,
    buckets,
    inputTokens: amounts.inputTokens,
    outputTokens: amounts.outputTokens,
    admittedAt,
    leaseMs: amounts.leaseMs,
    [RELEASED]: false,
  };
  return lease;
}

/** true the first time it is called for a lease, false after. */
export function claimRelease(lease: Lease): boolean {
  const marked = lease as Marked;
  if (marked[RELEASED] === true) return false;
  marked[RELEASED] = true;
  return true;
}

export function isReleased(lease: Lease): boolean {
  return (lease as Marked)[RELEASED] === true;
}
