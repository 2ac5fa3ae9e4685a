/**
 * The distributed mode's job queue: BullMQ on Redis, one BullMQ queue per job kind (`predictions`,
 * `webhooks`). BullMQ brings what the in-process queue cannot: jobs that survive a restart, retries
 * with exponential backoff, and stalled-job recovery (a worker that dies mid-job loses its lock, and
 * another worker runs the job again after the lock expired).
 *
 * At most one pending job per id: every job carries BullMQ's deduplication id = the prediction or
 * delivery id, so adding an id that is waiting, delayed or backing off before a retry is a no-op. Job ids
 * themselves are BullMQ's own counters, not ours, because an id may be added again while its job runs
 * (a webhook handler scheduling the next attempt, a sweep re-adding a slow prediction): with the id as
 * the jobId that add would be dropped silently. Instead `keepLastIfActive` stores such an add and BullMQ
 * creates it (with its delay) the moment the running job finishes, so it is never lost and the two runs
 * do not overlap. (A job is retried after a failed run before that stored add runs.)
 *
 * A handler's rejection is retried with exponential backoff; after the last attempt the job stays in
 * BullMQ's failed set (a week) and the store's sweeps (unfinished, pendingDeliveries) add it again.
 * Jobs carry only the id; the handler reads the store, so a job that runs twice does nothing twice.
 */
import { type Job, Queue, Worker } from 'bullmq';
import type { JobInfo, JobKind, JobQueue } from './types.js';

export const DEFAULT_JOB_PREFIX = 'gantry:{jobs}';

/** BullMQ queue names per job kind; all keys live under the prefix. */
export const QUEUE_NAMES: Readonly<Record<JobKind, string>> = {
  prediction: 'predictions',
  webhook: 'webhooks',
  deadline: 'deadlines',
};

export interface BullJobQueueOptions {
  url: string;
  /**
   * BullMQ key prefix; default 'gantry:{jobs}'. BullMQ's scripts touch many keys of a queue at once, so
   * on Redis Cluster the prefix must hold a hash tag, as the default does.
   */
  prefix?: string;
  /** Connection and worker errors (BullMQ retries by itself; this is for logs). */
  onError?: (error: Error) => void;
  /** Runs of a job (first one included) before BullMQ gives up on a failing handler. Default 5. */
  attempts?: number;
  /** First retry delay; each further retry doubles it. Default 500 ms. */
  backoffMs?: number;
  /** A running job's lock; a worker silent for this long is presumed dead. Default 30 s. */
  lockDurationMs?: number;
  /** How often workers look for jobs whose lock expired. Default 15 s. */
  stalledIntervalMs?: number;
  /**
   * Times a job may be recovered from a dead worker before BullMQ fails it. Default 5; Gantry sets
   * max_attempts, so the run past the store's cap still happens and marks the prediction failed.
   */
  maxStalledCount?: number;
}

interface JobData {
  id: string;
}

interface RunningJob {
  job: Job<JobData>;
  token: string | undefined;
}

const JOB_NAME = 'run';

