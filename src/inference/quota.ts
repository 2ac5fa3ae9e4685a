import type { Ceilings, GantryConfig, ModelEntry } from '../config/types.js';
import { GantryError } from '../errors.js';
import {
  type Admission,
  type AdmitRequest,
  accountBucket,
  type BucketLimits,
  type BucketQuota,
  type BucketSpec,
  type Lease,
  LimiterUnavailableError,
  modelBucket,
  type Refusal,
  tightest,
} from '../limits/index.js';
import type { Services } from '../services.js';

const DEFAULT_WINDOW_SECONDS = 60;
const METRIC_NAMES = {
  concurrency: 'concurrency',
  requests: 'requests',
  inputTokens: 'input_tokens',
  outputTokens: 'output_tokens',
} as const;

/** config → tier name → model entry → its buckets; keyed by objects, so a lookup builds no string. */
const specCache = new WeakMap<GantryConfig, Map<string, WeakMap<ModelEntry, readonly BucketSpec[]>>>();

/**
 * The account bucket and the account×model bucket for a tier and a model. Ceilings come from the tier,
 * then the model's own `limits`, then the tier's per-model override. Built once per tier and model.
 */
export function bucketsFor(config: GantryConfig, tierName: string, model: ModelEntry): readonly BucketSpec[] {
  let tiers = specCache.get(config);
  if (!tiers) {
    tiers = new Map();
    specCache.set(config, tiers);
  }
  let cache = tiers.get(tierName);
  if (!cache) {
    cache = new WeakMap();
    tiers.set(tierName, cache);
  }
  let specs = cache.get(model);
  if (!specs) {
    const tier = config.tiers[tierName] ?? {};
    const window = tier.window_seconds ?? DEFAULT_WINDOW_SECONDS;
    const modelCeilings = { ...tier.model, ...model.limits, ...tier.models?.[model.namespace] };
    // A bucket with no ceiling can refuse nothing: left out, so an unlimited tier costs no limiter work
    // (and, on Redis, no round trip at admission or release).
    specs = [
      accountBucket(toLimits(tier.account, window)),
      modelBucket(model.namespace, toLimits(modelCeilings, window)),
    ].filter(hasCeiling);
    cache.set(model, specs);
  }
  return specs;
}

/**
 * Whether a bucket has an input-token ceiling: only then does the limiter read a request's input tokens,
 * so only then are they counted before admission (see openTicket).
 */
export function limitsInputTokens(buckets: readonly BucketSpec[]): boolean {
  for (const spec of buckets) if (spec.limits.inputTokens !== undefined) return true;
  return false;
}

function hasCeiling(spec: BucketSpec): boolean {
  const l = spec.limits;
  return (
    l.concurrency !== undefined ||
    l.requests !== undefined ||
    l.inputTokens !== undefined ||
    l.outputTokens !== undefined
  );
}

function toLimits(c: Ceilings | undefined, windowSeconds: number): BucketLimits {
  const limits: BucketLimits = { windowSeconds };
  if (c?.concurrency !== undefined) limits.concurrency = c.concurrency;
  if (c?.requests !== undefined) limits.requests = c.requests;
  if (c?.input_tokens !== undefined) limits.inputTokens = c.input_tokens;
  if (c?.output_tokens !== undefined) limits.outputTokens = c.output_tokens;
  return limits;
}

/**
 * Success headers: the spec's X-RateLimit-* (requests) and x-gantry-ratelimit-* (tokens in/out), and
 * OpenAI's x-ratelimit-{limit,remaining,reset}-{requests,tokens}. Each shows the tightest bucket.
 */
