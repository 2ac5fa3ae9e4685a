/** The rate limiter: one interface, an in-process and a Redis implementation, and the failure policy. */
export { accountBucket, modelBucket } from './buckets.js';
export { LimiterUnavailableError } from './errors.js';
export { CONCURRENCY_RETRY_HINT_MS, tightest } from './evaluate.js';
export { MemoryLimiter, type MemoryLimiterOptions } from './memory.js';
export { type FailurePolicy, withFailurePolicy } from './policy.js';
export { DEFAULT_KEY_PREFIX, RedisLimiter, type RedisLimiterOptions } from './redis.js';
export {
  createLimiterRedis,
  DEFAULT_COMMAND_TIMEOUT_MS,
  type LimiterRedisOptions,
  limiterRedisOptions,
} from './redis-client.js';
export { DEFAULT_LEASE_MS } from './request.js';
export type * from './types.js';
