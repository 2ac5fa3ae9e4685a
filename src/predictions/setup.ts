import { createHmac } from 'node:crypto';
import type { FastifyBaseLogger } from 'fastify';
import { Redis } from 'ioredis';
import { CogSchemaError } from '../../providers/predictions/cog-openapi.js';
import { createBackend, mediaBackendFor, PREDICTION_KINDS } from '../../providers/predictions/index.js';
import type { PredictionBackend } from '../../providers/predictions/types.js';
import type { InferenceProvider } from '../../providers/types.js';
import { nextDelayMs } from '../backoff.js';
import { LocalDiskBlobStore } from '../blobs/local.js';
import { S3BlobStore } from '../blobs/s3.js';
import type { BlobStore } from '../blobs/types.js';
import type { Catalog } from '../catalog.js';
import type { GantryConfig, ModelEntry } from '../config/types.js';
import type { Safety } from '../safety/engine.js';
import type { Services } from '../services.js';
import type { SqliteStore } from '../store/sqlite.js';
import { MemoryEventBus } from './bus-memory.js';
import { RedisEventBus } from './bus-redis.js';
import type { PredictionDeps } from './context.js';
import { WebhookDeliverer } from './deliveries.js';
import { pydanticGeneration } from './input-dialect.js';
import { compileInputSchema, type InputValidator } from './input-schema.js';
import { BullJobQueue } from './queue-bullmq.js';
import { MemoryJobQueue } from './queue-memory.js';
import { loadSecretKey } from './secrets.js';
import { promptFieldsOf } from './service.js';
import { RedisPredictionStore } from './store-redis.js';
import { SqlitePredictionStore } from './store-sqlite.js';
import type { JobQueue } from './types.js';
import { PredictionWorker } from './worker.js';

export type Role = 'api' | 'worker' | 'all';

const SWEEP_EVERY_MS = 30_000;
/** Older than this, a starting prediction or a due delivery has surely been dropped by its queue. */
const SWEEP_AGE_MS = 30_000;
const STALE_PROCESSING_MS = 10 * 60_000;
/** How long predictions still running at the shutdown deadline get to record their end once aborted. */
const ABORT_SETTLE_MS = 1_000;

/** What a text model served as a prediction takes and gives when the catalog says nothing. */
const TEXT_INPUT_SCHEMA = {
  type: 'object',
  title: 'Input',
  required: ['prompt'],
  properties: {
    prompt: { type: 'string', title: 'Prompt', 'x-order': 0 },
    system_prompt: { type: 'string', title: 'System prompt', 'x-order': 1 },
    max_tokens: { type: 'integer', minimum: 1, maximum: 65536, default: 512, 'x-order': 2 },
    temperature: { type: 'number', minimum: 0, maximum: 2, default: 0.7, 'x-order': 3 },
    top_p: { type: 'number', minimum: 0, maximum: 1, default: 0.95, 'x-order': 4 },
  },
};
const TEXT_OUTPUT_SCHEMA = { type: 'string', title: 'Output' };

/** Prediction backends of every provider that runs predictions, built before the catalog. */
export function createBackends(
  config: GantryConfig,
  callbackBase: () => string,
): Map<string, PredictionBackend> {
  const backends = new Map<string, PredictionBackend>();
  const used = new Set(
    config.models
      .filter((m) => m.serves.includes('predictions'))
      .flatMap((m) => m.routes.map((r) => r.provider)),
  );
  for (const provider of config.providers) {
    if (!PREDICTION_KINDS.has(provider.kind)) continue;
    if (provider.kind === 'local' && !used.has(provider.name)) continue;
    backends.set(provider.name, createBackend(provider, callbackBase));
  }
  return backends;
}

/** A model whose backend could not give its schemas at start: retried in the background. */
export interface PendingSchemas {
  model: ModelEntry;
  backend: PredictionBackend;
  route: string;
  provider: string;
  /** The status the config gave it, restored once the schemas load. */
  status: ModelEntry['status'];
  /** Which schemas the config left out (the ones to fill in). */
  input: boolean;
  output: boolean;
}

