/**
 * The load generator: closed-loop workers on one undici Pool per target, driving raw dispatch handlers (no
 * Readable per response, no promise per request), so the bench process stays lean on a 2-core machine.
 *
 * The handler uses undici's classic callbacks (onConnect/onHeaders/onData/onComplete/onError): undici
 * calls them directly, while the newer onRequestStart-style handlers go through an adapter per request.
 */
import { Buffer } from 'node:buffer';
import { performance } from 'node:perf_hooks';
import { type Dispatcher, Pool } from 'undici';

export interface RequestSpec {
  path: string;
  headers: Record<string, string>;
  body: Buffer;
  stream: boolean;
  /** Streams: the bytes of the first content event (OpenAI's `"delta":{"content":"` by default). */
  contentMarker?: Buffer;
  /** Streams: the bytes a complete stream ends with (OpenAI's `data: [DONE]` by default). */
  endMarker?: Buffer;
}

/** How long a phase runs: a number of requests, or a time window; both after a warm-up. */
export type Plan =
  | { kind: 'count'; concurrency: number; warmup: number; requests: number }
  | { kind: 'time'; concurrency: number; warmupMs: number; durationMs: number };

export interface PhaseResult {
  /** Whole-request times (ms) of the measured requests. */
  latency: Float64Array;
  /** Streams only: request start → first content chunk (ms). */
  ttfc: Float64Array;
  /** Successful requests in the measured part. */
  completed: number;
  /** Successful requests in the whole phase, warm-up included (for CPU per request). */
  completedAll: number;
  /** Length of the measured part (ms). */
  windowMs: number;
  errors: number;
  errorSamples: string[];
}

const CONTENT = Buffer.from('"delta":{"content":"');
const DONE = Buffer.from('data: [DONE]\n\n');
const MAX_ERRORS = 50;
/** No phase may run longer than its plan plus this, whatever the target does. */
const SLACK_MS = 30_000;

export function createDispatcher(origin: string, connections: number): Pool {
  return new Pool(origin, {
    connections,
    pipelining: 1,
    keepAliveTimeout: 60_000,
    keepAliveMaxTimeout: 60_000,
    headersTimeout: 15_000,
    bodyTimeout: 15_000,
  });
}

type Done = (exchange: Exchange, err: Error | null) => void;

class Exchange implements Dispatcher.DispatchHandler {
  status = 0;
  bytes = 0;
  /** performance.now() when the first content chunk arrived; 0 until then. */
  firstContent = 0;
  private carry: Buffer | null = null;
  private last: Buffer = Buffer.alloc(0);

  constructor(
    readonly stream: boolean,
    private readonly done: Done,
    private readonly content: Buffer = CONTENT,
    private readonly end: Buffer = DONE,
  ) {}

  onConnect(): void {}

  onHeaders(statusCode: number): boolean {
    this.status = statusCode;
    return true;
  }

  onData(chunk: Buffer): boolean {
    this.bytes += chunk.length;
    if (this.stream) {
      if (this.firstContent === 0) {
        const hay = this.carry ? Buffer.concat([this.carry, chunk]) : chunk;
        if (hay.indexOf(this.content) !== -1) {
          this.firstContent = performance.now();
          this.carry = null;
        } else {
          this.carry = Buffer.from(hay.subarray(Math.max(0, hay.length - this.content.length + 1)));
        }
      }
      const end = this.end;
      this.last =
        chunk.length >= end.length
          ? chunk.subarray(chunk.length - end.length)
          : Buffer.concat([this.last, chunk]).subarray(-end.length);
    } else {
      this.last = chunk;
    }
    return true;
  }

  onComplete(): void {
    this.done(this, this.problem());
  }

  /** What is wrong with a completed response, if anything. */
  private problem(): Error | null {
    if (this.status !== 200) return new Error(`HTTP ${this.status}`);
    if (this.stream) {
      if (!this.last.equals(this.end))
        return new Error(`stream did not end with ${this.end.toString().trim()}`);
      if (this.firstContent === 0) return new Error('stream had no content chunk');
    } else if (this.bytes === 0 || this.last[this.last.length - 1] !== 0x7d /* } */) {
      return new Error('JSON body missing or cut');
    }
    return null;
  }

