import { createHmac, randomUUID } from 'node:crypto';
import { computeCost, toCredits } from '../metering/pricing.js';
import { type MediaUnits, newUsageId, predictionSafetyFields, type UsageRecord } from '../usage/index.js';
import { releasePrediction } from './admission.js';
import type { PredictionDeps } from './context.js';
import { serializePrediction } from './serialize.js';
import {
  isTerminal,
  type NewDelivery,
  type PredictionPatch,
  type PredictionRecord,
  type PredictionStatus,
  type WebhookEvent,
} from './types.js';

/**
 * The side effects of a status change, run by whichever instance won the change in the store (the
 * store's conditional update makes exactly one winner): bus notifications for `await` and SSE, the
 * webhook delivery, and for terminal states the stream's last events and the usage record.
 */

const EVENT_OF: Partial<Record<PredictionStatus, WebhookEvent>> = {
  processing: 'prediction.started',
  succeeded: 'prediction.succeeded',
  failed: 'prediction.failed',
  canceled: 'prediction.canceled',
};

/** The Prediction object with freshly signed file links (an S3 store signs asynchronously). */
export async function serialize(deps: PredictionDeps, record: PredictionRecord) {
  const expiresAt = Math.floor(
    ((record.completedAt ?? Date.now()) + deps.config.predictions.retentionMs) / 1000,
  );
  const links = new Map<string, string>();
  if (!record.dataRemoved) {
    await Promise.all(
      record.files.map(async (f) => links.set(f.key, await deps.blobs.urlFor(f.key, expiresAt))),
    );
  }
  return serializePrediction(record, {
    publicUrl: deps.publicUrl(),
    fileUrl: (key) => links.get(key) ?? '',
    retentionMs: deps.config.predictions.retentionMs,
  });
}

/** starting → processing. Returns the updated record, or undefined when it was no longer starting. */
export async function markProcessing(
  deps: PredictionDeps,
  id: string,
): Promise<PredictionRecord | undefined> {
  const current = await deps.store.get(id);
  if (current?.status !== 'starting') return undefined;
  const now = Date.now();
  const patch: PredictionPatch = { status: 'processing', startedAt: now };
  const outbox = await webhookOutbox(deps, { ...current, ...patch, updatedAt: now });
  const record = await deps.store.update(id, patch, ['starting'], outbox);
  if (!record) return undefined;
  await queueDeliveries(deps, record, outbox);
  await deps.bus.publish(record.id, { type: 'status', status: record.status });
  return record;
}

/**
 * Moves a non-terminal prediction to a terminal status with the given facts. Returns the record, or
 * undefined when another party (a cancel, another worker) finished it first: then nothing is announced.
 * Throws only when the store could not be written, before any side effect. `token` (one per run) goes
 * into the write: a retry after a write that was applied but whose answer was lost finds its own token
 * and completes the side effects, once, instead of taking the prediction for someone else's.
 */
export async function finish(
  deps: PredictionDeps,
  id: string,
  status: 'succeeded' | 'failed' | 'canceled',
  patch: PredictionPatch = {},
  token?: string,
): Promise<PredictionRecord | undefined> {
  const current = await deps.store.get(id);
  if (!current) return undefined;
  if (isTerminal(current.status)) return finishedBy(deps, current, token);
  const now = Date.now();
  const final: PredictionPatch = {
    ...patch,
    status,
    completedAt: now,
    sealedSecrets: null,
    finishToken: token ?? null,
  };
  final.creditsUsed = price(deps, { ...current, ...final }).credits;
  // The status and the webhook it owes are one write (the outbox): no crash can separate them.
  const outbox = await webhookOutbox(deps, { ...current, ...final, updatedAt: now });
  // Only from a running status, named here: a success or a cancel written since the read above wins,
  // and this write is refused rather than overwriting it.
  const record = await deps.store.update(id, final, ['starting', 'processing'], outbox);
  if (!record) {
    // Refused, or applied once already: a client that lost the answer re-sends the write, which then
    // finds the prediction finished (by this very call).
    const latest = await deps.store.get(id);
    return latest && isTerminal(latest.status) ? finishedBy(deps, latest, token) : undefined;
  }
  await afterFinish(deps, record, outbox);
  return record;
}

