/**
 * Predictions in the admin API (README, "Admin API"): any account's predictions for an operator, its own
 * for an owner, in the public /v1 shape plus `account_id`; their webhook deliveries (the receiver's URL
 * shown without query or credentials) and redelivery of one event.
 */
import type { FastifyInstance } from 'fastify';
import type { Gantry } from '../context.js';
import { GantryError } from '../errors.js';
import { serialize } from '../predictions/lifecycle.js';
import { redeliver } from '../predictions/redeliver.js';
import type { DeliveryRecord, PredictionRecord, PredictionStatus } from '../predictions/types.js';
import { audit, invalidParameter, listSchema, readLimit, readQueryString, routeSchema } from './records.js';
import { ADMIN_PREFIX, scopeOf } from './routes.js';
import type { Scope } from './scope.js';

const TAGS = ['admin'];
const STATUSES: readonly PredictionStatus[] = ['starting', 'processing', 'succeeded', 'failed', 'canceled'];
/** Records read from the store per page while filtering by status or source. */
const SCAN_PAGE = 100;
/** Most records one listing reads: past it, the answer's `next` continues the scan. */
const SCAN_MAX = 2_000;

const PREDICTION = {
  type: 'object',
  description: 'The Prediction object of /v1/predictions, plus account_id',
  additionalProperties: true,
  properties: { id: { type: 'string' }, account_id: { type: 'string' }, status: { type: 'string' } },
} as const;

const DELIVERY = {
  type: 'object',
  properties: {
    id: { type: 'string', description: 'The webhook-id of every attempt' },
    event: { type: 'string' },
    url: { type: ['string', 'null'], description: "The receiver's origin and path" },
    state: { type: 'string', enum: ['pending', 'delivered', 'failed'] },
    attempts: { type: 'integer' },
    created_at: { type: 'string', format: 'date-time' },
    log: {
      type: 'array',
      items: {
        type: 'object',
        properties: {
          at: { type: 'string', format: 'date-time' },
          outcome: { type: 'string' },
          status: { type: ['integer', 'null'] },
          error: { type: ['string', 'null'] },
          ms: { type: 'number' },
        },
      },
    },
  },
} as const;

const ID_PARAMS = { type: 'object', required: ['id'], properties: { id: { type: 'string' } } } as const;

type Query = Record<string, string | undefined>;

