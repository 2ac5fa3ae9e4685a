/**
 * Console sessions (README, "Console"): a signed cookie, so every instance that shares GANTRY_SECRET_KEY
 * reads it without a shared session store. The cookie holds who signed in (an admin key's name and a MAC of
 * its hash, or an API key's id and its account), never a key. An owner's session is checked against its key on every request,
 * so revoking the key (or suspending the account) ends the session at once.
 *
 * CSRF: the cookie is HttpOnly and SameSite=Strict, and every request made with it that changes state
 * (and every /v1 call) must also carry the session's CSRF token in the `x-csrf-token` header. The token is
 * returned by the sign-in answer and by GET /admin/v1/session; another site can read neither.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

export const SESSION_COOKIE = 'gantry_session';
export const CSRF_HEADER = 'x-csrf-token';

export interface SessionClaims {
  role: 'operator' | 'owner';
  /** operator: the admin key's name; owner: the API key's id. */
  sub: string;
  /** owner: the account's id. */
  acct?: string;
  /**
   * operator: a short MAC of the admin key's SHA-256 (adminKeyTag), so a key rotated under the same name
   * (GANTRY_ADMIN_KEY is always `env`) ends the sessions signed in with the old one.
   */
  kh?: string;
  /** Expiry, epoch ms. */
  exp: number;
  /** Random per session: the CSRF token derives from it. */
  n: string;
}

export class SessionSigner {
  private readonly key: Buffer;

  constructor(secretKey: Buffer) {
    this.key = createHmac('sha256', secretKey).update('gantry-console-session').digest();
  }

  issue(claims: Omit<SessionClaims, 'n'>): { value: string; claims: SessionClaims } {
    const full: SessionClaims = { ...claims, n: randomBytes(12).toString('base64url') };
    const payload = Buffer.from(JSON.stringify(full)).toString('base64url');
    return { value: `${payload}.${this.sign(payload)}`, claims: full };
  }

  /** The claims of a cookie value this signer issued and that has not expired; undefined otherwise. */
  read(value: string | undefined, now = Date.now()): SessionClaims | undefined {
    if (value === undefined || value.length > 2048) return undefined;
    const dot = value.indexOf('.');
    if (dot <= 0) return undefined;
    const payload = value.slice(0, dot);
    if (!safeEqual(value.slice(dot + 1), this.sign(payload))) return undefined;
    let claims: SessionClaims;
    try {
      claims = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as SessionClaims;
    } catch {
      return undefined;
    }
    if (typeof claims.exp !== 'number' || claims.exp <= now) return undefined;
    if (claims.role !== 'operator' && claims.role !== 'owner') return undefined;
    if (typeof claims.sub !== 'string' || typeof claims.n !== 'string') return undefined;
    if (claims.kh !== undefined && typeof claims.kh !== 'string') return undefined;
    return claims;
  }

  /** What an operator session keeps of its admin key: a MAC of its SHA-256, never the key or its hash. */
  adminKeyTag(sha256: string): string {
    return createHmac('sha256', this.key).update(`admin-key:${sha256}`).digest('base64url').slice(0, 22);
  }

  csrfToken(claims: SessionClaims): string {
    return createHmac('sha256', this.key).update(`csrf:${claims.n}`).digest('base64url');
  }

  checkCsrf(claims: SessionClaims, header: string | string[] | undefined): boolean {
    return typeof header === 'string' && safeEqual(header, this.csrfToken(claims));
  }

  private sign(payload: string): string {
    return createHmac('sha256', this.key).update(payload).digest('base64url');
  }
}

function safeEqual(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

/** The value of one cookie in a Cookie header. */
export function readCookie(header: string | undefined, name: string): string | undefined {
  if (!header) return undefined;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq < 0) continue;
    if (part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

/** Set-Cookie for a session (or, with maxAgeMs 0, its removal). `secure` when served over https. */
export function sessionCookie(value: string, maxAgeMs: number, secure: boolean): string {
  const parts = [
    `${SESSION_COOKIE}=${value}`,
    'Path=/',
    'HttpOnly',
    'SameSite=Strict',
    `Max-Age=${Math.floor(maxAgeMs / 1000)}`,
  ];
  if (secure) parts.push('Secure');
  return parts.join('; ');
}
