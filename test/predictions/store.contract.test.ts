import { randomUUID } from 'node:crypto';
import type { Command } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { RedisPredictionStore } from '../../src/predictions/store-redis.js';
import type {
  DeliveryRecord,
  PredictionRecord,
  PredictionStatus,
  PredictionStore,
} from '../../src/predictions/types.js';
import { predictionRecord } from '../helpers/prediction-record.js';
import { redisStores, type StoreImplementation, sqliteStores } from '../helpers/prediction-stores.js';
import { describeRedis } from '../helpers/redis.js';

let counter = 0;

function prediction(overrides: Partial<PredictionRecord> = {}): PredictionRecord {
  const createdAt = overrides.createdAt ?? 1_700_000_000_000 + counter++;
  return predictionRecord({
    input: { prompt: 'a cat', steps: 4, nested: { list: [], empty: {} } },
    createdAt,
    ...overrides,
  });
}

function delivery(
  predictionId: string,
  overrides: Partial<DeliveryRecord> = {},
): Omit<DeliveryRecord, 'seq'> {
  return {
    id: `d-${randomUUID()}`,
    predictionId,
    event: 'prediction.started',
    body: JSON.stringify({ id: predictionId, webhook_event_type: 'start' }),
    state: 'pending',
    attempts: 0,
    createdAt: 1_700_000_000_000,
    nextAttemptAt: 1_700_000_000_000,
    log: [],
    ...overrides,
  };
}

const TERMINAL: readonly PredictionStatus[] = ['succeeded', 'failed', 'canceled'];

