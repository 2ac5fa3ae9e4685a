/**
 * Who is calling the admin API (README, "Admin API"): an operator (an admin key, or a console session
 * signed in with one) or an account's owner (a console session signed in with one of the account's API
 * keys; an API key itself is never accepted here). An owner reaches only its own account: anything else
 * answers as if it did not exist.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { Principal } from '../auth/authenticate.js';
import { hashKey } from '../auth/keys.js';
import type { AdminKeyEntry } from '../config/web.js';
import { GantryError } from '../errors.js';
import type { Account, ApiKeyRecord, Store } from '../store/types.js';
import {
  CSRF_HEADER,
  readCookie,
  SESSION_COOKIE,
  type SessionClaims,
  type SessionSigner,
} from './session.js';

export type Scope =
  | { role: 'operator' /** `admin:<key name>`, as the audit log records it. */; actor: string; via: Via }
  | { role: 'owner'; actor: string; via: Via; account: Account; key: ApiKeyRecord };

type Via = 'admin_key' | 'session';

interface RequestLike {
  readonly method: string;
  readonly headers: IncomingHttpHeaders;
}

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

export class AdminAuth {
  private readonly adminByHash: Map<string, string>;
  /** adminKeyTag of each admin key -> its name: what an operator session is checked against. */
  private readonly adminByTag: Map<string, string>;

  constructor(
    adminKeys: readonly AdminKeyEntry[],
    readonly sessions: SessionSigner,
    private readonly store: Store,
  ) {
    this.adminByHash = new Map(adminKeys.map((k) => [k.sha256, k.name]));
    this.adminByTag = new Map(adminKeys.map((k) => [sessions.adminKeyTag(k.sha256), k.name]));
  }

  get hasAdminKeys(): boolean {
    return this.adminByHash.size > 0;
  }

  /** The admin key's name, when `key` is one. */
  adminKeyName(key: string): string | undefined {
    return this.adminByHash.get(hashKey(key));
  }

  /**
   * Sign-in with a key: an admin key makes an operator session, a live API key of an active account an
   * owner session. Throws UNAUTHORIZED / ACCOUNT_SUSPENDED otherwise.
   */
  signIn(key: string, sessionMs: number): { cookie: string; claims: SessionClaims; scope: Scope } {
    const exp = Date.now() + sessionMs;
    const sha256 = hashKey(key);
    const admin = this.adminByHash.get(sha256);
    if (admin !== undefined) {
      const kh = this.sessions.adminKeyTag(sha256);
      const { value, claims } = this.sessions.issue({ role: 'operator', sub: admin, kh, exp });
      return { cookie: value, claims, scope: this.fromClaims(claims) as Scope };
    }
    const found = this.store.findKeyByHash(sha256);
    if (!found) throw new GantryError('UNAUTHORIZED', { message: 'Invalid or revoked key' });
    if (found.account.status === 'suspended') throw new GantryError('ACCOUNT_SUSPENDED');
    const { value, claims } = this.sessions.issue({
      role: 'owner',
      sub: found.key.id,
      acct: found.account.id,
      exp,
    });
    return { cookie: value, claims, scope: this.fromClaims(claims) as Scope };
  }

  /** The session's claims, if the request carries a valid session cookie. */
  session(request: RequestLike): SessionClaims | undefined {
    return this.sessions.read(readCookie(request.headers.cookie, SESSION_COOKIE));
  }

  /**
   * The admin API's caller: `Authorization: Bearer <admin key>`, or a session cookie (with the CSRF token
   * on every method that changes state). Throws UNAUTHORIZED (no or bad credentials), ACCOUNT_SUSPENDED,
   * FORBIDDEN (a missing or wrong CSRF token).
   */
  scope(request: RequestLike): Scope {
    const auth = request.headers.authorization;
    if (typeof auth === 'string' && auth.startsWith('Bearer ')) {
      const name = this.adminKeyName(auth.slice(7).trim());
      if (name === undefined) {
        throw new GantryError('UNAUTHORIZED', {
          message: 'Invalid admin key',
          details: 'The admin API takes an admin key (README, "Admin API"), not an account API key.',
        });
      }
      return { role: 'operator', actor: `admin:${name}`, via: 'admin_key' };
    }
    const claims = this.session(request);
    if (claims === undefined) {
      throw new GantryError('UNAUTHORIZED', {
        message: 'Missing admin key or console session',
        details: 'Send an admin key as Authorization: Bearer <key>, or sign in to the console.',
      });
    }
    if (!SAFE_METHODS.has(request.method) && !this.sessions.checkCsrf(claims, request.headers[CSRF_HEADER])) {
      throw new GantryError('FORBIDDEN', {
        message: 'Missing or wrong CSRF token',
        details: `A console session's change must carry its ${CSRF_HEADER} header.`,
      });
    }
    const scope = this.fromClaims(claims);
    if (scope === undefined) throw new GantryError('UNAUTHORIZED', { message: 'The session has ended' });
    return scope;
  }

  /**
   * A /v1 call made by the console (the playground, the prediction form) on an owner's session: the
   * principal of the session's key, with the CSRF token required on every method. undefined when the
   * request carries no session cookie (the caller then needs an API key as usual).
   */
  principalFromSession(request: RequestLike): (Principal & { via: 'session' }) | undefined {
    const claims = this.session(request);
    if (claims === undefined) return undefined;
    if (!this.sessions.checkCsrf(claims, request.headers[CSRF_HEADER])) {
      throw new GantryError('FORBIDDEN', {
        message: 'Missing or wrong CSRF token',
        details: `A console session's API call must carry its ${CSRF_HEADER} header.`,
      });
    }
    const scope = this.fromClaims(claims);
    if (scope === undefined) throw new GantryError('UNAUTHORIZED', { message: 'The session has ended' });
    if (scope.role !== 'owner') {
      throw new GantryError('FORBIDDEN', {
        message: 'An operator session cannot call the API',
        details: "Sign in to the console with one of the account's API keys to use the playground.",
      });
    }
    if (scope.account.status === 'suspended') throw new GantryError('ACCOUNT_SUSPENDED');
    return { account: scope.account, key: scope.key, via: 'session' };
  }

  /** The scope of valid claims: an owner's key must still be live and its account active. */
  private fromClaims(claims: SessionClaims): Scope | undefined {
    if (claims.role === 'operator') {
      // An admin key removed from the config, or replaced by another under the same name, ends its
      // sessions at the next start: the session names the key by a MAC of its hash.
      if (claims.kh === undefined || this.adminByTag.get(claims.kh) !== claims.sub) return undefined;
      return { role: 'operator', actor: `admin:${claims.sub}`, via: 'session' };
    }
    const key = this.store.getKey(claims.sub);
    if (key === undefined || key.revokedAt !== null || key.accountId !== claims.acct) return undefined;
    const account = this.store.getAccount(key.accountId);
    if (account === undefined) return undefined;
    if (account.status === 'suspended') throw new GantryError('ACCOUNT_SUSPENDED');
    return { role: 'owner', actor: `key:${key.id}`, via: 'session', account, key };
  }
}

/** An owner may touch only its own account: another account's id answers NOT_FOUND, as if it did not exist. */
export function requireAccount(scope: Scope, accountId: string): void {
  if (scope.role === 'owner' && scope.account.id !== accountId) {
    throw new GantryError('NOT_FOUND', { message: 'Account not found' });
  }
}

/** Operator-only actions (creating accounts, granting credits, incidents, model status). */
export function requireOperator(scope: Scope): void {
  if (scope.role !== 'operator') {
    throw new GantryError('FORBIDDEN', { message: 'This action needs an operator (an admin key)' });
  }
}
