/**
 * The HTTP side of a remote classifier (README, "External classifiers"): one undici Pool per
 * classifier, built at start; JSON requests under one deadline per classified text; every way a call
 * can fail becomes ClassifierUnavailable, whose message names the classifier and the reason and never
 * carries the key or the text (the upstream's error message is left out: services echo inputs and
 * masked keys in it; only its status and a short error code are kept).
 */
import { Pool } from 'undici';
import { ClassifierUnavailable } from '../classifier.js';

/** Connections per classifier: the pieces of one long text are sent side by side. */
const CONNECTIONS = 16;
/** An error answer is read only this far (its code is all that is kept). */
const MAX_ERROR_BODY = 16 * 1024;

export class ClassifierClient {
  private readonly pool: Pool;
  /** The URL's path without a trailing slash (a base path a proxy may put in front). */
  readonly basePath: string;
  /** The URL's query string, `?…` or empty. */
  readonly query: string;

  constructor(
    readonly name: string,
    url: string,
    private readonly timeoutMs: number,
  ) {
    const parsed = new URL(url);
    this.basePath = parsed.pathname.replace(/\/+$/, '');
    this.query = parsed.search;
    this.pool = new Pool(parsed.origin, { connections: CONNECTIONS, keepAliveTimeout: 30_000 });
  }

  /**
   * Runs `calls` under one deadline (timeout_ms covers all of them, bodies included) and the request's
   * signal. The first failure ends the others. Whatever goes wrong is thrown as ClassifierUnavailable.
   */
  async within<T>(signal: AbortSignal | undefined, calls: (signal: AbortSignal) => Promise<T>): Promise<T> {
    if (signal?.aborted) throw this.unavailable('the request was cancelled');
    const deadline = new AbortController();
    const finished = new AbortController();
    const timer = setTimeout(() => deadline.abort(), this.timeoutMs);
    const linked = AbortSignal.any(
      signal ? [signal, deadline.signal, finished.signal] : [deadline.signal, finished.signal],
    );
    try {
      return await calls(linked);
    } catch (err) {
      if (err instanceof ClassifierUnavailable) throw err;
      if (deadline.signal.aborted) throw this.unavailable(`timed out after ${this.timeoutMs} ms`, err);
      if (signal?.aborted) throw this.unavailable('the request was cancelled', err);
      const code = (err as { code?: unknown }).code;
      const reason = typeof code === 'string' && /^[A-Z0-9_]+$/.test(code) ? code : 'connection error';
      throw this.unavailable(`could not reach the service (${reason})`, err);
    } finally {
      clearTimeout(timer);
      finished.abort();
    }
  }

  /** POSTs a JSON body to `path` (after the URL's own path) and returns the parsed 2xx answer. */
  async postJson(
    path: string,
    headers: Record<string, string>,
    body: unknown,
    signal: AbortSignal,
  ): Promise<unknown> {
    const res = await this.pool.request({
      method: 'POST',
      path: `${this.basePath}${path}`,
      headers: { ...headers, 'content-type': 'application/json', accept: 'application/json' },
      body: JSON.stringify(body),
      signal,
    });
    if (res.statusCode < 200 || res.statusCode > 299) {
      const text = await readBounded(res.body, MAX_ERROR_BODY);
      const code = errorCode(text);
      throw this.unavailable(`the service answered HTTP ${res.statusCode}${code ? ` (${code})` : ''}`);
    }
    const text = await res.body.text();
    try {
      return JSON.parse(text) as unknown;
    } catch {
      throw this.unavailable('the service answered with a body that is not JSON');
    }
  }

  unavailable(reason: string, cause?: unknown): ClassifierUnavailable {
    return new ClassifierUnavailable(
      this.name,
      `safety classifier "${this.name}": ${reason}`,
      cause === undefined ? undefined : { cause },
    );
  }

  close(): Promise<void> {
    return this.pool.close();
  }
}

async function readBounded(body: AsyncIterable<Buffer> & { dump?: () => Promise<void> }, limit: number) {
  const parts: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    parts.push(chunk);
    size += chunk.length;
    if (size >= limit) break;
  }
  return Buffer.concat(parts).toString('utf8');
}

/**
 * The error's code, when it is a short token: OpenAI's `{"error": {"code": "invalid_api_key", …}}`,
 * Azure's `{"error": {"code": "InvalidRequestBody", …}}` (Azure's 401 has code "401").
 */
function errorCode(text: string): string | undefined {
  try {
    const code = (JSON.parse(text) as { error?: { code?: unknown } }).error?.code;
    return typeof code === 'string' && /^[A-Za-z0-9_.-]{1,64}$/.test(code) ? code : undefined;
  } catch {
    return undefined;
  }
}
