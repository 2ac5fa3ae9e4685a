/** Why an upstream call failed. Only `connect`, `timeout` and retryable statuses allow a fallback. */
export type UpstreamFailure = 'connect' | 'timeout' | 'status' | 'protocol' | 'aborted';

export class UpstreamError extends Error {
  readonly failure: UpstreamFailure;
  readonly provider: string;
  /** The upstream's HTTP status when failure is `status`. */
  readonly status: number | undefined;
  /** The upstream's error message, when it sent one we could read. */
  readonly upstreamMessage: string | undefined;
  /** The upstream's `param`, when its error named one. */
  readonly param: string | undefined;
  /** The upstream's OpenAI error `code` (e.g. `previous_response_not_found`), when its error had one. */
  readonly code: string | undefined;
  /** Seconds, from the upstream's Retry-After. */
  readonly retryAfter: string | undefined;

  constructor(
    failure: UpstreamFailure,
    provider: string,
    message: string,
    extra: {
      status?: number;
      upstreamMessage?: string;
      param?: string;
      code?: string;
      retryAfter?: string;
      cause?: unknown;
    } = {},
  ) {
    super(message, { cause: extra.cause });
    this.name = 'UpstreamError';
    this.failure = failure;
    this.provider = provider;
    this.status = extra.status;
    this.upstreamMessage = extra.upstreamMessage;
    this.param = extra.param;
    this.code = extra.code;
    this.retryAfter = extra.retryAfter;
  }

  /** May the next provider be tried (if nothing reached the client yet)? */
  get retryable(): boolean {
    if (this.failure === 'connect' || this.failure === 'timeout') return true;
    if (this.failure === 'status') return this.status === 429 || (this.status ?? 0) >= 500;
    return false;
  }
}
