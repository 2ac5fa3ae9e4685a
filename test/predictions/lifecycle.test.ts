/**
 * Terminal writes against both real prediction stores (SQLite, Redis): finish() writes only from
 * `starting`/`processing`, so an outcome that lands between its read and its write is never overwritten;
 * the Cancel-After deadline job (worker.ts cancelAtDeadline) cancels a queued prediction with a token of
 * its own and announces the cancel once, and leaves a finished one alone.
 *
 * The side-effect sinks the terminal write feeds (usage batcher, metrics, catalog pricing) are small
 * recorders here: what is under test is the store's conditional write and who runs the side effects.
 */
import { randomUUID } from 'node:crypto';
import { afterEach, expect, it } from 'vitest';
import { MemoryEventBus } from '../../src/predictions/bus-memory.js';
import type { PredictionDeps } from '../../src/predictions/context.js';
import { finish } from '../../src/predictions/lifecycle.js';
import { MemoryJobQueue } from '../../src/predictions/queue-memory.js';
import { requeue } from '../../src/predictions/setup.js';
import type { BusMessage, JobInfo, PredictionStore } from '../../src/predictions/types.js';
import { PredictionWorker } from '../../src/predictions/worker.js';
import { predictionRecord } from '../helpers/prediction-record.js';
import { redisStores, type StoreImplementation, sqliteStores } from '../helpers/prediction-stores.js';
import { until } from '../helpers/wait.js';

interface Harness {
  deps: PredictionDeps;
  store: PredictionStore;
  usage: unknown[];
  published: Array<{ id: string; message: BusMessage }>;
  queue: MemoryJobQueue;
}

function harness(store: PredictionStore): Harness {
  const usage: unknown[] = [];
  const published: Harness['published'] = [];
  const bus = new MemoryEventBus();
  const publish = bus.publish.bind(bus);
  bus.publish = async (id, message) => {
    published.push({ id, message });
    await publish(id, message);
  };
  const queue = new MemoryJobQueue();
  const silent = () => undefined;
  const log = { warn: silent, error: silent, info: silent, debug: silent };
  const deps = {
    config: { predictions: { retentionMs: 3_600_000 }, credits: { perCurrency: {} } },
    catalog: { entry: () => undefined },
    store,
    queue,
    bus,
    usage: { add: (record: unknown) => usage.push(record) },
    metrics: { predictionDone: silent },
    log,
  } as unknown as PredictionDeps;
  return { deps, store, usage, published, queue };
}

/**
 * The store as finish() sees it, with another party's write slipped in right after finish's read of
 * `id`: the interleaving a success (or a cancel) landing between read and write makes.
 */
function withWriteAfterRead(store: PredictionStore, id: string, write: () => Promise<unknown>) {
  let fired = false;
  return new Proxy(store, {
    get(target, prop, receiver) {
      if (prop !== 'get') return Reflect.get(target, prop, receiver);
      return async (key: string) => {
        const read = await target.get(key);
        if (key === id && !fired) {
          fired = true;
          await write();
        }
        return read;
      };
    },
  });
}

