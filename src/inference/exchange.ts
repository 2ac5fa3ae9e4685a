import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import type { JsonObject } from '../../providers/types.js';
import type { Principal } from '../auth/authenticate.js';
import type { JsonText } from './rename.js';

/**
 * What the inference pipeline (auth, resolve, ticket, dispatch, stream writer, the three route handlers)
 * needs from a request and its reply. fastify's FastifyRequest and FastifyReply satisfy these as they are;
 * so does the raw node:http fast path (src/fast-path), which serves the inference routes without fastify.
 */

/** The log calls the pipeline makes: pino's, and therefore fastify's `request.log`. */
export interface CallLog {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

/** Bounded metric labels: the catalogue model and the provider that served the request. */
export interface CallLabels {
  model: string;
  provider: string;
}

export interface InferenceRequest {
  readonly id: string;
  readonly method: string;
  readonly url: string;
  readonly headers: IncomingHttpHeaders;
  /** The parsed JSON body. */
  readonly body: unknown;
  /**
   * The JSON text `body` was parsed from by JSON.parse alone, when there is one (the fast path's plain
   * bodies): sent upstream as it is when nothing in the body was changed. dispatch() drops it once the
   * upstream has answered, so a long stream does not hold the request's text as well as its body.
   */
  bodyText?: string | undefined;
  /** A logger bound to this request's id. */
  readonly log: CallLog;
  principal: Principal | null;
  labels: CallLabels;
  /** The error id the request ended with, for usage records and metrics. */
  errorId: string | null;
}

export interface InferenceReply {
  readonly raw: ServerResponse;
  /** Adds headers sent with the response (rate limits, Retry-After). */
  headers(values: Record<string, string>): unknown;
  /** The headers added so far. */
  getHeaders(): Record<string, number | string | string[] | undefined>;
  /** The caller writes the response itself from now on (SSE streams). */
  hijack(): unknown;
}

/** What a route handler answers: a JSON body, the upstream's JSON text as it is, or undefined once it wrote a stream. */
export type InferenceAnswer = JsonObject | JsonText | undefined;