export function quotaHeaders(quota: readonly BucketQuota[]): Record<string, string> {
  const headers: Record<string, string> = {};
  const now = Date.now();
  const requests = tightest(quota, 'requests');
  if (requests) {
    headers['x-ratelimit-limit'] = String(requests.limit);
    headers['x-ratelimit-remaining'] = String(requests.remaining);
    headers['x-ratelimit-reset'] = String(Math.ceil(requests.resetAt / 1000));
    headers['x-ratelimit-limit-requests'] = String(requests.limit);
    headers['x-ratelimit-remaining-requests'] = String(requests.remaining);
    headers['x-ratelimit-reset-requests'] = openAIDuration(requests.resetAt - now);
  }
  const tokensIn = tightest(quota, 'inputTokens');
  if (tokensIn) {
    headers['x-gantry-ratelimit-limit-tokens-in'] = String(tokensIn.limit);
    headers['x-gantry-ratelimit-remaining-tokens-in'] = String(tokensIn.remaining);
    headers['x-ratelimit-limit-tokens'] = String(tokensIn.limit);
    headers['x-ratelimit-remaining-tokens'] = String(tokensIn.remaining);
    headers['x-ratelimit-reset-tokens'] = openAIDuration(tokensIn.resetAt - now);
  }
  const tokensOut = tightest(quota, 'outputTokens');
  if (tokensOut) {
    headers['x-gantry-ratelimit-limit-tokens-out'] = String(tokensOut.limit);
    headers['x-gantry-ratelimit-remaining-tokens-out'] = String(tokensOut.remaining);
  }
  const window = requests ?? tokensIn ?? tokensOut;
  if (window) headers['x-gantry-ratelimit-window'] = String(window.windowSeconds);
  return headers;
}

/** OpenAI writes reset times as durations such as `1s`, `6m0s`, `120ms`. */
function openAIDuration(ms: number): string {
  if (ms <= 0) return '0s';
  if (ms < 1000) return `${Math.ceil(ms)}ms`;
  const seconds = Math.ceil(ms / 1000);
  if (seconds < 60) return `${seconds}s`;
  return `${Math.floor(seconds / 60)}m${seconds % 60}s`;
}

/**
 * Admits a request through the services' limiter, or throws what the client gets: 429 with the refusal
 * (counted in the metrics), or 503 when the limiter is down and the policy is to refuse.
 */
export async function admitOrRefuse(
  services: Services,
  request: AdmitRequest,
): Promise<{ lease: Lease; quota: readonly BucketQuota[] }> {
  let admission: Admission;
  try {
    admission = await services.limiter.admit(request);
  } catch (err) {
    if (!(err instanceof LimiterUnavailableError)) throw err;
    throw new GantryError('SERVICE_UNAVAILABLE', {
      message: 'The rate limiter is unavailable and this gateway is set to refuse requests meanwhile',
      headers: { 'retry-after': '1' },
      cause: err,
    });
  }
  if (!admission.ok) {
    services.metrics.rateLimited.inc({
      metric: admission.refusal.metric,
      scope: admission.refusal.bucket === 'account' ? 'account' : 'model',
    });
    throw refusalError(admission.refusal);
  }
  return admission;
}

/** 429 RATE_LIMIT_EXCEEDED with Retry-After (whole seconds, absent when not positive) and details. */
export function refusalError(refusal: Refusal): GantryError {
  const retryAfter = Math.ceil(refusal.retryAfterMs / 1000);
  const metric = METRIC_NAMES[refusal.metric];
  const scope = refusal.bucket === 'account' ? 'account' : 'model';
  return new GantryError('RATE_LIMIT_EXCEEDED', {
    message: refusal.neverFits
      ? `This request alone exceeds the ${scope} limit of ${refusal.limit} ${metric.replace('_', ' ')}`
      : `Rate limit exceeded: ${metric.replace('_', ' ')} of the ${scope} (limit ${refusal.limit})`,
    details: {
      metric,
      scope,
      limit: refusal.limit,
      window_seconds: refusal.windowSeconds,
      reset: Math.ceil(refusal.resetAt / 1000),
      retry_after_seconds: Math.max(retryAfter, 0),
    },
    ...(retryAfter > 0 ? { headers: { 'retry-after': String(retryAfter) } } : {}),
  });
}
