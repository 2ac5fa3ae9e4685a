import type { FastifyBaseLogger } from 'fastify';
import { Redis } from 'ioredis';
import { sharedEncoder } from '../providers/tokens.js';
import { CHANNEL as ACCESS_CHANNEL, AccessChanges } from './auth/changes.js';
import type { GantryConfig } from './config/types.js';
import { type Limiter, MemoryLimiter, RedisLimiter, withFailurePolicy } from './limits/index.js';
import { reconnectBackoff } from './limits/redis-client.js';
import { newLease } from './limits/request.js';
import { Metrics } from './metrics.js';
import { accountIdFor, type SqliteStore } from './store/sqlite.js';
import {
  CreditDebitSink,
  type CreditStore,
  JsonlUsageSink,
  RedisCreditStore,
  RedisStreamSink,
  SqliteCreditStore,
  SqliteUsageSink,
  UsageBatcher,
  type UsageSink,
} from './usage/index.js';
import { ledgerPathFor, openLedgerFile } from './usage/ledger-file.js';
import { LedgerThread, ThreadedCreditStore, ThreadedUsageSink } from './usage/ledger-thread.js';
import { checkpoint } from './usage/sqlite-db.js';

/** How often this process looks for changes made by another one (the CLI): keys, accounts, credits. */
const CHANGES_POLL_MS = 250;
/** How soon a failed catch-up with the changes kept on Redis is tried again. */
const CHANGES_RETRY_MS = 200;
/** Most time between two reconnection attempts of the metering and change connections. */
const RECONNECT_MAX_MS = 250;
const NOTHING = { inputTokens: 0, outputTokens: 0, leaseMs: 1 };
const RELEASED = Promise.resolve('released' as const);
const EXTENDED = Promise.resolve('extended' as const);
const EMBEDDED_MAX_BATCH = 100;

/** The stateful parts behind limits and metering, in-process or on Redis depending on the mode. */
export interface Services {
  mode: 'embedded' | 'redis';
  limiter: Limiter;
  credits: CreditStore;
  usage: UsageBatcher;
  /** The SQLite ledger in embedded mode (for the CLI and tests); absent on Redis. */
  ledger: SqliteUsageSink | undefined;
  metrics: Metrics;
  /** Keys and accounts changed here, relayed to every instance in distributed mode (auth/changes.ts). */
  access: AccessChanges;
  /** Resolves once the shared limiter answers (at once in embedded mode); never rejects. */
  ready(): Promise<void>;
  /**
   * The account's credit balance, or undefined when the credit store did not answer in time: the caller
   * applies the limiter's failure policy, so a Redis outage is handled the same way for both.
   */
  balance(accountId: string): Promise<number | undefined>;
  close(): Promise<void>;
}

export interface ServiceOptions {
  log: FastifyBaseLogger;
  /** Process-wide metrics (GC, memory); off in tests that build many apps. */
  processMetrics?: boolean;
}

