/**
 * The state behind the Predictions API and the interfaces that hold it. Each interface has an embedded
 * implementation (SQLite and in-process) and a distributed one (Redis, BullMQ, pub/sub), and one
 * contract suite under test/predictions/ runs against both.
 *
 * Jobs carry only ids: the store is the single source of truth, so a job that runs twice (a worker died
 * after finishing, BullMQ re-ran a stalled job) reads the state and does nothing twice.
 */

import type { Lease } from '../limits/types.js';

export type JsonObject = Record<string, unknown>;

export type PredictionStatus = 'starting' | 'processing' | 'succeeded' | 'failed' | 'canceled';

export const TERMINAL_STATUSES: ReadonlySet<PredictionStatus> = new Set(['succeeded', 'failed', 'canceled']);

export function isTerminal(status: PredictionStatus): boolean {
  return TERMINAL_STATUSES.has(status);
}

/** The canonical webhook events (DESIGN.md); requests may use any alias of spec 6. */
export type WebhookEvent =
  | 'prediction.started'
  | 'prediction.succeeded'
  | 'prediction.failed'
  | 'prediction.canceled';

export interface StoredFile {
  /** e.g. `output_0.png` */
  name: string;
  /** MIME type */
  type: string;
  size: number;
  /** Blob store key, `<predictionId>/<name>`. */
  key: string;
}

/**
 * An output kept in the shape the model produced it (README "Prediction outputs"): `value` is its JSON
 * with null where each file was; a signed link of the stored file `key` goes at `path` when it is shown.
 */
export interface StoredOutput {
  value: unknown;
  links: Array<{ path: Array<string | number>; key: string }>;
  /**
   * A concatenated text only: the end of it the stream's output events have not carried yet (all of it
   * when nothing streamed), sent as the last text piece. Other outputs are announced whole, as JSON.
   */
  streamRest?: string;
}

export interface WebhookTarget {
  url: string;
  events: WebhookEvent[];
  /** Custom header name sent to the receiver. */
  authHeader: string | null;
  /** The header's value, sealed (secrets.ts): never stored or shown in plain text. */
  authTokenSealed: string | null;
}

/** One prediction as stored. Times are epoch milliseconds. */
/** Safety results of a prediction: its prompt's (at create) and its outputs' (at the end), Azure-shaped. */
export interface PredictionSafety {
  /** The policy that ran. */
  policy: string;
  prompt?: JsonObject;
  output?: JsonObject;
}

export interface PredictionRecord {
  id: string;
  accountId: string;
  keyId: string;
  /** Catalog namespace. */
  model: string;
  /** The model's type: image, audio, video, text. */
  modelType: string;
  status: PredictionStatus;
  stream: boolean;
  /** `api` for API keys. */
  source: string;
  privacy: 'private' | 'public';
  /** Validated input with defaults, secret fields removed. */
  input: JsonObject;
  /** Names of the secret input fields (shown masked). */
  secretFields: string[];
  /** The secret fields' values, sealed for the worker; null when there are none or once finished. */
  sealedSecrets: string | null;
  webhook: WebhookTarget | null;
  /** Files stored for a succeeded prediction (empty until then, and after the retention purge). */
  files: StoredFile[];
  /** Text output (text models run as predictions); null for file outputs. */
  outputText: string | null;
  /** The model's output schema says a single URL (string) rather than an array. */
  singleOutput: boolean;
  /** The output in the model's shape (Cog and Replicate backends); absent for the others and older records. */
  output?: StoredOutput | null;
  error: string | null;
  logs: string;
  /** 0-100 where the backend reports it. */
  progress: number | null;
  createdAt: number;
  startedAt: number | null;
  completedAt: number | null;
  updatedAt: number;
  /** Seconds the backend worked. */
  predictTime: number | null;
  /** The safety checks' results (README, "Safety"): shown as `metadata.safety`; absent when none ran. */
  safety?: PredictionSafety;
  /** Output megapixels of image predictions (billing). */
  megapixels: number | null;
  creditsUsed: number;
  /** True once the retention purge removed the files. */
  dataRemoved: boolean;
  /** Worker attempts so far (a crashed worker's job is retried up to a limit). */
  attempts: number;
  /** The rate limiter's lease holding the model's concurrency slot until the prediction ends. */
  lease: Lease | null;
  /**
   * Set with the terminal status by the run (or call) that wrote it: a finish whose answer was lost
   * recognises its own write on retry and completes what follows it (lifecycle.ts finish).
   */
  finishToken?: string | null;
  /** Cancel-After: epoch ms past which the prediction is canceled, run or not (worker.ts). */
  cancelAt?: number;
}

