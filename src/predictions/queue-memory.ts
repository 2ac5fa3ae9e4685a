import { type BackoffPolicy, nextDelayMs } from '../backoff.js';
import type { JobInfo, JobKind, JobQueue } from './types.js';

const RETRY: BackoffPolicy = { baseMs: 500, maxMs: 30_000, jitter: 'none' };
const MAX_ATTEMPTS = 5;

interface Pending {
  id: string;
  attempt: number;
  timer: NodeJS.Timeout | undefined;
}

interface Lane {
  handler: ((job: JobInfo) => Promise<void>) | undefined;
  concurrency: number;
  running: Set<Promise<void>>;
  /** Due jobs waiting for a free slot, in order. */
  ready: Pending[];
  /** Every job not yet running, by id: a second add of a waiting id is a no-op. */
  waiting: Map<string, Pending>;
}

/**
 * The embedded job queue: in memory, in this process. Durability comes from the store, not from here:
 * at start-up Gantry re-adds every unfinished prediction and pending delivery (setup.ts requeue), so a
 * job lost with the process is found again.
 */
export class MemoryJobQueue implements JobQueue {
  private readonly lanes = new Map<JobKind, Lane>();
  private closed = false;
  private stopping: Promise<void> | undefined;

  async add(kind: JobKind, id: string, options: { delayMs?: number } = {}) {
    if (this.closed) return;
    const lane = this.lane(kind);
    if (lane.waiting.has(id)) return;
    this.schedule(lane, { id, attempt: 1, timer: undefined }, options.delayMs ?? 0);
  }

  process(kind: JobKind, handler: (job: JobInfo) => Promise<void>, options: { concurrency: number }) {
    const lane = this.lane(kind);
    lane.handler = handler;
    lane.concurrency = Math.max(1, options.concurrency);
    this.pump(lane);
  }

  /** In process, nothing is left to run once the workers stop: later adds are dropped (found again at start). */
  close(graceMs = 10_000): Promise<void> {
    return this.stopWorkers(graceMs);
  }

  stopWorkers(graceMs = 10_000): Promise<void> {
    this.stopping ??= this.stopRunning(graceMs);
    return this.stopping;
  }

  private async stopRunning(graceMs: number): Promise<void> {
    this.closed = true;
    const running: Promise<void>[] = [];
    for (const lane of this.lanes.values()) {
      for (const job of lane.waiting.values()) clearTimeout(job.timer);
      lane.waiting.clear();
      lane.ready.length = 0;
      running.push(...lane.running);
    }
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.allSettled(running),
      new Promise((resolve) => {
        timer = setTimeout(resolve, graceMs);
      }),
    ]);
    clearTimeout(timer);
  }

  private lane(kind: JobKind): Lane {
    let lane = this.lanes.get(kind);
    if (!lane) {
      lane = { handler: undefined, concurrency: 1, running: new Set(), ready: [], waiting: new Map() };
      this.lanes.set(kind, lane);
    }
    return lane;
  }

  private schedule(lane: Lane, job: Pending, delayMs: number) {
    lane.waiting.set(job.id, job);
    if (delayMs <= 0) {
      lane.ready.push(job);
      this.pump(lane);
      return;
    }
    job.timer = setTimeout(() => {
      job.timer = undefined;
      lane.ready.push(job);
      this.pump(lane);
    }, delayMs);
    job.timer.unref();
  }

  private pump(lane: Lane) {
    const handler = lane.handler;
    if (!handler) return;
    while (!this.closed && lane.running.size < lane.concurrency && lane.ready.length > 0) {
      const job = lane.ready.shift() as Pending;
      lane.waiting.delete(job.id);
      const run: Promise<void> = handler({ id: job.id, attempt: job.attempt }).then(
        () => undefined,
        () => {
          if (job.attempt >= MAX_ATTEMPTS || this.closed || lane.waiting.has(job.id)) return;
          const delay = nextDelayMs(job.attempt, RETRY);
          this.schedule(lane, { id: job.id, attempt: job.attempt + 1, timer: undefined }, delay);
        },
      );
      lane.running.add(run);
      run.finally(() => {
        lane.running.delete(run);
        this.pump(lane);
      });
    }
  }
}
