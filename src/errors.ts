/**
 * The one catalogue of Gantry's error ids (spec 7.3), and the two envelopes they are sent in.
 *
 * Every error a client can see is a GantryError built from an id in this table, so the HTTP status,
 * the OpenAI `type` (which decides the SDK's exception class) and the default message live in one place.
 */

export interface CatalogEntry {
  readonly status: number;
  /** OpenAI error `type`, used in the inference envelope. */
  readonly type: string;
  readonly message: string;
}

const catalog = {
  INVALID_INPUT: {
    status: 400,
    type: 'invalid_request_error',
    message: 'Input does not match the model schema',
  },
  INVALID_PARAMETER: { status: 400, type: 'invalid_request_error', message: 'Invalid parameter' },
  INVALID_PARAMETER_COMBINATION: {
    status: 400,
    type: 'invalid_request_error',
    message: 'Conflicting parameters',
  },
  UNSUPPORTED_MEDIA_TYPE: {
    status: 400,
    type: 'invalid_request_error',
    message: 'Content-Type must be application/json',
  },
  MISSING_REQUIRED_FIELD: {
    status: 400,
    type: 'invalid_request_error',
    message: 'A required field is missing',
  },
  INVALID_DATE_FORMAT: { status: 400, type: 'invalid_request_error', message: 'Dates must be YYYY-MM-DD' },
  INVALID_DATE_RANGE: { status: 400, type: 'invalid_request_error', message: '`from` is after `to`' },
  INFRASTRUCTURE_ERROR: { status: 400, type: 'invalid_request_error', message: 'Request rejected; retry' },
  INVALID_REQUEST: { status: 400, type: 'invalid_request_error', message: 'Malformed request' },
  UNAUTHORIZED: { status: 401, type: 'authentication_error', message: 'Invalid or missing API key' },
  ACCOUNT_SUSPENDED: { status: 401, type: 'authentication_error', message: 'Account suspended' },
  PAYMENT_REQUIRED: { status: 402, type: 'insufficient_quota', message: 'Account balance is negative' },
  INSUFFICIENT_CREDITS: { status: 402, type: 'insufficient_quota', message: 'Not enough credits' },
  SECURITY_VIOLATION: { status: 403, type: 'permission_error', message: 'Request flagged as malicious' },
  MODEL_ACCESS_DENIED: {
    status: 403,
    type: 'permission_error',
    message: 'Your plan has no access to this model',
  },
  MODEL_NOT_ACTIVE: { status: 403, type: 'permission_error', message: 'Model is not active' },
  MODEL_NOT_BILLABLE: { status: 403, type: 'permission_error', message: 'Model has no billable price' },
  PARAMETER_NOT_ALLOWED: { status: 403, type: 'permission_error', message: 'Restricted parameter' },
  FORBIDDEN: { status: 403, type: 'permission_error', message: 'Not allowed' },
  NOT_FOUND: { status: 404, type: 'not_found_error', message: 'Not found' },
  MODEL_NOT_FOUND: { status: 404, type: 'not_found_error', message: 'Model not found' },
  RESPONSE_NOT_FOUND: { status: 404, type: 'not_found_error', message: 'Response not found' },
  /**
   * Gantry's choice (DESIGN.md): a missing prediction, or another account's, is 404 rather than the
   * spec's 502, which clients would retry forever and which would tell existence apart.
   */
  PREDICTION_NOT_FOUND: { status: 404, type: 'not_found_error', message: 'Prediction not found' },
  /** Gantry extension: an output file that is unknown or purged. */
  FILE_NOT_FOUND: { status: 404, type: 'not_found_error', message: 'File not found' },
  /** Gantry extension: an output file link that was tampered with or has expired. */
  FILE_LINK_EXPIRED: { status: 403, type: 'permission_error', message: 'File link expired or invalid' },
  METHOD_NOT_ALLOWED: { status: 405, type: 'invalid_request_error', message: 'Method not allowed' },
  /** Gantry extension: the request (headers or body) did not arrive within the server's timeouts. */
  REQUEST_TIMEOUT: { status: 408, type: 'invalid_request_error', message: 'Request not received in time' },
  /** Gantry extension: an upstream's 409, relayed (the request conflicts with a resource's state). */
  CONFLICT: {
    status: 409,
    type: 'invalid_request_error',
    message: 'The request conflicts with the current state of the resource',
  },
  PREDICTION_NOT_CANCELLABLE: {
    status: 409,
    type: 'invalid_request_error',
    message: 'Prediction is already in a terminal state',
  },
  PAYLOAD_TOO_LARGE: { status: 413, type: 'invalid_request_error', message: 'Request body is too large' },
  /** Gantry extension: a path segment longer than any id or name Gantry has. */
  URI_TOO_LONG: { status: 414, type: 'invalid_request_error', message: 'Request path is too long' },
  /** Gantry extension: a Range header outside an output file. */
  RANGE_NOT_SATISFIABLE: {
    status: 416,
    type: 'invalid_request_error',
    message: 'The requested range is not satisfiable',
  },
  /**
   * A prompt (or prediction input) the content policy blocks. The spec lists it under 422; inference
   * answers it with 400 and code `content_filter`, as Azure OpenAI and OpenAI do (README, "Safety").
   */
  CONTENT_POLICY_VIOLATION: {
    status: 422,
    type: 'invalid_request_error',
    message: 'The request was filtered by the content policy',
  },
  UNPROCESSABLE_ENTITY: { status: 422, type: 'invalid_request_error', message: 'Unprocessable request' },
  VALIDATION_ERROR: { status: 422, type: 'invalid_request_error', message: 'Validation failed' },
  MODEL_NOT_SUPPORTED: {
    status: 422,
    type: 'invalid_request_error',
    message: 'Model does not support this operation',
  },
  RATE_LIMIT_EXCEEDED: { status: 429, type: 'rate_limit_error', message: 'Rate limit exceeded' },
  /** Gantry extension: request headers over Node's limit (16 KiB by default). */
  HEADERS_TOO_LARGE: {
    status: 431,
    type: 'invalid_request_error',
    message: 'Request headers are too large',
  },
  INTERNAL_ERROR: { status: 500, type: 'server_error', message: 'Internal error' },
  MODEL_UNAVAILABLE: { status: 500, type: 'server_error', message: 'Model service temporarily unavailable' },
  /** Gantry extension: an upstream answered with something we cannot use. */
  UPSTREAM_ERROR: { status: 502, type: 'server_error', message: 'Upstream provider error' },
  /** Gantry extension: a dependency (the shared rate limiter) is down and the policy is to refuse. */
  SERVICE_UNAVAILABLE: { status: 503, type: 'server_error', message: 'Service temporarily unavailable' },
  /**
   * Gantry extension: the model's provider is overloaded (its 503, Anthropic's 529) and no other route
   * could take the call; sent with Retry-After. Its code is OpenAI's `server_is_overloaded`.
   */
  UPSTREAM_OVERLOADED: {
    status: 503,
    type: 'server_error',
    message: 'The model provider is overloaded; retry later',
  },
  PREDICTION_ERROR: { status: 503, type: 'server_error', message: 'Prediction could not be created; retry' },
  /** Gantry extension: an upstream did not answer in time. */
  UPSTREAM_TIMEOUT: { status: 504, type: 'timeout_error', message: 'Upstream provider timed out' },
} as const satisfies Record<string, CatalogEntry>;

