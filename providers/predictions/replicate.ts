/**
 * A PredictionBackend for Replicate's HTTP API (https://api.replicate.com/v1), and for anything that
 * speaks it. Partner models are paid for by the caller: the caller's own token arrives inside `input`
 * as `replicate_api_key` (or `<provider name>_api_key`, spec 2.2). It is taken out of the input before
 * anything is sent, used as the Bearer token of this one run only (create, polls, cancel), and never
 * appears in an input field, an error message, a log line or a text output.
 *
 * One run: POST the prediction with `Prefer: wait=5` (a fast model answers in that one round trip),
 * then GET it every `pollIntervalMs` until it is terminal. Logs are cumulative on Replicate: only the new
 * tail is reported. `Cancel-After` is set to the run's timeout plus a grace, so Replicate stops billing
 * the caller even if this process dies mid-run; an abort or our own timeout POSTs /cancel at once.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { Pool } from 'undici';
import { LinkedAbort } from '../abort.js';
import { canceledError, isObject, LogProgress, raceAbort } from './common.js';
import { OutputPieces, shapeOutput } from './outputs.js';
import {
  type BackendConfig,
  type BackendContext,
  BackendError,
  type BackendEvents,
  type BackendJob,
  type BackendResult,
  type FileOutput,
  type JsonObject,
  type PredictionBackend,
} from './types.js';

export const DEFAULT_REPLICATE_BASE_URL = 'https://api.replicate.com/v1';
export const DEFAULT_POLL_INTERVAL_MS = 500;
/** `Prefer: wait=n` on create. Short, because an abort during create must wait for it to learn the id. */
export const CREATE_WAIT_SECONDS = 5;
/** Cancel-After = our timeout + this, so Replicate's own deadline only fires when we could not cancel. */
const CANCEL_AFTER_GRACE_SECONDS = 30;
/** Replicate's minimum Cancel-After. */
const CANCEL_AFTER_MIN_SECONDS = 5;
/** Polls that may fail in a row (network, 429, 5xx) before the run gives up on a prediction it started. */
const MAX_POLL_FAILURES = 5;
const CANCEL_TIMEOUT_MS = 10_000;
const MAX_PARTNER_MESSAGE = 500;
/**
 * Replicate serves output files from replicate.delivery and its subdomains and documents that they need
 * the Authorization header. The caller's token is attached to URLs on those hosts (https only) and on the
 * API's own origin (its files API; a self-hosted or fake partner), never to any other host: a model can
 * return any URL, and the token must not travel to a third party.
 */
const DELIVERY_HOST = 'replicate.delivery';
/** Largest answer read from the partner's API (its outputs are URLs; a prediction object is small). */
export const MAX_ANSWER_BYTES = 64 * 1024 * 1024;

type Status = 'starting' | 'processing' | 'succeeded' | 'failed' | 'canceled' | 'aborted';
const TERMINAL = new Set<string>(['succeeded', 'failed', 'canceled', 'aborted']);

/** The fields of Replicate's prediction object this backend reads. */
export interface ReplicatePrediction {
  id: string;
  status: Status | string;
  output?: unknown;
  error?: unknown;
  logs?: string | null;
  started_at?: string | null;
  metrics?: { predict_time?: unknown } | null;
}

/** `owner/name` runs the model's official endpoint; `owner/name:version` pins a version. */
export interface ModelTarget {
  owner: string;
  name: string;
  version?: string;
}

interface PartnerAnswer {
  status: number;
  headers: IncomingHttpHeaders;
  body: unknown;
}

export class ReplicateBackend implements PredictionBackend {
  readonly kind = 'replicate';
  readonly name: string;
  private readonly pool: Pool;
  private readonly origin: string;
  private readonly pathPrefix: string;
  private readonly defaultToken: string | undefined;
  private readonly timeoutMs: number;
  private readonly pollIntervalMs: number;
  /** Input fields that may hold the caller's key, the provider's own name first. */
  private readonly keyFields: string[];
  /** Cancels still in flight after their run rejected; close() lets them finish. */
  private readonly pendingCancels = new Set<Promise<void>>();

