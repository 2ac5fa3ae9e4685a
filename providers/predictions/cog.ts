/**
 * A prediction backend for one Cog server (a model container built with replicate/cog).
 *
 * Cog's HTTP API, as its server implements it (python/cog/server/http.py, crates/coglet):
 * - `PUT /predictions/{id}` creates a prediction idempotently: a retry with the same id while it still
 *   runs answers 202 with its current state instead of starting a second one.
 * - Without `Prefer: respond-async` the answer waits for the final prediction (200, also for `failed`).
 *   With it, Cog answers 202 at once and reports through `webhook`, filtered by `webhook_events_filter`
 *   (start, output, logs, completed). Each webhook is the whole prediction: `logs` and a list `output`
 *   are cumulative, and output/logs webhooks are throttled (500 ms by default), so one webhook may carry
 *   several new lines.
 * - `POST /predictions/{id}/cancel` answers 200 `{}`, or 404 when nothing with that id runs.
 * - 409 `Already running a prediction` when all slots are busy; 422 for invalid input.
 * - Cog has no `GET /predictions/{id}` ("polling is not supported"): only a server whose /openapi.json
 *   lists one is polled when webhooks go missing; any other run simply times out.
 *
 * The parts: cog/client.ts (HTTP and errors), cog/sync.ts and cog/async.ts (the two ways to run),
 * cog/outputs.ts (a finished prediction as a result), cog/schema.ts (what /openapi.json tells a run).
 */
import { randomBytes } from 'node:crypto';
import { AsyncRuns } from './cog/async.js';
import { CogClient } from './cog/client.js';
import type { OutputShape } from './cog/outputs.js';
import { outputSchemaOf, supportsPolling } from './cog/schema.js';
import { runSync } from './cog/sync.js';
import { schemasFromCogOpenApi } from './cog-openapi.js';
import { canceledError, raceAbort } from './common.js';
import {
  type BackendConfig,
  type BackendContext,
  BackendError,
  type BackendJob,
  type BackendResult,
  type JsonObject,
  type PredictionBackend,
} from './types.js';

export { COG_WEBHOOK_EVENTS } from './cog/async.js';
export { CogHttpError, type CogPrediction, type CogStatus } from './cog/client.js';

export interface CogBackendOptions {
  /** Key of the webhook tokens; by default 32 random bytes per process (webhooks come back to this process). */
  webhookSecret?: string | Uint8Array;
  /** Async mode: how long without any webhook before polling starts (where the server can be polled). */
  webhookSilenceMs?: number;
  /** Connections to the Cog server; one per concurrent prediction plus cancels. */
  maxConnections?: number;
}

const DEFAULT_WEBHOOK_SILENCE_MS = 30_000;
const DEFAULT_POLL_INTERVAL_MS = 1_000;

export class CogBackend implements PredictionBackend {
  readonly kind = 'cog';
  readonly name: string;
  private readonly client: CogClient;
  private readonly asyncRuns: AsyncRuns;
  private readonly callbackUrl: string | (() => string) | undefined;
  private readonly timeoutMs: number;
  private readonly pollIntervalMs: number;
  private readonly webhookSilenceMs: number;
  /** Every run in flight, so close() can stop them. */
  private readonly active = new Set<(error: BackendError) => void>();
  private closing: Promise<void> | undefined;

  constructor(config: BackendConfig, options: CogBackendOptions = {}) {
    if (!config.baseUrl) throw new Error(`prediction backend ${config.name}: a cog backend needs baseUrl`);
    this.name = config.name;
    this.client = new CogClient(config.baseUrl, options.maxConnections ?? 16);
    this.callbackUrl = config.callbackUrl;
    this.timeoutMs = config.timeoutMs;
    this.pollIntervalMs = config.pollIntervalMs ?? DEFAULT_POLL_INTERVAL_MS;
    this.webhookSilenceMs = options.webhookSilenceMs ?? DEFAULT_WEBHOOK_SILENCE_MS;
    const key =
      typeof options.webhookSecret === 'string'
        ? Buffer.from(options.webhookSecret, 'utf8')
        : (options.webhookSecret ?? randomBytes(32));
    this.asyncRuns = new AsyncRuns(this.client, key);
  }

  async run(job: BackendJob, ctx: BackendContext): Promise<BackendResult> {
    if (this.closing) throw new BackendError('the Cog backend is closed', { retryable: true });
    // The schema tells files from text, a concatenated text stream from a list, and whether polling
    // exists; it is read once, and a server that cannot serve it still gets the prediction request.
    const doc = await raceAbort(
      this.client.loadOpenApi().catch(() => undefined),
      ctx.signal,
      () => canceledError(ctx.signal),
    );
    const shape: OutputShape = {
      schema: outputSchemaOf(doc) ?? job.outputSchema,
      stream: job.stream,
      origin: this.client.origin,
    };
    const track = (stop: (error: BackendError) => void): (() => void) => {
      this.active.add(stop);
      return () => this.active.delete(stop);
    };
    if (this.callbackUrl === undefined) {
      return runSync(this.client, job, ctx, shape, { timeoutMs: this.timeoutMs, track });
    }
    return this.asyncRuns.run(job, ctx, shape, {
      callbackUrl: typeof this.callbackUrl === 'function' ? this.callbackUrl() : this.callbackUrl,
      pollable: supportsPolling(doc),
      timeoutMs: this.timeoutMs,
      pollIntervalMs: this.pollIntervalMs,
      webhookSilenceMs: this.webhookSilenceMs,
      track,
    });
  }

  /**
   * Gantry's webhook route hands every Cog webhook here. False when the token is not the one this
   * process gave for that prediction's current run, when no run waits for it (finished, timed out,
   * unknown) or when the payload is not a prediction: the route should then answer 404, which Cog does
   * not retry.
   */
  receiveWebhook(predictionId: string, token: string, payload: unknown): boolean {
    return this.asyncRuns.receive(predictionId, token, payload);
  }

  /** True when a run waits for webhooks of this prediction with this token: checked before the body is read. */
  expectsWebhook(predictionId: string, token: string): boolean {
    return this.asyncRuns.expects(predictionId, token);
  }

  /** Input and Output of the server's /openapi.json, `$ref`s inlined; throws when the document has none. */
  async schemas(_model: string): Promise<{ input?: JsonObject; output?: JsonObject } | undefined> {
    // A Cog server serves exactly one model, whatever the catalog calls it.
    return schemasFromCogOpenApi(await this.client.loadOpenApi());
  }

  /** Fails the runs in flight (retryable: another worker may take them) after canceling them on the server. */
  close(): Promise<void> {
    if (!this.closing) {
      const error = new BackendError('the Cog backend is closing', { retryable: true });
      for (const stop of [...this.active]) stop(error);
      // Waits for the cancels just sent; every other request has been aborted.
      this.closing = this.client.close();
    }
    return this.closing;
  }
}
