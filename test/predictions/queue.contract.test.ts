import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { BullJobQueue, type BullJobQueueOptions } from '../../src/predictions/queue-bullmq.js';
import { MemoryJobQueue } from '../../src/predictions/queue-memory.js';
import type { JobInfo, JobQueue } from '../../src/predictions/types.js';
import { describeRedis, redisServerAvailable, startRedis, type TestRedis } from '../helpers/redis.js';

/** A way to make fresh queues of one implementation; `peer` shares the first one's jobs where it can. */
interface Implementation {
  name: string;
  /** `describe`, or `describeRedis` for implementations that need redis-server. */
  describe: (name: string, body: () => void) => void;
  create(): Promise<{ queue: JobQueue; peer?: () => JobQueue }>;
  /** Errors reported by the queues so far (taken: the list starts over). */
  takeErrors(): Error[];
}

function memory(): Implementation {
  return {
    name: 'MemoryJobQueue',
    describe,
    async create() {
      return { queue: new MemoryJobQueue() };
    },
    takeErrors: () => [],
  };
}

/** Short timings so retries and stall recovery fit in a test. */
const FAST_BULL: Omit<BullJobQueueOptions, 'url'> = {
  backoffMs: 100,
  lockDurationMs: 1000,
  stalledIntervalMs: 500,
};

/** One redis-server for the suite; each queue gets its own prefix (its own BullMQ queues). */
function bull(): Implementation {
  let server: TestRedis | undefined;
  const errors: Error[] = [];
  if (redisServerAvailable) {
    beforeAll(async () => {
      server = await startRedis();
    });
    afterAll(async () => {
      await server?.close();
    });
  }
  return {
    name: 'BullJobQueue',
    describe: describeRedis,
    async create() {
      if (!server) throw new Error('redis-server not started');
      const options: BullJobQueueOptions = {
        ...FAST_BULL,
        url: server.url,
        prefix: `test-${randomUUID()}`,
        onError: (error) => errors.push(error),
      };
      return { queue: new BullJobQueue(options), peer: () => new BullJobQueue(options) };
    },
    takeErrors: () => errors.splice(0),
  };
}

