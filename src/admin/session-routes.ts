/**
 * Console sign-in (README, "Console"): POST /admin/v1/session with a key sets the session cookie and answers
 * the session (role, account, CSRF token); GET answers the current session; DELETE signs out.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Gantry } from '../context.js';
import { GantryError } from '../errors.js';
import { getSessionSchema, signInSchema, signOutSchema } from '../openapi/schemas/admin.js';
import { ADMIN_PREFIX } from './routes.js';
import type { Scope } from './scope.js';
import { type SessionClaims, sessionCookie } from './session.js';

/**
 * Failed sign-ins one client address may make per minute before it is refused for the rest of it. Counted
 * per instance, by the client's address (request.ip: the connection's, or the one a proxy named in
 * `server.trust_proxy` forwarded).
 */
const FAILED_SIGN_INS_PER_MINUTE = 10;
/** Client addresses tracked at most: past it the oldest is forgotten, never every one at once. */
const MAX_TRACKED_ADDRESSES = 10_000;

export function registerSessionRoutes(app: FastifyInstance, gantry: Gantry): void {
  const failures = new Map<string, { count: number; until: number }>();
  const secure = (request: FastifyRequest): boolean =>
    request.protocol === 'https' || (gantry.config.server.publicUrl ?? '').startsWith('https:');

  app.post(`${ADMIN_PREFIX}/session`, { schema: signInSchema }, async (request, reply) => {
    if (!gantry.config.web.console.enabled) throw new GantryError('NOT_FOUND');
    const now = Date.now();
    const seen = failures.get(request.ip);
    if (seen && seen.until > now && seen.count >= FAILED_SIGN_INS_PER_MINUTE) {
      const wait = Math.ceil((seen.until - now) / 1000);
      throw new GantryError('RATE_LIMIT_EXCEEDED', {
        message: 'Too many failed sign-ins',
        headers: { 'retry-after': String(wait) },
      });
    }
    const body = request.body as { key?: unknown } | undefined;
    if (body === undefined || body === null || typeof body !== 'object') {
      throw new GantryError('INVALID_REQUEST', { message: 'Send {"key": "<your key>"}' });
    }
    if (typeof body.key !== 'string' || body.key.length === 0 || body.key.length > 256) {
      throw new GantryError('INVALID_PARAMETER', {
        param: 'key',
        details: 'key: a string of 1 to 256 characters',
      });
    }
    let signed: ReturnType<typeof gantry.plane.auth.signIn>;
    try {
      signed = gantry.plane.auth.signIn(body.key, gantry.config.web.console.sessionMs);
    } catch (err) {
      let entry = seen && seen.until > now ? seen : undefined;
      if (entry === undefined) {
        // A new window goes to the end of the Map's insertion order: the oldest stay first.
        failures.delete(request.ip);
        entry = { count: 0, until: now + 60_000 };
        failures.set(request.ip, entry);
      }
      entry.count++;
      for (const oldest of failures.keys()) {
        if (failures.size <= MAX_TRACKED_ADDRESSES) break;
        failures.delete(oldest);
      }
      throw err;
    }
    // A success does not reset the count: one valid key must not buy another round of guesses.
    reply.header(
      'set-cookie',
      sessionCookie(signed.cookie, gantry.config.web.console.sessionMs, secure(request)),
    );
    reply.header('cache-control', 'no-store');
    await gantry.plane.audit.record({
      actor: signed.scope.actor,
      action: 'session.create',
      accountId: signed.scope.role === 'owner' ? signed.scope.account.id : null,
      target: signed.scope.actor,
      details: { via: 'console' },
    });
    return sessionView(gantry, signed.claims, signed.scope);
  });

  app.get(`${ADMIN_PREFIX}/session`, { schema: getSessionSchema }, async (request, reply) => {
    const claims = gantry.plane.auth.session(request);
    if (claims === undefined) throw new GantryError('UNAUTHORIZED', { message: 'Not signed in' });
    const scope = gantry.plane.auth.scope(request);
    reply.header('cache-control', 'no-store');
    return sessionView(gantry, claims, scope);
  });

  app.delete(
    `${ADMIN_PREFIX}/session`,
    { schema: signOutSchema },
    async (request: FastifyRequest, reply: FastifyReply) => {
      reply.header('set-cookie', sessionCookie('', 0, secure(request)));
      return { signed_out: true };
    },
  );
}

function sessionView(gantry: Gantry, claims: SessionClaims, scope: Scope) {
  return {
    role: scope.role,
    actor: scope.actor,
    account:
      scope.role === 'owner'
        ? { id: scope.account.id, name: scope.account.name, tier: scope.account.tier }
        : null,
    key: scope.role === 'owner' ? { id: scope.key.id, name: scope.key.name, prefix: scope.key.prefix } : null,
    csrf_token: gantry.plane.auth.sessions.csrfToken(claims),
    expires_at: new Date(claims.exp).toISOString(),
  };
}
