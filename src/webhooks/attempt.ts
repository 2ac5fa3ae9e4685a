/**
 * One webhook delivery attempt: a single POST and a verdict on what to do next. Scheduling, retries and
 * bookkeeping belong to the caller; this never throws, so a receiver's behaviour cannot crash a worker.
 *
 * Verdicts follow the Standard Webhooks etiquette:
 * - 2xx is delivered;
 * - 408, 425, 429, 5xx, network errors and timeouts are worth retrying (honouring Retry-After);
 * - any other status is a permanent rejection: 3xx are not followed (a redirect could lead past the
 *   SSRF guard, and the receiver should fix its URL) and other 4xx will not change on retry;
 * - a target the SSRF guard refuses, or headers undici refuses to send, are rejected too, with `error`.
 */
import { type Dispatcher, request } from 'undici';
import { isForbiddenWebhookTargetError } from './ssrf.js';

export type AttemptResult =
  | { outcome: 'delivered'; status: number; ms: number }
  | { outcome: 'retry'; status?: number; error?: string; retryAfterMs?: number; ms: number }
  /** `status` for an HTTP answer, `error` when the request could not be made at all (forbidden target). */
  | { outcome: 'rejected'; status?: number; error?: string; ms: number };

export interface DeliverOnceInput {
  url: string | URL;
  /** The exact JSON text that was signed. */
  body: string;
  /** Signature headers plus the caller's `auth_header`; content-type is always application/json. */
  headers: Readonly<Record<string, string>>;
  /** Budget for the whole exchange: connect, answer and reading its body. */
  timeoutMs: number;
  /** Normally the agent from `createGuardedAgent`. */
  dispatcher: Dispatcher;
  /** Aborts the attempt early (e.g. on shutdown); it then counts as a retry. */
  signal?: AbortSignal;
  /** How much of the receiver's answer is read before the connection is dropped (default 64 KiB). */
  maxResponseBytes?: number;
}

const DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024;
const USER_AGENT = 'Gantry-Webhooks/1';
const RETRYABLE_STATUSES = new Set([408, 425, 429]);
/** Error texts end up in delivery logs; keep them short. */
const MAX_ERROR_LENGTH = 200;

export async function deliverOnce(input: DeliverOnceInput): Promise<AttemptResult> {
  const started = performance.now();
  const elapsed = (): number => Math.round(performance.now() - started);
  const timeout = AbortSignal.timeout(input.timeoutMs);
  const signal = input.signal ? AbortSignal.any([timeout, input.signal]) : timeout;
  try {
    const response = await request(input.url, {
      method: 'POST',
      headers: requestHeaders(input.headers),
      body: input.body,
      dispatcher: input.dispatcher,
      signal,
      headersTimeout: input.timeoutMs,
      bodyTimeout: input.timeoutMs,
    });
    // Read (and drop) the answer so the connection can be reused, but never more than the bound.
    await discard(response.body, input.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES);
    return verdictForStatus(response.statusCode, response.headers['retry-after'], elapsed());
  } catch (err) {
    return verdictForError(err, { timedOut: timeout.aborted, timeoutMs: input.timeoutMs }, elapsed());
  }
}

/** What a status means for delivery; exported for the delivery worker's tests and metrics. */
export function verdictForStatus(
  status: number,
  retryAfter: string | string[] | undefined,
  ms: number,
  now = Date.now(),
): AttemptResult {
  if (status >= 200 && status < 300) return { outcome: 'delivered', status, ms };
  if (RETRYABLE_STATUSES.has(status) || status >= 500) {
    const retryAfterMs = parseRetryAfter(Array.isArray(retryAfter) ? retryAfter[0] : retryAfter, now);
    return retryAfterMs === undefined
      ? { outcome: 'retry', status, ms }
      : { outcome: 'retry', status, retryAfterMs, ms };
  }
  return { outcome: 'rejected', status, ms };
}

/** `Retry-After` as milliseconds from `now`: delta-seconds or an HTTP date; undefined when unusable. */
export function parseRetryAfter(value: string | undefined, now = Date.now()): number | undefined {
  if (value === undefined) return undefined;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  // Every HTTP-date form starts with a day name; Date.parse alone would read "-5" as a year.
  if (!/^[A-Za-z]{3}/.test(text)) return undefined;
  const at = Date.parse(text);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}

function verdictForError(
  err: unknown,
  context: { timedOut: boolean; timeoutMs: number },
  ms: number,
): AttemptResult {
  if (isForbiddenWebhookTargetError(err)) return { outcome: 'rejected', error: err.message, ms };
  const code = errorCode(err);
  // A request undici will not put on the wire (e.g. a newline in auth_token) never becomes valid.
  // Its messages name the header, never the value, so they are safe to keep.
  if (code === 'UND_ERR_INVALID_ARG') {
    const message = err instanceof Error ? err.message : 'invalid argument';
    return { outcome: 'rejected', error: `invalid request: ${message}`.slice(0, MAX_ERROR_LENGTH), ms };
  }
  if (context.timedOut || code?.endsWith('_TIMEOUT')) {
    return { outcome: 'retry', error: `timed out after ${context.timeoutMs} ms`, ms };
  }
  const message = err instanceof Error ? err.message : String(err);
  const text = code !== undefined && !message.includes(code) ? `${code}: ${message}` : message;
  return { outcome: 'retry', error: text.slice(0, MAX_ERROR_LENGTH), ms };
}

function errorCode(err: unknown): string | undefined {
  if (err === null || typeof err !== 'object') return undefined;
  // undici puts the socket's errno error (ECONNREFUSED, ECONNRESET…) in `cause` of some of its errors.
  const cause = 'cause' in err ? errorCode(err.cause) : undefined;
  const code = 'code' in err && typeof err.code === 'string' ? err.code : undefined;
  return code ?? cause;
}

/** Caller headers with lower-cased names, so ours cannot be doubled by a different spelling. */
function requestHeaders(headers: Readonly<Record<string, string>>): Record<string, string> {
  const out: Record<string, string> = { 'user-agent': USER_AGENT };
  for (const [name, value] of Object.entries(headers)) out[name.toLowerCase()] = value;
  out['content-type'] = 'application/json';
  return out;
}

async function discard(
  body: AsyncIterable<Buffer> & { destroy(): unknown },
  maxBytes: number,
): Promise<void> {
  let read = 0;
  try {
    for await (const chunk of body) {
      read += chunk.length;
      if (read > maxBytes) break;
    }
  } catch {
    // The verdict is already decided by the status; a body cut short changes nothing.
  } finally {
    body.destroy();
  }
}