/**
 * Models whose input schema Gantry read from their Cog server, i.e. pydantic wrote it: their inputs are
 * converted as that pydantic generation converts them (input-dialect.ts `pydanticGeneration`). A schema
 * written in the catalog, or a local model's, gets pydantic v2's narrower rules. Keyed by the entry so
 * the config types stay as they are.
 */
const COG_WRITTEN = new WeakSet<ModelEntry>();

/** Retries of a schema fetch that failed: 1 s, then doubling with jitter up to a minute. */
const SCHEMA_RETRY = { baseMs: 1_000, maxMs: 60_000 };

/**
 * Fills in the input and output schemas of prediction models that the config leaves out, from their
 * backend (a Cog server's /openapi.json, the local models' own), so the Models API shows them and
 * inputs are validated against them. Whatever goes wrong takes only that model offline, with the
 * reason: an answer holding no usable schemas (CogSchemaError) for good; a backend that cannot answer
 * (unreachable, an error status, not JSON) until a background retry loads them (`retrySchemas`), so
 * those models are returned.
 */
export async function loadModelSchemas(
  models: ModelEntry[],
  backends: ReadonlyMap<string, PredictionBackend>,
  log?: FastifyBaseLogger,
): Promise<PendingSchemas[]> {
  const pending: PendingSchemas[] = [];
  for (const model of models) {
    if (!model.serves.includes('predictions') || (model.input_schema && model.output_schema)) continue;
    const route = model.routes[0];
    const backend = route ? mediaBackendFor(backends, route.provider, route.model) : undefined;
    let schemas: { input?: Record<string, unknown>; output?: Record<string, unknown> } | undefined;
    if (backend?.schemas && route) {
      try {
        schemas = await backend.schemas(route.model);
      } catch (error) {
        const unusable = error instanceof CogSchemaError;
        if (!unusable) {
          pending.push({
            model,
            backend,
            route: route.model,
            provider: route.provider,
            status: model.status,
            input: model.input_schema === undefined,
            output: model.output_schema === undefined,
          });
        }
        // The server answered with schemas Gantry cannot use, or could not answer: this model only
        // goes offline (the second until its schemas load).
        model.status = 'offline';
        model.status_reason = unusable
          ? `its schemas from ${route.provider} cannot be used: ${(error as Error).message}`
          : `cannot read its schemas from ${route.provider}: ${(error as Error).message} (retrying)`;
        log?.error({ model: model.namespace, reason: model.status_reason }, 'model taken offline');
        if (!unusable) continue;
        schemas = undefined;
      }
    } else if (!backend) {
      schemas = { input: TEXT_INPUT_SCHEMA, output: TEXT_OUTPUT_SCHEMA };
    }
    if (backend?.kind === 'cog' && model.input_schema === undefined && schemas?.input) COG_WRITTEN.add(model);
    model.input_schema ??= schemas?.input ?? { type: 'object', properties: {} };
    model.output_schema ??= schemas?.output ?? DEFAULT_OUTPUT_SCHEMA;
  }
  return pending;
}

const DEFAULT_OUTPUT_SCHEMA = { type: 'array', items: { type: 'string', format: 'uri' } };

export interface SchemaRetryTarget {
  catalog: Catalog;
  validators: Map<string, InputValidator>;
  promptFields: Map<string, readonly string[]>;
  log: FastifyBaseLogger;
}

/**
 * Asks each pending model's backend for its schemas again, with backoff (SCHEMA_RETRY), until they load;
 * then fills them in, compiles the validator and brings the model back to its configured status. Schemas
 * that load but cannot be used (CogSchemaError, or an input schema that does not compile) keep the model
 * offline with that reason, and end its retries. Returns a stop function (shutdown).
 */