  constructor(config: BackendConfig) {
    this.name = config.name;
    const url = new URL(config.baseUrl ?? DEFAULT_REPLICATE_BASE_URL);
    this.origin = url.origin;
    this.pathPrefix = url.pathname.replace(/\/+$/, '');
    this.defaultToken = config.apiKey || undefined;
    this.timeoutMs = config.timeoutMs;
    this.pollIntervalMs =
      config.pollIntervalMs && config.pollIntervalMs > 0 ? config.pollIntervalMs : DEFAULT_POLL_INTERVAL_MS;
    this.keyFields = partnerKeyFields(config.name);
    this.pool = new Pool(this.origin, {
      connections: 32,
      connect: { timeout: 10_000 },
      // A create holds the response for up to CREATE_WAIT_SECONDS before its headers.
      headersTimeout: (CREATE_WAIT_SECONDS + 30) * 1000,
      bodyTimeout: 30_000,
      keepAliveTimeout: 30_000,
    });
  }

  async run(job: BackendJob, ctx: BackendContext): Promise<BackendResult> {
    const { input, token } = takePartnerKey(job.input, this.keyFields);
    const bearer = token ?? this.defaultToken;
    if (bearer === undefined) {
      throw new BackendError('a replicate_api_key is required in input', { retryable: false });
    }
    if (!/^[\x21-\x7e]+$/.test(bearer)) {
      throw new BackendError('the replicate_api_key is not a valid token', { retryable: false });
    }
    const target = parseModel(job.model);
    if (ctx.signal.aborted) throw canceledError(ctx.signal);

    const run = new LinkedAbort(ctx.signal, this.timeoutMs);
    // The create is not tied to the run's signal: cut off mid-way, it would leave a prediction running
    // (and billed) whose id we never learn. On abort the run rejects at once; the create finishes in the
    // background and its prediction is canceled.
    const created = this.create(target, input, bearer);
    let predictionId: string | undefined;
    let terminal = false;
    try {
      let prediction = await raceAbort(created, run.signal);
      predictionId = prediction.id;
      const reporter = new RunReporter(ctx.events, new OutputPieces(job.stream, job.outputSchema), bearer);
      reporter.update(prediction);
      let failures = 0;
      while (!TERMINAL.has(prediction.status)) {
        await sleep(this.pollIntervalMs, undefined, { signal: run.signal });
        try {
          prediction = await this.get(prediction.id, bearer, run.signal);
          failures = 0;
        } catch (err) {
          if (run.signal.aborted || !(err instanceof BackendError) || !err.retryable) throw err;
          // Not retryable once given up: the model may have run, and a retry would bill the caller twice.
          if (++failures >= MAX_POLL_FAILURES) {
            throw new BackendError(`${this.name} could not be polled: ${err.message}`, { retryable: false });
          }
          continue;
        }
        reporter.update(prediction);
      }
      terminal = true;
      return this.finish(prediction, bearer, job.outputSchema);
    } catch (err) {
      // Whatever ended the run early, a prediction still running on the partner is stopped.
      if (predictionId !== undefined && !terminal) this.cancelInBackground(predictionId, bearer);
      if (!run.signal.aborted) throw err;
      if (predictionId === undefined) {
        created.then(
          (prediction) => this.cancelInBackground(prediction.id, bearer),
          () => undefined,
        );
      }
      if (run.timedOut) {
        throw new BackendError(`${this.name} prediction timed out after ${formatSeconds(this.timeoutMs)}`, {
          retryable: false,
        });
      }
      throw canceledError(ctx.signal);
    } finally {
      run.release();
    }
  }

  async close(): Promise<void> {
    await Promise.allSettled([...this.pendingCancels]);
    await this.pool.close();
  }

  private async create(target: ModelTarget, input: JsonObject, token: string): Promise<ReplicatePrediction> {
    const path =
      target.version === undefined
        ? `/models/${encodeURIComponent(target.owner)}/${encodeURIComponent(target.name)}/predictions`
        : '/predictions';
    const body: JsonObject = target.version === undefined ? { input } : { version: target.version, input };
    const cancelAfter = Math.max(
      CANCEL_AFTER_MIN_SECONDS,
      Math.ceil(this.timeoutMs / 1000) + CANCEL_AFTER_GRACE_SECONDS,
    );
    const answer = await this.send('POST', path, token, undefined, body, {
      prefer: `wait=${CREATE_WAIT_SECONDS}`,
      'cancel-after': `${cancelAfter}s`,
    });
    if (answer.status >= 300) throw this.statusError(answer, token, `${target.owner}/${target.name}`);
    return this.readPrediction(answer.body, token);
  }

  private async get(id: string, token: string, signal: AbortSignal): Promise<ReplicatePrediction> {
    const answer = await this.send('GET', `/predictions/${encodeURIComponent(id)}`, token, signal);
    if (answer.status >= 300) throw this.statusError(answer, token);
    return this.readPrediction(answer.body, token);
  }

