import { randomUUID } from 'node:crypto';
import { GantryError } from '../errors.js';
import type { PredictionDeps } from './context.js';
import type { DeliveryRecord } from './types.js';

/** Redeliveries one prediction may have in REDELIVERY_WINDOW_MS (the admin API answers 429 past it). */
export const MAX_REDELIVERIES_PER_HOUR = 10;
const REDELIVERY_WINDOW_MS = 60 * 60_000;

/**
 * Sends a delivery's event again (the admin API's redeliver): a new delivery, with a new webhook-id, of the
 * same event and body, queued like any other and signed anew at each attempt. It takes the prediction's next
 * seq, so it waits for the prediction's pending deliveries (README, "Webhooks": in order per prediction).
 *
 * Bounded, so an admin caller cannot flood a receiver: CONFLICT while the delivery or an earlier redelivery
 * of it is still pending, RATE_LIMIT_EXCEEDED past MAX_REDELIVERIES_PER_HOUR for the prediction.
 * `deliveries`: the prediction's deliveries as the store has them (the original among them).
 */
export async function redeliver(
  deps: PredictionDeps,
  original: DeliveryRecord,
  deliveries: readonly DeliveryRecord[],
): Promise<DeliveryRecord> {
  const now = Date.now();
  checkRedeliveryLimits(original, deliveries, now);
  const delivery = await deps.store.addDelivery({
    id: `msg_${randomUUID().replaceAll('-', '')}`,
    predictionId: original.predictionId,
    event: original.event,
    body: original.body,
    state: 'pending',
    attempts: 0,
    createdAt: now,
    nextAttemptAt: now,
    log: [],
  });
  await deps.queue.add('webhook', delivery.id).catch((error: Error) => {
    // Pending in the store: recovery's sweep queues it.
    deps.log.warn({ err: error.message, prediction: original.predictionId }, 'redelivery not queued yet');
  });
  return delivery;
}

/**
 * Throws when `original` may not be sent again now. Read from the store, so every instance sees the same
 * limits: a redelivery is a delivery that repeats the event and body of one with a lower seq (an event's
 * body holds the prediction as it was when it fired, so two events never share one).
 */
export function checkRedeliveryLimits(
  original: DeliveryRecord,
  deliveries: readonly DeliveryRecord[],
  now: number,
): void {
  const sameAs = (d: DeliveryRecord) => d.event === original.event && d.body === original.body;
  if (deliveries.some((d) => d.state === 'pending' && sameAs(d))) {
    throw new GantryError('CONFLICT', {
      message: 'This delivery is still pending',
      details: 'The delivery or an earlier redelivery of it is not finished yet; redeliver once it is.',
    });
  }
  const bySeq = [...deliveries].sort((a, b) => a.seq - b.seq);
  const seen = new Set<string>();
  const recent: number[] = [];
  for (const d of bySeq) {
    const sent = `${d.event}\n${d.body}`;
    if (seen.has(sent) && d.createdAt > now - REDELIVERY_WINDOW_MS) recent.push(d.createdAt);
    seen.add(sent);
  }
  if (recent.length >= MAX_REDELIVERIES_PER_HOUR) {
    const oldest = Math.min(...recent);
    const wait = Math.max(1, Math.ceil((oldest + REDELIVERY_WINDOW_MS - now) / 1000));
    throw new GantryError('RATE_LIMIT_EXCEEDED', {
      message: `At most ${MAX_REDELIVERIES_PER_HOUR} redeliveries per prediction per hour`,
      headers: { 'retry-after': String(wait) },
    });
  }
}
