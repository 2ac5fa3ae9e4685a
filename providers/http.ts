import type { IncomingHttpHeaders } from 'node:http';
import { Pool } from 'undici';
import type { AbortSource } from './abort.js';
import type { CallOptions } from './call-handler.js';
import { callForJson, type JsonAnswer, JsonCallFailure } from './json-call.js';
import { callForStream } from './stream-call.js';
import type { ProviderTimeouts } from './types.js';
import { UpstreamError } from './upstream-error.js';

export interface UpstreamResponse {
  status: number;
  headers: IncomingHttpHeaders;
  /** The body as it arrives; iterating it throws UpstreamError when the upstream breaks or goes silent. */
  body: AsyncIterable<Uint8Array>;
  /** Stops reading and frees the connection. */
  dump(): Promise<void>;
}

const MAX_ERROR_BODY = 64 * 1024;
const DRAIN_GRACE_MS = 50;

/**
 * One keep-alive connection pool to one upstream, with the four timeouts of a provider: connect,
 * first byte (response headers), idle (between body chunks) and total (the whole call, body included).
 */
export class UpstreamClient {
  private readonly pool: Pool;
  private readonly pathPrefix: string;

  constructor(
    private readonly provider: string,
    baseUrl: string,
    private readonly timeouts: ProviderTimeouts,
    maxConnections: number,
  ) {
    const url = new URL(baseUrl);
    this.pathPrefix = url.pathname.replace(/\/+$/, '');
    this.pool = new Pool(url.origin, {
      connections: maxConnections,
      connect: { timeout: timeouts.connectMs },
      headersTimeout: timeouts.firstByteMs,
      bodyTimeout: timeouts.idleMs,
      keepAliveTimeout: 30_000,
    });
  }

  /**
   * Sends a request whose answer is read as it arrives (streams). Non-2xx answers are thrown as
   * UpstreamError(status) carrying the upstream's message. `clientSignal` aborts at once (the client went
   * away); the total timeout aborts as a timeout. A consumer that stops iterating early lets the rest of
   * the body drain for a short grace, so the connection is reused, then cuts it (stream-call.ts).
   */
  async request(
    method: 'GET' | 'POST',
    path: string,
    headers: Record<string, string>,
    body: string | undefined,
    clientSignal: AbortSource,
  ): Promise<UpstreamResponse> {
    const res = await callForStream(this.pool, {
      ...this.callOptions(method, path, headers, body, clientSignal),
      mapError: this.mapError,
      dropMs: DRAIN_GRACE_MS,
      dropLimit: MAX_ERROR_BODY,
    });
    if (res.status >= 400) {
      const text = await readBounded(res.body, MAX_ERROR_BODY).catch(() => '');
      throw this.statusError(res.status, res.headers, text);
    }
    const iterator = res.body;
    return {
      status: res.status,
      headers: res.headers,
      body: iterator,
      dump: async () => {
        await iterator.return?.();
      },
    };
  }

  /**
   * A request whose answer is read whole and parsed as JSON (every non-streamed call), returned with its
   * text. The same outcomes as `request()` then `json()`: non-2xx answers are thrown as
   * UpstreamError(status) carrying the upstream's message, a body that is not JSON as
   * UpstreamError(protocol); but cheaper (json-call.ts).
   */
  async requestJson(
    method: 'GET' | 'POST' | 'DELETE',
    path: string,
    headers: Record<string, string>,
    body: string | undefined,
    clientSignal: AbortSource,
  ): Promise<{ value: unknown; text: string }> {
    let answer: JsonAnswer;
    try {
      answer = await callForJson(this.pool, {
        ...this.callOptions(method, path, headers, body, clientSignal),
        errorBodyLimit: MAX_ERROR_BODY,
      });
    } catch (err) {
      if (!(err instanceof JsonCallFailure)) throw err;
      // An error answer whose body broke off is still that error, as request() reports it.
      if (err.status >= 400) throw this.statusError(err.status, err.headers, '');
      throw this.mapError(err.error, err.timedOut, err.status !== 0);
    }
    if (answer.status >= 400) throw this.statusError(answer.status, answer.headers, answer.text);
    try {
      return { value: JSON.parse(answer.text) as unknown, text: answer.text };
    } catch (cause) {
      throw this.notJson(cause);
    }
  }

  close(): Promise<void> {
    return this.pool.close();
  }