export function registerPredictionAdminRoutes(app: FastifyInstance, gantry: Gantry): void {
  const deps = () => gantry.predictions.deps;

  /** The prediction, when the caller may see it; NOT_FOUND otherwise. */
  const visible = async (scope: Scope, id: string): Promise<PredictionRecord> => {
    const record = await deps().store.get(id);
    if (!record || (scope.role === 'owner' && record.accountId !== scope.account.id)) {
      throw new GantryError('NOT_FOUND', { message: 'Prediction not found' });
    }
    return record;
  };
  const view = async (record: PredictionRecord) => ({
    ...(await serialize(deps(), record)),
    account_id: record.accountId,
  });

  app.get<{ Querystring: Query }>(
    `${ADMIN_PREFIX}/predictions`,
    {
      schema: routeSchema({
        summary: "An account's predictions, newest first",
        tags: TAGS,
        querystring: {
          type: 'object',
          properties: {
            account: { type: 'string', description: 'Required for an operator; an owner sees its own' },
            model: { type: 'string' },
            status: { type: 'string', enum: [...STATUSES] },
            source: { type: 'string', description: 'api, web, …' },
            cursor: { type: 'string', description: "The previous answer's next" },
            limit: { type: 'integer', minimum: 1, maximum: 100, default: 20 },
          },
        },
        response: {
          200: listSchema(PREDICTION, { next: { type: ['string', 'null'] } }),
        },
      }),
    },
    async (request) => {
      const scope = scopeOf(request);
      const q = request.query;
      const asked = readQueryString(q.account, 'account');
      let accountId: string;
      if (scope.role === 'owner') {
        if (asked !== undefined && asked !== scope.account.id) {
          throw new GantryError('NOT_FOUND', { message: 'Account not found' });
        }
        accountId = scope.account.id;
      } else {
        if (asked === undefined) {
          throw invalidParameter(
            'account',
            'account is required: the id of the account whose predictions to list',
          );
        }
        accountId = asked;
      }
      const model = readQueryString(q.model, 'model');
      const status = readQueryString(q.status, 'status');
      if (status !== undefined && !STATUSES.includes(status as PredictionStatus)) {
        throw invalidParameter('status', `status must be one of ${STATUSES.join(', ')}`);
      }
      const source = readQueryString(q.source, 'source');
      const limit = readLimit(q.limit, 'limit', 20, 100);
      let offset = 0;
      if (q.cursor !== undefined && q.cursor !== '') {
        if (!/^\d{1,9}$/.test(q.cursor)) {
          throw invalidParameter('cursor', 'cursor is not valid');
        }
        offset = Number(q.cursor);
      }
      // The store pages by position; status and source are filtered here, so the cursor is the position
      // of the next record to read.
      const found: PredictionRecord[] = [];
      let next: string | null = null;
      const scanEnd = offset + SCAN_MAX;
      for (;;) {
        const { records } = await deps().store.list({
          accountId,
          ...(model === undefined ? {} : { model }),
          offset,
          limit: SCAN_PAGE,
        });
        let read = 0;
        for (const record of records) {
          read++;
          if (status !== undefined && record.status !== status) continue;
          if (source !== undefined && record.source !== source) continue;
          found.push(record);
          if (found.length >= limit) break;
        }
        offset += read;
        const exhausted = records.length < SCAN_PAGE && read === records.length;
        if (exhausted) break;
        if (found.length >= limit || offset >= scanEnd) {
          next = String(offset);
          break;
        }
      }
      return { data: await Promise.all(found.map(view)), next };
    },
  );

  app.get<{ Params: { id: string } }>(
    `${ADMIN_PREFIX}/predictions/:id`,
    {
      schema: routeSchema({
        summary: 'One prediction',
        tags: TAGS,
        params: ID_PARAMS,
        response: { 200: PREDICTION },
      }),
    },
    async (request) => view(await visible(scopeOf(request), request.params.id)),
  );

  app.get<{ Params: { id: string } }>(
    `${ADMIN_PREFIX}/predictions/:id/deliveries`,
    {
      schema: routeSchema({
        summary: "A prediction's webhook deliveries and their attempts",
        tags: TAGS,
        params: ID_PARAMS,
        response: { 200: listSchema(DELIVERY) },
      }),
    },
    async (request) => {
      const record = await visible(scopeOf(request), request.params.id);
      const deliveries = await deps().store.deliveries(record.id);
      return { data: deliveries.map((d) => deliveryView(d, record)) };
    },
  );

  app.post<{ Params: { id: string; delivery: string } }>(
    `${ADMIN_PREFIX}/predictions/:id/deliveries/:delivery/redeliver`,
    {
      schema: routeSchema({
        summary: "Send a delivery's event again (a new delivery, signed anew)",
        tags: TAGS,
        params: {
          type: 'object',
          required: ['id', 'delivery'],
          properties: { id: { type: 'string' }, delivery: { type: 'string' } },
        },
        response: { 202: DELIVERY },
      }),
    },
    async (request, reply) => {
      const scope = scopeOf(request);
      const record = await visible(scope, request.params.id);
      const deliveries = await deps().store.deliveries(record.id);
      const original = deliveries.find((d) => d.id === request.params.delivery);
      if (!original) throw new GantryError('NOT_FOUND', { message: 'Delivery not found' });
      if (!record.webhook) {
        throw new GantryError('CONFLICT', { message: 'The prediction has no webhook to deliver to' });
      }
      // Throws CONFLICT while it is still pending, RATE_LIMIT_EXCEEDED past the hourly cap.
      const delivery = await redeliver(deps(), original, deliveries);
      await audit(gantry, request, scope, {
        action: 'delivery.redeliver',
        accountId: record.accountId,
        target: record.id,
        details: { delivery: original.id, redelivery: delivery.id, event: original.event },
      });
      reply.code(202);
      return deliveryView(delivery, record);
    },
  );
}

function deliveryView(d: DeliveryRecord, record: PredictionRecord) {
  return {
    id: d.id,
    event: d.event,
    url: record.webhook ? originAndPath(record.webhook.url) : null,
    state: d.state,
    attempts: d.attempts,
    created_at: new Date(d.createdAt).toISOString(),
    log: d.log.map((l) => ({ ...l, at: new Date(l.at).toISOString() })),
  };
}

/** A receiver's URL without its query, fragment or credentials, which may hold a token. */
function originAndPath(url: string): string | null {
  try {
    const parsed = new URL(url);
    return `${parsed.origin}${parsed.pathname}`;
  } catch {
    return null;
  }
}