/** A prediction found finished: the side effects are this caller's to do if its token wrote it. */
async function finishedBy(
  deps: PredictionDeps,
  record: PredictionRecord,
  token: string | undefined,
): Promise<PredictionRecord | undefined> {
  if (token === undefined || record.finishToken !== token) return undefined;
  // Read before any side effect: a failure here is retried without doing any of them twice.
  const owed = (await deps.store.deliveries(record.id)).filter(
    (d) => d.state === 'pending' && d.event === EVENT_OF[record.status],
  );
  await afterFinish(deps, record, owed);
  return record;
}

/**
 * What follows a terminal write, run once per prediction by the finish that made it. Never throws: a
 * throw would make the caller retry the finish, and the retry would do all of this again.
 */
async function afterFinish(
  deps: PredictionDeps,
  record: PredictionRecord,
  outbox: ReadonlyArray<{ id: string }>,
): Promise<void> {
  const { id, status } = record;
  // The usage record (in memory, batched) comes before anything that can wait; stream events and bus
  // notifications are best effort after that.
  deps.usage.add(usageRecordOf(deps, record, price(deps, record)));
  await releasePrediction(deps, record.lease);
  deps.metrics.predictionDone(
    record.model,
    status,
    ((record.completedAt ?? Date.now()) - record.createdAt) / 1000,
  );
  await queueDeliveries(deps, record, outbox);
  try {
    if (record.stream) {
      // A concatenated text streams as text pieces (its rest goes last); any other output is announced
      // whole, as JSON, once it is stored (README, Predictions, "Stream").
      const rest = record.output?.streamRest;
      if (status === 'succeeded' && rest !== undefined) {
        if (rest !== '') await emitStream(deps, id, 'output', rest);
      } else if (status === 'succeeded' && (record.output || record.files.length > 0)) {
        const { output } = await serialize(deps, record);
        await emitStream(deps, id, 'output', JSON.stringify(output));
      }
      if (status === 'failed') await emitStream(deps, id, 'error', record.error ?? 'Prediction failed');
      if (status === 'canceled') await emitStream(deps, id, 'error', 'Prediction was canceled');
      await emitStream(deps, id, 'done', JSON.stringify({ status }));
    }
    await deps.bus.publish(record.id, { type: 'status', status: record.status });
  } catch (error) {
    // Stream readers and awaiting requests fall back to the store (await polls it every second).
    deps.log.warn({ err: (error as Error).message, prediction: id }, 'prediction events not published');
  }
}

/** Appends an event to the prediction's SSE stream (kept for late subscribers) and publishes it. */
export async function emitStream(
  deps: PredictionDeps,
  id: string,
  event: 'output' | 'logs' | 'error' | 'done',
  data: string,
): Promise<void> {
  const stored = await deps.store.appendStreamEvent(id, { event, data });
  await deps.bus.publish(id, { type: 'stream', event: stored });
}

/**
 * The webhook delivery owed for the status `next` is about to reach, if its caller subscribed to that
 * event: written by the store together with the status (the outbox).
 */
async function webhookOutbox(deps: PredictionDeps, next: PredictionRecord): Promise<NewDelivery[]> {
  const event = EVENT_OF[next.status];
  if (!event || !next.webhook?.events.includes(event)) return [];
  const body = JSON.stringify({ ...(await serialize(deps, next)), webhook_event_type: event });
  const now = Date.now();
  return [
    {
      id: `msg_${randomUUID().replaceAll('-', '')}`,
      event,
      body,
      state: 'pending',
      attempts: 0,
      createdAt: now,
      nextAttemptAt: now,
      log: [],
    },
  ];
}

/** Queues the deliveries just written; one not queued is found by recovery (setup.ts requeue). */
async function queueDeliveries(
  deps: PredictionDeps,
  record: PredictionRecord,
  outbox: ReadonlyArray<{ id: string }>,
): Promise<void> {
  for (const delivery of outbox) {
    await deps.queue.add('webhook', delivery.id).catch((error: Error) => {
      deps.log.warn({ err: error.message, prediction: record.id }, 'webhook not queued; recovery will');
    });
  }
}