function contract(impl: StoreImplementation): void {
  let open: PredictionStore | undefined;
  let queue: MemoryJobQueue | undefined;
  afterEach(async () => {
    await queue?.close(0);
    await open?.close();
    open = queue = undefined;
  });
  const fresh = async () => {
    open = await impl.create();
    const h = harness(open);
    queue = h.queue;
    return h;
  };

  it('finish(canceled) does not overwrite a success written between its read and its write', async () => {
    const { deps, store, usage, published } = await fresh();
    const record = predictionRecord({ status: 'processing', startedAt: Date.now() });
    await store.create(record);
    deps.store = withWriteAfterRead(store, record.id, () =>
      store.update(record.id, { status: 'succeeded', completedAt: Date.now(), outputText: 'done' }),
    );

    expect(await finish(deps, record.id, 'canceled', {}, randomUUID())).toBeUndefined();
    const latest = await store.get(record.id);
    expect(latest?.status).toBe('succeeded');
    expect(latest?.outputText).toBe('done');
    // The loser runs no side effect: no usage record, no status announced.
    expect(usage).toHaveLength(0);
    expect(published).toHaveLength(0);
  });

  it('finish(succeeded) does not overwrite a cancel written between its read and its write', async () => {
    const { deps, store, usage } = await fresh();
    const record = predictionRecord({ status: 'processing', startedAt: Date.now() });
    await store.create(record);
    deps.store = withWriteAfterRead(store, record.id, () =>
      store.update(record.id, { status: 'canceled', completedAt: Date.now() }),
    );

    expect(await finish(deps, record.id, 'succeeded', { outputText: 'late' }, randomUUID())).toBeUndefined();
    const latest = await store.get(record.id);
    expect(latest?.status).toBe('canceled');
    expect(latest?.outputText).toBeNull();
    expect(usage).toHaveLength(0);
  });

  it('the Cancel-After deadline job cancels a queued prediction once, with its own token, and announces the cancel to its worker', async () => {
    const { deps, store, usage, published } = await fresh();
    const record = predictionRecord({ cancelAt: Date.now() - 1 });
    await store.create(record);
    const worker = new PredictionWorker(deps);

    await worker.cancelAtDeadline(record.id);
    const latest = await store.get(record.id);
    expect(latest?.status).toBe('canceled');
    expect(latest?.finishToken).toEqual(expect.any(String));
    expect(usage).toHaveLength(1);
    expect(published.filter((p) => p.message.type === 'cancel')).toHaveLength(1);

    // A second run of the job (a queue retry) finds it finished by someone else's token: nothing again.
    await worker.cancelAtDeadline(record.id);
    expect(usage).toHaveLength(1);
    expect(published.filter((p) => p.message.type === 'cancel')).toHaveLength(1);
  });

  it('the deadline job leaves a finished prediction alone', async () => {
    const { deps, store, usage } = await fresh();
    const record = predictionRecord({
      status: 'succeeded',
      completedAt: Date.now(),
      outputText: 'kept',
      cancelAt: Date.now() - 1,
    });
    await store.create(record);
    await new PredictionWorker(deps).cancelAtDeadline(record.id);
    expect((await store.get(record.id))?.status).toBe('succeeded');
    expect(usage).toHaveLength(0);
  });

  it('a deadline job that comes early schedules itself for the rest, then cancels', async () => {
    const { deps, store, queue: jobs } = await fresh();
    const record = predictionRecord({ cancelAt: Date.now() + 300 });
    await store.create(record);
    const worker = new PredictionWorker(deps);
    const runs: JobInfo[] = [];
    jobs.process(
      'deadline',
      async (job) => {
        runs.push(job);
        await worker.cancelAtDeadline(job.id);
      },
      { concurrency: 1 },
    );
    await jobs.add('deadline', record.id);
    await until('the prediction canceled', async () => (await store.get(record.id))?.status === 'canceled');
    // The first run came early; a timer may fire a millisecond early too, so possibly one more.
    expect(runs.length).toBeGreaterThanOrEqual(2);
    expect(Date.now()).toBeGreaterThanOrEqual(record.cancelAt ?? 0);
  });

  it('embedded start-up recovery schedules the deadline again: a queued prediction is canceled with no worker free', async () => {
    const { deps, store, queue: jobs } = await fresh();
    const record = predictionRecord({ cancelAt: Date.now() + 200 });
    await store.create(record);
    const worker = new PredictionWorker(deps);
    // No prediction worker is free (none consumes 'prediction'); only the deadline lane runs.
    jobs.process('deadline', (job) => worker.cancelAtDeadline(job.id), { concurrency: 1 });
    await requeue(deps, Number.MAX_SAFE_INTEGER);
    await until('the prediction canceled', async () => (await store.get(record.id))?.status === 'canceled');
  });
}

const implementations = [sqliteStores(), redisStores()];
for (const impl of implementations) impl.describe(impl.name, () => contract(impl));
