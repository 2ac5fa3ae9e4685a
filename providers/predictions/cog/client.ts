/**
 * HTTP to one Cog server: requests answered with JSON, the statuses Cog uses mapped onto BackendErrors,
 * the cached /openapi.json and best-effort cancels. Cog's protocol itself is described in ../cog.ts.
 */
import { type Dispatcher, Pool } from 'undici';
import { isObject } from '../common.js';
import { BackendError, type JsonObject } from '../types.js';

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

export interface CogAnswer {
  status: number;
  body: unknown;
}

export interface SendOptions {
  signal: AbortSignal;
  headers?: Record<string, string>;
  /** The answer comes when the model is done: no headers timeout, only the caller's signal. */
  waitForModel?: boolean;
  /** Called once the whole request has been written to the server's connection. */
  onSent?: () => void;
}

/** Short calls (cancel, openapi.json, polls) must not wait as long as a prediction may run. */
const CONTROL_TIMEOUT_MS = 10_000;
/** Cog's server (uvicorn) closes idle connections after 5 s: reusing one just then fails the request. */
const KEEP_ALIVE_MS = 4_000;
const MAX_ERROR_TEXT = 300;
/**
 * Largest answer read from a Cog server (README "Prediction outputs"): a synchronous prediction's answer
 * carries its file outputs inline as data: URIs, so it is bounded like the webhooks that carry them
 * (`server.callback_body_limit_bytes`' default).
 */
export const MAX_REPLY_BYTES = 64 * 1024 * 1024;

export class CogClient {
  private readonly pool: Pool;
  private readonly pathPrefix: string;
  /** The server's origin (scheme, host, port): where its own file URLs point. */
  readonly origin: string;
  private openApi: Promise<unknown> | undefined;

  constructor(baseUrl: string, maxConnections: number) {
    const url = new URL(baseUrl);
    this.pathPrefix = url.pathname.replace(/\/+$/, '');
    this.origin = url.origin;
    this.pool = new Pool(url.origin, {
      connections: maxConnections,
      connect: { timeout: CONTROL_TIMEOUT_MS },
      headersTimeout: CONTROL_TIMEOUT_MS,
      bodyTimeout: CONTROL_TIMEOUT_MS,
      keepAliveTimeout: KEEP_ALIVE_MS,
      keepAliveMaxTimeout: KEEP_ALIVE_MS,
    });
  }

  /** Waits for the requests still open (the cancels just sent); callers abort the others first. */
  close(): Promise<void> {
    return this.pool.close();
  }

  /** Best effort: a cancel that fails leaves a prediction Cog finishes on its own. */
  cancel(predictionId: string): void {
    void this.cancelled(predictionId);
  }

  /** The same cancel, resolved once Cog answered it (or it failed). */
  async cancelled(predictionId: string): Promise<void> {
    await this.send('POST', `/predictions/${encodeURIComponent(predictionId)}/cancel`, undefined, {
      signal: new AbortController().signal,
    }).catch(() => undefined);
  }

  /** Shared by every caller, so no caller's signal cuts it: the control timeouts bound it. */
  loadOpenApi(): Promise<unknown> {
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
  async send(
    method: 'GET' | 'POST' | 'PUT',
    path: string,
    body: JsonObject | undefined,
    options: SendOptions,
  ): Promise<CogAnswer> {
    let text: string;
    let status: number;
    try {
      ({ status, text } = await this.dispatch(method, path, body, options));
    } catch (err) {
      if (options.signal.aborted || err instanceof BackendError) throw err;
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

  /**
   * undici's dispatch API with a handler of its own, because `pool.request()` cannot tell when the
   * request has been sent (onRequestSent), which a synchronous run reports as `processing`.
   */
  private dispatch(
    method: string,
    path: string,
    body: JsonObject | undefined,
    options: SendOptions,
  ): Promise<{ status: number; text: string }> {
    const { signal } = options;
    if (signal.aborted) return Promise.reject(abortReason(signal));
    return new Promise((resolve, reject) => {
      let abort: ((err?: Error) => void) | undefined;
      let settled = false;
      let status = 0;
      let size = 0;
      const chunks: Buffer[] = [];
      const onAbort = (): void => {
        if (abort) abort(abortReason(signal));
        else done(abortReason(signal));
      };
      const done = (err?: Error): void => {
        if (settled) return;
        settled = true;
        signal.removeEventListener('abort', onAbort);
        if (err) reject(err);
        else resolve({ status, text: Buffer.concat(chunks).toString('utf8') });
      };
      signal.addEventListener('abort', onAbort, { once: true });
      // The legacy handler methods: undici hands onRequestSent only to handlers of this form.
      const handler: Dispatcher.DispatchHandler = {
        onConnect: (abortRequest) => {
          if (settled) return abortRequest(abortReason(signal));
          abort = abortRequest;
        },
        onRequestSent: () => {
          if (!settled) options.onSent?.();
        },
        onHeaders: (statusCode) => {
          status = statusCode;
          return true;
        },
        onData: (chunk) => {
          size += chunk.length;
          if (size > MAX_REPLY_BYTES) {
            // The same output again would be as large: the run is not retried.
            const tooLarge = new BackendError(
              `the Cog server's answer is larger than ${MAX_REPLY_BYTES} bytes`,
              { retryable: false },
            );
            abort?.(tooLarge);
            done(tooLarge);
            return false;
          }
          chunks.push(chunk);
          return true;
        },
        onComplete: () => done(),
        onError: (err) => done(err),
      } as Dispatcher.DispatchHandler;
      this.pool.dispatch(
        {
          method,
          path: this.pathPrefix + path,
          headers: {
            accept: 'application/json',
            ...(body === undefined ? {} : { 'content-type': 'application/json' }),
            ...options.headers,
          },
          body: body === undefined ? null : JSON.stringify(body),
          ...(options.waitForModel ? { headersTimeout: 0 } : {}),
        },
        handler,
      );
    });
  }
}

function abortReason(signal: AbortSignal): Error {
  return signal.reason instanceof Error
    ? signal.reason
    : new DOMException('This operation was aborted', 'AbortError');
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
export function startedNothing(err: unknown): boolean {
  return err instanceof CogHttpError;
}

export function timeoutError(timeoutMs: number): BackendError {
  return new BackendError(`the prediction did not finish within ${Math.round(timeoutMs / 1000)} s`, {
    retryable: false,
  });
}

export function truncate(text: string): string {
  return text.length > MAX_ERROR_TEXT ? `${text.slice(0, MAX_ERROR_TEXT)}…` : text;
}

export function asPrediction(body: unknown): CogPrediction {
  if (!isObject(body)) throw new BackendError('the Cog server answered without a prediction object');
  return body as CogPrediction;
}

export function isCogAnswer(value: unknown): value is CogAnswer {
  return isObject(value) && typeof value.status === 'number';
}

export function isStatus(value: unknown): value is CogStatus {
  return (
    value === 'starting' ||
    value === 'processing' ||
    value === 'succeeded' ||
    value === 'failed' ||
    value === 'canceled'
  );
}
