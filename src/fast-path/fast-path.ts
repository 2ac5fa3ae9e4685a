import type { IncomingMessage, ServerResponse } from 'node:http';
import { errorCodes, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { Gantry } from '../context.js';
import { toGantryError } from '../error-handler.js';
import { envelope, envelopeFor } from '../errors.js';
import type { InferenceAnswer, InferenceReply, InferenceRequest } from '../inference/exchange.js';
import { JsonText } from '../inference/rename.js';
import { checkJsonDepth } from '../json-depth.js';
import type { RequestTracker } from '../request-tracking.js';
import { FastReply, FastRequest } from './call.js';
import { nextRequestId } from './request-id.js';

/** A route handler shared with fastify: the JSON answer, or undefined once it wrote a stream itself. */
export type InferenceHandler = (
  gantry: Gantry,
  request: InferenceRequest,
  reply: InferenceReply,
) => Promise<InferenceAnswer>;

/** fastify's default JSON parser (getDefaultJsonParser): the same errors, the same prototype checks. */
type JsonParser = (req: unknown, body: string, done: (err: Error | null, value?: unknown) => void) => void;

/** Content types taken here; any other (parameters, odd spelling) goes to fastify, which decides. */
const JSON_TYPES: ReadonlySet<string | undefined> = new Set([
  'application/json',
  'application/json; charset=utf-8',
  'application/json;charset=utf-8',
  'application/json; charset=UTF-8',
]);

export interface FastPathOptions {
  gantry: Gantry;
  /** POST path → handler. */
  routes: ReadonlyMap<string, InferenceHandler>;
  track: RequestTracker;
}

/**
 * Serves POST /v1/chat/completions, /v1/embeddings and /v1/responses straight from node:http, without
 * fastify's per-request machinery (request/reply objects, hook runners, content-type parser, child
 * logger), which costs about as much CPU as the whole upstream call. It takes only the plain case: a
 * JSON body with a Content-Length within the body limit, no query string, server not closing. Anything
 * else goes to fastify untouched, so every unusual request keeps fastify's exact behaviour and errors.
 *
 * What it does for a request is what fastify does for these routes: the request id (x-request-id or the
 * shared counter), metrics and the request log line, authentication first, then the body (limit,
 * Content-Length check, fastify's own JSON parser), then the same handler, with errors mapped by
 * toGantryError into the same envelopes and JSON answers sent with fastify's headers.
 */
export class FastPath {
  private closing = false;
  private readonly log: FastifyBaseLogger;
  private readonly parseJson: JsonParser;
  private readonly bodyLimit: number;
  private readonly gantry: Gantry;
  private readonly routes: ReadonlyMap<string, InferenceHandler>;
  private readonly track: RequestTracker;

  constructor(app: FastifyInstance, options: FastPathOptions) {
    this.gantry = options.gantry;
    this.routes = options.routes;
    this.track = options.track;
    this.log = app.log;
    this.bodyLimit = app.initialConfig.bodyLimit ?? 1_048_576;
    this.parseJson = app.getDefaultJsonParser(
      app.initialConfig.onProtoPoisoning ?? 'error',
      app.initialConfig.onConstructorPoisoning ?? 'error',
    ) as unknown as JsonParser;
    // From here on fastify answers new requests with its 503, as return503OnClosing asks.
    app.addHook('preClose', (done) => {
      this.closing = true;
      done();
    });
  }

  /** Serves the request and returns true, or returns false and leaves it to fastify. */
  take(req: IncomingMessage, res: ServerResponse): boolean {
    if (req.method !== 'POST' || this.closing) return false;
    const url = req.url ?? '';
    const handler = this.routes.get(url);
    if (handler === undefined) return false;
    const headers = req.headers;
    if (headers['transfer-encoding'] !== undefined || !JSON_TYPES.has(headers['content-type'])) return false;
    // No key: fastify answers (a console session's call, or the 401).
    if (headers.authorization === undefined && headers['x-api-key'] === undefined) return false;
    // Empty and oversized bodies get fastify's own errors (after authentication, as there).
    const length = Number(headers['content-length']);
    if (!(length > 0 && length <= this.bodyLimit)) return false;

    const request = new FastRequest(req, requestIdOf(req), url, this.log);
    const reply = new FastReply(res);
    this.track(request, res, url);
    try {
      request.principal = this.gantry.auth.authenticate(request);
    } catch (err) {
      this.fail(request, reply, err);
      return true;
    }
    this.readBody(request, reply, length, handler);
    return true;
  }

  /** Gathers the body, then parses it and runs the handler; as fastify's rawBody + default JSON parser. */
  private readBody(request: FastRequest, reply: FastReply, length: number, handler: InferenceHandler): void {
    const req = request.raw;
    const chunks: Buffer[] = [];
    let received = 0;
    const onData = (chunk: Buffer) => {
      received += chunk.length;
      chunks.push(chunk);
    };
    const onEnd = (err?: Error & { statusCode?: number }) => {
      req.removeListener('data', onData);
      req.removeListener('end', onEnd);
      req.removeListener('error', onEnd);
      if (err != null) {
        // fastify marks a body that failed to arrive (client gone mid-body) as a 400.
        if (!(typeof err.statusCode === 'number' && err.statusCode >= 400)) err.statusCode = 400;
        this.fail(request, reply, err);
        return;
      }
      if (received !== length) {
        this.fail(request, reply, new errorCodes.FST_ERR_CTP_INVALID_CONTENT_LENGTH());
        return;
      }
      const text =
        chunks.length === 1
          ? (chunks[0] as Buffer).toString('utf8')
          : Buffer.concat(chunks, received).toString('utf8');
      const plain = parsePlain(text);
      if (plain !== NOT_PARSED) {
        request.body = plain;
        request.bodyText = text;
        this.run(request, reply, handler);
        return;
      }
      this.parseJson(null, text, (parseError, body) => {
        if (parseError) {
          this.fail(request, reply, parseError);
          return;
        }
        request.body = body;
        this.run(request, reply, handler);
      });
    };
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onEnd);
  }

  private run(request: FastRequest, reply: FastReply, handler: InferenceHandler): void {
    // As fastify's JSON parser in src/app.ts: a cap on nesting.
    const deep = checkJsonDepth(request.body);
    if (deep) {
      this.fail(request, reply, deep);
      return;
    }
    handler(this.gantry, request, reply).then(
      (result) => {
        if (reply.hijacked) return;
        if (result instanceof JsonText) reply.sendJsonText(200, result.text);
        else reply.sendJson(200, result);
      },
      (err: unknown) => this.fail(request, reply, err),
    );
  }

  /** fastify's error handler (src/error-handler.ts) for a fast-path call. */
  private fail(request: FastRequest, reply: FastReply, error: unknown): void {
    const cause = error instanceof Error ? error : new Error(String(error));
    if (reply.hijacked || reply.raw.headersSent) {
      // The stream writer reports its own failures; this is a bug, not a client error.
      request.log.error({ err: cause }, 'request failed after its response began');
      return;
    }
    const err = toGantryError(cause);
    if (err.status >= 500) request.log.error({ err: cause }, 'request failed');
    request.errorId = err.errorId;
    if (err.headers) reply.headers(err.headers);
    reply.sendJson(err.status, envelope(envelopeFor(request.url), err));
  }
}

const NOT_PARSED = Symbol('not parsed');

/**
 * The body parsed by JSON.parse alone, or NOT_PARSED. fastify's JSON parser (secure-json-parse) runs two
 * regular expressions over every body, looking for keys that could poison a prototype. A body without
 * "__proto__", "constructor" or a \u escape (which could spell either) cannot match them, so JSON.parse
 * alone gives the same result. Every other body, and every body JSON.parse refuses, is left to
 * fastify's parser for its exact result and errors.
 */
function parsePlain(text: string): unknown {
  if (text.indexOf('\\u') !== -1 || text.indexOf('__proto__') !== -1 || text.indexOf('constructor') !== -1) {
    return NOT_PARSED;
  }
  try {
    return JSON.parse(text);
  } catch {
    return NOT_PARSED;
  }
}

function requestIdOf(req: IncomingMessage): string {
  const header = req.headers['x-request-id'];
  return typeof header === 'string' && header !== '' ? header : nextRequestId();
}
