import type { IncomingHttpHeaders } from 'node:http';
import type { Dispatcher } from 'undici';
import { CallHandler, type CallOptions, cancelledBefore, dispatchOptions } from './call-handler.js';

/** A whole answer: status, headers and the body as text (bounded for error statuses). */
export interface JsonAnswer {
  status: number;
  headers: IncomingHttpHeaders;
  text: string;
}

/** Why a call gave no answer; the caller maps it (UpstreamClient.mapError). */
export class JsonCallFailure extends Error {
  constructor(
    readonly error: unknown,
    /** The total deadline, not the client, stopped the call. */
    readonly timedOut: boolean,
    /** The answer's status and headers when they had arrived (the body then failed), else 0 and {}. */
    readonly status: number,
    readonly headers: IncomingHttpHeaders,
  ) {
    super('upstream call failed', { cause: error });
    this.name = 'JsonCallFailure';
  }
}

export interface JsonCallOptions extends CallOptions {
  /** Bytes of an error answer (status >= 400) kept, in whole chunks; the rest is read and dropped. */
  errorBodyLimit: number;
}

const UTF8_BOM = 0xfeff;

/**
 * One request whose answer is read whole, through undici's dispatch API: the body is gathered by the
 * handler, without the Readable stream, AsyncResource and second AbortController that `pool.request()`
 * and `body.text()` cost on every call. The pool's own timeouts (connect, headers, body idle) apply as
 * they do to `pool.request()`; the client's signal and the total deadline abort through the handler.
 */
export function callForJson(pool: Dispatcher, options: JsonCallOptions): Promise<JsonAnswer> {
  const cancelled = cancelledBefore(options);
  if (cancelled) return Promise.reject(new JsonCallFailure(cancelled, false, 0, {}));
  return new Promise<JsonAnswer>((resolve, reject) => {
    pool.dispatch(dispatchOptions(options), new JsonHandler(options, resolve, reject));
  });
}

class JsonHandler extends CallHandler {
  private status = 0;
  private headers: IncomingHttpHeaders = {};
  private readonly chunks: Buffer[] = [];
  private kept = 0;
  private limit = Number.POSITIVE_INFINITY;

  constructor(
    private readonly options: JsonCallOptions,
    private readonly resolve: (answer: JsonAnswer) => void,
    private readonly reject: (failure: JsonCallFailure) => void,
  ) {
    super(options);
  }

  onResponseStart(
    _controller: Dispatcher.DispatchController,
    statusCode: number,
    headers: IncomingHttpHeaders,
  ): void {
    this.status = statusCode;
    this.headers = headers;
    if (statusCode >= 400) this.limit = this.options.errorBodyLimit;
  }

  onResponseData(_controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.kept < this.limit) {
      this.chunks.push(chunk);
      this.kept += chunk.length;
    }
  }

  onResponseEnd(): void {
    if (!this.finish()) return;
    const chunks = this.chunks;
    let text =
      chunks.length === 1 ? (chunks[0] as Buffer).toString('utf8') : Buffer.concat(chunks).toString('utf8');
    // As undici's text() for an answer: a leading byte order mark is not part of the text.
    if (this.status < 400 && text.charCodeAt(0) === UTF8_BOM) text = text.slice(1);
    this.resolve({ status: this.status, headers: this.headers, text });
  }

  onResponseError(_controller: Dispatcher.DispatchController, error: Error): void {
    if (!this.finish()) return;
    this.reject(new JsonCallFailure(error, this.timedOut, this.status, this.headers));
  }
}