interface Bill {
  cost: number;
  currency: string;
  credits: number;
  provider: string;
  units: MediaUnits;
}

/** What the prediction costs under its model's pricing: only a success is charged. */
function price(deps: PredictionDeps, record: PredictionRecord): Bill {
  const model = deps.catalog.entry(record.model);
  const images = record.modelType === 'image' ? record.files.length : 0;
  const seconds = numberOf(record.input.duration) ?? numberOf(record.input.seconds);
  const ok = record.status === 'succeeded';
  const usage = {
    images,
    predictions: 1,
    gpuSeconds: record.predictTime ?? 0,
    params: record.input,
    ...(seconds === undefined ? {} : { seconds }),
    ...(record.megapixels === null ? {} : { megapixels: { output: record.megapixels } }),
  };
  const currency = String(model?.pricing?.currency ?? 'USD');
  const cost = ok
    ? // As for inference, only a model the catalogue shows as billable costs anything.
      computeCost(model?.pricing, usage, { billable: model?.billable === true, modelType: record.modelType })
    : { cost: 0, currency, lines: [] };
  const credits = cost.cost > 0 ? toCredits(cost.cost, cost.currency, deps.config.credits.perCurrency) : 0;
  return {
    cost: cost.cost,
    currency: cost.currency,
    credits,
    provider: model?.routes[0]?.provider ?? 'unknown',
    units: mediaUnits(String(model?.pricing?.unit ?? 'prediction'), record, usage),
  };
}

/** One usage record per prediction, written when it ends, whatever the end. */
function usageRecordOf(deps: PredictionDeps, record: PredictionRecord, bill: Bill): UsageRecord {
  const ok = record.status === 'succeeded';
  const canceled = record.status === 'canceled';
  return {
    id: newUsageId(),
    time: new Date().toISOString(),
    account_id: record.accountId,
    key_id: record.keyId,
    model: record.model,
    provider: bill.provider,
    api: 'prediction',
    outcome: ok ? 'ok' : canceled ? 'client_aborted' : 'error',
    status: ok ? 200 : canceled ? 499 : 500,
    error_id: record.status === 'failed' ? 'PREDICTION_FAILED' : null,
    input_tokens: 0,
    cached_input_tokens: 0,
    cache_write_input_tokens: 0,
    output_tokens: 0,
    media_units: bill.units,
    cost: bill.cost,
    currency: bill.currency,
    credits: bill.credits,
    latency_ms: (record.completedAt ?? Date.now()) - record.createdAt,
    ttft_ms: null,
    stream: record.stream,
    // The policy table is read only for a prediction that was checked.
    ...(record.safety === undefined
      ? { safety_flags: [], safety_action: null }
      : predictionSafetyFields(record.safety, deps.safety.table.policies)),
  };
}

function mediaUnits(
  unit: string,
  record: PredictionRecord,
  usage: { images: number; seconds?: number; megapixels?: { output: number } },
): MediaUnits {
  const u = unit.toLowerCase();
  if (u.includes('megapixel')) return { unit: 'megapixel', quantity: usage.megapixels?.output ?? 0 };
  if (u.includes('image')) return { unit: 'image', quantity: usage.images };
  if (u.includes('second') || u.includes('minute'))
    return { unit: 'second', quantity: usage.seconds ?? record.predictTime ?? 0 };
  return { unit: 'prediction', quantity: record.status === 'succeeded' ? 1 : 0 };
}

function numberOf(value: unknown): number | undefined {
  const n = typeof value === 'string' ? Number(value) : value;
  return typeof n === 'number' && Number.isFinite(n) ? n : undefined;
}

/** Per-account webhook signing secret, derived from the instance secret so every instance agrees. */
export function webhookSecretFor(secretKey: Buffer, accountId: string): string {
  const bytes = createHmac('sha256', secretKey).update(`webhook-secret:${accountId}`).digest();
  return `whsec_${bytes.subarray(0, 24).toString('base64')}`;
}