  /** Best effort: the run has already rejected, so a failure here has nobody to report to. */
  private cancelInBackground(id: string, token: string): void {
    const pending = this.send(
      'POST',
      `/predictions/${encodeURIComponent(id)}/cancel`,
      token,
      AbortSignal.timeout(CANCEL_TIMEOUT_MS),
    ).then(
      () => undefined,
      () => undefined,
    );
    this.pendingCancels.add(pending);
    void pending.finally(() => this.pendingCancels.delete(pending));
  }

  private finish(
    prediction: ReplicatePrediction,
    token: string,
    schema: JsonObject | undefined,
  ): BackendResult {
    const partner = this.name;
    switch (prediction.status) {
      case 'succeeded': {
        // The output keeps its shape (outputs.ts); file URLs on Replicate's hosts get the caller's token.
        const result: BackendResult = {
          outputs: [],
          output: shapeOutput(prediction.output, schema, {
            urlFile: (url) => this.urlFile(url, token),
            ownUrl: (url) => this.needsToken(url.href),
            text: (value) => redact(value, token),
          }),
        };
        const predictTime = prediction.metrics?.predict_time;
        if (typeof predictTime === 'number' && Number.isFinite(predictTime)) result.predictTime = predictTime;
        if (typeof prediction.logs === 'string') result.logs = redact(prediction.logs, token);
        return result;
      }
      case 'failed': {
        const reason = partnerText(prediction.error, token);
        throw new BackendError(reason || `${partner} prediction failed`, { retryable: false });
      }
      case 'aborted':
        // Replicate's deadline passed before the model started: nothing ran, so another try is fair.
        throw new BackendError(`${partner} gave up on the prediction before it started`, { retryable: true });
      default:
        throw new BackendError(`${partner} canceled the prediction`, { retryable: false });
    }
  }

  private urlFile(url: string, token: string): FileOutput {
    return this.needsToken(url)
      ? { kind: 'url', url, headers: { authorization: `Bearer ${token}` } }
      : { kind: 'url', url };
  }

  private needsToken(reference: string): boolean {
    const url = new URL(reference);
    if (url.origin === this.origin) return true;
    const host = url.hostname.toLowerCase();
    return url.protocol === 'https:' && (host === DELIVERY_HOST || host.endsWith(`.${DELIVERY_HOST}`));
  }

  private readPrediction(body: unknown, token: string): ReplicatePrediction {
    if (isObject(body) && typeof body.id === 'string' && body.id !== '' && typeof body.status === 'string') {
      return body as unknown as ReplicatePrediction;
    }
    throw new BackendError(`${this.name} sent something that is not a prediction`, {
      retryable: false,
      cause: redact(JSON.stringify(body ?? null).slice(0, MAX_PARTNER_MESSAGE), token),
    });
  }

  /** Maps an HTTP error answer; Replicate's errors are problem+json: `{title, detail, status}`. */
  private statusError(answer: PartnerAnswer, token: string, model?: string): BackendError {
    const { status } = answer;
    const detail = problemText(answer.body, token);
    const suffix = detail ? `: ${detail}` : '';
    if (status === 401 || status === 403) {
      return new BackendError(`${this.name} rejected the API key (HTTP ${status})`, { retryable: false });
    }
    if (status === 429) {
      return new BackendError(`${this.name} is rate limiting this API key (HTTP 429)${suffix}`, {
        retryable: true,
      });
    }
    if (status >= 500) {
      return new BackendError(`${this.name} answered HTTP ${status}${suffix}`, { retryable: true });
    }
    if (status === 404 && model !== undefined) {
      return new BackendError(`${this.name} has no model ${model} (HTTP 404)`, { retryable: false });
    }
    return new BackendError(`${this.name} refused the request (HTTP ${status})${suffix}`, {
      retryable: false,
    });
  }

  private async send(
    method: 'GET' | 'POST',
    path: string,
    token: string,
    signal: AbortSignal | undefined,
    body?: JsonObject,
    extraHeaders: Record<string, string> = {},
  ): Promise<PartnerAnswer> {
    const headers: Record<string, string> = {
      authorization: `Bearer ${token}`,
      accept: 'application/json',
      ...extraHeaders,
    };
    const payload = body === undefined ? undefined : JSON.stringify(body);
    if (payload !== undefined) headers['content-type'] = 'application/json';
    try {
      const res = await this.pool.request({
        method,
        path: this.pathPrefix + path,
        headers,
        body: payload,
        signal,
      });
      const text = await readLimited(res.body, this.name);
      return { status: res.statusCode, headers: res.headers, body: parseJson(text) };
    } catch (err) {
      if (signal?.aborted || err instanceof BackendError) throw err;
      const code = (err as { code?: unknown }).code;
      const why = typeof code === 'string' ? code : (err as Error).message;
      // Only the code or undici's own message: neither carries request headers.
      throw new BackendError(`could not reach ${this.name}: ${redact(why, token)}`, { retryable: true });
    }
  }
}

