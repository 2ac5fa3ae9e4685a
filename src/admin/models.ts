/**
 * Models in the admin API (README, "Status page" → "Models and incidents"): the catalogue with each
 * model's shown status and override; operators set and clear a model's status override.
 */
import type { FastifyInstance } from 'fastify';
import type { CatalogModel } from '../catalog.js';
import type { Gantry } from '../context.js';
import { GantryError } from '../errors.js';
import type { StatusOverride } from '../status/overrides.js';
import { audit, invalidParameter, listSchema } from './records.js';
import { ADMIN_PREFIX, scopeOf } from './routes.js';
import { requireOperator } from './scope.js';

const STATUSES = ['operational', 'degraded', 'offline'] as const;
const MAX_REASON = 500;

const MODEL_SCHEMA = {
  type: 'object',
  properties: {
    id: { type: 'string', description: 'The namespace' },
    name: { type: 'string' },
    type: { type: 'string' },
    visibility: { type: 'string', enum: ['public', 'private'] },
    status: { type: 'string', enum: STATUSES },
    status_reason: { type: ['string', 'null'] },
    override: {
      type: ['object', 'null'],
      properties: {
        status: { type: 'string', enum: STATUSES },
        reason: { type: 'string' },
        set_by: { type: 'string' },
        at: { type: 'string', format: 'date-time' },
      },
    },
    pricing: { type: 'object' },
  },
} as const;

const PARAMS = {
  type: 'object',
  properties: { owner: { type: 'string' }, name: { type: 'string' } },
  required: ['owner', 'name'],
} as const;

export function registerModelAdminRoutes(app: FastifyInstance, gantry: Gantry): void {
  const entryOf = (model: CatalogModel) => {
    const entry = model.entry;
    const shown = gantry.catalog.statusOf(entry, gantry.routing.statusOf(entry.namespace));
    const override = gantry.plane.overrides.get(entry.namespace);
    return {
      id: entry.namespace,
      name: entry.name ?? entry.namespace,
      type: model.view.type,
      visibility: entry.accounts === undefined ? 'public' : 'private',
      status: shown.status,
      status_reason: shown.reason,
      override:
        override === undefined
          ? null
          : {
              status: override.status,
              reason: override.reason,
              set_by: override.setBy,
              at: new Date(override.at).toISOString(),
            },
      pricing: model.view.pricing,
    };
  };

  const modelOf = (params: unknown): CatalogModel => {
    const { owner, name } = params as { owner: string; name: string };
    const namespace = `${owner}/${name}`;
    const model = gantry.catalog.all().find((m) => m.entry.namespace === namespace);
    if (model === undefined) throw new GantryError('NOT_FOUND', { message: `Model ${namespace} not found` });
    return model;
  };

  app.get(
    `${ADMIN_PREFIX}/models`,
    {
      schema: {
        summary:
          'List the models with their shown status and override (an owner sees those its account may use)',
        tags: ['admin'],
        response: { 200: listSchema(MODEL_SCHEMA) },
      },
    },
    async (request) => {
      const scope = scopeOf(request);
      const models = scope.role === 'owner' ? gantry.catalog.visibleTo(scope.account) : gantry.catalog.all();
      return { data: models.map(entryOf) };
    },
  );

  app.put(
    `${ADMIN_PREFIX}/models/:owner/:name/status`,
    {
      schema: {
        summary: "Override a model's status (shown everywhere; offline also refuses its calls)",
        tags: ['admin'],
        params: PARAMS,
        body: {
          type: 'object',
          required: ['status', 'reason'],
          properties: {
            status: { type: 'string', enum: STATUSES },
            reason: { type: 'string', minLength: 1, maxLength: MAX_REASON },
          },
        },
        response: { 200: MODEL_SCHEMA },
      },
    },
    async (request) => {
      const scope = scopeOf(request);
      requireOperator(scope);
      const model = modelOf(request.params);
      const body = (request.body ?? {}) as { status?: unknown; reason?: unknown };
      if (typeof body !== 'object' || body === null)
        throw invalidParameter('status', 'send {"status", "reason"}');
      if (typeof body.status !== 'string' || !(STATUSES as readonly string[]).includes(body.status)) {
        throw invalidParameter('status', 'status must be one of operational, degraded, offline');
      }
      if (typeof body.reason !== 'string' || body.reason.trim() === '' || body.reason.length > MAX_REASON) {
        throw invalidParameter('reason', `reason must be a string of 1 to ${MAX_REASON} characters`);
      }
      const override: StatusOverride = {
        status: body.status as StatusOverride['status'],
        reason: body.reason,
        setBy: scope.actor,
        at: Date.now(),
      };
      await gantry.plane.overrides.set(model.entry.namespace, override);
      // Recorded in the status history now (other instances within a second): the page's bars and feed.
      gantry.routing.judgeAll();
      await audit(gantry, request, scope, {
        action: 'model.status.set',
        accountId: null,
        target: model.entry.namespace,
        details: { status: override.status, reason: override.reason },
      });
      return entryOf(model);
    },
  );

  app.delete(
    `${ADMIN_PREFIX}/models/:owner/:name/status`,
    {
      schema: {
        summary: "Clear a model's status override (back to the status judged from its traffic)",
        tags: ['admin'],
        params: PARAMS,
        response: { 200: MODEL_SCHEMA },
      },
    },
    async (request) => {
      const scope = scopeOf(request);
      requireOperator(scope);
      const model = modelOf(request.params);
      const had = await gantry.plane.overrides.clear(model.entry.namespace);
      gantry.routing.judgeAll();
      await audit(gantry, request, scope, {
        action: 'model.status.clear',
        accountId: null,
        target: model.entry.namespace,
        details: { had_override: had },
      });
      return entryOf(model);
    },
  );
}
