import { setImmediate as yieldToEventLoop } from 'node:timers/promises';
import { type BackoffPolicy, nextDelayMs } from '../backoff.js';
import { type UsageRecord, UsageRecordError, usageRecordProblem } from './record.js';
import type { UsageSink } from './sink.js';

export type UsageDropReason = 'invalid' | 'buffer_full' | 'closed' | 'shutdown_timeout';

export interface UsageBatcherOptions {
  sinks: UsageSink[];
  /** Flush at least this often; default 250 ms. */
  flushIntervalMs?: number;
  /** Flush as soon as this many records wait, and never write more than this in one call; default 500. */
  maxBatch?: number;
  /** Records kept per sink while it fails; beyond this the oldest are dropped (onDrop). Default 100,000. */
  maxBuffered?: number;
  /** Longest wait between retries of a failing sink (backoff doubles from flushIntervalMs); default 5 s. */
  maxRetryDelayMs?: number;
  /** How long close() keeps retrying a failing sink before giving up (onDrop); default 10 s. */
  closeTimeoutMs?: number;
  /** A sink write failed; its records are kept and retried. */
  onError?: (error: unknown, sink: string) => void;
  /** Records lost for good: make this loud (log at error level and count in a metric). */
  onDrop?: (count: number, reason: UsageDropReason, sink: string) => void;
}

export interface UsageSinkStats {
  name: string;
  /** Waiting for this sink, including a batch being written. */
  pending: number;
  written: number;
  dropped: number;
  failures: number;
  /** Failures since the last success; > 0 means the sink is down right now. */
  consecutiveFailures: number;
}

export interface UsageBatcherStats {
  /** Added but not yet handed to the sinks. */
  queued: number;
  sinks: UsageSinkStats[];
}

/** One sink's own queue, so a sink that is down neither blocks nor re-writes the healthy ones. */
interface Lane {
  name: string;
  sink: UsageSink;
  queue: UsageRecord[];
  inFlight: UsageRecord[];
  running: Promise<void> | undefined;
  retryAt: number;
  consecutiveFailures: number;
  failures: number;
  written: number;
  dropped: number;
}

/**
 * The only part of usage metering on the request path: add() pushes to an array; a timer (or a full
 * batch) hands the records to every sink off the request. A failing sink keeps its records and is
 * retried with backoff, with the same ids, so idempotent sinks never duplicate; close() flushes all.
 */
export class UsageBatcher {
  private pending: UsageRecord[] = [];
  private readonly lanes: Lane[];
  private readonly timer: NodeJS.Timeout;
  private readonly interval: number;
  private readonly maxBatch: number;
  private readonly maxBuffered: number;
  private readonly retry: BackoffPolicy;
  private readonly closeTimeout: number;
  private scheduled = false;
  private closed = false;
  private closing: Promise<void> | undefined;

  constructor(private readonly options: UsageBatcherOptions) {
    this.interval = options.flushIntervalMs ?? 250;
    this.maxBatch = options.maxBatch ?? 500;
    this.maxBuffered = options.maxBuffered ?? 100_000;
    this.retry = { baseMs: this.interval, maxMs: options.maxRetryDelayMs ?? 5_000, jitter: 'none' };
    this.closeTimeout = options.closeTimeoutMs ?? 10_000;
    this.lanes = options.sinks.map((sink, i) => ({
      name: sink.name ?? `sink${i}`,
      sink,
      queue: [],
      inFlight: [],
      running: undefined,
      retryAt: 0,
      consecutiveFailures: 0,
      failures: 0,
      written: 0,
      dropped: 0,
    }));
    this.timer = setInterval(() => this.tick(), this.interval);
    this.timer.unref();
  }

  /** Synchronous and cheap; never throws (a bad or late record is reported through onDrop). */
  add(record: UsageRecord): void {
    if (this.closed) {
      this.drop(1, 'closed', 'batcher');
      return;
    }
    const problem = usageRecordProblem(record);
    if (problem) {
      this.error(new UsageRecordError(record.id, problem), 'batcher');
      this.drop(1, 'invalid', 'batcher');
      return;
    }
    this.pending.push(record);
    if (this.pending.length >= this.maxBatch && !this.scheduled) {
      this.scheduled = true;
      // Not inline: an embedded sink writes synchronously, and add() runs on the request path.
      setImmediate(() => {
        this.scheduled = false;
        this.tick();
      });
    }
  }

  /** Writes everything added so far to every sink now (ignoring retry backoff); never rejects. */
  async flush(): Promise<void> {
    this.distribute();
    await Promise.all(this.lanes.map((lane) => this.drain(lane)));
  }

  /**
   * Stops the timer and flushes everything (records added meanwhile included), retrying failing sinks
   * until closeTimeoutMs; what is left then is reported through onDrop. Then closes the sinks.
   */
  close(): Promise<void> {
    this.closing ??= this.shutdown();
    return this.closing;
  }