/** Polls until `check` holds, or fails with `what` after `ms`. */
async function until(what: string, check: () => boolean, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

/** The same behaviour, whichever queue carries the jobs. */
function contract(impl: Implementation): void {
  const open: JobQueue[] = [];
  afterEach(async () => {
    await Promise.all(open.splice(0).map((q) => q.close(100)));
    expect(impl.takeErrors()).toEqual([]);
  });

  const fresh = async () => {
    const made = await impl.create();
    open.push(made.queue);
    return made.queue;
  };

  it('runs an added job with attempt 1', async () => {
    const queue = await fresh();
    const seen: JobInfo[] = [];
    queue.process('prediction', async (job) => void seen.push(job), { concurrency: 1 });
    await queue.add('prediction', 'p-1');
    await until('the job', () => seen.length === 1);
    expect(seen).toEqual([{ id: 'p-1', attempt: 1 }]);
  });

  it('runs jobs added before a worker starts', async () => {
    const queue = await fresh();
    await queue.add('prediction', 'p-early');
    const seen: string[] = [];
    queue.process('prediction', async (job) => void seen.push(job.id), { concurrency: 1 });
    await until('the job', () => seen.length === 1);
    expect(seen).toEqual(['p-early']);
  });

  it('keeps kinds apart', async () => {
    const queue = await fresh();
    const predictions: string[] = [];
    const webhooks: string[] = [];
    queue.process('prediction', async (job) => void predictions.push(job.id), { concurrency: 1 });
    queue.process('webhook', async (job) => void webhooks.push(job.id), { concurrency: 1 });
    await queue.add('prediction', 'same-id');
    await queue.add('webhook', 'same-id');
    await queue.add('webhook', 'd-2');
    await until('both kinds', () => predictions.length === 1 && webhooks.length === 2);
    await sleep(100);
    expect(predictions).toEqual(['same-id']);
    expect(webhooks.sort()).toEqual(['d-2', 'same-id']);
  });

  it('an id already waiting is not added twice', async () => {
    const queue = await fresh();
    await queue.add('prediction', 'p-dup');
    await queue.add('prediction', 'p-dup');
    await queue.add('prediction', 'p-other');
    await queue.add('prediction', 'p-dup');
    const seen: string[] = [];
    queue.process('prediction', async (job) => void seen.push(job.id), { concurrency: 1 });
    await until('both jobs', () => seen.length >= 2);
    await sleep(150);
    expect(seen.sort()).toEqual(['p-dup', 'p-other']);
  });

  it('an id already delayed is not added twice (the first delay holds)', async () => {
    const queue = await fresh();
    const seen: Array<{ id: string; at: number }> = [];
    queue.process('prediction', async (job) => void seen.push({ id: job.id, at: Date.now() }), {
      concurrency: 1,
    });
    const start = Date.now();
    await queue.add('prediction', 'p-delayed', { delayMs: 300 });
    await queue.add('prediction', 'p-delayed');
    await queue.add('prediction', 'p-delayed', { delayMs: 50 });
    await until('the job', () => seen.length === 1);
    await sleep(150);
    expect(seen).toHaveLength(1);
    expect(seen[0]!.at - start).toBeGreaterThanOrEqual(280);
  });

  it('honours delayMs', async () => {
    const queue = await fresh();
    const ran = new Map<string, number>();
    queue.process('webhook', async (job) => void ran.set(job.id, Date.now()), { concurrency: 2 });
    const start = Date.now();
    await queue.add('webhook', 'd-late', { delayMs: 400 });
    await queue.add('webhook', 'd-now');
    await until('both jobs', () => ran.size === 2);
    expect(ran.get('d-now')! - start).toBeLessThan(300);
    expect(ran.get('d-late')! - start).toBeGreaterThanOrEqual(380);
    expect(ran.get('d-late')!).toBeGreaterThan(ran.get('d-now')!);
  });

  it('retries a rejected job later with the attempt incremented', async () => {
    const queue = await fresh();
    const seen: JobInfo[] = [];
    queue.process(
      'prediction',
      async (job) => {
        seen.push(job);
        if (job.attempt < 3) throw new Error(`failure ${job.attempt}`);
      },
      { concurrency: 1 },
    );
    await queue.add('prediction', 'p-flaky');
    await until('three attempts', () => seen.length === 3, 8000);
    await sleep(200);
    expect(seen).toEqual([
      { id: 'p-flaky', attempt: 1 },
      { id: 'p-flaky', attempt: 2 },
      { id: 'p-flaky', attempt: 3 },
    ]);
  });

  it('an id added again while its job runs is not lost: it runs again', async () => {
    const queue = await fresh();
    const runs: JobInfo[] = [];
    queue.process(
      'webhook',
      async (job) => {
        runs.push(job);
        // The first run schedules the next one (a webhook's next attempt) before it ends.
        if (runs.length === 1) await queue.add('webhook', job.id, { delayMs: 50 });
        await sleep(100);
      },
      { concurrency: 1 },
    );
    await queue.add('webhook', 'd-again');
    await until('the second run', () => runs.length === 2);
    await sleep(150);
    expect(runs).toEqual([
      { id: 'd-again', attempt: 1 },
      { id: 'd-again', attempt: 1 },
    ]);
  });

  it('respects concurrency', async () => {
    const queue = await fresh();
    let running = 0;
    let peak = 0;
    const done: string[] = [];
    queue.process(
      'prediction',
      async (job) => {
        running++;
        peak = Math.max(peak, running);
        await sleep(80);
        running--;
        done.push(job.id);
      },
      { concurrency: 2 },
    );
    for (let i = 0; i < 6; i++) await queue.add('prediction', `p-${i}`);
    await until('all jobs', () => done.length === 6);
    expect(peak).toBe(2);
  });

  it('close waits for running jobs and takes no new ones', async () => {
    const queue = await fresh();
    let finished = false;
    const started: string[] = [];
    queue.process(
      'prediction',
      async (job) => {
        started.push(job.id);
        await sleep(150);
        finished = true;
      },
      { concurrency: 1 },
    );
    await queue.add('prediction', 'p-slow');
    await until('the job to start', () => started.length === 1);
    await queue.add('prediction', 'p-next');
    await queue.close(5000);
    expect(finished).toBe(true);
    expect(started).toEqual(['p-slow']);
  });

  it('close gives up on a running job after graceMs', async () => {
    const queue = await fresh();
    const started: string[] = [];
    let release = () => {};
    const blocked = new Promise<void>((resolve) => {
      release = resolve;
    });
    queue.process(
      'prediction',
      async (job) => {
        started.push(job.id);
        await blocked;
      },
      { concurrency: 1 },
    );
    await queue.add('prediction', 'p-stuck');
    await until('the job to start', () => started.length === 1);
    const before = Date.now();
    await queue.close(200);
    const took = Date.now() - before;
    release();
    expect(took).toBeGreaterThanOrEqual(180);
    expect(took).toBeLessThan(2000);
  });
}

const implementations: Implementation[] = [memory(), bull()];

for (const impl of implementations) {
  impl.describe(`JobQueue contract: ${impl.name}`, () => contract(impl));
}

/** What only a shared queue can do: two instances (two processes, in production) on one Redis. */
describeRedis('JobQueue on BullMQ: shared between instances', () => {
  const impl = bull();
  const open: JobQueue[] = [];
  afterEach(async () => {
    await Promise.all(open.splice(0).map((q) => q.close(100)));
    expect(impl.takeErrors()).toEqual([]);
  });

  async function pair(): Promise<[JobQueue, JobQueue]> {
    const { queue, peer } = await impl.create();
    const other = peer!();
    open.push(queue, other);
    return [queue, other];
  }

  it("a job added on one instance runs on the other's worker", async () => {
    const [api, worker] = await pair();
    const seen: JobInfo[] = [];
    worker.process('prediction', async (job) => void seen.push(job), { concurrency: 1 });
    await api.add('prediction', 'p-shared');
    await until('the job', () => seen.length === 1);
    expect(seen).toEqual([{ id: 'p-shared', attempt: 1 }]);
  });

  it('an instance whose workers stopped still adds jobs until it is closed; another instance runs them', async () => {
    const [api, worker] = await pair();
    await api.stopWorkers(100);
    await api.add('prediction', 'p-while-draining');
    const seen: string[] = [];
    worker.process('prediction', async (job) => void seen.push(job.id), { concurrency: 1 });
    await until('the job', () => seen.length === 1);
    expect(seen).toEqual(['p-while-draining']);
  });

  it('dedup holds across instances', async () => {
    const [a, b] = await pair();
    await a.add('webhook', 'd-shared', { delayMs: 200 });
    await b.add('webhook', 'd-shared', { delayMs: 200 });
    const seen: string[] = [];
    b.process('webhook', async (job) => void seen.push(job.id), { concurrency: 1 });
    await until('the job', () => seen.length === 1);
    await sleep(150);
    expect(seen).toEqual(['d-shared']);
  });

  it('an id added again while its job runs waits for that run to finish (no overlap)', async () => {
    const [queue] = await pair();
    let running = 0;
    let overlapped = false;
    const runs: string[] = [];
    queue.process(
      'webhook',
      async (job) => {
        running++;
        if (running > 1) overlapped = true;
        runs.push(job.id);
        if (runs.length === 1) await queue.add('webhook', job.id);
        await sleep(150);
        running--;
      },
      { concurrency: 4 },
    );
    await queue.add('webhook', 'd-serial');
    await until('the second run', () => runs.length === 2);
    await sleep(200);
    expect(runs).toEqual(['d-serial', 'd-serial']);
    expect(overlapped).toBe(false);
  });

  it('a job its worker gave up on at close runs on another worker at once', async () => {
    const [first, second] = await pair();
    const started: JobInfo[] = [];
    first.process(
      'prediction',
      () => {
        started.push({ id: 'first', attempt: 0 });
        return new Promise<void>(() => {});
      },
      { concurrency: 1 },
    );
    await first.add('prediction', 'p-handed-back');
    await until('the first run', () => started.length === 1);
    await first.close(100);
    const before = Date.now();
    second.process('prediction', async (job) => void started.push(job), { concurrency: 1 });
    await until('the second run', () => started.length === 2);
    // Without waiting for the lock to expire (lockDuration is 1 s here).
    expect(Date.now() - before).toBeLessThan(900);
    expect(started[1]).toEqual({ id: 'p-handed-back', attempt: 2 });
  });
});
