import { randomUUID } from 'node:crypto';
import type { PredictionDeps } from './context.js';
import type { DeliveryRecord } from './types.js';

/**
 * Sends a delivery's event again (the admin API's redeliver): a new delivery, with a new webhook-id, of the
 * same event and body, queued like any other and signed anew at each attempt. It takes the prediction's next
 * seq, so it waits for the prediction's pending deliveries (README, "Webhooks": in order per prediction).
 */
export async function redeliver(deps: PredictionDeps, original: DeliveryRecord): Promise<DeliveryRecord> {
  const now = Date.now();
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