export interface ListQuery {
  accountId: string;
  model?: string;
  /** Epoch ms, inclusive. */
  from?: number;
  /** Epoch ms, exclusive. */
  to?: number;
  offset: number;
  limit: number;
}

export type PredictionPatch = Partial<
  Pick<
    PredictionRecord,
    | 'status'
    | 'sealedSecrets'
    | 'files'
    | 'outputText'
    | 'output'
    | 'error'
    | 'logs'
    | 'progress'
    | 'startedAt'
    | 'completedAt'
    | 'predictTime'
    | 'megapixels'
    | 'creditsUsed'
    | 'dataRemoved'
    | 'attempts'
    | 'lease'
    | 'finishToken'
    | 'safety'
  >
>;

/** One webhook delivery: one event of one prediction, delivered at least once, in order per prediction. */
export interface DeliveryRecord {
  /** Also the Standard Webhooks `webhook-id`, stable across retries. */
  id: string;
  predictionId: string;
  /** Order of the prediction's events; a delivery waits until every lower one is finished. */
  seq: number;
  event: WebhookEvent;
  /** The body sent on every attempt (the prediction when the event fired, plus webhook_event_type). */
  body: string;
  state: 'pending' | 'delivered' | 'failed';
  attempts: number;
  createdAt: number;
  /** When the next attempt is due (epoch ms); null once finished. */
  nextAttemptAt: number | null;
  /** One line per attempt: time, outcome, status or error, duration. Never a secret. */
  log: DeliveryAttemptLog[];
}

/** A delivery written together with a status change (the outbox); the store sets its prediction and seq. */
export type NewDelivery = Omit<DeliveryRecord, 'seq' | 'predictionId'>;

export interface DeliveryAttemptLog {
  at: number;
  outcome: 'delivered' | 'retry' | 'rejected' | 'gave_up';
  status: number | null;
  error: string | null;
  ms: number;
}

/** An event of a prediction's SSE stream (GET /v1/predictions/{id}/stream). */
export interface StreamEvent {
  /** Increasing per prediction, from 1; lets a late subscriber join replay and live events without gaps. */
  seq: number;
  event: 'output' | 'logs' | 'error' | 'done';
  data: string;
}

