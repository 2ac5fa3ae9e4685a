/**
 * The audit log in the admin API (README, "Admin API"): an operator reads every entry (or one account's),
 * an owner its own account's entries. Newest first, paged with `before`.
 */
import type { FastifyInstance } from 'fastify';
import type { Gantry } from '../context.js';
import { GantryError } from '../errors.js';
import { DEFAULT_AUDIT_LIMIT } from './audit.js';
import { invalidParameter, listSchema, readLimit, readQueryString, routeSchema } from './records.js';
import { ADMIN_PREFIX, scopeOf } from './routes.js';

const MAX_LIMIT = 500;

export function registerAuditRoutes(app: FastifyInstance, gantry: Gantry): void {
  app.get<{ Querystring: Record<string, string | undefined> }>(
    `${ADMIN_PREFIX}/audit`,
    {
      schema: routeSchema({
        summary: 'Audit log entries, newest first',
        tags: ['admin'],
        querystring: {
          type: 'object',
          properties: {
            account: { type: 'string', description: "One account's entries (an owner: always its own)" },
            limit: { type: 'integer', minimum: 1, maximum: MAX_LIMIT, default: DEFAULT_AUDIT_LIMIT },
            before: { type: 'string', description: 'Entries older than this entry id (paging)' },
          },
        },
        response: {
          200: listSchema({
            type: 'object',
            properties: {
              id: { type: 'string' },
              at: { type: 'string', format: 'date-time' },
              actor: { type: 'string', description: 'admin:<admin key name> or key:<API key id>' },
              action: { type: 'string' },
              account_id: { type: ['string', 'null'] },
              target: { type: 'string' },
              details: { type: 'object', additionalProperties: true },
            },
          }),
        },
      }),
    },
    async (request) => {
      const scope = scopeOf(request);
      const asked = readQueryString(request.query.account, 'account');
      let accountId = asked;
      if (scope.role === 'owner') {
        if (asked !== undefined && asked !== scope.account.id) {
          throw new GantryError('NOT_FOUND', { message: 'Account not found' });
        }
        accountId = scope.account.id;
      }
      const limit = readLimit(request.query.limit, 'limit', DEFAULT_AUDIT_LIMIT, MAX_LIMIT);
      const before = readQueryString(request.query.before, 'before', 64);
      let entries: Awaited<ReturnType<typeof gantry.plane.audit.list>>;
      try {
        entries = await gantry.plane.audit.list({
          ...(accountId === undefined ? {} : { accountId }),
          ...(before === undefined ? {} : { before }),
          limit,
        });
      } catch (error) {
        if (error instanceof RangeError) {
          throw invalidParameter('before', 'before must be the id of an audit entry');
        }
        throw error;
      }
      return {
        data: entries.map((e) => ({
          id: e.id,
          at: new Date(e.at).toISOString(),
          actor: e.actor,
          action: e.action,
          account_id: e.accountId,
          target: e.target,
          details: e.details,
        })),
      };
    },
  );
}