/** True once `settled` settles (fulfilled or rejected), false if `ms` pass first. */
async function within(settled: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  const done = settled.then(
    () => true as const,
    () => true as const,
  );
  try {
    return await Promise.race([done, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

export class BullJobQueue implements JobQueue {
  private readonly queues = new Map<JobKind, Queue<JobData>>();
  private readonly workers: Worker<JobData>[] = [];
  private readonly running = new Map<Promise<void>, RunningJob>();
  private readonly prefix: string;
  private readonly onError: (error: Error) => void;
  private closed = false;
  private stopping: Promise<void> | undefined;
  private queuesClosed = false;

  constructor(private readonly options: BullJobQueueOptions) {
    this.prefix = options.prefix ?? DEFAULT_JOB_PREFIX;
    this.onError = options.onError ?? (() => {});
  }

  async add(kind: JobKind, id: string, options: { delayMs?: number } = {}): Promise<void> {
    // Jobs are still taken while the workers stop (a prediction finishing then schedules its webhook, an
    // API instance's requests in flight queue theirs); once close() has closed the connections nothing
    // is (the store's sweeps find that work again).
    if (this.queuesClosed) return;
    const attempts = this.options.attempts ?? 5;
    await this.queue(kind).add(
      JOB_NAME,
      { id },
      {
        deduplication: { id, keepLastIfActive: true },
        delay: Math.max(0, options.delayMs ?? 0),
        attempts,
        backoff: { type: 'exponential', delay: this.options.backoffMs ?? 500 },
        // Finished jobs are of no use (the store holds the outcome); failed ones stay a week for a look.
        removeOnComplete: true,
        removeOnFail: { age: 7 * 24 * 3600, count: 10_000 },
      },
    );
  }

  process(kind: JobKind, handler: (job: JobInfo) => Promise<void>, options: { concurrency: number }): void {
    if (this.closed) throw new Error('BullJobQueue is closed');
    const worker = new Worker<JobData>(QUEUE_NAMES[kind], (job, token) => this.run(job, token, handler), {
      // Workers block on Redis (BZPOPMIN) and must never give up on a command: BullMQ requires null.
      connection: { url: this.options.url, maxRetriesPerRequest: null },
      prefix: this.prefix,
      concurrency: Math.max(1, options.concurrency),
      lockDuration: this.options.lockDurationMs ?? 30_000,
      stalledInterval: this.options.stalledIntervalMs ?? 15_000,
      maxStalledCount: this.options.maxStalledCount ?? 5,
    });
    worker.on('error', this.onError);
    this.workers.push(worker);
  }

  /**
   * Stops taking jobs, waits up to `graceMs` for the running ones, then hands those still running back
   * to the queue at once (another worker may take them) and closes the workers' connections. A handler
   * still running is not stopped (nothing can stop a promise), but its outcome is no longer reported.
   */
  stopWorkers(graceMs = 10_000): Promise<void> {
    this.stopping ??= this.stopRunning(graceMs);
    return this.stopping;
  }

  async close(graceMs = 10_000): Promise<void> {
    await this.stopWorkers(graceMs);
    if (this.queuesClosed) return;
    this.queuesClosed = true;
    await Promise.all([...this.queues.values()].map((q) => q.close().catch(this.onError)));
  }

  private async stopRunning(graceMs: number): Promise<void> {
    this.closed = true;
    // pause(true) stops fetching without waiting; the wait is ours, bounded by graceMs. A job a worker
    // was already fetching may still start: close() then waits for it, or the lock expires after a crash.
    await Promise.all(this.workers.map((w) => w.pause(true).catch(this.onError)));
    const finished = await within(Promise.allSettled(this.running.keys()), graceMs);
    if (!finished) {
      await Promise.all(
        [...this.running.values()].map(({ job, token }) =>
          job.moveToWait(token).catch((error: Error) => this.onError(error)),
        ),
      );
    }
    await Promise.all(this.workers.map((w) => w.close(!finished).catch(this.onError)));
  }

  private queue(kind: JobKind): Queue<JobData> {
    let queue = this.queues.get(kind);
    if (!queue) {
      queue = new Queue<JobData>(QUEUE_NAMES[kind], {
        connection: { url: this.options.url },
        prefix: this.prefix,
      });
      queue.on('error', this.onError);
      this.queues.set(kind, queue);
    }
    return queue;
  }

  private async run(
    job: Job<JobData>,
    token: string | undefined,
    handler: (job: JobInfo) => Promise<void>,
  ): Promise<void> {
    // attemptsStarted counts runs cut short by a dead worker too; attemptsMade only failed ones.
    const attempt = Math.max(job.attemptsStarted, job.attemptsMade + 1);
    const run = handler({ id: job.data.id, attempt });
    this.running.set(run, { job, token });
    try {
      await run;
    } finally {
      this.running.delete(run);
    }
  }
}