export type ErrorId = keyof typeof catalog;

/** Every error id with its catalogue entry (the README's error table, the fuzz command's check). */
export const ERROR_CATALOG: Readonly<Record<ErrorId, CatalogEntry>> = catalog;

export interface GantryErrorOptions {
  message?: string;
  /** Free text, or structured facts such as a rate limit's reset and window. */
  details?: string | Record<string, unknown>;
  /** The request parameter at fault (inference envelope `param`). */
  param?: string | null;
  /** Overrides the catalogue's status, e.g. to relay an upstream 400 as is. */
  status?: number;
  /**
   * OpenAI's error `code` when a more precise one applies (an upstream's own code,
   * `context_length_exceeded`, `content_filter`), or null where the upstream relayed sent `"code": null`;
   * by default the error id in lower case.
   */
  code?: string | null;
  headers?: Record<string, string>;
  cause?: unknown;
  /** Azure's `innererror` (a filtered prompt's content filter results), sent in the inference envelope. */
  innererror?: Record<string, unknown>;
}

export class GantryError extends Error {
  readonly errorId: ErrorId;
  readonly status: number;
  readonly type: string;
  readonly details: string | Record<string, unknown>;
  readonly param: string | null;
  readonly headers: Record<string, string> | undefined;
  /** OpenAI's `code`, in both envelopes. */
  readonly code: string | null;
  readonly innererror: Record<string, unknown> | undefined;

  constructor(errorId: ErrorId, options: GantryErrorOptions = {}) {
    const entry: CatalogEntry = catalog[errorId];
    super(options.message ?? entry.message, { cause: options.cause });
    this.name = 'GantryError';
    this.errorId = errorId;
    this.status = options.status ?? entry.status;
    this.type = entry.type;
    this.details = options.details ?? '';
    this.param = options.param ?? null;
    this.headers = options.headers;
    this.code = options.code === undefined ? errorId.toLowerCase() : options.code;
    this.innererror = options.innererror;
  }
}

export function invalidParameter(param: string, message: string): GantryError {
  return new GantryError('INVALID_PARAMETER', { param, message });
}

/**
 * The unified REST envelope (spec 7.1 shape 1): models, predictions, auth. Its `error` also carries
 * OpenAI's `type` and `code` (additions the spec's clients ignore), so the OpenAI SDK's `err.type` and
 * `err.code` are set on REST routes too, e.g. `client.models.retrieve()` of an unknown model.
 */
export function restEnvelope(err: GantryError): Record<string, unknown> {
  return {
    status: false,
    response: err.message,
    error: {
      http_status: err.status,
      message: err.message,
      details: err.details,
      error_id: err.errorId,
      type: err.type,
      code: err.code,
    },
  };
}

/**
 * The inference envelope: OpenAI's `{error:{message,type,param,code}}` plus the spec's fields, so the
 * official SDKs raise the right exception class and spec clients can branch on `error_id`.
 */
export function inferenceEnvelope(err: GantryError): Record<string, unknown> {
  return {
    error: {
      message: err.message,
      type: err.type,
      param: err.param,
      code: err.code,
      error_id: err.errorId,
      details: err.details,
      http_status: err.status,
      ...(err.innererror === undefined ? {} : { innererror: err.innererror }),
    },
  };
}

export type EnvelopeKind = 'rest' | 'inference';

export function envelope(kind: EnvelopeKind, err: GantryError): Record<string, unknown> {
  return kind === 'inference' ? inferenceEnvelope(err) : restEnvelope(err);
}

/** Which envelope a URL's errors are sent in. */
export function envelopeFor(url: string): EnvelopeKind {
  if (!url.startsWith('/v1/')) return 'rest';
  const rest =
    url.startsWith('/v1/models') ||
    url.startsWith('/v1/predict') ||
    url.startsWith('/v1/files') ||
    url.startsWith('/v1/webhooks');
  return rest ? 'rest' : 'inference';
}
