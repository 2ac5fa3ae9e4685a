/**
 * Calls to Gantry from the console: same origin, the session cookie sent by the browser, and the CSRF token
 * (kept in memory only, never in storage) on every call. No key ever passes through here except the one
 * sign-in call, whose key is not kept.
 */

export interface Session {
  role: 'operator' | 'owner';
  actor: string;
  account: { id: string; name: string; tier: string } | null;
  key: { id: string; name: string; prefix: string } | null;
  csrf_token: string;
  expires_at: string;
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

let csrf = '';
let onSignedOut: () => void = () => {};

export function setCsrf(token: string): void {
  csrf = token;
}

/** Called when an answer says the session is gone (expired, signed out, its key revoked). */
export function whenSignedOut(handler: () => void): void {
  onSignedOut = handler;
}

function messageOf(status: number, body: unknown): string {
  const error = (body as { error?: { message?: unknown } } | null)?.error;
  if (error && typeof error.message === 'string') return error.message;
  return `HTTP ${status}`;
}

export async function request(method: string, path: string, body?: unknown, signal?: AbortSignal) {
  const headers: Record<string, string> = { accept: 'application/json' };
  if (csrf) headers['x-csrf-token'] = csrf;
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(path, {
    method,
    headers,
    credentials: 'same-origin',
    body: body === undefined ? null : JSON.stringify(body),
    signal: signal ?? null,
  });
  if (res.status === 401 && path !== '/admin/v1/session') onSignedOut();
  return res;
}

export async function api<T>(method: string, path: string, body?: unknown): Promise<T> {
  const res = await request(method, path, body);
  const text = await res.text();
  let parsed: unknown = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    parsed = null;
  }
  if (!res.ok) throw new ApiError(res.status, messageOf(res.status, parsed));
  return parsed as T;
}

/** A query string from the defined, non-empty values. */
export function query(params: Record<string, string | number | undefined | null>): string {
  const search = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '') search.set(k, String(v));
  }
  const text = search.toString();
  return text ? `?${text}` : '';
}

export function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
