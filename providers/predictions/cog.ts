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
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { Pool } from 'undici';
import { LinkedAbort } from '../abort.js';
import { schemasFromCogOpenApi } from './cog-openapi.js';
import {
  type BackendConfig,
  type BackendContext,
  BackendError,
  type BackendEvents,
  type BackendJob,
  type BackendOutput,
  type BackendResult,
  type JsonObject,
  type PredictionBackend,
} from './types.js';

/** Every event, so logs and outputs arrive while the model works (Cog's default is the same list). */
export const COG_WEBHOOK_EVENTS = ['start', 'output', 'logs', 'completed'] as const;

export type CogStatus = 'starting' | 'processing' | 'succeeded' | 'failed' | 'canceled';

/** A Cog prediction object as its answers and webhooks carry it; every field may be missing. */
export interface CogPrediction {
  id?: string;
  input?: JsonObject;
  output?: unknown;
  status?: CogStatus;
  error?: string | null;
  logs?: string;
  metrics?: { predict_time?: number } & JsonObject;
  started_at?: string;
  completed_at?: string;
}

export interface CogBackendOptions {
  /** Key of the webhook tokens; by default 32 random bytes per process (webhooks come back to this process). */
  webhookSecret?: string | Uint8Array;
  /** Async mode: how long without any webhook before polling starts (where the server can be polled). */
  webhookSilenceMs?: number;
  /** Connections to the Cog server; one per concurrent prediction plus cancels. */
  maxConnections?: number;
}

/** Short calls (cancel, openapi.json, polls) must not wait as long as a prediction may run. */
const CONTROL_TIMEOUT_MS = 10_000;
const DEFAULT_WEBHOOK_SILENCE_MS = 30_000;
const DEFAULT_POLL_INTERVAL_MS = 1_000;
/** Cog's server (uvicorn) closes idle connections after 5 s: reusing one just then fails the request. */
const KEEP_ALIVE_MS = 4_000;
const MAX_ERROR_TEXT = 300;

interface CogAnswer {
  status: number;
  body: unknown;
}

export class CogBackend implements PredictionBackend {
  readonly kind = 'cog';
  readonly name: string;
  private readonly pool: Pool;
  private readonly pathPrefix: string;
  private readonly callbackUrl: string | (() => string) | undefined;
  private readonly timeoutMs: number;
  private readonly pollIntervalMs: number;
  private readonly webhookSilenceMs: number;
  private readonly webhookKey: Uint8Array;
  /** Runs waiting for webhooks, by prediction id. */
  private readonly asyncRuns = new Map<string, AsyncRun>();
  /** Every run in flight, so close() can stop them. */
  private readonly active = new Set<(error: BackendError) => void>();
  private openApi: Promise<unknown> | undefined;
  private closing: Promise<void> | undefined;

  constructor(config: BackendConfig, options: CogBackendOptions = {}) {
    if (!config.baseUrl) throw new Error(`prediction backend ${config.name}: a cog backend needs baseUrl`);
    const url = new URL(config.baseUrl);
    this.name = config.name;
    this.pathPrefix = url.pathname.replace(/\/+$/, '');
    this.callbackUrl = config.callbackUrl;
    this.timeoutMs = config.timeoutMs;
    this.pollIntervalMs = config.pollIntervalMs ?? DEFAULT_POLL_INTERVAL_MS;
    this.webhookSilenceMs = options.webhookSilenceMs ?? DEFAULT_WEBHOOK_SILENCE_MS;
    this.webhookKey =
      typeof options.webhookSecret === 'string'
        ? Buffer.from(options.webhookSecret, 'utf8')
        : (options.webhookSecret ?? randomBytes(32));
    this.pool = new Pool(url.origin, {
      connections: options.maxConnections ?? 16,
      connect: { timeout: CONTROL_TIMEOUT_MS },
      headersTimeout: CONTROL_TIMEOUT_MS,
      bodyTimeout: CONTROL_TIMEOUT_MS,
      keepAliveTimeout: KEEP_ALIVE_MS,
      keepAliveMaxTimeout: KEEP_ALIVE_MS,
    });
  }