export interface PredictionStore {
  /**
   * Inserts a new prediction. With an idempotency key already used by the same account, returns the
   * existing prediction and `created: false` instead (a retried create).
   */
  create(
    record: PredictionRecord,
    idempotencyKey?: string,
  ): Promise<{ record: PredictionRecord; created: boolean }>;
  get(id: string): Promise<PredictionRecord | undefined>;
  /** The prediction an account created with this idempotency key in the last 24 hours, if any. */
  findByIdempotencyKey(accountId: string, key: string): Promise<PredictionRecord | undefined>;
  /**
   * Applies the patch only while the prediction is in one of `from` (default: any non-terminal status),
   * atomically; returns the updated record, or undefined when the prediction is missing or the condition
   * failed (e.g. it was canceled meanwhile). `updatedAt` is set by the store.
   *
   * `outbox`: webhook deliveries written in the same atomic step, pending, with the next seq numbers of
   * the prediction (none when the condition failed). A crash can then never leave a status change
   * without the deliveries it owes; recovery queues pending deliveries that no queue holds.
   */
  update(
    id: string,
    patch: PredictionPatch,
    from?: readonly PredictionStatus[],
    outbox?: readonly NewDelivery[],
  ): Promise<PredictionRecord | undefined>;
  /** Newest first. */
  list(query: ListQuery): Promise<{ records: PredictionRecord[]; total: number }>;
  /**
   * Voids a create whose caller was told it failed (it timed out): a create not applied yet never will
   * be, and one already applied is removed, so the prediction never runs. Its idempotency key is freed
   * before anything the caller sends next reaches the store, so a retry creates the prediction anew.
   */
  abandon(id: string, idempotency?: { accountId: string; key: string }): Promise<void>;
  /** Removes the prediction, its deliveries and stream events; true when it existed. */
  delete(id: string): Promise<boolean>;
  /** Ids of non-terminal predictions (start-up recovery in embedded mode, stuck-job sweeps). */
  unfinished(limit: number): Promise<string[]>;
  /** Ids of predictions completed before `before` whose files are not purged yet. */
  dueForPurge(before: number, limit: number): Promise<string[]>;

  appendStreamEvent(predictionId: string, event: Omit<StreamEvent, 'seq'>): Promise<StreamEvent>;
  streamEvents(predictionId: string, afterSeq: number): Promise<StreamEvent[]>;

  /** Adds the deliveries with the next seq numbers of their prediction; returns them with seq set. */
  addDelivery(delivery: Omit<DeliveryRecord, 'seq'>): Promise<DeliveryRecord>;
  getDelivery(id: string): Promise<DeliveryRecord | undefined>;
  updateDelivery(
    id: string,
    patch: Partial<Pick<DeliveryRecord, 'state' | 'attempts' | 'nextAttemptAt' | 'log'>>,
  ): Promise<void>;
  deliveries(predictionId: string): Promise<DeliveryRecord[]>;
  /** Ids of pending deliveries due before `before` (start-up recovery, sweeps). */
  pendingDeliveries(before: number, limit: number): Promise<string[]>;

  close(): Promise<void>;
}

/** `deadline`: a prediction's Cancel-After, a delayed job with the prediction's id (worker.ts). */
export type JobKind = 'prediction' | 'webhook' | 'deadline';

export interface JobInfo {
  /** The prediction or delivery id. */
  id: string;
  /** 1 on the first run; higher when a crashed or failed run is retried. */
  attempt: number;
}

export interface JobQueue {
  /**
   * Schedules a job; adding an id that is already waiting or delayed is a no-op (at most one pending
   * job per id). `delayMs` postpones it.
   */
  add(kind: JobKind, id: string, options?: { delayMs?: number }): Promise<void>;
  /** Starts consuming (worker role). The handler's rejection makes the queue retry the job later. */
  process(kind: JobKind, handler: (job: JobInfo) => Promise<void>, options: { concurrency: number }): void;
  /**
   * Stops taking jobs and waits for running ones up to `graceMs`; unfinished ones go back to the queue.
   * Jobs may still be added (an API instance's requests in flight queue theirs) until close().
   */
  stopWorkers(graceMs?: number): Promise<void>;
  /** stopWorkers(graceMs) if not done yet, then closes the queue: later adds are dropped. */
  close(graceMs?: number): Promise<void>;
}

/** Live notifications between instances: stream events, status changes (await) and cancel requests. */
export type BusMessage =
  | { type: 'stream'; event: StreamEvent }
  | { type: 'status'; status: PredictionStatus }
  | { type: 'cancel' };

export interface EventBus {
  publish(predictionId: string, message: BusMessage): Promise<void>;
  /** Returns the unsubscribe function; the listener may be called on any instance's publish. */
  subscribe(predictionId: string, listener: (message: BusMessage) => void): Promise<() => void>;
  close(): Promise<void>;
}
