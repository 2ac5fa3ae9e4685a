import type { FastifyInstance } from 'fastify';
import type { CatalogModel } from '../catalog.js';
import type { Gantry } from '../context.js';
import { rejectOtherMethods } from '../error-handler.js';
import { GantryError, invalidParameter } from '../errors.js';
import { principalOf } from '../inference/resolve.js';
import { getModelSchema, listModelsSchema } from '../openapi/schemas/models.js';

const DEFAULT_PAGE_SIZE = 10;
const MAX_PAGE_SIZE = 100;
const SCHEMA_FIELDS = new Set(['input_schema', 'output_schema']);
const STATUSES = new Set(['operational', 'degraded', 'offline']);

type Query = Record<string, string | undefined>;

/**
 * GET /v1/models and GET /v1/models/{slug} (spec 4.1, 4.2), shaped for spec clients and the OpenAI SDK.
 *
 * The list answers both kinds of client in one body. `models` and `has_more` are the spec's page (ten by
 * default). `data` is OpenAI's list, which OpenAI clients read as complete (the SDK's models.list() never
 * asks for a second page): every model that matches, unless the request pages explicitly (limit, offset,
 * page or per_page), when it is the same page as `models`.
 */
export function registerModelRoutes(app: FastifyInstance, gantry: Gantry): void {
  app.get('/v1/models', { schema: listModelsSchema }, async (request) => {
    const query = request.query as Query;
    const page = readPage(query);
    const views = gantry.catalog.visibleTo(principalOf(request).account).map((m) => viewOf(gantry, m));
    const models = views.filter(matches(query));
    const { offset, limit } = page;
    const items = models.slice(offset, offset + limit);
    const data = page.explicit || models.length <= limit ? items : models;
    return { object: 'list', data, models: items, has_more: offset + limit < models.length };
  });
  rejectOtherMethods(app, '/v1/models', ['GET']);

  // Slugs contain `/` (vendor/model), so the rest of the path is the slug, encoded or not.
  app.get('/v1/models/*', { schema: getModelSchema }, async (request) => {
    const raw = (request.params as { '*': string })['*'];
    const slug = safeDecode(raw);
    const model = gantry.catalog.get(slug, principalOf(request).account);
    if (!model) {
      throw new GantryError('MODEL_NOT_FOUND', {
        message: `Model ${slug} not found`,
        details: 'GET /v1/models lists the models your key may use.',
      });
    }
    return withFields(model, viewOf(gantry, model), (request.query as Query).fields);
  });
  rejectOtherMethods(app, '/v1/models/*', ['GET']);
}

/** The spec's page; `explicit` when the client asked for one (any paging parameter). */
function readPage(query: Query): { offset: number; limit: number; explicit: boolean } {
  if (query.page !== undefined || query.per_page !== undefined) {
    const perPage = readInt(query, 'per_page', DEFAULT_PAGE_SIZE, 1, MAX_PAGE_SIZE);
    const page = readInt(query, 'page', 1, 1, Number.MAX_SAFE_INTEGER);
    return { offset: (page - 1) * perPage, limit: perPage, explicit: true };
  }
  return {
    offset: readInt(query, 'offset', 0, 0, Number.MAX_SAFE_INTEGER),
    limit: readInt(query, 'limit', DEFAULT_PAGE_SIZE, 1, MAX_PAGE_SIZE),
    explicit: query.offset !== undefined || query.limit !== undefined,
  };
}

function readInt(query: Query, name: string, fallback: number, min: number, max: number): number {
  const raw = query[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min || value > max) {
    throw invalidParameter(name, `${name} must be an integer from ${min} to ${max}`);
  }
  return value;
}

type View = Readonly<Record<string, unknown>>;

/**
 * The Model object with its live status (Catalog.statusOf): an operator's override through the admin API,
 * else the config's `status`, else the status derived from the deployments' health
 * (src/routing/status.ts), with `status_reason` saying why when there is a reason.
 */
function viewOf(gantry: Gantry, model: CatalogModel): View {
  const shown = gantry.catalog.statusOf(model.entry, gantry.routing.statusOf(model.entry.namespace));
  const reason = shown.reason ?? undefined;
  if (shown.status === model.view.status && reason === model.view.status_reason) return model.view;
  const { status_reason: _previous, ...rest } = model.view;
  return reason === undefined
    ? { ...rest, status: shown.status }
    : { ...rest, status: shown.status, status_reason: reason };
}

function matches(query: Query): (view: View) => boolean {
  const { vendor, type, status } = query;
  if (status !== undefined && !STATUSES.has(status)) {
    throw invalidParameter('status', 'status must be one of operational, degraded, offline');
  }
  const vendorLower = vendor?.toLowerCase();
  return (view) => {
    if (type !== undefined && view.type !== type) return false;
    if (status !== undefined && view.status !== status) return false;
    if (vendorLower !== undefined) {
      const v = view.vendor as { slug?: string; name?: string };
      if (v.slug?.toLowerCase() !== vendorLower && v.name?.toLowerCase() !== vendorLower) return false;
    }
    return true;
  };
}

function withFields(model: CatalogModel, view: View, fields: string | undefined): View {
  if (!fields) return view;
  const extra: Record<string, unknown> = {};
  for (const field of fields.split(',').map((f) => f.trim())) {
    if (field === '') continue;
    if (!SCHEMA_FIELDS.has(field)) {
      throw invalidParameter('fields', `fields may list input_schema and output_schema, not "${field}"`);
    }
    extra[field] = model.entry[field as 'input_schema' | 'output_schema'] ?? {};
  }
  return { ...view, ...extra };
}

function safeDecode(raw: string): string {
  try {
    return decodeURIComponent(raw);
  } catch {
    throw invalidParameter('slug', 'the model slug is not validly URL-encoded');
  }
}