export function createServices(config: GantryConfig, store: SqliteStore, options: ServiceOptions): Services {
  const { log } = options;
  const metrics = new Metrics({ processMetrics: options.processMetrics ?? true });
  // The tokenizer takes ~300 ms to build: pay it at start-up, not on the first request.
  sharedEncoder();

  let limiter: Limiter;
  let redisLimiter: RedisLimiter | undefined;
  let credits: CreditStore;
  const sinks: UsageSink[] = [];
  let ledger: SqliteUsageSink | undefined;
  let redis: Redis | undefined;
  let subscriber: Redis | undefined;
  let ledgerThread: LedgerThread | undefined;
  let closeLedger = () => {};
  const backend = config.redisUrl ? 'redis' : 'memory';

  if (config.redisUrl) {
    limiter = redisLimiter = new RedisLimiter({
      url: config.redisUrl,
      leaseMs: config.limits.leaseMs,
      commandTimeoutMs: config.limits.redisTimeoutMs,
      onError: (error) => log.debug({ err: error.message }, 'limiter redis connection error'),
    });
    // Metering tolerates a slow Redis (the batcher retries), so it gets its own, patient connection.
    // Its reconnect delay is bounded like the subscriber's: access changes made while Redis was down
    // are relayed through it within a second of Redis's return (README, "Keys").
    redis = new Redis(config.redisUrl, {
      maxRetriesPerRequest: 1,
      commandTimeout: 5_000,
      retryStrategy: reconnectBackoff(RECONNECT_MAX_MS),
    });
    redis.on('error', (error: Error) => log.debug({ err: error.message }, 'usage redis connection error'));
    const redisCredits = new RedisCreditStore(redis, {
      defaultBalance: config.credits.defaultBalance,
      balanceCacheMs: 1_000,
    });
    credits = redisCredits;
    // Grants (the CLI, another instance) and access changes are announced on Redis: each instance
    // forgets the cached balance, or applies the change to its own store, as soon as it hears.
    // What is published while the subscriber is disconnected is lost: each time it (re)connects, it
    // subscribes, then the access changes kept in Redis are read again and every cached balance is
    // forgotten (src/auth/changes.ts).
    const changes = new Redis(config.redisUrl, {
      maxRetriesPerRequest: null,
      autoResubscribe: false,
      retryStrategy: reconnectBackoff(RECONNECT_MAX_MS),
    });
    subscriber = changes;
    changes.on('error', (error: Error) =>
      log.debug({ err: error.message }, 'changes redis connection error'),
    );
    changes.on('message', (channel: string, message: string) => {
      if (channel === redisCredits.grantsChannel) redisCredits.forget(message);
      else if (channel === ACCESS_CHANNEL) access.receive(message);
    });
    const catchUp = async (): Promise<void> => {
      try {
        await changes.subscribe(redisCredits.grantsChannel, ACCESS_CHANNEL);
        redisCredits.forget();
        await access.join();
      } catch (error) {
        log.warn({ err: (error as Error).message }, 'could not catch up with the access changes on Redis');
        // The other connection may still be reconnecting: try again while this one is up.
        if (changes.status === 'ready') setTimeout(() => void catchUp(), CHANGES_RETRY_MS).unref();
      }
    };
    changes.on('ready', () => void catchUp());
    sinks.push(new RedisStreamSink(redis, { stream: config.usage.stream }));
  } else {
    limiter = new MemoryLimiter({ leaseMs: config.limits.leaseMs });
    const defaultBalance = config.credits.defaultBalance;
    const ledgerPath = ledgerPathFor(store.path);
    // Reads (balances, listings) go through this connection; so do the writes of an in-memory store.
    const ledgerDb = ledgerPath ? openLedgerFile(ledgerPath, store.handle) : store.handle;
    // Balances are read on every billable request: cached in memory (kept current by this process's own
    // writes, on the ledger thread's answers where there is one), and forgotten whenever another
    // process (the CLI granting credits) changed the file. The ledger thread watches for those itself,
    // from its own connection, whose data_version its own writes do not move.
    const sqliteCredits = new SqliteCreditStore(ledgerDb, { defaultBalance, cache: true });
    ledger = new SqliteUsageSink(ledgerDb);
    if (ledgerPath) {
      ledgerThread = new LedgerThread(
        { path: ledgerPath, defaultBalance, watchMs: CHANGES_POLL_MS },
        (error) =>
          log.error({ err: error.message }, 'the ledger thread stopped; it restarts on the next write'),
        () => sqliteCredits.forget(),
      );
      credits = new ThreadedCreditStore(ledgerThread, sqliteCredits);
      sinks.push(new ThreadedUsageSink(ledgerThread));
      closeLedger = () => {
        sqliteCredits.close();
        // After the thread has stopped: ledger.db alone then holds every record (see checkpoint).
        checkpoint(ledgerDb);
        ledgerDb.close();
      };
    } else {
      credits = sqliteCredits;
      sinks.push(ledger);
    }
  }
  sinks.push(new CreditDebitSink(credits));
  const access = new AccessChanges(store, redis, {
    configured: new Set(config.accounts.map((a) => accountIdFor(a.name))),
  });
  const changesTimer = setInterval(() => {
    try {
      access.poll();
    } catch (error) {
      log.warn({ err: (error as Error).message }, 'looking for key, account or credit changes failed');
    }
  }, CHANGES_POLL_MS);
  changesTimer.unref();
  if (config.usage.jsonlPath) sinks.push(new JsonlUsageSink(config.usage.jsonlPath));

  // The gauge is written when the state flips, not on every admission.
  let limiterUp = true;
  const markLimiter = (up: boolean) => {
    if (up === limiterUp) return;
    limiterUp = up;
    metrics.limiterUp.set({ backend }, up ? 1 : 0);
  };
  metrics.limiterUp.set({ backend }, 1);
  const guarded = withFailurePolicy(limiter, config.limits.failurePolicy, (error) => {
    markLimiter(false);
    metrics.limiterFailures.inc({ policy: config.limits.failurePolicy });
    log.warn({ err: error.message, policy: config.limits.failurePolicy }, 'rate limiter unavailable');
  });

  const usage = new UsageBatcher({
    sinks,
    flushIntervalMs: config.usage.flushMs,
    // A batch is one ledger transaction (on the ledger thread, or on the main thread for an in-memory
    // store, where 100 records hold requests for about a millisecond). Not more on the thread either:
    // posting a batch holds the event loop about 3.5 µs a record, and larger batches save no CPU (libsql's
    // cost is per bound value), so the stall stays short.
    ...(ledger ? { maxBatch: EMBEDDED_MAX_BATCH } : {}),
    onError: (error, sink) => {
      metrics.usageSinkUp.set({ sink }, 0);
      log.error(
        { err: error instanceof Error ? error.message : String(error), sink },
        'usage sink write failed',
      );
    },
    onDrop: (count, reason, sink) => log.error({ count, reason, sink }, 'usage records dropped'),
  });
  for (const sink of sinks) metrics.usageSinkUp.set({ sink: sink.name ?? 'sink' }, 1);

  return {
    mode: config.redisUrl ? 'redis' : 'embedded',
    limiter: {
      // A request no bucket limits (an unlimited tier, a model without limits) has nothing to count
      // against: it is admitted without the limiter (no work, on Redis no round trip, whatever the
      // failure policy) and its lease, holding nothing, is never handed back to it.
      admit: async (request) => {
        if (request.buckets.length === 0) {
          return {
            ok: true,
            lease: newLease('unlimited', request.accountId, [], NOTHING, Date.now()),
            quota: [],
          };
        }
        const admission = await guarded.admit(request);
        if (!admission.ok || !admission.failedOpen) markLimiter(true);
        return admission;
      },
      release: (lease, used) => (lease.buckets.length === 0 ? RELEASED : guarded.release(lease, used)),
      extend: (lease, ms) => (lease.buckets.length === 0 ? EXTENDED : guarded.extend(lease, ms)),
      close: () => guarded.close(),
    },
    credits,
    usage,
    ledger,
    metrics,
    access,
    ready: async () => {
      try {
        await access.join();
      } catch (error) {
        log.warn({ err: (error as Error).message }, 'could not read the revoked keys shared on Redis');
      }
      try {
        await redisLimiter?.ready(5_000);
      } catch (error) {
        log.warn(
          { err: (error as Error).message },
          'the rate limiter is not connected yet; the failure policy applies',
        );
      }
    },
    balance: async (accountId) => {
      const balance = credits.balance(accountId);
      if (typeof balance === 'number') return balance;
      // A Redis read on the request path gets the limiter's deadline, never the patient metering one.
      let timer: ReturnType<typeof setTimeout> | undefined;
      const deadline = new Promise<undefined>((resolve) => {
        timer = setTimeout(() => resolve(undefined), config.limits.redisTimeoutMs);
      });
      try {
        return await Promise.race([balance.catch(() => undefined), deadline]);
      } finally {
        clearTimeout(timer);
      }
    },
    close: async () => {
      clearInterval(changesTimer);
      subscriber?.disconnect();
      await usage.close();
      await guarded.close();
      await credits.close();
      await ledgerThread?.close();
      closeLedger();
      if (redis) redis.disconnect();
    },
  };
}
