/**
 * ioredis settings for a limiter connection. Admission sits on the request path, so a Redis problem
 * must surface within a bound (and become LimiterUnavailableError) instead of queueing requests:
 * commands time out, nothing is queued while disconnected, nothing is resent after a reconnect (an
 * admission that may have landed must not be replayed), and reconnection keeps trying in the background
 * so the limiter recovers by itself.
 */
import { Redis, type RedisOptions } from 'ioredis';
import { nextDelayMs } from '../backoff.js';

export interface LimiterRedisOptions {
  /** Per-command deadline. */
  commandTimeoutMs?: number;
  connectTimeoutMs?: number;
  /** Ceiling of the reconnect backoff: how stale the limiter can stay after Redis comes back. */
  maxReconnectDelayMs?: number;
}

export const DEFAULT_COMMAND_TIMEOUT_MS = 200;

export function limiterRedisOptions(options: LimiterRedisOptions = {}): RedisOptions {
  const maxDelay = options.maxReconnectDelayMs ?? 1000;
  return {
    commandTimeout: options.commandTimeoutMs ?? DEFAULT_COMMAND_TIMEOUT_MS,
    connectTimeout: options.connectTimeoutMs ?? 1000,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    autoResendUnfulfilledCommands: false,
    retryStrategy: reconnectBackoff(maxDelay),
  };
}

/**
 * An ioredis retryStrategy: doubling from 100 ms, never more than `maxDelayMs` between attempts, so a
 * connection is back within that bound of Redis's return (ioredis's default waits up to 2 s).
 */
export function reconnectBackoff(maxDelayMs: number): (times: number) => number {
  const policy = { baseMs: 100, maxMs: maxDelayMs, jitter: 'none' } as const;
  return (times) => nextDelayMs(times, policy);
}

export function createLimiterRedis(url: string, options: LimiterRedisOptions = {}): Redis {
  return new Redis(url, limiterRedisOptions(options));
}