  onError(err: Error): void {
    this.done(this, err);
  }
}

/** Runs one phase against one target and resolves when every request it started has finished. */
export function drive(dispatcher: Dispatcher, spec: RequestSpec, plan: Plan): Promise<PhaseResult> {
  const options: Dispatcher.DispatchOptions = {
    method: 'POST',
    path: spec.path,
    headers: spec.headers,
    body: spec.body,
  };
  return new Promise<PhaseResult>((resolve) => {
    const latency: number[] = [];
    const ttfc: number[] = [];
    const errorSamples: string[] = [];
    let issued = 0;
    let inflight = 0;
    let completed = 0;
    let completedAll = 0;
    let errors = 0;
    let finished = false;

    const t0 = performance.now();
    const measureFrom = plan.kind === 'time' ? t0 + plan.warmupMs : Number.NaN;
    const measureTo = plan.kind === 'time' ? measureFrom + plan.durationMs : Number.NaN;
    const budgetMs =
      plan.kind === 'time' ? plan.warmupMs + plan.durationMs : (plan.warmup + plan.requests) * 1_000;
    const hardStop = t0 + Math.min(budgetMs, 10 * 60_000) + SLACK_MS;
    // count plan: the measured window runs from the first measured start to the last completion.
    let firstMeasuredStart = Number.NaN;
    let lastMeasuredEnd = Number.NaN;

    const finish = () => {
      if (finished) return;
      finished = true;
      clearTimeout(guard);
      const windowMs = plan.kind === 'time' ? plan.durationMs : lastMeasuredEnd - firstMeasuredStart;
      resolve({
        latency: Float64Array.from(latency),
        ttfc: Float64Array.from(ttfc),
        completed,
        completedAll,
        windowMs,
        errors,
        errorSamples,
      });
    };
    // Last resort if a target hangs past every timeout: report what was measured.
    const guard = setTimeout(
      () => {
        errors++;
        errorSamples.push(`phase stopped by the guard with ${inflight} requests in flight`);
        finish();
      },
      hardStop - t0 + 20_000,
    );

    const canIssue = (now: number): boolean => {
      if (finished || now > hardStop || errors >= MAX_ERRORS) return false;
      return plan.kind === 'count' ? issued < plan.warmup + plan.requests : now < measureTo;
    };

    const issue = () => {
      const index = issued++;
      inflight++;
      const start = performance.now();
      if (plan.kind === 'count' && index === plan.warmup) firstMeasuredStart = start;
      const exchange = new Exchange(
        spec.stream,
        (ex, err) => settle(ex, err, index, start),
        spec.contentMarker,
        spec.endMarker,
      );
      try {
        dispatcher.dispatch(options, exchange);
      } catch (err) {
        exchange.onError(err as Error);
      }
    };

    const settle = (ex: Exchange, err: Error | null, index: number, start: number) => {
      inflight--;
      const end = performance.now();
      if (err) {
        errors++;
        if (errorSamples.length < 5) errorSamples.push(err.message);
      } else {
        completedAll++;
        const measured =
          plan.kind === 'count' ? index >= plan.warmup : start >= measureFrom && end <= measureTo;
        if (measured) {
          latency.push(end - start);
          if (ex.stream) ttfc.push(ex.firstContent - start);
        }
        if (plan.kind === 'count' ? index >= plan.warmup : end >= measureFrom && end <= measureTo) {
          completed++;
          if (plan.kind === 'count') lastMeasuredEnd = end;
        }
      }
      if (canIssue(end)) issue();
      else if (inflight === 0) finish();
    };

    for (let i = 0; i < plan.concurrency && canIssue(performance.now()); i++) issue();
    if (inflight === 0) finish();
  });
}
