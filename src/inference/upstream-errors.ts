import type { UpstreamError } from '../../providers/upstream-error.js';
import { type ErrorId, GantryError } from '../errors.js';

/** Retry-After of an overload answer when the upstream gave none (README "Errors"). */
export const OVERLOAD_RETRY_AFTER_SECONDS = '1';

/** OpenAI's code for an overloaded server (its 503 `service_unavailable_error`). */
const OVERLOADED_CODE = 'server_is_overloaded';

/**
 * The upstream 4xx statuses that speak about the client's own request, relayed with the upstream's
 * message, param and code. 401/403 are about Gantry's credential and 404 mostly about its routing (see
 * fromUpstream), so they are not here.
 */
const RELAYED: Readonly<Record<number, ErrorId>> = {
  400: 'INVALID_REQUEST',
  409: 'CONFLICT',
  413: 'PAYLOAD_TOO_LARGE',
  422: 'UNPROCESSABLE_ENTITY',
};

/**
 * OpenAI's code for an Anthropic error type (Anthropic's bodies have a type, no code; docs "HTTP errors"
 * of each API): what an OpenAI client would have been told by OpenAI for the same condition.
 */
const CODE_OF_ANTHROPIC_TYPE: Readonly<Record<string, string | null>> = {
  invalid_request_error: null,
  request_too_large: null,
  rate_limit_error: 'rate_limit_exceeded',
  overloaded_error: OVERLOADED_CODE,
};

/**
 * What the client sees when the last provider failed. Provider names and credentials problems stay in
 * the logs: the client learns what it can act on. An upstream's complaint about the request itself
 * keeps its status, message, param and code, so the SDK raises what the upstream would have raised.
 */
export function fromUpstream(err: UpstreamError): GantryError {
  const details = err.upstreamMessage ?? '';
  switch (err.failure) {
    case 'timeout':
      return new GantryError('UPSTREAM_TIMEOUT', {
        message: 'The model provider did not answer in time',
        cause: err,
      });
    case 'connect':
      return new GantryError('UPSTREAM_ERROR', {
        message: 'The model provider could not be reached',
        cause: err,
      });
    case 'protocol':
      return new GantryError('UPSTREAM_ERROR', {
        message: 'The model provider sent an invalid response',
        cause: err,
      });
    case 'aborted':
      return new GantryError('INVALID_REQUEST', { message: 'The request was cancelled', cause: err });
  }
  const status = err.status ?? 502;
  const message = err.upstreamMessage ?? `The model provider answered HTTP ${status}`;
  const param = err.param ?? null;
  const code = clientCode(err);
  if (err.overloaded) {
    // One status for every overload (OpenAI's 503, Anthropic's 529), with a Retry-After to honour.
    return new GantryError('UPSTREAM_OVERLOADED', {
      details,
      code: typeof code === 'string' ? code : OVERLOADED_CODE,
      headers: { 'retry-after': err.retryAfter ?? OVERLOAD_RETRY_AFTER_SECONDS },
      cause: err,
    });
  }
  if (status === 429 && !isBilling(err)) {
    const headers = err.retryAfter ? { 'retry-after': err.retryAfter } : undefined;
    // Not the upstream's text: OpenAI's names Gantry's organization and the upstream model and its limits.
    return new GantryError('RATE_LIMIT_EXCEEDED', {
      message: err.retryAfter
        ? `The model provider is rate limiting; retry after ${err.retryAfter} s`
        : 'The model provider is rate limiting; retry later',
      ...(headers ? { headers } : {}),
      ...(code === undefined ? {} : { code }),
      cause: err,
    });
  }
  const relayed = RELAYED[status];
  if (relayed) {
    return new GantryError(relayed, { message, param, ...(code === undefined ? {} : { code }), cause: err });
  }
  // A 404 naming what was not found (an OpenAI code such as previous_response_not_found) is about a
  // resource the client named. Without a code (Anthropic, a proxy's page) or with model_not_found it
  // is Gantry's routing at fault (a model name or path in its config): a 502, naming nothing internal.
  if (status === 404 && typeof code === 'string' && code !== 'model_not_found') {
    const id = code === 'previous_response_not_found' ? 'RESPONSE_NOT_FOUND' : 'NOT_FOUND';
    return new GantryError(id, { message, param, code, cause: err });
  }
  // 401/403/404 from an upstream mean Gantry's own credentials or routing are wrong, not the client's, and
  // a 429 about billing is Gantry's account with the provider out of quota; what the upstream said about
  // them (it may quote the key, name internal models or the account's spend) is not relayed.
  const internal = status === 401 || status === 403 || status === 404 || status === 429;
  return new GantryError('UPSTREAM_ERROR', {
    message: `The model provider failed (it answered HTTP ${status})`,
    details: internal ? '' : details,
    cause: err,
  });
}

/**
 * OpenAI's 429 `insufficient_quota` (its type, or its code in older answers; docs "Error codes"): Gantry's
 * account with the provider has no quota left. Not the client's rate limit, and no wait fixes it.
 */
function isBilling(err: UpstreamError): boolean {
  return err.type === 'insufficient_quota' || err.code === 'insufficient_quota';
}

/**
 * The OpenAI code to send: the upstream's own when its body had one (null included), else the one
 * OpenAI uses for the Anthropic error type (Anthropic's "prompt is too long" is OpenAI's
 * context_length_exceeded); undefined leaves the catalogue's.
 */
function clientCode(err: UpstreamError): string | null | undefined {
  if (err.code !== undefined) return err.code;
  const type = err.type;
  if (type === undefined || !Object.hasOwn(CODE_OF_ANTHROPIC_TYPE, type)) return undefined;
  if (type === 'invalid_request_error' && err.upstreamMessage?.startsWith('prompt is too long')) {
    return 'context_length_exceeded';
  }
  return CODE_OF_ANTHROPIC_TYPE[type];
}
