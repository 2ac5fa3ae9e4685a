/**
 * URL file inputs are fetched by Gantry when the prediction runs, before the backend call, and handed to
 * the backend as data: URIs (README.md, Predictions, "File inputs"). The backend would otherwise fetch
 * them from inside our network, where a public name that resolves to a private address (or redirects to
 * one) reaches internal services, and where nothing limits the size.
 *
 * So each http(s) URL gets the output downloads' guard (src/webhooks/ssrf.ts): the URL checked with DNS,
 * the connection's address checked again at connect time (DNS rebinding), each redirect hop checked like
 * the first. `predictions.webhooks.allow_private` lifts the address checks, as it does for webhooks and
 * for the create-time check (input-files.ts). The body is read up to `predictions.max_input_file_bytes`
 * and no further; the whole fetch has a time limit.
 *
 * A failed fetch is final (BackendError, not retryable): it is the caller's URL, not the backend, that
 * failed, and running the job again would fetch the same URL again.
 */
import type { Agent, Dispatcher } from 'undici';
import { request } from 'undici';
import { BackendError, type JsonObject } from '../../providers/predictions/types.js';
import { isValidContentType } from '../blobs/types.js';
import {
  checkWebhookUrl,
  createGuardedAgent,
  isForbiddenWebhookTargetError,
  type ResolveHost,
} from '../webhooks/ssrf.js';
import { fileInputValues } from './input-files.js';

const MAX_REDIRECTS = 3;
const REDIRECT_STATUSES = new Set([301, 302, 303, 307, 308]);
/** Time allowed for one input file: connecting, redirects and the whole body. */
const DEFAULT_TIMEOUT_MS = 60_000;

export interface InputFetchPolicy {
  /** `predictions.max_input_file_bytes`: a longer body is refused as soon as it is seen. */
  maxBytes: number;
  /** `predictions.webhooks.allow_private`: loopback/private/internal targets allowed. */
  allowPrivate: boolean;
  /** Per file; DEFAULT_TIMEOUT_MS by default. */
  timeoutMs?: number;
}

export interface InputFetcherOptions {
  /** Host names exempt from the guard (tests map names to addresses with `resolve`). */
  allowHosts?: readonly string[];
  /** Name resolution, for the URL check and the connections; the system resolver by default. */
  resolve?: ResolveHost;
}

/** A file input that could not be fetched; the message names the input, never its URL's path. */
export class InputFetchError extends BackendError {
  constructor(field: string, reason: string) {
    super(`Could not fetch input ${field}: ${reason}`, { retryable: false });
    this.name = 'InputFetchError';
  }
}

export class InputFetcher {
  private readonly guarded: Agent;
  /** allow_private: no address checks, but the same name resolution. */
  private readonly open: Agent;

  constructor(private readonly options: InputFetcherOptions = {}) {
    this.guarded = createGuardedAgent({ allowPrivate: false, ...options });
    this.open = createGuardedAgent({ ...options, allowPrivate: true });
  }

