/**
 * An asynchronous Cog run: `PUT /predictions/{id}` with `Prefer: respond-async`, answered 202 at once;
 * the run then follows the webhooks Cog sends back to Gantry (start, output, logs, completed), each the
 * whole prediction so far. A server whose /openapi.json lists `GET /predictions/{id}` is polled when the
 * webhooks go quiet.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { LinkedAbort } from '../../abort.js';
import { canceledError, LogProgress } from '../common.js';
import { OutputPieces } from '../outputs.js';
import {
  type BackendContext,
  BackendError,
  type BackendEvents,
  type BackendJob,
  type BackendResult,
} from '../types.js';
import {
  asPrediction,
  type CogClient,
  CogHttpError,
  type CogPrediction,
  isCogAnswer,
  startedNothing,
  timeoutError,
} from './client.js';
import { finalResult, type OutputShape } from './outputs.js';

/** Every event, so logs and outputs arrive while the model works (Cog's default is the same list). */
export const COG_WEBHOOK_EVENTS = ['start', 'output', 'logs', 'completed'] as const;

export interface AsyncRunOptions {
  callbackUrl: string;
  pollable: boolean;
  timeoutMs: number;
  pollIntervalMs: number;
  webhookSilenceMs: number;
  track(stop: (error: BackendError) => void): () => void;
}

/**
 * The runs waiting for webhooks, by prediction id, and the key of their webhook tokens: Gantry's
 * callback route hands each webhook here.
 */
export class AsyncRuns {
  private readonly runs = new Map<string, AsyncRun>();

  constructor(
    private readonly client: CogClient,
    private readonly webhookKey: Uint8Array,
  ) {}

  /** False when the token or the payload is not this run's, or no run waits: the route answers 404. */
  receive(predictionId: string, token: string, payload: unknown): boolean {
    const run = this.runs.get(predictionId);
    if (!run || !this.expects(predictionId, token)) return false;
    if (payload === null || typeof payload !== 'object' || Array.isArray(payload)) return false;
    const id = (payload as CogPrediction).id;
    if (typeof id === 'string' && id !== predictionId) return false;
    run.heard();
    run.apply(payload as CogPrediction);
    return true;
  }

  expects(predictionId: string, token: string): boolean {
    const run = this.runs.get(predictionId);
    return run !== undefined && tokensEqual(token, this.token(predictionId, run.nonce));
  }

  async run(
    job: BackendJob,
    ctx: BackendContext,
    shape: OutputShape,
    options: AsyncRunOptions,
  ): Promise<BackendResult> {
    const { client } = this;
    const id = job.predictionId;
    const run = new AsyncRun(ctx.events, shape);
    // A retried attempt reuses the prediction id: its webhooks must not reach the previous attempt.
    this.runs.get(id)?.fail(new BackendError('superseded by a newer attempt', { retryable: true }));
    // Registered before the PUT: Cog sends the start webhook before it answers 202.
    this.runs.set(id, run);
    const call = new LinkedAbort(ctx.signal);
    const stop = (error: BackendError): void => {
      client.cancel(id);
      run.fail(error);
      // A PUT still waiting for its answer is cut too (it sees the run settled and stays quiet).
      call.abort();
    };
    const untrack = options.track(stop);
    const onAbort = (): void => stop(canceledError(ctx.signal));
    ctx.signal.addEventListener('abort', onAbort, { once: true });
    const deadline = setTimeout(() => stop(timeoutError(options.timeoutMs)), options.timeoutMs);
    let pollTimer: NodeJS.Timeout | undefined;
    const watchSilence = (): void => {
      pollTimer = setTimeout(() => {
        if (run.settled) return;
        if (Date.now() - run.lastHeardAt < options.webhookSilenceMs) return watchSilence();
        this.poll(id, run, call.signal, options.pollIntervalMs);
      }, options.webhookSilenceMs);
    };
    if (options.pollable) watchSilence();

    try {
      const answer = await client
        .send(
          'PUT',
          `/predictions/${encodeURIComponent(id)}`,
          {
            id,
            input: job.input,
            webhook: this.webhookUrl(options.callbackUrl, id, run.nonce),
            webhook_events_filter: COG_WEBHOOK_EVENTS,
          },
          { signal: call.signal, headers: { prefer: 'respond-async' } },
        )
        .catch((err: unknown) => {
          // After an abort or a timeout the run already failed with the reason that matters.
          if (run.settled) return undefined;
          // A connection lost after Cog took the request leaves a prediction nobody listens to.
          if (!startedNothing(err)) client.cancel(id);
          throw err;
        });
      if (answer) run.apply(asPrediction(answer.body));
      return await run.result;
    } catch (err) {
      run.fail(err instanceof BackendError ? err : new BackendError('the Cog run failed', { cause: err }));
      throw err;
    } finally {
      clearTimeout(deadline);
      clearTimeout(pollTimer);
      ctx.signal.removeEventListener('abort', onAbort);
      call.abort();
      call.release();
      untrack();
      if (this.runs.get(id) === run) this.runs.delete(id);
    }
  }