export function retrySchemas(pending: readonly PendingSchemas[], target: SchemaRetryTarget): () => void {
  const timers = new Set<NodeJS.Timeout>();
  let stopped = false;
  const schedule = (item: PendingSchemas, attempt: number) => {
    const timer = setTimeout(
      () => {
        timers.delete(timer);
        void tryOnce(item, attempt);
      },
      nextDelayMs(attempt, SCHEMA_RETRY),
    );
    timer.unref();
    timers.add(timer);
  };
  const tryOnce = async (item: PendingSchemas, attempt: number) => {
    const { model, provider } = item;
    let schemas: { input?: Record<string, unknown>; output?: Record<string, unknown> } | undefined;
    try {
      schemas = await item.backend.schemas?.(item.route);
    } catch (error) {
      if (stopped) return;
      if (error instanceof CogSchemaError) {
        const reason = `its schemas from ${provider} cannot be used: ${error.message}`;
        target.log.error({ model: model.namespace, reason }, 'model stays offline');
        target.catalog.takeOffline(model.namespace, reason);
        return;
      }
      const reason = `cannot read its schemas from ${provider}: ${(error as Error).message} (retrying)`;
      if (reason !== model.status_reason) target.catalog.takeOffline(model.namespace, reason);
      target.log.debug({ model: model.namespace, attempt, reason }, 'model schemas still unavailable');
      schedule(item, attempt + 1);
      return;
    }
    if (stopped) return;
    const input = item.input ? (schemas?.input ?? { type: 'object', properties: {} }) : model.input_schema;
    let validator: InputValidator;
    try {
      const repairs: string[] = [];
      const options = { repairs, ...(model.unknown_inputs ? { unknownInputs: model.unknown_inputs } : {}) };
      validator = compileInputSchema(input ?? { type: 'object' }, {
        ...options,
        pydantic: pydanticOf(model, input ?? {}, item.input && item.backend.kind === 'cog'),
      });
      if (repairs.length > 0)
        target.log.warn({ model: model.namespace, repairs }, 'model input schema repaired');
    } catch (error) {
      const reason = (error as Error).message;
      target.log.error(
        { model: model.namespace, reason },
        'model stays offline: its input schema cannot be used',
      );
      target.catalog.takeOffline(model.namespace, reason);
      return;
    }
    if (item.input) model.input_schema = input;
    if (item.input && item.backend.kind === 'cog' && schemas?.input) COG_WRITTEN.add(model);
    if (item.output) model.output_schema = schemas?.output ?? DEFAULT_OUTPUT_SCHEMA;
    target.validators.set(model.namespace, validator);
    target.promptFields.set(model.namespace, promptFieldsOf(model.input_schema ?? {}, validator));
    target.catalog.bringOnline(model.namespace, item.status);
    target.log.info({ model: model.namespace, attempts: attempt }, 'model schemas loaded; model back online');
  };
  for (const item of pending) schedule(item, 1);
  return () => {
    stopped = true;
    for (const timer of timers) clearTimeout(timer);
    timers.clear();
  };
}

/**
 * One validator per prediction model. A schema that cannot be compiled takes only its model offline (the
 * reason logged and shown on the model as `status_reason`); the others are served. Repairs made to a
 * schema (input-dialect.ts) are logged once.
 */
export function compileValidators(
  models: readonly ModelEntry[],
  catalog: Catalog,
  log: FastifyBaseLogger,
): Map<string, InputValidator> {
  const validators = new Map<string, InputValidator>();
  for (const model of models) {
    if (!model.serves.includes('predictions')) continue;
    const repairs: string[] = [];
    try {
      const schema = model.input_schema ?? { type: 'object' };
      const options = {
        repairs,
        pydantic: pydanticOf(model, schema),
        ...(model.unknown_inputs ? { unknownInputs: model.unknown_inputs } : {}),
      };
      validators.set(model.namespace, compileInputSchema(schema, options));
    } catch (error) {
      const reason = (error as Error).message;
      log.error({ model: model.namespace, reason }, 'model taken offline: its input schema cannot be used');
      catalog.takeOffline(model.namespace, reason);
      continue;
    }
    if (repairs.length > 0) log.warn({ model: model.namespace, repairs }, 'model input schema repaired');
  }
  return validators;
}

/** The pydantic whose conversions a model's inputs get (see COG_WRITTEN). */
function pydanticOf(model: ModelEntry, schema: Record<string, unknown>, fromCog = false): 'v1' | 'v2' {
  return fromCog || COG_WRITTEN.has(model) ? pydanticGeneration(schema) : 'v2';
}