  async run(job: BackendJob, ctx: BackendContext): Promise<BackendResult> {
    if (this.closing) throw new BackendError('the Cog backend is closed', { retryable: true });
    // The schema tells how to assemble outputs (concatenated text streams) and whether polling exists;
    // it is read once, and a server that cannot serve it still gets the prediction request.
    const doc = await untilAborted(
      this.loadOpenApi().catch(() => undefined),
      ctx.signal,
    );
    const shape: OutputShape = { concatenate: outputConcatenates(doc), stream: job.stream };
    return this.callbackUrl === undefined
      ? this.runSync(job, ctx, shape)
      : this.runAsync(
          job,
          ctx,
          shape,
          typeof this.callbackUrl === 'function' ? this.callbackUrl() : this.callbackUrl,
          supportsPolling(doc),
        );
  }

  /**
   * Gantry's webhook route hands every Cog webhook here. False when the token is not the one this
   * process gave for that prediction's current run, when no run waits for it (finished, timed out,
   * unknown) or when the payload is not a prediction: the route should then answer 404, which Cog does
   * not retry.
   */
  receiveWebhook(predictionId: string, token: string, payload: unknown): boolean {
    const run = this.asyncRuns.get(predictionId);
    if (!run || !this.expectsWebhook(predictionId, token)) return false;
    if (!isObject(payload)) return false;
    if (typeof payload.id === 'string' && payload.id !== predictionId) return false;
    run.heard();
    run.apply(payload as CogPrediction);
    return true;
  }

  /** True when a run waits for webhooks of this prediction with this token: checked before the body is read. */
  expectsWebhook(predictionId: string, token: string): boolean {
    const run = this.asyncRuns.get(predictionId);
    return run !== undefined && tokensEqual(token, this.webhookToken(predictionId, run.nonce));
  }

  /** Input and Output of the server's /openapi.json, `$ref`s inlined; throws when the document has none. */
  async schemas(_model: string): Promise<{ input?: JsonObject; output?: JsonObject } | undefined> {
    // A Cog server serves exactly one model, whatever the catalog calls it.
    return schemasFromCogOpenApi(await this.loadOpenApi());
  }

  /** Fails the runs in flight (retryable: another worker may take them) after canceling them on the server. */
  close(): Promise<void> {
    if (!this.closing) {
      const error = new BackendError('the Cog backend is closing', { retryable: true });
      for (const stop of [...this.active]) stop(error);
      // Waits for the cancels just sent; every other request has been aborted.
      this.closing = this.pool.close();
    }
    return this.closing;
  }

  // ---- synchronous mode ----

  private async runSync(job: BackendJob, ctx: BackendContext, shape: OutputShape): Promise<BackendResult> {
    const id = job.predictionId;
    const call = new LinkedAbort(ctx.signal, this.timeoutMs);
    let stoppedBy: BackendError | undefined;
    const stop = (error: BackendError): void => {
      stoppedBy = error;
      call.abort();
    };
    this.active.add(stop);
    let answer: CogAnswer;
    try {
      answer = await this.send(
        'PUT',
        `/predictions/${encodeURIComponent(id)}`,
        { id, input: job.input },
        // The answer comes when the model is done: only the run's own deadline applies.
        { signal: call.signal, waitForModel: true },
      );
    } catch (err) {
      // An error status means nothing runs. A cut request (abort, deadline, lost connection) may leave it
      // running: Python Cog goes on with a synchronous prediction whose client left.
      if (call.signal.aborted || !startedNothing(err)) this.cancelRemote(id);
      if (!call.signal.aborted) throw err;
      if (stoppedBy) throw stoppedBy;
      if (call.timedOut) throw timeoutError(this.timeoutMs);
      throw canceledError(ctx.signal);
    } finally {
      call.release();
      this.active.delete(stop);
    }
    if (answer.status === 202) {
      // Cog answers 202 to a PUT whose id still runs (an earlier attempt's): there is nothing to wait on.
      this.cancelRemote(id);
      throw new BackendError('the Cog server is still running an earlier attempt of this prediction', {
        retryable: true,
      });
    }
    const prediction = asPrediction(answer.body);
    // A synchronous answer only comes once the model ran: report it started, then what it printed.
    if (isStatus(prediction.status) && prediction.status !== 'starting') ctx.events.processing();
    if (typeof prediction.logs === 'string' && prediction.logs !== '')
      reportLogs(ctx.events, prediction.logs);
    return finalResult(prediction, shape);
  }