  /** Polls GET /predictions/{id} until the run settles; failures are retried until the deadline. */
  private poll(id: string, run: AsyncRun, signal: AbortSignal, intervalMs: number): void {
    const tick = async (): Promise<void> => {
      while (!run.settled && !signal.aborted) {
        const answer = await this.client
          .send('GET', `/predictions/${encodeURIComponent(id)}`, undefined, { signal })
          .catch((err: unknown) => err);
        if (answer instanceof CogHttpError && answer.status === 404) {
          // The server finished and forgot it, and the webhook saying how was lost: run it again.
          run.fail(new BackendError('the Cog server no longer knows the prediction', { retryable: true }));
          return;
        }
        if (!(answer instanceof Error) && isCogAnswer(answer)) run.apply(asPrediction(answer.body));
        if (!run.settled) await delay(intervalMs, signal);
      }
    };
    void tick();
  }

  private webhookUrl(callbackUrl: string, predictionId: string, nonce: string): string {
    const url = new URL(callbackUrl);
    url.pathname = `${url.pathname.replace(/\/+$/, '')}/${encodeURIComponent(predictionId)}`;
    url.searchParams.set('token', this.token(predictionId, nonce));
    return url.toString();
  }

  /** HMAC of the prediction id and the run's nonce: only this process can mint it, per attempt. */
  private token(predictionId: string, nonce: string): string {
    return createHmac('sha256', this.webhookKey).update(`${predictionId}.${nonce}`).digest('base64url');
  }
}

/** The state of a run driven by webhooks (or polls), turning cumulative snapshots into events. */
class AsyncRun {
  readonly nonce = randomBytes(9).toString('base64url');
  readonly result: Promise<BackendResult>;
  settled = false;
  lastHeardAt = Date.now();
  private resolve!: (result: BackendResult) => void;
  private reject!: (error: unknown) => void;
  private logLength = 0;
  private started = false;
  private readonly logs: LogProgress;
  private readonly pieces: OutputPieces;

  constructor(
    private readonly events: BackendEvents,
    private readonly shape: OutputShape,
  ) {
    this.logs = new LogProgress(events);
    this.pieces = new OutputPieces(shape.stream, shape.schema);
    this.result = new Promise<BackendResult>((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
    // Rejections are observed through `result` by run(); this keeps a settled-early one from being unhandled.
    this.result.catch(() => undefined);
  }

  heard(): void {
    this.lastHeardAt = Date.now();
  }

  apply(prediction: CogPrediction): void {
    if (this.settled) return;
    const status = prediction.status;
    // Any word from Cog about the prediction (the 202, the start webhook: both say `starting`) means the
    // server has it and has started it: Gantry reports `processing` from then on, as a synchronous run does.
    if (!this.started) {
      this.started = true;
      this.events.processing();
    }
    // Logs are cumulative: report what is new. An older, shorter snapshot (the 202 answer arriving after
    // a webhook) has nothing new.
    if (typeof prediction.logs === 'string' && prediction.logs.length > this.logLength) {
      const fresh = prediction.logs.slice(this.logLength);
      this.logLength = prediction.logs.length;
      this.logs.report(fresh);
    }
    for (const piece of this.pieces.fresh(prediction.output)) this.events.output(piece);
    if (status === 'succeeded' || status === 'failed' || status === 'canceled') {
      try {
        this.settle(finalResult(prediction, this.shape));
      } catch (err) {
        this.fail(err);
      }
    }
  }

  fail(error: unknown): void {
    if (this.settled) return;
    this.settled = true;
    this.reject(error);
  }

  private settle(result: BackendResult): void {
    if (this.settled) return;
    this.settled = true;
    this.resolve(result);
  }
}

function tokensEqual(given: string, expected: string): boolean {
  const a = Buffer.from(given);
  const b = Buffer.from(expected);
  return a.length === b.length && timingSafeEqual(a, b);
}

function delay(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}