export interface Predictions {
  deps: PredictionDeps;
  /** Key of the signed file links (the file routes verify with it). */
  blobSecret: Buffer;
  /** Starts the workers, deliveries, recovery and the retention purge (worker and all roles). */
  startWorkers(): Promise<void>;
  /**
   * Stops taking jobs at once and gives the running ones until the shutdown deadline
   * (server.shutdown_timeout_seconds from now) to finish; those still running then are handed back to
   * the queue and aborted. Runs alongside the HTTP drain; close() waits for it (and starts it if needed).
   */
  drain(): Promise<void>;
  close(): Promise<void>;
}

export interface PredictionsOptions {
  config: GantryConfig;
  store: SqliteStore;
  services: Services;
  catalog: Catalog;
  backends: ReadonlyMap<string, PredictionBackend>;
  inference: ReadonlyMap<string, InferenceProvider>;
  safety: Safety;
  log: FastifyBaseLogger;
  publicUrl: () => string;
  /** Models whose schemas could not be read at start (loadModelSchemas): retried in the background. */
  pendingSchemas?: readonly PendingSchemas[];
}

export function createPredictions(options: PredictionsOptions): Predictions {
  const { config, log } = options;
  const secretKey = loadSecretKey(process.env.GANTRY_SECRET_KEY, config.server.dataDir);
  const blobSecret = createHmac('sha256', secretKey).update('gantry-file-links').digest();
  let redis: Redis | undefined;
  let queue: JobQueue;
  const distributed = config.redisUrl !== undefined;
  if (config.redisUrl) {
    // Predictions make many small independent commands (store, indexes): let ioredis pipeline them.
    redis = new Redis(config.redisUrl, { maxRetriesPerRequest: 3, enableAutoPipelining: true });
    redis.on('error', (error: Error) =>
      log.debug({ err: error.message }, 'predictions redis connection error'),
    );
    queue = new BullJobQueue({
      url: config.redisUrl,
      onError: (error) => log.warn({ err: error.message }, 'prediction queue error'),
      // A dead worker's job is taken over within 1.5 locks (checks every half lock). The store's attempts
      // cap the runs (worker.ts): BullMQ hands a stalled job back up to max_attempts times, so the run
      // past the cap is the one that marks the prediction failed (README, Predictions).
      lockDurationMs: config.predictions.workerLockMs,
      stalledIntervalMs: Math.max(500, Math.floor(config.predictions.workerLockMs / 2)),
      maxStalledCount: config.predictions.maxAttempts,
    });
  } else {
    queue = new MemoryJobQueue();
  }
  const validators = compileValidators(config.models, options.catalog, log);
  const promptFields = new Map<string, readonly string[]>();
  for (const model of config.models) {
    const validator = validators.get(model.namespace);
    if (validator) promptFields.set(model.namespace, promptFieldsOf(model.input_schema ?? {}, validator));
  }
  const deps: PredictionDeps = {
    config,
    catalog: options.catalog,
    store: redis ? new RedisPredictionStore(redis, {}) : new SqlitePredictionStore(options.store.handle),
    queue,
    bus: config.redisUrl ? new RedisEventBus({ url: config.redisUrl }) : new MemoryEventBus(),
    blobs: createBlobStore(config, blobSecret, options.publicUrl),
    backends: options.backends,
    inference: options.inference,
    validators,
    secretKey,
    services: options.services,
    usage: options.services.usage,
    metrics: options.services.metrics,
    safety: options.safety,
    promptFields,
    log,
    publicUrl: options.publicUrl,
  };

  const stopSchemaRetries = retrySchemas(options.pendingSchemas ?? [], {
    catalog: options.catalog,
    validators,
    promptFields,
    log,
  });
  const worker = new PredictionWorker(deps);
  const deliverer = new WebhookDeliverer(deps);
  let purgeTimer: NodeJS.Timeout | undefined;
  let sweepTimer: NodeJS.Timeout | undefined;
  let workersStarted = false;
  let draining: Promise<void> | undefined;
  const drain = (): Promise<void> => {
    draining ??= (async () => {
      stopSchemaRetries();
      clearInterval(purgeTimer);
      clearInterval(sweepTimer);
      await queue.stopWorkers(config.server.shutdownTimeoutMs);
      if (workersStarted) await worker.abortAll(ABORT_SETTLE_MS);
    })();
    return draining;
  };

  return {
    deps,
    blobSecret,
    async startWorkers() {
      workersStarted = true;
      worker.start();
      deliverer.start();
      // Embedded: the in-process queue died with the last process, so everything unfinished is re-queued.
      // Distributed: what a dead instance wrote but did not queue (a delivery written with its status
      // just before a crash) is queued now rather than at the first sweep; queued ids are not doubled.
      if (!distributed) await requeue(deps, Number.MAX_SAFE_INTEGER);
      else
        await requeue(deps, Date.now()).catch((e) =>
          log.warn({ err: (e as Error).message }, 'start-up recovery failed; the sweep will retry'),
        );
      // Both modes, now and then: work the queue lost (an add that failed, a delivery recorded while a
      // worker drained its queue) is found in the store and queued again; queued ids are not duplicated.
      sweepTimer = setInterval(
        () =>
          void requeue(deps, Date.now() - SWEEP_AGE_MS).catch((e) =>
            log.warn({ err: (e as Error).message }, 'sweep failed'),
          ),
        SWEEP_EVERY_MS,
      );
      sweepTimer.unref();
      const every = Math.max(100, Math.min(30_000, Math.floor(config.predictions.retentionMs / 4)));
      purgeTimer = setInterval(
        () => void purge(deps).catch((e) => log.warn({ err: (e as Error).message }, 'purge failed')),
        every,
      );
      purgeTimer.unref();
    },
    drain,
    async close() {
      await drain();
      await queue.close();
      await deliverer.close();
      await deps.bus.close();
      await Promise.all([...options.backends.values()].map((b) => b.close()));
      await deps.blobs.close();
      await deps.store.close();
      redis?.disconnect();
    },
  };
}

