import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import type { FastifyBaseLogger } from 'fastify';
import type { Principal } from '../auth/authenticate.js';
import type { CallLabels, InferenceReply, InferenceRequest } from '../inference/exchange.js';
import { JSON_CONTENT_TYPE } from '../routes/answer.js';

/** The request side of a fast-path call: what fastify's request would hold, and no more. */
export class FastRequest implements InferenceRequest {
  body: unknown = undefined;
  bodyText: string | undefined = undefined;
  principal: Principal | null = null;
  labels: CallLabels = { model: 'none', provider: 'none' };
  errorId: string | null = null;
  private childLog: FastifyBaseLogger | undefined;

  constructor(
    readonly raw: IncomingMessage,
    readonly id: string,
    readonly url: string,
    private readonly parentLog: FastifyBaseLogger,
  ) {}

  get method(): string {
    return this.raw.method ?? 'POST';
  }

  get headers(): IncomingHttpHeaders {
    return this.raw.headers;
  }

  /** A child logger with fastify's `reqId` binding, made only when something is logged. */
  get log(): FastifyBaseLogger {
    this.childLog ??= this.parentLog.child({ reqId: this.id });
    return this.childLog;
  }
}

/** The reply side: headers collected until the one writeHead, as fastify's reply does. */
export class FastReply implements InferenceReply {
  hijacked = false;
  private readonly pending: Record<string, string> = {};

  constructor(readonly raw: ServerResponse) {}

  headers(values: Record<string, string>): void {
    for (const name in values) {
      const value = values[name];
      if (value !== undefined) this.pending[name.toLowerCase()] = value;
    }
  }

  getHeaders(): Record<string, string> {
    return this.pending;
  }

  hijack(): void {
    this.hijacked = true;
  }

  /** Sends `body` as JSON with the collected headers, byte for byte what fastify's reply.send would. */
  sendJson(status: number, body: unknown): void {
    this.sendJsonText(status, JSON.stringify(body));
  }

  /** Sends JSON text as it is, with the headers fastify's reply.type(json).send(text) would. */
  sendJsonText(status: number, payload: string): void {
    const headers = this.pending;
    headers['content-type'] ??= JSON_CONTENT_TYPE;
    headers['content-length'] = String(Buffer.byteLength(payload));
    this.raw.writeHead(status, headers);
    this.raw.end(payload);
  }
}
