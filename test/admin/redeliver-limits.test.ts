/**
 * Redelivery is bounded (README, "Admin API"): refused with 409 while the delivery or a redelivery of it is
 * still pending, and past 10 redeliveries of a prediction in an hour with 429 and Retry-After. The limits
 * are read from the prediction store, as every instance sees it.
 */
import Database from 'libsql';
import { afterAll, describe, expect, it } from 'vitest';
import { GantryError } from '../../src/errors.js';
import type { PredictionDeps } from '../../src/predictions/context.js';
import { MAX_REDELIVERIES_PER_HOUR, redeliver } from '../../src/predictions/redeliver.js';
import { SqlitePredictionStore } from '../../src/predictions/store-sqlite.js';
import type { DeliveryRecord } from '../../src/predictions/types.js';

const db = new Database(':memory:');
const store = new SqlitePredictionStore(db);
afterAll(async () => {
  await store.close();
  db.close();
});
const queued: string[] = [];
const deps = {
  store,
  queue: { add: async (_name: string, id: string) => void queued.push(id) },
  log: { warn: () => undefined },
} as unknown as PredictionDeps;

async function delivered(predictionId: string, event: DeliveryRecord['event'], body: string) {
  const d = await store.addDelivery({
    id: `msg_${predictionId}_${event}`,
    predictionId,
    event,
    body,
    state: 'delivered',
    attempts: 1,
    createdAt: Date.now(),
    nextAttemptAt: null,
    log: [],
  });
  return d;
}

/** The error `redeliver` throws for `original`, or undefined when it queued a redelivery. */
async function attempt(original: DeliveryRecord): Promise<GantryError | DeliveryRecord> {
  try {
    return await redeliver(deps, original, await store.deliveries(original.predictionId));
  } catch (err) {
    if (err instanceof GantryError) return err;
    throw err;
  }
}

const finish = (d: DeliveryRecord) => store.updateDelivery(d.id, { state: 'delivered', nextAttemptAt: null });

describe('redeliver', () => {
  it('refuses with 409 while the delivery or a redelivery of it is still pending', async () => {
    const original = await delivered('p1', 'prediction.succeeded', '{"id":"p1","status":"succeeded"}');
    const other = await delivered('p1', 'prediction.started', '{"id":"p1","status":"starting"}');
    const first = await attempt(original);
    expect(first).not.toBeInstanceOf(GantryError);
    expect(queued).toContain((first as DeliveryRecord).id);
    const again = await attempt(original);
    expect(again).toBeInstanceOf(GantryError);
    expect((again as GantryError).errorId).toBe('CONFLICT');
    expect((again as GantryError).status).toBe(409);
    // Another event of the same prediction is not held back by it.
    expect(await attempt(other)).not.toBeInstanceOf(GantryError);
    // Once the redelivery finished, the delivery may be sent again.
    await finish(first as DeliveryRecord);
    expect(await attempt(original)).not.toBeInstanceOf(GantryError);
  });

  it('allows 10 redeliveries of a prediction an hour, then answers 429 with Retry-After', async () => {
    const started = await delivered('p2', 'prediction.started', '{"id":"p2","status":"starting"}');
    const succeeded = await delivered('p2', 'prediction.succeeded', '{"id":"p2","status":"succeeded"}');
    for (let i = 0; i < MAX_REDELIVERIES_PER_HOUR; i++) {
      const sent = await attempt(i % 2 === 0 ? started : succeeded);
      expect(sent, `redelivery ${i + 1}`).not.toBeInstanceOf(GantryError);
      await finish(sent as DeliveryRecord);
    }
    const refused = await attempt(started);
    expect(refused).toBeInstanceOf(GantryError);
    const error = refused as GantryError;
    expect(error.errorId).toBe('RATE_LIMIT_EXCEEDED');
    expect(error.status).toBe(429);
    const retryAfter = Number(error.headers?.['retry-after']);
    expect(retryAfter).toBeGreaterThan(3500);
    expect(retryAfter).toBeLessThanOrEqual(3600);
    // Another prediction has its own count.
    const elsewhere = await delivered('p3', 'prediction.started', '{"id":"p3","status":"starting"}');
    expect(await attempt(elsewhere)).not.toBeInstanceOf(GantryError);
  });
});