  stats(): UsageBatcherStats {
    return {
      queued: this.pending.length,
      sinks: this.lanes.map((lane) => ({
        name: lane.name,
        pending: lane.queue.length + lane.inFlight.length,
        written: lane.written,
        dropped: lane.dropped,
        failures: lane.failures,
        consecutiveFailures: lane.consecutiveFailures,
      })),
    };
  }

  private tick(): void {
    this.distribute();
    const now = Date.now();
    for (const lane of this.lanes) {
      if (!lane.running && lane.queue.length > 0 && now >= lane.retryAt) void this.drain(lane);
    }
  }

  private distribute(): void {
    if (this.pending.length === 0) return;
    const batch = this.pending;
    this.pending = [];
    for (const lane of this.lanes) {
      lane.queue = lane.queue.length === 0 ? batch.slice() : lane.queue.concat(batch);
      const excess = lane.queue.length - this.maxBuffered;
      if (excess > 0) {
        lane.queue.splice(0, excess);
        lane.dropped += excess;
        this.drop(excess, 'buffer_full', lane.name);
      }
    }
  }

  private async drain(lane: Lane): Promise<void> {
    while (lane.running) await lane.running;
    if (lane.queue.length === 0) return;
    lane.running = this.writeQueue(lane);
    try {
      await lane.running;
    } finally {
      lane.running = undefined;
    }
  }

  /**
   * Writes the lane's queue in batches until it is empty or a write fails. Between two batches the event
   * loop runs: a synchronous sink (the SQLite ledger) then holds requests for one batch at most.
   */
  private async writeQueue(lane: Lane): Promise<void> {
    let first = true;
    while (lane.queue.length > 0) {
      if (!first) await yieldToEventLoop();
      first = false;
      const batch = lane.queue.splice(0, this.maxBatch);
      lane.inFlight = batch;
      try {
        await lane.sink.write(batch);
      } catch (error) {
        lane.inFlight = [];
        this.failed(lane, batch, error);
        return;
      }
      lane.inFlight = [];
      lane.written += batch.length;
      lane.consecutiveFailures = 0;
      lane.retryAt = 0;
    }
  }

  private failed(lane: Lane, batch: UsageRecord[], error: unknown): void {
    this.error(error, lane.name);
    if (error instanceof UsageRecordError) {
      // A record this sink can never take would block the lane forever: drop it, keep the rest.
      const rest = batch.filter((r) => r.id !== error.recordId);
      const bad = batch.length - rest.length;
      if (bad > 0) {
        lane.dropped += bad;
        this.drop(bad, 'invalid', lane.name);
        lane.queue = rest.concat(lane.queue);
        return;
      }
    }
    lane.queue = batch.concat(lane.queue);
    lane.failures += 1;
    lane.consecutiveFailures += 1;
    lane.retryAt = Date.now() + nextDelayMs(lane.consecutiveFailures, this.retry);
  }

  private remaining(): number {
    return this.lanes.reduce((n, lane) => n + lane.queue.length + lane.inFlight.length, this.pending.length);
  }

  private async shutdown(): Promise<void> {
    clearInterval(this.timer);
    // Records still arrive from requests finishing during shutdown; they are taken until the last flush.
    const deadline = Date.now() + this.closeTimeout;
    let attempt = 0;
    while (this.remaining() > 0) {
      if (!(await within(this.flush(), deadline - Date.now()))) break;
      if (this.remaining() === 0) break;
      const pause = Math.min(nextDelayMs(++attempt, this.retry), deadline - Date.now());
      if (pause <= 0) break;
      await within(new Promise<never>(() => {}), pause);
    }
    this.closed = true;
    this.distribute();
    for (const lane of this.lanes) {
      const lost = lane.queue.length + lane.inFlight.length;
      if (lost === 0) continue;
      lane.dropped += lost;
      this.drop(lost, 'shutdown_timeout', lane.name);
    }
    await Promise.allSettled(this.lanes.map((lane) => lane.sink.close()));
  }

  private error(error: unknown, sink: string): void {
    const onError = this.options.onError;
    try {
      if (onError) onError(error, sink);
      else process.emitWarning(`usage sink ${sink} failed: ${String(error)}`, 'GantryUsageWarning');
    } catch {
      // A throwing hook must not break metering.
    }
  }

  private drop(count: number, reason: UsageDropReason, sink: string): void {
    const onDrop = this.options.onDrop;
    try {
      if (onDrop) onDrop(count, reason, sink);
      else process.emitWarning(`${count} usage records LOST (${reason}) at ${sink}`, 'GantryUsageWarning');
    } catch {
      // A throwing hook must not break metering.
    }
  }
}

/** true when `promise` settled within `ms`; the timer is cleared either way so it never holds the process. */
async function within(promise: Promise<unknown>, ms: number): Promise<boolean> {
  if (ms <= 0) return false;
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  try {
    return await Promise.race([promise.then(() => true), timeout]);
  } finally {
    clearTimeout(timer);
  }
}
