import type { IncomingHttpHeaders } from 'node:http';
import type { Readable } from 'node:stream';
import { Pool } from 'undici';
import { type AbortSource, LinkedAbort } from './abort.js';
import { callForJson, type JsonAnswer, JsonCallFailure } from './json-call.js';
import type { ProviderTimeouts } from './types.js';
import { UpstreamError } from './upstream-error.js';

export interface UpstreamResponse {
  status: number;
  headers: IncomingHttpHeaders;
  /** The body as it arrives; iterating it throws UpstreamError when the upstream breaks or goes silent. */
  body: AsyncIterable<Uint8Array>;
  /** Reads the whole body as JSON; UpstreamError(protocol) when it is not JSON. */
  json(): Promise<unknown>;
  /** Stops reading and frees the connection. */
  dump(): Promise<void>;
}

const MAX_ERROR_BODY = 64 * 1024;
const DRAIN_GRACE_MS = 50;

interface UndiciBody {
  dump(options?: { limit?: number }): Promise<void>;
}

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
   * Sends a request. Non-2xx answers are thrown as UpstreamError(status) carrying the upstream's message.
   * `clientSignal` aborts at once (the client went away); the total timeout aborts as a timeout.
   */
  async request(
    method: 'GET' | 'POST',
    path: string,
    headers: Record<string, string>,
    body: string | undefined,
    clientSignal: AbortSignal,
  ): Promise<UpstreamResponse> {
    const call = new LinkedAbort(clientSignal, this.timeouts.totalMs);
    let res: Awaited<ReturnType<Pool['request']>>;
    try {
      res = await this.pool.request({
        method,
        path: this.pathPrefix + path,
        headers,
        body,
        signal: call.signal,
      });
    } catch (err) {
      call.release();
      throw this.mapError(err, call.timedOut, false);
    }

    const wrapped = this.wrapBody(res.body, call);
    if (res.statusCode >= 400) {
      const text = await readBounded(wrapped, MAX_ERROR_BODY).catch(() => '');
      throw this.statusError(res.statusCode, res.headers, text);
    }
    return {
      status: res.statusCode,
      headers: res.headers,
      body: wrapped,
      json: async () => {
        // undici's own text() reads the body without the async-generator hops of iteration.
        let text: string;
        try {
          text = await res.body.text();
        } catch (err) {
          throw this.mapError(err, call.timedOut, true);
        } finally {
          call.release();
        }
        try {
          return JSON.parse(text) as unknown;
        } catch (cause) {
          throw this.notJson(cause);
        }
      },
      dump: async () => {
        call.release();
        await res.body.dump().catch(() => undefined);
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
    method: 'GET' | 'POST',
    path: string,
    headers: Record<string, string>,
    body: string | undefined,
    clientSignal: AbortSource,
  ): Promise<{ value: unknown; text: string }> {
    let answer: JsonAnswer;
    try {
      answer = await callForJson(this.pool, {
        method,
        path: this.pathPrefix + path,
        headers,
        body,
        signal: clientSignal,
        totalMs: this.timeouts.totalMs,
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

  /**
   * The body as an async iterable that maps failures to UpstreamError. A consumer that stops early has
   * usually seen the last event (a chat stream ends at `[DONE]` just before the body does): the rest is
   * drained for a short grace so the keep-alive connection is reused and no AbortError is built; an
   * upstream still talking after that is cut off, so it stops spending compute on nobody.
   */
  private async *wrapBody(body: Readable & UndiciBody, call: LinkedAbort): AsyncGenerator<Uint8Array> {
    let ended = false;
    try {
      for await (const chunk of body.iterator({ destroyOnReturn: false })) yield chunk as Uint8Array;
      ended = true;
    } catch (err) {
      ended = true;
      throw this.mapError(err, call.timedOut, true);
    } finally {
      if (!ended) {
        const cutOff = setTimeout(() => call.abort(), DRAIN_GRACE_MS);
        body
          .dump({ limit: MAX_ERROR_BODY })
          .catch(() => undefined)
          .finally(() => {
            clearTimeout(cutOff);
            call.release();
          });
      } else {
        call.release();
      }
    }
  }

  private statusError(status: number, headers: IncomingHttpHeaders, text: string): UpstreamError {
    let upstreamMessage: string | undefined;
    let param: string | undefined;
    try {
      const parsed = JSON.parse(text) as { error?: { message?: unknown; param?: unknown } | string };
      const error = parsed.error;
      if (typeof error === 'string') upstreamMessage = error;
      else if (error && typeof error.message === 'string') {
        upstreamMessage = error.message;
        if (typeof error.param === 'string') param = error.param;
      }
    } catch {
      if (text.length > 0 && text.length < 500) upstreamMessage = text;
    }
    const retryAfter = headers['retry-after'];
    return new UpstreamError('status', this.provider, `${this.provider} answered HTTP ${status}`, {
      status,
      ...(upstreamMessage === undefined ? {} : { upstreamMessage }),
      ...(param === undefined ? {} : { param }),
      ...(typeof retryAfter === 'string' ? { retryAfter } : {}),
    });
  }

  private notJson(cause: unknown): UpstreamError {
    return new UpstreamError('protocol', this.provider, `${this.provider} sent a body that is not JSON`, {
      cause,
    });
  }

  private mapError(err: unknown, timedOut: boolean, midBody: boolean): UpstreamError {
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
  }
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
