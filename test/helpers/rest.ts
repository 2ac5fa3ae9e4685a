/** A REST answer as the tests read it: status, headers, the parsed JSON body (undefined if not JSON), the text. */
export interface Res<T> {
  status: number;
  headers: Headers;
  body: T;
  text: string;
}

export interface RestOptions {
  /** Sent as `x-api-key`; null sends none. */
  key: string | null;
  /** JSON-encoded. */
  body?: unknown;
  /** Sent as is (no JSON encoding). */
  raw?: string;
  /** Of a body; application/json unless given, none when null. */
  contentType?: string | null;
  headers?: Record<string, string>;
}

/** One request to Gantry's REST API with fetch; `path` is relative to `origin` or a whole URL. */
export async function restCall<T>(
  origin: string,
  method: string,
  path: string,
  options: RestOptions,
): Promise<Res<T>> {
  const headers: Record<string, string> = { ...options.headers };
  if (options.key !== null) headers['x-api-key'] = options.key;
  let body: string | undefined;
  if (options.raw !== undefined) body = options.raw;
  else if (options.body !== undefined) body = JSON.stringify(options.body);
  const contentType = options.contentType === undefined ? 'application/json' : options.contentType;
  if (body !== undefined && contentType !== null) headers['content-type'] = contentType;
  const url = path.startsWith('http') ? path : origin + path;
  const res = await fetch(url, { method, headers, ...(body === undefined ? {} : { body }) });
  const text = await res.text();
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  return { status: res.status, headers: res.headers, body: parsed as T, text };
}
