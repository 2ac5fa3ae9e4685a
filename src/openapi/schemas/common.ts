/**
 * Building blocks of the route schemas: the two error envelopes (src/errors.ts), JSON and SSE bodies.
 * Route schemas only document (app.ts sets no-op validator and serializer compilers); the OpenAPI document
 * at /v1/openapi.json is generated from them, so they describe what the handlers really accept and send.
 */
import { ERROR_CATALOG } from '../../errors.js';

export type JsonSchema = Record<string, unknown>;

/** Every error id of the catalogue: `error_id` is always one of them. */
const ERROR_IDS = Object.keys(ERROR_CATALOG);

const details = {
  description: 'More about the error: free text, or structured facts (a rate limit’s reset and window)',
  type: ['string', 'object'],
};

/** The REST envelope: models, predictions, files, the status page, the admin API, unknown routes. */
export const restError: JsonSchema = {
  title: 'RestError',
  type: 'object',
  description: 'The REST error envelope',
  required: ['status', 'response', 'error'],
  properties: {
    status: { const: false },
    response: { type: 'string', description: 'The message again' },
    error: {
      type: 'object',
      required: ['http_status', 'message', 'details', 'error_id', 'type', 'code'],
      properties: {
        http_status: { type: 'integer' },
        message: { type: 'string' },
        details,
        error_id: { type: 'string', enum: ERROR_IDS },
        type: { type: 'string', description: 'OpenAI’s error type (the class an OpenAI SDK raises)' },
        code: {
          type: ['string', 'null'],
          description: 'OpenAI’s code; by default the error id in lower case',
        },
      },
    },
  },
};

/** The inference envelope: OpenAI’s {error:{message,type,param,code}} with the catalogue's fields added. */
export const inferenceError: JsonSchema = {
  title: 'InferenceError',
  type: 'object',
  description: 'OpenAI’s error envelope, with Gantry’s error_id, details and http_status',
  required: ['error'],
  properties: {
    error: {
      type: 'object',
      required: ['message', 'type', 'param', 'code', 'error_id', 'details', 'http_status'],
      properties: {
        message: { type: 'string' },
        type: { type: 'string' },
        param: { type: ['string', 'null'], description: 'The request parameter at fault' },
        code: { type: ['string', 'null'] },
        error_id: { type: 'string', enum: ERROR_IDS },
        details,
        http_status: { type: 'integer' },
        innererror: { type: 'object', description: 'Azure’s content filter results of a filtered prompt' },
      },
    },
  },
};

/** The schemas the document holds once, in components, by their title (src/openapi/routes.ts). */
export const SHARED_SCHEMAS: ReadonlySet<string> = new Set(['RestError', 'InferenceError']);

/** 4xx and 5xx answers in the envelope of the route (src/errors.ts envelopeFor). */
export function errors(kind: 'rest' | 'inference'): Record<string, JsonSchema> {
  const envelope = kind === 'rest' ? restError : inferenceError;
  return {
    '4xx': {
      ...envelope,
      description:
        'The request was refused: 400 invalid, 401 no or a wrong key, 402 out of credits, 403 not allowed, ' +
        '404 not found, 405 wrong method, 413 too large, 422 not processable, 429 rate limited (Retry-After)',
    },
    '5xx': {
      ...envelope,
      description:
        'Gantry or the upstream failed: 500, 502 upstream error, 503 unavailable (Retry-After), 504 timeout',
    },
  };
}

/** A JSON answer (the description is the response's). */
export function json(description: string, schema: JsonSchema): JsonSchema {
  return { description, ...schema };
}

/** An answer that is JSON, or a Server-Sent Events stream when the request asked for `stream: true`. */
export function jsonOrStream(description: string, schema: JsonSchema, stream: string): JsonSchema {
  return {
    description,
    content: {
      'application/json': { schema },
      'text/event-stream': { schema: { type: 'string', description: stream } },
    },
  };
}

/** A text answer of one media type. */
export function text(description: string, mediaType: string): JsonSchema {
  return { description, content: { [mediaType]: { schema: { type: 'string' } } } };
}

/** An object the handler reads by hand: the main fields, and whatever else the upstream takes. */
export function openObject(required: string[], properties: Record<string, JsonSchema>): JsonSchema {
  return { type: 'object', required, properties, additionalProperties: true };
}

/** Unix time in seconds. */
export const unixSeconds: JsonSchema = { type: 'integer', description: 'Unix time, seconds' };

/** Token usage as OpenAI reports it. */
export const usage: JsonSchema = {
  type: 'object',
  properties: {
    prompt_tokens: { type: 'integer' },
    completion_tokens: { type: 'integer' },
    total_tokens: { type: 'integer' },
  },
  additionalProperties: true,
};

/** A path parameter `id`. */
export const idParams: JsonSchema = {
  type: 'object',
  required: ['id'],
  properties: { id: { type: 'string' } },
};