  // ---- asynchronous mode ----

  private async runAsync(
    job: BackendJob,
    ctx: BackendContext,
    shape: OutputShape,
    callbackUrl: string,
    pollable: boolean,
  ): Promise<BackendResult> {
    const id = job.predictionId;
    const run = new AsyncRun(ctx.events, shape);
    // A retried attempt reuses the prediction id: its webhooks must not reach the previous attempt.
    this.asyncRuns.get(id)?.fail(new BackendError('superseded by a newer attempt', { retryable: true }));
    // Registered before the PUT: Cog sends the start webhook before it answers 202.
    this.asyncRuns.set(id, run);
    const call = new LinkedAbort(ctx.signal);
    const stop = (error: BackendError): void => {
      this.cancelRemote(id);
      run.fail(error);
      // A PUT still waiting for its answer is cut too (it sees the run settled and stays quiet).
      call.abort();
    };
    this.active.add(stop);

    const onAbort = (): void => stop(canceledError(ctx.signal));
    ctx.signal.addEventListener('abort', onAbort, { once: true });
    const deadline = setTimeout(() => stop(timeoutError(this.timeoutMs)), this.timeoutMs);
    let pollTimer: NodeJS.Timeout | undefined;
    const watchSilence = (): void => {
      pollTimer = setTimeout(() => {
        if (run.settled) return;
        if (Date.now() - run.lastHeardAt < this.webhookSilenceMs) return watchSilence();
        this.poll(id, run, call.signal);
      }, this.webhookSilenceMs);
    };
    if (pollable) watchSilence();

    try {
      const answer = await this.send(
        'PUT',
        `/predictions/${encodeURIComponent(id)}`,
        {
          id,
          input: job.input,
          webhook: this.webhookUrl(callbackUrl, id, run.nonce),
          webhook_events_filter: COG_WEBHOOK_EVENTS,
        },
        { signal: call.signal, headers: { prefer: 'respond-async' } },
      ).catch((err: unknown) => {
        // After an abort or a timeout the run already failed with the reason that matters.
        if (run.settled) return undefined;
        // A connection lost after Cog took the request leaves a prediction nobody listens to.
        if (!startedNothing(err)) this.cancelRemote(id);
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
      this.active.delete(stop);
      if (this.asyncRuns.get(id) === run) this.asyncRuns.delete(id);
    }
  }

  /** Polls GET /predictions/{id} until the run settles; failures are retried until the deadline. */
  private poll(id: string, run: AsyncRun, signal: AbortSignal): void {
    const tick = async (): Promise<void> => {
      while (!run.settled && !signal.aborted) {
        const answer = await this.send('GET', `/predictions/${encodeURIComponent(id)}`, undefined, {
          signal,
        }).catch((err: unknown) => err);
        if (answer instanceof CogHttpError && answer.status === 404) {
          // The server finished and forgot it, and the webhook saying how was lost: run it again.
          run.fail(new BackendError('the Cog server no longer knows the prediction', { retryable: true }));
          return;
        }
        if (!(answer instanceof Error) && isCogAnswer(answer)) run.apply(asPrediction(answer.body));
        if (!run.settled) await delay(this.pollIntervalMs, signal);
      }
    };
    void tick();
  }

  private webhookUrl(callbackUrl: string, predictionId: string, nonce: string): string {
    const url = new URL(callbackUrl);
    url.pathname = `${url.pathname.replace(/\/+$/, '')}/${encodeURIComponent(predictionId)}`;
    url.searchParams.set('token', this.webhookToken(predictionId, nonce));
    return url.toString();
  }

  /** HMAC of the prediction id and the run's nonce: only this process can mint it, per attempt. */
  private webhookToken(predictionId: string, nonce: string): string {
    return createHmac('sha256', this.webhookKey).update(`${predictionId}.${nonce}`).digest('base64url');
  }

  // ---- HTTP ----

  /** Best effort: a cancel that fails leaves a prediction Cog finishes on its own. */
  private cancelRemote(predictionId: string): void {
    this.send('POST', `/predictions/${encodeURIComponent(predictionId)}/cancel`, undefined, {
      signal: new AbortController().signal,
    }).catch(() => undefined);
  }

  /** Shared by every caller, so no caller's signal cuts it: the control timeouts bound it. */
  private loadOpenApi(): Promise<unknown> {
    if (!this.openApi) {
      const loading = this.send('GET', '/openapi.json', undefined, {
        signal: new AbortController().signal,
      }).then((a) => a.body);
      // A failure is not cached: the next run or schemas() call asks again.
      loading.catch(() => {
        if (this.openApi === loading) this.openApi = undefined;
      });
      this.openApi = loading;
    }
    return this.openApi;
  }

  /**
   * One request to the Cog server, answered with its JSON body. Statuses that mean the prediction did
   * not run (connection refused, 409 busy, 5xx) are retryable BackendErrors; other 4xx are final.
   */
  private async send(
    method: 'GET' | 'POST' | 'PUT',
    path: string,
    body: JsonObject | undefined,
    options: { signal: AbortSignal; headers?: Record<string, string>; waitForModel?: boolean },
  ): Promise<CogAnswer> {
    let text: string;
    let status: number;
    try {
      const res = await this.pool.request({
        method,
        path: this.pathPrefix + path,
        headers: {
          accept: 'application/json',
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
          ...options.headers,
        },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: options.signal,
        ...(options.waitForModel ? { headersTimeout: 0 } : {}),
      });
      status = res.statusCode;
      text = await res.body.text();
    } catch (err) {
      if (options.signal.aborted) throw err;
      const code = (err as { code?: unknown }).code;
      throw new BackendError(
        `could not reach the Cog server (${typeof code === 'string' ? code : 'error'})`,
        {
          retryable: true,
          cause: err,
        },
      );
    }
    let parsed: unknown;
    try {
      parsed = text === '' ? undefined : (JSON.parse(text) as unknown);
    } catch (cause) {
      parsed = undefined;
      if (status < 400) {
        throw new BackendError(`the Cog server answered HTTP ${status} with a body that is not JSON`, {
          cause,
        });
      }
    }
    if (status >= 400) throw statusError(status, parsed);
    return { status, body: parsed };
  }
}

// ---- one asynchronous run ----

interface OutputShape {
  /** The Output schema says `x-cog-array-display: concatenate`: a list of text pieces is one text. */
  concatenate: boolean;
  /** The caller asked for a stream: new list items are reported as output pieces. */
  stream: boolean;
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
  private outputCount = 0;
  private started = false;

  constructor(
    private readonly events: BackendEvents,
    private readonly shape: OutputShape,
  ) {
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
    if (status !== undefined && status !== 'starting' && !this.started) {
      this.started = true;
      this.events.processing();
    }
    // Logs are cumulative: report what is new. An older, shorter snapshot (the 202 answer arriving after
    // a webhook) has nothing new.
    if (typeof prediction.logs === 'string' && prediction.logs.length > this.logLength) {
      const fresh = prediction.logs.slice(this.logLength);
      this.logLength = prediction.logs.length;
      reportLogs(this.events, fresh);
    }
    if (this.shape.stream && Array.isArray(prediction.output)) {
      for (const item of prediction.output.slice(this.outputCount)) {
        const piece = streamPiece(item);
        if (piece !== undefined) this.events.output(piece);
      }
      this.outputCount = Math.max(this.outputCount, prediction.output.length);
    }
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

// ---- predictions and outputs ----

/** The result of a terminal prediction, or the BackendError it stands for. */
function finalResult(prediction: CogPrediction, shape: OutputShape): BackendResult {
  switch (prediction.status) {
    case 'succeeded': {
      const predictTime = prediction.metrics?.predict_time;
      return {
        outputs: mapCogOutput(prediction.output, { concatenate: shape.concatenate }),
        ...(typeof predictTime === 'number' && Number.isFinite(predictTime) ? { predictTime } : {}),
        ...(typeof prediction.logs === 'string' ? { logs: prediction.logs } : {}),
      };
    }
    case 'failed':
      // Cog's error is the model's exception text: it is what the caller needs to see.
      throw new BackendError(
        truncate(nonEmpty(prediction.error) ?? 'the model failed without an error message'),
        { retryable: false },
      );
    case 'canceled':
      throw new BackendError('the Cog server canceled the prediction', { retryable: false });
    default:
      throw new BackendError(`the Cog server answered a prediction in status ${String(prediction.status)}`, {
        retryable: true,
      });
  }
}

/**
 * Cog's output as Gantry outputs, in order: data: URIs (files, when the server has no upload URL) as
 * bytes, http(s) URLs as URLs, other strings as text; lists are flattened; other JSON values are text.
 * With `concatenate` a list of text pieces (a token stream) is one text.
 */
export function mapCogOutput(output: unknown, options: { concatenate?: boolean } = {}): BackendOutput[] {
  if (output === null || output === undefined) return [];
  const items = Array.isArray(output) ? output.flat(Number.POSITIVE_INFINITY) : [output];
  if (options.concatenate && items.every((i) => typeof i === 'string' && classify(i) === 'text')) {
    return [{ kind: 'text', text: items.join('') }];
  }
  return items.map((item, index): BackendOutput => {
    if (typeof item !== 'string') return { kind: 'text', text: JSON.stringify(item) };
    switch (classify(item)) {
      case 'data': {
        const file = parseDataUri(item);
        if (file)
          return { kind: 'bytes', ...file, name: `output_${index}.${extensionFor(file.contentType)}` };
        return { kind: 'text', text: item };
      }
      case 'url':
        return { kind: 'url', url: item };
      default:
        return { kind: 'text', text: item };
    }
  });
}

function classify(value: string): 'data' | 'url' | 'text' {
  if (value.startsWith('data:')) return 'data';
  if (/^https?:\/\/\S+$/i.test(value) && URL.canParse(value)) return 'url';
  return 'text';
}

/** `data:[<type>][;param...][;base64],<data>` (RFC 2397); undefined when malformed. */
function parseDataUri(uri: string): { data: Buffer; contentType: string } | undefined {
  const comma = uri.indexOf(',');
  if (comma < 0) return undefined;
  const meta = uri.slice('data:'.length, comma).split(';');
  const base64 = meta.at(-1)?.toLowerCase() === 'base64';
  const contentType = (meta[0] ?? '').trim().toLowerCase() || 'text/plain';
  const payload = uri.slice(comma + 1);
  try {
    const data = base64 ? Buffer.from(payload, 'base64') : Buffer.from(decodeURIComponent(payload), 'utf8');
    return { data, contentType };
  } catch {
    return undefined;
  }
}

const EXTENSIONS: Record<string, string> = {
  'image/png': 'png',
  'image/jpeg': 'jpg',
  'image/webp': 'webp',
  'image/gif': 'gif',
  'image/svg+xml': 'svg',
  'video/mp4': 'mp4',
  'video/webm': 'webm',
  'video/quicktime': 'mov',
  'audio/wav': 'wav',
  'audio/x-wav': 'wav',
  'audio/mpeg': 'mp3',
  'audio/ogg': 'ogg',
  'audio/flac': 'flac',
  'application/json': 'json',
  'text/plain': 'txt',
  'model/gltf-binary': 'glb',
};

function extensionFor(contentType: string): string {
  return EXTENSIONS[contentType] ?? 'bin';
}

/** A new list item as a stream piece: text tokens and URLs; a data: URI is a whole file, not a piece. */
function streamPiece(item: unknown): string | undefined {
  if (typeof item === 'string') return item.startsWith('data:') ? undefined : item;
  if (item === null || item === undefined) return undefined;
  return JSON.stringify(item);
}

/** Reports new log text, and the last tqdm percentage in it (` 45%|████▌     | 45/100`) as progress. */
function reportLogs(events: BackendEvents, text: string): void {
  events.log(text);
  const percent = lastTqdmPercent(text);
  if (percent !== undefined) events.progress(percent);
}

export function lastTqdmPercent(text: string): number | undefined {
  let last: number | undefined;
  for (const match of text.matchAll(/(\d{1,3})%\|/g)) {
    const value = Number(match[1]);
    if (value <= 100) last = value;
  }
  return last;
}

// ---- openapi.json ----

function componentSchemas(doc: unknown): JsonObject | undefined {
  if (!isObject(doc) || !isObject(doc.components)) return undefined;
  const schemas = doc.components.schemas;
  return isObject(schemas) ? schemas : undefined;
}

function outputConcatenates(doc: unknown): boolean {
  const output = componentSchemas(doc)?.Output;
  return isObject(output) && output['x-cog-array-display'] === 'concatenate';
}

/** Cog itself has no GET /predictions/{id}; a server that lists one in its schema can be polled. */
function supportsPolling(doc: unknown): boolean {
  if (!isObject(doc) || !isObject(doc.paths)) return false;
  const item = doc.paths['/predictions/{prediction_id}'];
  return isObject(item) && isObject(item.get);
}

// ---- errors ----

/** A Cog answer with an error status; `status` lets the poller tell a forgotten prediction (404). */
export class CogHttpError extends BackendError {
  readonly status: number;
  constructor(status: number, message: string, retryable: boolean) {
    super(message, { retryable });
    this.status = status;
  }
}

function statusError(status: number, body: unknown): CogHttpError {
  const detail = errorDetail(body);
  const suffix = detail ? `: ${detail}` : '';
  // 409: every slot is busy, nothing ran. 5xx: the server broke before answering (coglet's 503 is
  // "setup has not finished yet"). Both may go to another attempt; other 4xx would fail the same way.
  if (status === 409) return new CogHttpError(status, `the Cog server is busy${suffix}`, true);
  if (status === 422) return new CogHttpError(status, `the Cog server rejected the input${suffix}`, false);
  return new CogHttpError(
    status,
    `the Cog server answered HTTP ${status}${suffix}`,
    status >= 500 || status === 429,
  );
}

/**
 * The message of a Cog error body: FastAPI's `{detail: string}` or `{detail: [{loc, msg}]}` (validation;
 * only the field path and message: pydantic also echoes the input value, which may hold a secret), or
 * coglet's `{error}`.
 */
function errorDetail(body: unknown): string | undefined {
  if (!isObject(body)) return undefined;
  const { detail, error } = body;
  if (typeof detail === 'string') return truncate(detail);
  if (Array.isArray(detail)) {
    const parts = detail.filter(isObject).map((d) => {
      const loc = Array.isArray(d.loc) ? d.loc.filter((p) => p !== 'body' && p !== 'input').join('.') : '';
      const msg = typeof d.msg === 'string' ? d.msg : 'invalid';
      return loc ? `${loc}: ${msg}` : msg;
    });
    return parts.length > 0 ? truncate(parts.join('; ')) : undefined;
  }
  if (typeof error === 'string') return truncate(error);
  return undefined;
}

/** Errors that prove the prediction never started: Cog answered the create request with an error status. */
function startedNothing(err: unknown): boolean {
  return err instanceof CogHttpError;
}

function timeoutError(timeoutMs: number): BackendError {
  return new BackendError(`the prediction did not finish within ${Math.round(timeoutMs / 1000)} s`, {
    retryable: false,
  });
}

function canceledError(signal: AbortSignal): BackendError {
  return new BackendError('the prediction was canceled', { retryable: false, cause: signal.reason });
}

// ---- small helpers ----

function asPrediction(body: unknown): CogPrediction {
  if (!isObject(body)) throw new BackendError('the Cog server answered without a prediction object');
  return body as CogPrediction;
}

function isCogAnswer(value: unknown): value is CogAnswer {
  return isObject(value) && typeof value.status === 'number';
}

function isStatus(value: unknown): value is CogStatus {
  return (
    value === 'starting' ||
    value === 'processing' ||
    value === 'succeeded' ||
    value === 'failed' ||
    value === 'canceled'
  );
}

function isObject(value: unknown): value is JsonObject {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

function nonEmpty(value: unknown): string | undefined {
  return typeof value === 'string' && value.trim() !== '' ? value : undefined;
}

function truncate(text: string): string {
  return text.length > MAX_ERROR_TEXT ? `${text.slice(0, MAX_ERROR_TEXT)}…` : text;
}

function tokensEqual(given: string, expected: string): boolean {
  const a = Buffer.from(given);
  const b = Buffer.from(expected);
  return a.length === b.length && timingSafeEqual(a, b);
}

/** `promise`, or a canceled BackendError as soon as `signal` aborts. */
function untilAborted<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(canceledError(signal));
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(canceledError(signal));
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
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
