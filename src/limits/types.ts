/**
 * The rate limiter's interface, shared by the in-process limiter (embedded default) and the Redis one
 * (many instances, one set of limits). Spec 8: limits are per account (all its keys) and per model, on
 * concurrency, requests and tokens over a rolling window; a refusal is 429 RATE_LIMIT_EXCEEDED.
 */

/** What a bucket can limit. The names double as the keys of BucketLimits. */
export type LimitMetric = 'concurrency' | 'requests' | 'inputTokens' | 'outputTokens';

/** The windowed metrics (everything but concurrency). */
export type WindowMetric = Exclude<LimitMetric, 'concurrency'>;

/** Ceilings of one bucket; an absent ceiling is unlimited (and costs nothing to enforce). */
export interface BucketLimits {
  /** Requests in flight at once. */
  concurrency?: number;
  /** Requests per rolling window. */
  requests?: number;
  /** Input (prompt) tokens per rolling window. */
  inputTokens?: number;
  /** Output (completion) tokens per rolling window. */
  outputTokens?: number;
  /** Length of the rolling window in seconds (positive; fractions allowed, whole milliseconds used). */
  windowSeconds: number;
}

/**
 * One bucket to check. `key` names it within the account: `account` for the account-wide bucket,
 * `model:<name>` for the account×model one (see buckets.ts). Build these once per config and reuse
 * them: a lease keeps a reference so reconciliation uses the limits it was admitted under.
 */
export interface BucketSpec {
  readonly key: string;
  readonly limits: Readonly<BucketLimits>;
}

export interface AdmitRequest {
  accountId: string;
  /** Checked together, all or nothing. Typically [accountBucket, modelBucket]. Keys must differ. */
  buckets: readonly BucketSpec[];
  /**
   * Estimated input tokens to reserve (rounded up to a whole number). Read only by buckets with an
   * inputTokens ceiling, in both limiters: without one, 0 admits, refuses, reconciles and reports the
   * same, which spares callers counting a prompt that no bucket limits.
   */
  inputTokens: number;
  /** Expected output tokens to reserve, e.g. max_tokens (rounded up to a whole number). */
  outputTokens: number;
  /** Lease duration for the concurrency slots; the limiter's default when absent. */
  leaseMs?: number;
}

/** Numbers for one metric of one bucket, for the rate-limit response headers. */
export interface MetricQuota {
  limit: number;
  /** Whole units left after this admission. */
  remaining: number;
  /**
   * Epoch ms when the budget is fully restored if nothing else is consumed. For concurrency, slots are
   * not time-based: this is the admission time.
   */
  resetAt: number;
}

/** Per-bucket quota after a successful admission; metrics without a ceiling are absent. */
export interface BucketQuota {
  bucket: string;
  windowSeconds: number;
  concurrency?: MetricQuota;
  requests?: MetricQuota;
  inputTokens?: MetricQuota;
  outputTokens?: MetricQuota;
}

/** A granted admission: holds concurrency slots until released (or until it expires). */
export interface Lease {
  readonly id: string;
  readonly accountId: string;
  /** The specs it was admitted under (same objects as in the request). Empty for a fail-open lease. */
  readonly buckets: readonly BucketSpec[];
  /** Reserved input tokens (after rounding). */
  readonly inputTokens: number;
  /** Reserved output tokens (after rounding). */
  readonly outputTokens: number;
  /** Epoch ms on the limiter's clock (the Redis server's for Redis) when it was admitted. */
  readonly admittedAt: number;
  /** How long the slots are held without extend(); extend well before it runs out (e.g. every third). */
  readonly leaseMs: number;
}

export interface Refusal {
  /** The bucket key that refused (when several refuse, the one with the longest wait). */
  bucket: string;
  metric: LimitMetric;
  limit: number;
  windowSeconds: number;
  /** How long until the refused amount would fit, if nothing else were consumed. For Retry-After. */
  retryAfterMs: number;
  /** Epoch ms when the bucket's budget for that metric is fully restored (details.reset). */
  resetAt: number;
  /**
   * The request alone exceeds the ceiling (e.g. more input tokens than the window allows): waiting
   * will not help. retryAfterMs then points to resetAt.
   */
  neverFits: boolean;
}

export type Admission =
  | {
      ok: true;
      lease: Lease;
      /** One entry per requested bucket, in request order. */
      quota: BucketQuota[];
      /** Set by withFailurePolicy('open') when the limiter was unavailable and nothing was checked. */
      failedOpen?: true;
    }
  | { ok: false; refusal: Refusal };

/** Real usage, known when the response ends. */
export interface Usage {
  inputTokens: number;
  outputTokens: number;
}

/** `already-released` on every call after the first; `unavailable` when Redis could not be reached. */
export type ReleaseOutcome = 'released' | 'already-released' | 'unavailable';

/** `gone` when the lease no longer holds its slots (released, or expired and purged). */
export type ExtendOutcome = 'extended' | 'gone' | 'unavailable';

export interface Limiter {
  /**
   * Checks every bucket and, only when all accept, consumes one request, the reserved tokens and a
   * concurrency slot in each. Rejects with LimiterUnavailableError when the shared store is unreachable
   * (never hangs); any other rejection is a programming error (TypeError on invalid input).
   */
  admit(request: AdmitRequest): Promise<Admission>;
  /**
   * Frees the concurrency slots and, when `usage` is given, replaces the reservation with the real
   * usage (window counters move by the difference, up or down). Without `usage` the reservation stands.
   * Idempotent per lease; never rejects, so it is safe in `finally` and on abort/timeout paths.
   */
  release(lease: Lease, usage?: Usage): Promise<ReleaseOutcome>;
  /** Pushes the lease's expiry to now + leaseMs (default: the lease's own). Never rejects. */
  extend(lease: Lease, leaseMs?: number): Promise<ExtendOutcome>;
  close(): Promise<void>;
}