  /**
   * `input` with every http(s) URL in its file inputs (`fields`, input-files.ts fileFields) replaced by
   * a data: URI of the fetched file; the same object when there is none. One file at a time, so at most
   * one body is being read. `signal` (cancel, shutdown) aborts the fetch with its own reason.
   */
  async inline(
    input: JsonObject,
    fields: readonly string[],
    policy: InputFetchPolicy,
    signal?: AbortSignal,
  ): Promise<JsonObject> {
    const urls = fileInputValues(input, fields).filter((v) => /^https?:\/\//i.test(v.value));
    if (urls.length === 0) return input;
    const result: JsonObject = { ...input };
    for (const { field, name, index, value } of urls) {
      const dataUri = await this.fetchOne(field, value, policy, signal);
      if (index === undefined) {
        result[name] = dataUri;
      } else {
        const items = [...(result[name] as unknown[])];
        items[index] = dataUri;
        result[name] = items;
      }
    }
    return result;
  }

  async close(): Promise<void> {
    await Promise.all([this.guarded.close(), this.open.close()]);
  }

  private async fetchOne(
    field: string,
    url: string,
    policy: InputFetchPolicy,
    outer: AbortSignal | undefined,
  ): Promise<string> {
    const timeoutMs = policy.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    const timeout = AbortSignal.timeout(timeoutMs);
    const signal = outer ? AbortSignal.any([outer, timeout]) : timeout;
    try {
      const response = await this.fetchFollowing(field, url, policy.allowPrivate, signal);
      if (response.statusCode !== 200) {
        await response.body.dump();
        throw new InputFetchError(field, `HTTP ${response.statusCode}`);
      }
      const declared = Number(response.headers['content-length']);
      if (Number.isFinite(declared) && declared > policy.maxBytes) {
        response.body.destroy();
        throw tooLarge(field, policy.maxBytes);
      }
      const chunks: Buffer[] = [];
      let size = 0;
      for await (const chunk of response.body) {
        size += (chunk as Buffer).length;
        if (size > policy.maxBytes) {
          response.body.destroy();
          throw tooLarge(field, policy.maxBytes);
        }
        chunks.push(chunk as Buffer);
      }
      return `data:${contentTypeOf(response)};base64,${Buffer.concat(chunks).toString('base64')}`;
    } catch (error) {
      if (error instanceof InputFetchError) throw error;
      // A cancel or shutdown is the worker's to handle, as during a backend call.
      if (outer?.aborted) throw error;
      if (timeout.aborted) throw new InputFetchError(field, `timed out after ${timeoutMs} ms`);
      if (isForbiddenWebhookTargetError(error)) throw refused(field, error.message);
      throw new InputFetchError(field, describe(error));
    }
  }

  /** The response of `url` after its redirects, each hop's URL checked unless `allowPrivate`. */
  private async fetchFollowing(
    field: string,
    url: string,
    allowPrivate: boolean,
    signal: AbortSignal,
  ): Promise<Dispatcher.ResponseData> {
    let current = url;
    for (let hop = 0; ; hop++) {
      const check = await checkWebhookUrl(current, { allowPrivate, ...this.options });
      if (!check.ok) throw refused(field, check.reason);
      const response = await request(check.url, {
        dispatcher: allowPrivate ? this.open : this.guarded,
        signal,
      });
      const location = response.headers.location;
      if (!REDIRECT_STATUSES.has(response.statusCode) || typeof location !== 'string') return response;
      await response.body.dump();
      if (hop === MAX_REDIRECTS) throw new InputFetchError(field, `more than ${MAX_REDIRECTS} redirects`);
      current = new URL(location, check.url).href;
    }
  }
}

function tooLarge(field: string, maxBytes: number): InputFetchError {
  return new InputFetchError(field, `the file is larger than the ${maxBytes} bytes allowed`);
}

/** The guard's reason, without its webhook wording (`webhook target …`, `(use webhook.auth_header…)`). */
function refused(field: string, reason: string): InputFetchError {
  const text = reason.replace(/^webhook target /, '').replace(/ \(use webhook\.[^)]*\)/, '');
  return new InputFetchError(field, `refused, ${text}`);
}

/** The media type the server gave (parameters dropped), or application/octet-stream. */
function contentTypeOf(response: Dispatcher.ResponseData): string {
  const type = String(response.headers['content-type'] ?? '')
    .split(';')[0]
    ?.trim()
    .toLowerCase();
  return type && isValidContentType(type) ? type : 'application/octet-stream';
}

/** A network failure in words, without the URL (its path or query may carry a token). */
function describe(error: unknown): string {
  const code = (error as NodeJS.ErrnoException).code;
  if (code === 'ENOTFOUND') return 'its host does not resolve';
  if (code === 'ECONNREFUSED') return 'the connection was refused';
  return code ? `network error (${code})` : 'network error';
}
