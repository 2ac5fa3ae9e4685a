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
  /** Seconds, from the upstream's Retry-After. */
  readonly retryAfter: string | undefined;
  /**
   * The upstream's error `code` as its body said it: a string (OpenAI's `previous_response_not_found`,
   * `context_length_exceeded`, …), null when the body had `"code": null`, undefined when it had none
   * (Anthropic's bodies, HTML pages; a number such as vLLM's 404, or LiteLLM's "404", is an HTTP status,
   * not a code).
   */
  readonly code: string | null | undefined;
  /** The upstream's error `type` (OpenAI's or Anthropic's, e.g. `overloaded_error`), when it sent one. */
  readonly type: string | undefined;

  constructor(
    failure: UpstreamFailure,
    provider: string,
    message: string,
    extra: {
      status?: number;
      upstreamMessage?: string;
      param?: string;
      retryAfter?: string;
      code?: string | null;
      type?: string;
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
    this.retryAfter = extra.retryAfter;
    this.code = extra.code;
    this.type = extra.type;
  }

  /**
   * The upstream is overloaded: 503, Anthropic's 529 (`overloaded_error`, also sent as a stream event),
   * or OpenAI's `server_is_overloaded` code. Retryable, like every 5xx.
   */
  get overloaded(): boolean {
    if (this.failure !== 'status') return false;
    return (
      this.status === 503 ||
      this.status === 529 ||
      this.type === 'overloaded_error' ||
      this.code === 'server_is_overloaded'
    );
  }

  /** May the next provider be tried (if nothing reached the client yet)? */
  get retryable(): boolean {
    if (this.failure === 'connect' || this.failure === 'timeout') return true;
    if (this.failure === 'status') return this.status === 429 || (this.status ?? 0) >= 500;
    return false;
  }
}