function createBlobStore(config: GantryConfig, secret: Buffer, publicUrl: () => string): BlobStore {
  const storage = config.predictions.storage;
  if (storage.kind === 'local')
    return new LocalDiskBlobStore(config.predictions.filesDir, { secret, publicUrl });
  return new S3BlobStore({
    ...(storage.endpoint === undefined ? {} : { endpoint: storage.endpoint }),
    ...(storage.prefix === undefined ? {} : { prefix: storage.prefix }),
    region: storage.region,
    bucket: storage.bucket,
    accessKeyId: storage.accessKeyId,
    secretAccessKey: storage.secretAccessKey,
    forcePathStyle: storage.forcePathStyle,
  });
}

/**
 * Queues again the predictions still `starting` and the deliveries still pending that were created or due
 * before `before` (epoch ms). Processing predictions are left to their worker (or BullMQ's stalled-job
 * recovery), except at an embedded start-up, when no worker can hold them.
 */
export async function requeue(deps: PredictionDeps, before: number): Promise<void> {
  const everything = before === Number.MAX_SAFE_INTEGER;
  for (const id of await deps.store.unfinished(10_000)) {
    if (!everything) {
      const record = await deps.store.get(id);
      if (!record) continue;
      // A processing prediction whose run ended without a verdict (its worker failed to record one)
      // is queued again once it has been quiet for long; a run still going is never doubled (the
      // queue keeps a re-add until the active job ends; a worker skips ids it runs).
      const quietSince = record.status === 'starting' ? before : before - STALE_PROCESSING_MS;
      if (record.updatedAt >= quietSince) continue;
    }
    await deps.queue.add('prediction', id);
    if (everything) {
      // The in-process queue lost the Cancel-After deadline jobs too (Redis keeps its delayed ones).
      const cancelAt = (await deps.store.get(id))?.cancelAt;
      if (cancelAt !== undefined) await deps.queue.add('deadline', id, { delayMs: cancelAt - Date.now() });
    }
  }
  for (const id of await deps.store.pendingDeliveries(before, 10_000)) await deps.queue.add('webhook', id);
}

/** Removes output files past the retention window; the prediction stays, with data_available false. */
export async function purge(deps: PredictionDeps, now = Date.now()): Promise<number> {
  const due = await deps.store.dueForPurge(now - deps.config.predictions.retentionMs, 200);
  for (const id of due) {
    await deps.blobs.deletePrefix(id);
    await deps.store.update(id, { files: [], dataRemoved: true }, ['succeeded', 'failed', 'canceled']);
  }
  return due.length;
}