/**
 * Reports a run's progress from successive snapshots of the prediction: `processing` once the model
 * started, the new tail of the cumulative logs and a percentage found in them, and (for stream callers)
 * the new pieces of a concatenated text output.
 */
class RunReporter {
  private started = false;
  private seenLogs = '';
  private readonly logs: LogProgress;

  constructor(
    private readonly events: BackendEvents,
    private readonly pieces: OutputPieces,
    private readonly token: string,
  ) {
    this.logs = new LogProgress(events);
  }

  update(prediction: ReplicatePrediction): void {
    if (
      !this.started &&
      (prediction.status === 'processing' || (TERMINAL.has(prediction.status) && prediction.started_at))
    ) {
      this.started = true;
      this.events.processing();
    }
    this.reportLogs(prediction.logs);
    for (const piece of this.pieces.fresh(prediction.output)) {
      if (piece !== '') this.events.output(redact(piece, this.token));
    }
  }

  private reportLogs(logs: string | null | undefined): void {
    if (typeof logs !== 'string' || logs === this.seenLogs) return;
    // Cumulative: the new text is what follows what we saw (all of it, if the partner rewrote the log).
    const fresh = logs.startsWith(this.seenLogs) ? logs.slice(this.seenLogs.length) : logs;
    this.seenLogs = logs;
    this.logs.report(redact(fresh, this.token));
  }
}

/** The input fields that may carry the caller's partner key for a provider called `name`. */
export function partnerKeyFields(name: string): string[] {
  const own = `${name.toLowerCase().replace(/[^a-z0-9]+/g, '_')}_api_key`;
  return [...new Set([own, 'replicate_api_key'])];
}

/**
 * Splits the caller's key out of the input. Every candidate field is removed, whatever its value, so a
 * key never reaches the partner as an input field; the first non-empty string wins.
 */
export function takePartnerKey(
  input: JsonObject,
  fields: readonly string[],
): { input: JsonObject; token: string | undefined } {
  const rest: JsonObject = { ...input };
  let token: string | undefined;
  for (const field of fields) {
    const value = rest[field];
    delete rest[field];
    if (token === undefined && typeof value === 'string' && value.trim() !== '') token = value.trim();
  }
  return { input: rest, token };
}

export function parseModel(model: string): ModelTarget {
  const match = /^([A-Za-z0-9._-]+)\/([A-Za-z0-9._-]+)(?::([A-Za-z0-9._-]+))?$/.exec(model);
  if (!match) {
    throw new BackendError(`replicate model ${model} is not owner/name or owner/name:version`, {
      retryable: false,
    });
  }
  const [, owner, name, version] = match as unknown as [string, string, string, string | undefined];
  return version === undefined ? { owner, name } : { owner, name, version };
}

/** The partner's `error` field as text, trimmed, bounded, with the token scrubbed. */
function partnerText(value: unknown, token: string): string {
  if (value === null || value === undefined) return '';
  const text = typeof value === 'string' ? value : JSON.stringify(value);
  return redact(text.trim().slice(0, MAX_PARTNER_MESSAGE), token);
}

function problemText(body: unknown, token: string): string {
  if (!isObject(body)) return '';
  const title = typeof body.title === 'string' ? body.title.trim() : '';
  const detail = typeof body.detail === 'string' ? body.detail.trim() : '';
  const text = title && detail && !detail.startsWith(title) ? `${title}: ${detail}` : detail || title;
  return redact(text.slice(0, MAX_PARTNER_MESSAGE), token);
}

/** Defence in depth: the partner never gets the key as input, but nothing it echoes may carry it either. */
function redact(text: string, token: string): string {
  return token.length >= 4 ? text.split(token).join('[redacted]') : text;
}

function formatSeconds(ms: number): string {
  return `${Number((ms / 1000).toFixed(3))}s`;
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

/** A response body as text, refused (and the connection dropped) past MAX_ANSWER_BYTES. */
async function readLimited(
  body: AsyncIterable<Buffer> & { destroy(): unknown },
  partner: string,
): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    size += chunk.length;
    if (size > MAX_ANSWER_BYTES) {
      body.destroy();
      throw new BackendError(`${partner}'s answer is larger than ${MAX_ANSWER_BYTES} bytes`, {
        retryable: false,
      });
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}
