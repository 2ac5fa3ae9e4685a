import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import { BullJobQueue, type BullJobQueueOptions } from '../../src/predictions/queue-bullmq.js';
import { RedisPredictionStore } from '../../src/predictions/store-redis.js';
import type { DeliveryRecord, JobInfo, JobKind, PredictionRecord } from '../../src/predictions/types.js';
import { predictionRecord } from '../helpers/prediction-record.js';
import { describeRedis, startRedis, type TestRedis } from '../helpers/redis.js';

/** Polls until `check` holds, or fails with `what` after `ms`. */
async function until(what: string, check: () => boolean, ms = 8000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

function prediction(overrides: Partial<PredictionRecord> = {}): PredictionRecord {
  return predictionRecord({
    accountId: 'acct-durable',
    model: 'acme/painter',
    stream: true,
    input: { prompt: 'a lighthouse' },
    webhook: {
      url: 'https://example.com/hook',
      events: ['prediction.succeeded'],
      authHeader: null,
      authTokenSealed: null,
    },
    ...overrides,
  });
}

function delivery(predictionId: string, nextAttemptAt: number): Omit<DeliveryRecord, 'seq'> {
  return {
    id: `d-${randomUUID()}`,
    predictionId,
    event: 'prediction.succeeded',
    body: '{"status":"succeeded"}',
    state: 'pending',
    attempts: 1,
    createdAt: nextAttemptAt - 1000,
    nextAttemptAt,
    log: [{ at: nextAttemptAt - 1000, outcome: 'retry', status: 503, error: null, ms: 20 }],
  };
}

/**
 * A BullMQ worker in its own Node process, as a Gantry worker would be: it prints every job it starts
 * and never finishes one, so the test can kill it mid-job.
 */
function startWorkerProcess(options: BullJobQueueOptions): ChildProcess {
  const queueModule = pathToFileURL(
    fileURLToPath(new URL('../../src/predictions/queue-bullmq.ts', import.meta.url)),
  );
  const script = `
    import { BullJobQueue } from ${JSON.stringify(queueModule.href)};
    const queue = new BullJobQueue(JSON.parse(process.env.QUEUE_OPTIONS));
    queue.process('prediction', (job) => {
      process.stdout.write(JSON.stringify(job) + '\\n');
      return new Promise(() => {});
    }, { concurrency: 1 });
  `;
  return spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '--eval', script], {
    env: { ...process.env, QUEUE_OPTIONS: JSON.stringify(options) },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
}

describeRedis('Redis durability (AOF)', () => {
  let server: TestRedis;
  const closers: Array<() => Promise<unknown>> = [];

  beforeAll(async () => {
    server = await startRedis({ aof: true });
  });
  afterEach(async () => {
    for (const close of closers.splice(0).reverse()) await close().catch(() => {});
  });
  afterAll(async () => {
    await server?.close();
  });

  function open(prefix: string) {
    const client = new Redis(server.url);
    const store = new RedisPredictionStore(client, { prefix: `${prefix}:pred:` });
    const queue = new BullJobQueue({
      url: server.url,
      prefix: `${prefix}-jobs`,
      lockDurationMs: 1000,
      stalledIntervalMs: 500,
    });
    let closed = false;
    const close = async () => {
      if (closed) return;
      closed = true;
      await queue.close(100);
      await client.quit();
    };
    closers.push(close);
    return { client, store, queue, close };
  }

  for (const restart of ['stop', 'kill'] as const) {
    it(`accepted predictions, pending deliveries and waiting/delayed jobs survive a Redis ${restart} and start`, async () => {
      const prefix = `durable-${randomUUID()}`;
      const before = open(prefix);
      const accepted = prediction();
      const running = prediction({ createdAt: accepted.createdAt + 1 });
      await before.store.create(accepted, 'idem-1');
      await before.store.create(running);
      const processing = await before.store.update(running.id, {
        status: 'processing',
        startedAt: Date.now(),
      });
      await before.store.appendStreamEvent(running.id, { event: 'logs', data: 'step 1' });
      const pending = await before.store.addDelivery(delivery(running.id, Date.now()));
      const addedAt = Date.now();
      await before.queue.add('prediction', accepted.id);
      await before.queue.add('webhook', pending.id, { delayMs: 1500 });
      await before.close();

      await (restart === 'stop' ? server.stop() : server.kill());
      await server.start();

      const after = open(prefix);
      expect(await after.store.get(accepted.id)).toEqual(accepted);
      expect(await after.store.get(running.id)).toEqual(processing);
      expect(await after.store.unfinished(10)).toEqual([accepted.id, running.id]);
      expect(await after.store.pendingDeliveries(Date.now(), 10)).toEqual([pending.id]);
      expect(await after.store.getDelivery(pending.id)).toEqual(pending);
      expect(await after.store.streamEvents(running.id, 0)).toEqual([
        { seq: 1, event: 'logs', data: 'step 1' },
      ]);
      // The idempotency key survived too: a retried create still finds the first prediction.
      expect((await after.store.create(prediction(), 'idem-1')).record).toEqual(accepted);

      const ran: Array<{ kind: JobKind; job: JobInfo; at: number }> = [];
      for (const kind of ['prediction', 'webhook'] as const) {
        after.queue.process(kind, async (job) => void ran.push({ kind, job, at: Date.now() }), {
          concurrency: 1,
        });
      }
      await until('both jobs', () => ran.length === 2);
      // Two queues, two workers: either may run first.
      const byKind = new Map(ran.map((r) => [r.kind, r]));
      expect(byKind.get('prediction')?.job.id).toBe(accepted.id);
      expect(byKind.get('webhook')?.job.id).toBe(pending.id);
      // The webhook job was delayed; its delay survived the restart.
      expect((byKind.get('webhook')?.at ?? 0) - addedAt).toBeGreaterThanOrEqual(1450);
    });
  }

  it('a job whose worker process is killed mid-job is run again by another worker', async () => {
    const options: BullJobQueueOptions = {
      url: server.url,
      prefix: `stall-${randomUUID()}`,
      lockDurationMs: 1000,
      stalledIntervalMs: 300,
    };
    const child = startWorkerProcess(options);
    closers.push(async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    });
    const childStarted: JobInfo[] = [];
    child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
      for (const line of chunk.split('\n').filter(Boolean)) childStarted.push(JSON.parse(line) as JobInfo);
    });

    const api = new BullJobQueue(options);
    closers.push(() => api.close(100));
    await api.add('prediction', 'p-orphaned');
    await until('the child to take the job', () => childStarted.length === 1, 15_000);
    expect(childStarted).toEqual([{ id: 'p-orphaned', attempt: 1 }]);

    const exited = once(child, 'exit');
    child.kill('SIGKILL');
    await exited;
    const killedAt = Date.now();

    const rescuer = new BullJobQueue(options);
    closers.push(() => rescuer.close(100));
    const rescued: JobInfo[] = [];
    rescuer.process('prediction', async (job) => void rescued.push(job), { concurrency: 1 });
    await until('another worker to run the job', () => rescued.length === 1);
    expect(rescued).toEqual([{ id: 'p-orphaned', attempt: 2 }]);
    // Not before the dead worker's lock ran out.
    expect(Date.now() - killedAt).toBeGreaterThanOrEqual(300);
  });
});