  private callOptions(
    method: 'GET' | 'POST' | 'DELETE',
    path: string,
    headers: Record<string, string>,
    body: string | undefined,
    signal: AbortSource,
  ): CallOptions {
    return { method, path: this.pathPrefix + path, headers, body, signal, totalMs: this.timeouts.totalMs };
  }

  private statusError(status: number, headers: IncomingHttpHeaders, text: string): UpstreamError {
    const retryAfter = headers['retry-after'];
    return new UpstreamError('status', this.provider, `${this.provider} answered HTTP ${status}`, {
      status,
      ...parseErrorBody(text),
      ...(typeof retryAfter === 'string' ? { retryAfter } : {}),
    });
  }

  private notJson(cause: unknown): UpstreamError {
    return new UpstreamError('protocol', this.provider, `${this.provider} sent a body that is not JSON`, {
      cause,
    });
  }

  private readonly mapError = (err: unknown, timedOut: boolean, midBody: boolean): UpstreamError => {
    if (err instanceof UpstreamError) return err;
    const code = (err as { code?: string }).code ?? '';
    const name = (err as { name?: string }).name ?? '';
    const p = this.provider;
    if (timedOut) return new UpstreamError('timeout', p, `${p} exceeded the total timeout`, { cause: err });
    if (name === 'AbortError' || code === 'UND_ERR_ABORTED') {
      return new UpstreamError('aborted', p, 'the client went away', { cause: err });
    }
    switch (code) {
      case 'UND_ERR_CONNECT_TIMEOUT':
        return new UpstreamError('timeout', p, `${p} did not accept the connection in time`, { cause: err });
      case 'UND_ERR_HEADERS_TIMEOUT':
        return new UpstreamError('timeout', p, `${p} sent no response in time`, { cause: err });
      case 'UND_ERR_BODY_TIMEOUT':
        return new UpstreamError('timeout', p, `${p} went silent mid-response`, { cause: err });
    }
    if (midBody)
      return new UpstreamError('protocol', p, `${p} closed the connection mid-response`, { cause: err });
    return new UpstreamError('connect', p, `could not reach ${p}: ${code || (err as Error).message}`, {
      cause: err,
    });
  };
}

interface ErrorFields {
  upstreamMessage?: string;
  param?: string;
  code?: string | null;
  type?: string;
}

/**
 * The facts of an error body: OpenAI's `{"error": {message, type, param, code}}`, Anthropic's
 * `{"type": "error", "error": {type, message}}`, a bare `{"error": "text"}`, or short plain text. Only the
 * fields the body really had are set (see UpstreamError.code for what absent and null mean).
 */
function parseErrorBody(text: string): ErrorFields {
  let parsed: { error?: unknown };
  try {
    parsed = JSON.parse(text) as { error?: unknown };
  } catch {
    return text.length > 0 && text.length < 500 ? { upstreamMessage: text } : {};
  }
  const error = parsed?.error;
  if (typeof error === 'string') return { upstreamMessage: error };
  if (error === null || typeof error !== 'object') return {};
  const e = error as { message?: unknown; param?: unknown; code?: unknown; type?: unknown };
  if (typeof e.message !== 'string') return {};
  return {
    upstreamMessage: e.message,
    ...(typeof e.param === 'string' ? { param: e.param } : {}),
    // A code of digits is a status (vLLM sends 404, LiteLLM "404"), not OpenAI's kind of code.
    ...((typeof e.code === 'string' && !/^\d+$/.test(e.code)) || e.code === null ? { code: e.code } : {}),
    ...(typeof e.type === 'string' ? { type: e.type } : {}),
  };
}

/** A stream request answered with anything but SSE (some servers fall back to JSON) is a protocol failure. */
export async function requireEventStream(res: UpstreamResponse, provider: string): Promise<void> {
  const contentType = String(res.headers['content-type'] ?? '');
  if (contentType.includes('text/event-stream')) return;
  await res.dump();
  throw new UpstreamError('protocol', provider, `${provider} answered a stream request with ${contentType}`);
}

async function readBounded(body: AsyncIterable<Uint8Array>, limit: number): Promise<string> {
  const parts: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    if (size < limit) parts.push(Buffer.from(chunk));
    size += chunk.byteLength;
  }
  return Buffer.concat(parts).toString('utf8');
}