/** The same behaviour, whichever store holds the predictions. */
function contract(impl: StoreImplementation): void {
  let store: PredictionStore | undefined;
  afterEach(async () => {
    await store?.close();
    store = undefined;
  });

  /** A fresh store per test (made inside the test, so the Redis server is up by then). */
  const fresh = async (): Promise<PredictionStore> => {
    store = await impl.create();
    return store;
  };

  describe('create and get', () => {
    it('stores the record as given and reads it back whole', async () => {
      const s = await fresh();
      const record = prediction({
        webhook: {
          url: 'https://example.com/hook',
          events: ['prediction.succeeded'],
          authHeader: 'X-Token',
          authTokenSealed: 'sealed:abc',
        },
        secretFields: ['api_key'],
        sealedSecrets: 'sealed:xyz',
        creditsUsed: 0.1 + 0.2,
        stream: true,
      });
      expect(await s.create(record)).toEqual({ record, created: true });
      expect(await s.get(record.id)).toEqual(record);
      expect(await s.get('p-missing')).toBeUndefined();
    });

    it('refuses a second record with the same id', async () => {
      const s = await fresh();
      const record = prediction();
      await s.create(record);
      await expect(s.create({ ...record, model: 'other/model' })).rejects.toThrow();
      expect(await s.get(record.id)).toEqual(record);
    });

    it('is idempotent per account and key: a retried create returns the first prediction', async () => {
      const s = await fresh();
      const first = prediction();
      const retry = prediction();
      expect(await s.create(first, 'key-a')).toEqual({ record: first, created: true });
      expect(await s.create(retry, 'key-a')).toEqual({ record: first, created: false });
      expect(await s.get(retry.id)).toBeUndefined();
      expect((await s.list({ accountId: 'acct-1', offset: 0, limit: 10 })).total).toBe(1);
      expect(await s.unfinished(10)).toEqual([first.id]);
    });

    it("another account's same key, another key or no key create new predictions", async () => {
      const s = await fresh();
      const first = prediction();
      await s.create(first, 'key-a');
      const otherAccount = prediction({ accountId: 'acct-2' });
      expect((await s.create(otherAccount, 'key-a')).created).toBe(true);
      const otherKey = prediction();
      expect((await s.create(otherKey, 'key-b')).created).toBe(true);
      const noKey = prediction();
      expect((await s.create(noKey)).created).toBe(true);
      expect((await s.create(prediction())).created).toBe(true);
      expect(await s.get(otherAccount.id)).toEqual(otherAccount);
    });

    it('concurrent creates with one key make exactly one prediction', async () => {
      const s = await fresh();
      const attempts = Array.from({ length: 8 }, () => prediction());
      const results = await Promise.all(attempts.map((r) => s.create(r, 'key-race')));
      const created = results.filter((r) => r.created);
      expect(created).toHaveLength(1);
      const winner = created[0]!.record;
      for (const r of results) expect(r.record).toEqual(winner);
      expect((await s.list({ accountId: 'acct-1', offset: 0, limit: 50 })).total).toBe(1);
    });
  });

  describe('update', () => {
    it('applies the patch, sets updatedAt and returns the new record', async () => {
      const s = await fresh();
      const record = prediction();
      await s.create(record);
      const before = Date.now();
      const updated = await s.update(record.id, {
        status: 'processing',
        startedAt: before,
        logs: 'loading\n',
        progress: 10,
        attempts: 1,
      });
      expect(updated).toMatchObject({
        status: 'processing',
        startedAt: before,
        logs: 'loading\n',
        progress: 10,
      });
      expect(updated!.updatedAt).toBeGreaterThanOrEqual(before);
      expect(updated!.input).toEqual(record.input);
      expect(await s.get(record.id)).toEqual(updated);
    });

    it('returns undefined for a missing prediction', async () => {
      const s = await fresh();
      expect(await s.update('p-missing', { logs: 'x' })).toBeUndefined();
      expect(await s.get('p-missing')).toBeUndefined();
    });

    it('by default only while the prediction is not terminal', async () => {
      const s = await fresh();
      const record = prediction();
      await s.create(record);
      const canceled = await s.update(record.id, { status: 'canceled', completedAt: Date.now() });
      expect(canceled?.status).toBe('canceled');
      // The worker finishing late must not overwrite the cancel.
      expect(await s.update(record.id, { status: 'succeeded', outputText: 'late' })).toBeUndefined();
      expect(await s.update(record.id, { logs: 'more' })).toBeUndefined();
      expect(await s.get(record.id)).toEqual(canceled);
    });

    it('honours an explicit `from`', async () => {
      const s = await fresh();
      const record = prediction();
      await s.create(record);
      expect(await s.update(record.id, { status: 'succeeded' }, ['processing'])).toBeUndefined();
      expect((await s.get(record.id))?.status).toBe('starting');
      expect((await s.update(record.id, { status: 'processing' }, ['starting']))?.status).toBe('processing');
      const done = await s.update(record.id, { status: 'succeeded', completedAt: 5 }, ['processing']);
      expect(done?.status).toBe('succeeded');
      // A terminal prediction changes only when the caller says so (the retention purge).
      const purged = await s.update(record.id, { dataRemoved: true, files: [] }, TERMINAL);
      expect(purged).toMatchObject({ status: 'succeeded', dataRemoved: true, files: [] });
      expect(await s.update(record.id, { logs: 'x' }, [])).toBeUndefined();
    });

    it('concurrent conditional updates: exactly one wins', async () => {
      const s = await fresh();
      const record = prediction();
      await s.create(record);
      const results = await Promise.all(
        Array.from({ length: 6 }, (_, i) =>
          s.update(record.id, { status: 'processing', attempts: i + 1 }, ['starting']),
        ),
      );
      const winners = results.filter((r) => r !== undefined);
      expect(winners).toHaveLength(1);
      expect(await s.get(record.id)).toEqual(winners[0]);
    });

    it('keeps files, nulls and nested values exactly', async () => {
      const s = await fresh();
      const record = prediction();
      await s.create(record);
      const files = [
        { name: 'output_0.png', type: 'image/png', size: 1234, key: `${record.id}/output_0.png` },
      ];
      const updated = await s.update(record.id, {
        status: 'succeeded',
        files,
        outputText: null,
        error: null,
        predictTime: 1.25,
        megapixels: 0.262144,
        creditsUsed: 0.003,
        completedAt: 1_700_000_000_500,
        sealedSecrets: null,
      });
      expect(await s.get(record.id)).toEqual(updated);
      expect(updated?.files).toEqual(files);
      expect(updated?.creditsUsed).toBe(0.003);
    });
  });

  describe('list', () => {
    async function seeded() {
      const s = await fresh();
      const accountId = `acct-${randomUUID()}`;
      const base = 1_700_000_000_000;
      const records: PredictionRecord[] = [];
      for (let i = 0; i < 7; i++) {
        const record = prediction({
          accountId,
          createdAt: base + i * 1000,
          model: i % 2 ? 'm/odd' : 'm/even',
        });
        records.push(record);
        await s.create(record);
      }
      await s.create(prediction({ accountId: `${accountId}-other`, createdAt: base + 500 }));
      return { s, accountId, base, records, newestFirst: [...records].reverse() };
    }

    it('newest first, with total, for one account only', async () => {
      const { s, accountId, newestFirst } = await seeded();
      const page = await s.list({ accountId, offset: 0, limit: 100 });
      expect(page.total).toBe(7);
      expect(page.records.map((r) => r.id)).toEqual(newestFirst.map((r) => r.id));
      expect(page.records[0]).toEqual(newestFirst[0]);
    });

    it('pages by offset and limit; total ignores paging', async () => {
      const { s, accountId, newestFirst } = await seeded();
      const ids = newestFirst.map((r) => r.id);
      const first = await s.list({ accountId, offset: 0, limit: 3 });
      const second = await s.list({ accountId, offset: 3, limit: 3 });
      const third = await s.list({ accountId, offset: 6, limit: 3 });
      const beyond = await s.list({ accountId, offset: 10, limit: 3 });
      expect(first.records.map((r) => r.id)).toEqual(ids.slice(0, 3));
      expect(second.records.map((r) => r.id)).toEqual(ids.slice(3, 6));
      expect(third.records.map((r) => r.id)).toEqual(ids.slice(6));
      expect(beyond.records).toEqual([]);
      for (const page of [first, second, third, beyond]) expect(page.total).toBe(7);
    });

    it('filters by model', async () => {
      const { s, accountId, newestFirst } = await seeded();
      const odd = await s.list({ accountId, model: 'm/odd', offset: 0, limit: 100 });
      expect(odd.records.map((r) => r.id)).toEqual(
        newestFirst.filter((r) => r.model === 'm/odd').map((r) => r.id),
      );
      expect(odd.total).toBe(3);
      const none = await s.list({ accountId, model: 'm/none', offset: 0, limit: 100 });
      expect(none).toEqual({ records: [], total: 0 });
    });

    it('filters by time: from inclusive, to exclusive, with model and paging', async () => {
      const { s, accountId, base, records } = await seeded();
      const window = await s.list({ accountId, from: base + 2000, to: base + 5000, offset: 0, limit: 100 });
      expect(window.records.map((r) => r.id)).toEqual([records[4]!.id, records[3]!.id, records[2]!.id]);
      expect(window.total).toBe(3);
      const fromOnly = await s.list({ accountId, from: base + 5000, offset: 0, limit: 100 });
      expect(fromOnly.records.map((r) => r.id)).toEqual([records[6]!.id, records[5]!.id]);
      const toOnly = await s.list({ accountId, to: base + 1000, offset: 0, limit: 100 });
      expect(toOnly.records.map((r) => r.id)).toEqual([records[0]!.id]);
      const combined = await s.list({
        accountId,
        model: 'm/even',
        from: base,
        to: base + 6000,
        offset: 1,
        limit: 1,
      });
      expect(combined.records.map((r) => r.id)).toEqual([records[2]!.id]);
      expect(combined.total).toBe(3);
    });

    it('shows the current state after updates, and nothing for an unknown account', async () => {
      const { s, accountId, newestFirst } = await seeded();
      await s.update(newestFirst[0]!.id, { status: 'processing' });
      const page = await s.list({ accountId, offset: 0, limit: 1 });
      expect(page.records[0]?.status).toBe('processing');
      expect(await s.list({ accountId: 'acct-nobody', offset: 0, limit: 10 })).toEqual({
        records: [],
        total: 0,
      });
    });
  });

  describe('abandon', () => {
    it('removes a prediction already created, and it is not unfinished any more', async () => {
      const s = await fresh();
      const a = prediction();
      await s.create(a, 'idem-abandon');
      await s.abandon(a.id);
      expect(await s.get(a.id)).toBeUndefined();
      expect(await s.unfinished(10)).toEqual([]);
      expect(await s.findByIdempotencyKey(a.accountId, 'idem-abandon')).toBeUndefined();
    });

    it("frees the key before the caller's next request: a retry right after it creates anew", async () => {
      const s = await fresh();
      const a = prediction();
      await s.create(a, 'idem-race');
      // Not awaited, as the API answers 503 without waiting for it.
      const abandoning = s.abandon(a.id, { accountId: a.accountId, key: 'idem-race' });
      const found = await s.findByIdempotencyKey(a.accountId, 'idem-race');
      await abandoning;
      expect(found).toBeUndefined();
      const retry = prediction();
      expect(await s.create(retry, 'idem-race')).toEqual({ record: retry, created: true });
    });

    it('is harmless for an id that was never created', async () => {
      const s = await fresh();
      await s.abandon('p-never');
      expect(await s.get('p-never')).toBeUndefined();
    });
  });

  describe('delete', () => {
    it('removes the prediction, its stream events and its deliveries', async () => {
      const s = await fresh();
      const record = prediction();
      const other = prediction();
      await s.create(record);
      await s.create(other);
      await s.appendStreamEvent(record.id, { event: 'logs', data: 'hello' });
      await s.appendStreamEvent(other.id, { event: 'logs', data: 'kept' });
      const d = await s.addDelivery(delivery(record.id));
      const kept = await s.addDelivery(delivery(other.id));

      expect(await s.delete(record.id)).toBe(true);
      expect(await s.get(record.id)).toBeUndefined();
      expect(await s.streamEvents(record.id, 0)).toEqual([]);
      expect(await s.deliveries(record.id)).toEqual([]);
      expect(await s.getDelivery(d.id)).toBeUndefined();
      expect(await s.pendingDeliveries(Number.MAX_SAFE_INTEGER, 10)).toEqual([kept.id]);
      expect(await s.unfinished(10)).toEqual([other.id]);
      const page = await s.list({ accountId: 'acct-1', offset: 0, limit: 10 });
      expect(page).toEqual({ records: [other], total: 1 });
      const modelPage = await s.list({ accountId: 'acct-1', model: record.model, offset: 0, limit: 10 });
      expect(modelPage.total).toBe(1);
      // The other prediction is untouched.
      expect(await s.streamEvents(other.id, 0)).toHaveLength(1);
      expect(await s.getDelivery(kept.id)).toEqual(kept);
    });

    it('is false for a missing prediction and the second time', async () => {
      const s = await fresh();
      const record = prediction();
      await s.create(record);
      expect(await s.delete('p-missing')).toBe(false);
      expect(await s.delete(record.id)).toBe(true);
      expect(await s.delete(record.id)).toBe(false);
    });

    it('frees the idempotency key of the deleted prediction', async () => {
      const s = await fresh();
      const first = prediction();
      await s.create(first, 'key-a');
      await s.delete(first.id);
      const again = prediction();
      expect(await s.create(again, 'key-a')).toEqual({ record: again, created: true });
    });

    it('a terminal deleted prediction is no longer due for purge', async () => {
      const s = await fresh();
      const record = prediction({ status: 'succeeded', completedAt: 1000 });
      await s.create(record);
      expect(await s.dueForPurge(2000, 10)).toEqual([record.id]);
      await s.delete(record.id);
      expect(await s.dueForPurge(2000, 10)).toEqual([]);
    });
  });

  describe('recovery queries', () => {
    it('unfinished: non-terminal ids, oldest first, up to the limit', async () => {
      const s = await fresh();
      const a = prediction({ createdAt: 3000 });
      const b = prediction({ createdAt: 1000, status: 'processing' });
      const c = prediction({ createdAt: 2000 });
      const done = prediction({ createdAt: 500, status: 'succeeded', completedAt: 600 });
      for (const r of [a, b, c, done]) await s.create(r);
      expect(await s.unfinished(10)).toEqual([b.id, c.id, a.id]);
      expect(await s.unfinished(2)).toEqual([b.id, c.id]);
      await s.update(c.id, { status: 'failed', error: 'boom', completedAt: 4000 });
      await s.update(b.id, { status: 'processing', logs: 'still going' });
      expect(await s.unfinished(10)).toEqual([b.id, a.id]);
      expect(await s.unfinished(1)).toEqual([b.id]);
    });

    it('dueForPurge: completed before `before` and not purged, oldest completion first', async () => {
      const s = await fresh();
      const early = prediction();
      const late = prediction();
      const running = prediction();
      const failed = prediction();
      for (const r of [early, late, running, failed]) await s.create(r);
      await s.update(late.id, { status: 'succeeded', completedAt: 5000 });
      await s.update(early.id, { status: 'succeeded', completedAt: 1000 });
      await s.update(failed.id, { status: 'failed', completedAt: 3000 });
      expect(await s.dueForPurge(5000, 10)).toEqual([early.id, failed.id]);
      expect(await s.dueForPurge(5001, 10)).toEqual([early.id, failed.id, late.id]);
      expect(await s.dueForPurge(5001, 2)).toEqual([early.id, failed.id]);
      expect(await s.dueForPurge(1000, 10)).toEqual([]);
      await s.update(early.id, { dataRemoved: true, files: [] }, TERMINAL);
      expect(await s.dueForPurge(10_000, 10)).toEqual([failed.id, late.id]);
    });
  });

  describe('stream events', () => {
    it('numbers events per prediction from 1, and replays after a seq', async () => {
      const s = await fresh();
      const a = prediction();
      const b = prediction();
      await s.create(a);
      await s.create(b);
      const e1 = await s.appendStreamEvent(a.id, { event: 'logs', data: 'one' });
      const e2 = await s.appendStreamEvent(a.id, { event: 'output', data: '{"x":1}' });
      const f1 = await s.appendStreamEvent(b.id, { event: 'logs', data: 'other' });
      const e3 = await s.appendStreamEvent(a.id, { event: 'done', data: '{}' });
      expect([e1.seq, e2.seq, e3.seq, f1.seq]).toEqual([1, 2, 3, 1]);
      expect(e2).toEqual({ seq: 2, event: 'output', data: '{"x":1}' });
      expect(await s.streamEvents(a.id, 0)).toEqual([e1, e2, e3]);
      expect(await s.streamEvents(a.id, 1)).toEqual([e2, e3]);
      expect(await s.streamEvents(a.id, 3)).toEqual([]);
      expect(await s.streamEvents(b.id, 0)).toEqual([f1]);
      expect(await s.streamEvents('p-missing', 0)).toEqual([]);
    });

    it('concurrent appends get distinct, gapless seqs in stored order', async () => {
      const s = await fresh();
      const a = prediction();
      await s.create(a);
      const events = await Promise.all(
        Array.from({ length: 20 }, (_, i) => s.appendStreamEvent(a.id, { event: 'logs', data: `line ${i}` })),
      );
      expect(events.map((e) => e.seq).sort((x, y) => x - y)).toEqual(
        Array.from({ length: 20 }, (_, i) => i + 1),
      );
      const stored = await s.streamEvents(a.id, 0);
      expect(stored.map((e) => e.seq)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
      for (const e of events) expect(stored[e.seq - 1]).toEqual(e);
    });
  });

  describe('deliveries', () => {
    it('numbers deliveries per prediction from 1 and reads them back in order', async () => {
      const s = await fresh();
      const a = prediction();
      const b = prediction();
      await s.create(a);
      await s.create(b);
      const d1 = await s.addDelivery(delivery(a.id, { event: 'prediction.started' }));
      const x1 = await s.addDelivery(delivery(b.id));
      const d2 = await s.addDelivery(delivery(a.id, { event: 'prediction.succeeded' }));
      expect([d1.seq, d2.seq, x1.seq]).toEqual([1, 2, 1]);
      expect(await s.getDelivery(d2.id)).toEqual(d2);
      expect(await s.getDelivery('d-missing')).toBeUndefined();
      expect(await s.deliveries(a.id)).toEqual([d1, d2]);
      expect(await s.deliveries(b.id)).toEqual([x1]);
    });

    it('concurrent adds get distinct seqs', async () => {
      const s = await fresh();
      const a = prediction();
      await s.create(a);
      const added = await Promise.all(Array.from({ length: 10 }, () => s.addDelivery(delivery(a.id))));
      expect(added.map((d) => d.seq).sort((x, y) => x - y)).toEqual(
        Array.from({ length: 10 }, (_, i) => i + 1),
      );
      expect((await s.deliveries(a.id)).map((d) => d.seq)).toEqual(
        Array.from({ length: 10 }, (_, i) => i + 1),
      );
    });

    it('updates state, attempts, next attempt and log', async () => {
      const s = await fresh();
      const a = prediction();
      await s.create(a);
      const d = await s.addDelivery(delivery(a.id));
      const log = [{ at: 1, outcome: 'retry' as const, status: 503, error: null, ms: 12 }];
      await s.updateDelivery(d.id, { attempts: 1, nextAttemptAt: 1_700_000_060_000, log });
      expect(await s.getDelivery(d.id)).toEqual({ ...d, attempts: 1, nextAttemptAt: 1_700_000_060_000, log });
      const log2 = [...log, { at: 2, outcome: 'delivered' as const, status: 200, error: null, ms: 8 }];
      await s.updateDelivery(d.id, { state: 'delivered', attempts: 2, nextAttemptAt: null, log: log2 });
      expect(await s.getDelivery(d.id)).toEqual({
        ...d,
        state: 'delivered',
        attempts: 2,
        nextAttemptAt: null,
        log: log2,
      });
      // A missing delivery is not an error, and nothing appears.
      await s.updateDelivery('d-missing', { state: 'failed' });
      expect(await s.getDelivery('d-missing')).toBeUndefined();
    });

    it('outbox: a status change writes its deliveries in the same step, pending, with the next seqs', async () => {
      const s = await fresh();
      const a = prediction();
      await s.create(a);
      const first = await s.addDelivery(delivery(a.id, { nextAttemptAt: 1000 }));
      const { predictionId: _, ...started } = delivery(a.id, {
        event: 'prediction.started',
        nextAttemptAt: 2000,
      });
      const updated = await s.update(a.id, { status: 'processing', startedAt: 5 }, ['starting'], [started]);
      expect(updated?.status).toBe('processing');
      const written = await s.deliveries(a.id);
      expect(written).toEqual([first, { ...started, predictionId: a.id, seq: 2 }]);
      // Pending and due: recovery finds it, with no job ever queued for it.
      expect(await s.pendingDeliveries(2000, 10)).toEqual([first.id, started.id]);

      const { predictionId: __, ...done } = delivery(a.id, {
        event: 'prediction.succeeded',
        nextAttemptAt: 3000,
      });
      await s.update(a.id, { status: 'succeeded', completedAt: 6 }, undefined, [done]);
      expect((await s.get(a.id))?.status).toBe('succeeded');
      expect((await s.getDelivery(done.id))?.seq).toBe(3);
      expect(await s.pendingDeliveries(3000, 10)).toEqual([first.id, started.id, done.id]);
    });

    it('outbox: nothing is written when the condition fails or the prediction is missing', async () => {
      const s = await fresh();
      const a = prediction({ status: 'canceled', completedAt: 1 });
      await s.create(a);
      const { predictionId: _, ...owed } = delivery(a.id, { event: 'prediction.succeeded' });
      expect(await s.update(a.id, { status: 'succeeded' }, undefined, [owed])).toBeUndefined();
      expect(await s.deliveries(a.id)).toEqual([]);
      expect(await s.getDelivery(owed.id)).toBeUndefined();
      expect(await s.pendingDeliveries(Number.MAX_SAFE_INTEGER, 10)).toEqual([]);
      expect(await s.update('p-missing', { status: 'succeeded' }, undefined, [owed])).toBeUndefined();
      expect(await s.getDelivery(owed.id)).toBeUndefined();
    });

    it('outbox: racing terminal changes write the deliveries of the winner only', async () => {
      const s = await fresh();
      const a = prediction({ status: 'processing' });
      await s.create(a);
      const outcomes = ['succeeded', 'canceled', 'failed'] as const;
      const owed = outcomes.map((status) => {
        const { predictionId: _, ...d } = delivery(a.id, { event: `prediction.${status}` });
        return d;
      });
      const results = await Promise.all(
        outcomes.map((status, i) => s.update(a.id, { status }, undefined, [owed[i]!])),
      );
      const winners = results.filter((r) => r !== undefined);
      expect(winners).toHaveLength(1);
      const written = await s.deliveries(a.id);
      expect(written.map((d) => d.event)).toEqual([`prediction.${winners[0]?.status}`]);
      expect(written[0]?.seq).toBe(1);
    });

    it('pendingDeliveries: pending and due at or before `before`, soonest first, up to the limit', async () => {
      const s = await fresh();
      const a = prediction();
      await s.create(a);
      const later = await s.addDelivery(delivery(a.id, { nextAttemptAt: 3000 }));
      const soon = await s.addDelivery(delivery(a.id, { nextAttemptAt: 1000 }));
      const mid = await s.addDelivery(delivery(a.id, { nextAttemptAt: 2000 }));
      const done = await s.addDelivery(delivery(a.id, { state: 'delivered', nextAttemptAt: null }));
      expect(await s.pendingDeliveries(2000, 10)).toEqual([soon.id, mid.id]);
      expect(await s.pendingDeliveries(5000, 10)).toEqual([soon.id, mid.id, later.id]);
      expect(await s.pendingDeliveries(5000, 1)).toEqual([soon.id]);
      expect(await s.pendingDeliveries(999, 10)).toEqual([]);
      await s.updateDelivery(soon.id, { state: 'delivered', nextAttemptAt: null });
      await s.updateDelivery(mid.id, { attempts: 1, nextAttemptAt: 4000 });
      await s.updateDelivery(later.id, { state: 'failed', nextAttemptAt: null });
      expect(await s.pendingDeliveries(3500, 10)).toEqual([]);
      expect(await s.pendingDeliveries(4000, 10)).toEqual([mid.id]);
      expect(done.state).toBe('delivered');
    });
  });
}

const redisImpl = redisStores();
const implementations: StoreImplementation[] = [sqliteStores(), redisImpl];

for (const impl of implementations) {
  impl.describe(`PredictionStore contract: ${impl.name}`, () => contract(impl));
}

/** How the Redis store lays out its keys, and how it copes with a crash between two of its writes. */
describeRedis('RedisPredictionStore: keys and crash tolerance', () => {
  const setup = () => {
    const prefix = `test:${randomUUID()}:`;
    const client = redisImpl.client();
    return { prefix, client, store: new RedisPredictionStore(client, { prefix }) };
  };

  it('keeps predictions until deleted; idempotency keys expire after 24 hours', async () => {
    const { prefix, client, store } = setup();
    const record = prediction();
    await store.create(record, 'key-ttl');
    await store.appendStreamEvent(record.id, { event: 'logs', data: 'x' });
    await store.addDelivery(delivery(record.id));
    const keys = await client.keys(`${prefix}*`);
    const ttls = Object.fromEntries(
      await Promise.all(keys.map(async (k) => [k, await client.ttl(k)] as const)),
    );
    const idempotency = keys.filter((k) => k.includes(':idempotency:'));
    expect(idempotency).toHaveLength(1);
    expect(ttls[idempotency[0]!]).toBeGreaterThan(24 * 3600 - 10);
    expect(ttls[idempotency[0]!]).toBeLessThanOrEqual(24 * 3600);
    for (const key of keys.filter((k) => !k.includes(':idempotency:'))) expect(ttls[key]).toBe(-1);
    // Every key of one prediction shares its hash tag (one Cluster slot for the scripts).
    expect(keys.filter((k) => k.includes(`{${record.id}}`)).sort()).toEqual(
      [
        `${prefix}{${record.id}}`,
        `${prefix}{${record.id}}:events`,
        `${prefix}{${record.id}}:deliveries`,
        `${prefix}{${record.id}}:delivery-seq`,
      ].sort(),
    );
    await store.delete(record.id);
    expect(await client.keys(`${prefix}*`)).toEqual([]);
  });

  it('drops index entries left by a crash between writes', async () => {
    const { prefix, client, store } = setup();
    const live = prediction({ createdAt: 2000 });
    await store.create(live);
    // As if a process died after writing an index entry and before writing the record (or the reverse).
    await client.zadd(`${prefix}unfinished`, 1000, 'p-ghost');
    await client.zadd(`${prefix}purge`, 1000, 'p-ghost');
    await client.zadd(`${prefix}deliveries:pending`, 1000, 'd-ghost');
    const finished = prediction({ createdAt: 1500 });
    await store.create(finished);
    await client.hset(`${prefix}{${finished.id}}`, 'status', JSON.stringify('succeeded'));
    expect(await store.unfinished(1)).toEqual([live.id]);
    expect(await store.dueForPurge(Number.MAX_SAFE_INTEGER, 10)).toEqual([]);
    expect(await store.pendingDeliveries(Number.MAX_SAFE_INTEGER, 10)).toEqual([]);
    expect(await client.zrange(`${prefix}unfinished`, '0', '-1')).toEqual([live.id]);
    expect(await client.zcard(`${prefix}purge`)).toBe(0);
    expect(await client.zcard(`${prefix}deliveries:pending`)).toBe(0);
  });

  it('an idempotency key whose prediction vanished goes to the next create', async () => {
    const { prefix, client, store } = setup();
    await client.set(`${prefix}idempotency:acct-1:key-stale`, 'p-vanished');
    const record = prediction();
    expect(await store.create(record, 'key-stale')).toEqual({ record, created: true });
    expect((await store.create(prediction(), 'key-stale')).record).toEqual(record);
  });

  it('an abandon that lands right after the create script leaves nothing of the create behind', async () => {
    const { prefix, client } = setup();
    // The create's connection; the abandon comes on another, as from a caller that gave up.
    const creating = client.duplicate();
    const store = new RedisPredictionStore(creating, { prefix });
    const abandoning = new RedisPredictionStore(client, { prefix });
    await store.create(prediction()); // loads the scripts: no NOSCRIPT round trip below
    const record = prediction({ accountId: 'acct-abandoned' });
    const marker = `${prefix}{${record.id}}:abandoned`;
    // Once the create script for `record` is sent, the abandon runs whole right after the script, and
    // whatever the create sends next waits for it: the worst order the two can take.
    let gate: Promise<void> | undefined;
    const send = creating.sendCommand.bind(creating);
    creating.sendCommand = ((command: Command, ...rest: []) => {
      if (gate) {
        void gate.then(() => send(command, ...rest));
        return command.promise;
      }
      const sent = send(command, ...rest);
      if (command.name.startsWith('eval') && command.args.map(String).includes(marker)) {
        gate = command.promise.then(
          () => abandoning.abandon(record.id, { accountId: record.accountId, key: 'key-abandon' }),
          () => undefined,
        );
      }
      return sent;
    }) as typeof creating.sendCommand;
    await store.create(record, 'key-abandon').catch(() => undefined);
    await gate;
    expect(gate).toBeDefined();
    expect(await abandoning.get(record.id)).toBeUndefined();
    expect(await abandoning.findByIdempotencyKey(record.accountId, 'key-abandon')).toBeUndefined();
    expect(await abandoning.list({ accountId: record.accountId, offset: 0, limit: 10 })).toEqual({
      records: [],
      total: 0,
    });
    const left = (await client.keys(`${prefix}*`)).filter(
      (k) => k.includes(record.id) || k.includes('acct-abandoned') || k.includes('key-abandon'),
    );
    expect(left).toEqual([marker]);
    expect(await abandoning.unfinished(10)).not.toContain(record.id);
    creating.disconnect();
  });

  it('a create that reaches Redis after its abandon (queued behind an outage) is refused', async () => {
    const { store } = setup();
    const record = prediction();
    await store.abandon(record.id);
    await expect(store.create(record, 'key-late')).rejects.toThrow(/abandoned/);
    expect(await store.get(record.id)).toBeUndefined();
    expect(await store.unfinished(10)).toEqual([]);
    // The key is free for the caller's retry.
    const retry = prediction();
    expect(await store.create(retry, 'key-late')).toEqual({ record: retry, created: true });
  });
});
