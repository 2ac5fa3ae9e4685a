/**
 * The admin API under /admin/v1 (README, "Admin API"). Every route here resolves its caller's Scope first
 * (scope.ts): an admin key, or a console session. Each area registers its own routes.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Gantry } from '../context.js';
import { registerAccountRoutes } from './accounts.js';
import { registerAuditRoutes } from './audit-routes.js';
import { registerCreditRoutes } from './credits.js';
import { registerIncidentRoutes } from './incidents.js';
import { registerKeyRoutes } from './keys.js';
import { registerModelAdminRoutes } from './models.js';
import { registerPredictionAdminRoutes } from './predictions.js';
import type { Scope } from './scope.js';
import { registerSessionRoutes } from './session-routes.js';
import { registerUsageRoutes } from './usage.js';

export const ADMIN_PREFIX = '/admin/v1';

declare module 'fastify' {
  interface FastifyRequest {
    /** The admin API caller; set on /admin/v1 routes except sign-in. */
    scope: Scope | null;
  }
}

/** The caller of an admin route (set by the prefix's hook). */
export function scopeOf(request: FastifyRequest): Scope {
  if (request.scope === null) throw new Error('admin route without a scope');
  return request.scope;
}

export function registerAdminRoutes(app: FastifyInstance, gantry: Gantry): void {
  app.decorateRequest('scope', null);
  app.addHook('onRequest', async (request) => {
    // The matched route, not the raw URL: the router decodes the path, so /%61dmin/v1/accounts reaches
    // /admin/v1/accounts and must be checked as it. An unmatched URL answers 404 without a scope.
    const route = request.routeOptions.url;
    if (route === undefined || !route.startsWith(`${ADMIN_PREFIX}/`)) return;
    // Sign-in and the session's own routes read the cookie themselves.
    if (route === `${ADMIN_PREFIX}/session`) return;
    request.scope = gantry.plane.auth.scope(request);
  });
  registerSessionRoutes(app, gantry);
  registerAccountRoutes(app, gantry);
  registerKeyRoutes(app, gantry);
  registerCreditRoutes(app, gantry);
  registerUsageRoutes(app, gantry);
  registerPredictionAdminRoutes(app, gantry);
  registerModelAdminRoutes(app, gantry);
  registerIncidentRoutes(app, gantry);
  registerAuditRoutes(app, gantry);
}
