import type { UpstreamError } from '../../providers/upstream-error.js';
import { GantryError } from '../errors.js';

/**
 * What the client sees when the last provider failed. Provider names and credentials problems stay in
 * the logs: the client learns what it can act on.
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
  if (status === 429) {
    const headers = err.retryAfter ? { 'retry-after': err.retryAfter } : undefined;
    return new GantryError('RATE_LIMIT_EXCEEDED', {
      message: `The model provider is rate limiting: ${message}`,
      ...(headers ? { headers } : {}),
      cause: err,
    });
  }
  if (status === 400) return new GantryError('INVALID_REQUEST', { message, param, cause: err });
  if (status === 413) return new GantryError('PAYLOAD_TOO_LARGE', { message, cause: err });
  if (status === 422) return new GantryError('UNPROCESSABLE_ENTITY', { message, param, cause: err });
  // 401/403/404 from an upstream mean Gantry's own credentials or routing are wrong, not the client's; what
  // the upstream said about them (it may quote the key, or name internal models) is not relayed.
  const internal = status === 401 || status === 403 || status === 404;
  return new GantryError('UPSTREAM_ERROR', {
    message: `The model provider failed (HTTP ${status})`,
    details: internal ? '' : details,
    cause: err,
  });
}
