import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Principal } from '../auth/authenticate.js';
import { rejectOtherMethods } from '../error-handler.js';
import { GantryError } from '../errors.js';
import { principalOf } from '../inference/resolve.js';
import {
  cancelPredictionSchema,
  createPredictionSchema,
  deletePredictionActionSchema,
  deletePredictionSchema,
  getPredictionSchema,
  listPredictionsSchema,
  predictAliasSchema,
  predictionWebhooksSchema,
  streamPredictionSchema,
  webhookSecretSchema,
} from '../openapi/schemas/predictions.js';
import type { PredictionDeps } from '../predictions/context.js';
import { serialize, webhookSecretFor } from '../predictions/lifecycle.js';
import { cancelAfterMs, preferWaitMs } from '../predictions/request-headers.js';
import {
  awaitPrediction,
  cancelPrediction,
  createPrediction,
  deletePrediction,
  ownedPrediction,
} from '../predictions/service.js';
import { streamPrediction } from '../predictions/sse.js';

const DEFAULT_PER_PAGE = 15;
const MAX_PER_PAGE = 50;
const DATE = /^(\d{4})-(\d{2})-(\d{2})$/;
const DAY_MS = 86_400_000;

type Query = Record<string, string | undefined>;
type IdParams = { id: string };

/** The Predictions API (spec 4.3-4.8) and the account's webhook secret. */
export function registerPredictionRoutes(app: FastifyInstance, deps: PredictionDeps): void {
  const create = async (request: FastifyRequest, reply: FastifyReply) => {
    const caller = principalOf(request);
    const idempotencyKey = header(request, 'idempotency-key');
    // Both headers are read before anything is created: a bad one is a 400 with nothing stored.
    const preferWait = preferWaitMs(header(request, 'prefer'));
    const cancelAfter = cancelAfterMs(header(request, 'cancel-after'));
    const result = await createPrediction(deps, caller, request.body, idempotencyKey, {
      ...(cancelAfter === undefined ? {} : { cancelAfterMs: cancelAfter }),
    });
    request.labels.model = result.record.model;
    let record = result.record;
    const waitMs = preferWait ?? (result.wait ? deps.config.predictions.awaitTimeoutMs : undefined);
    if (waitMs !== undefined) {
      const gone = new AbortController();
      // The response's close, not the request's: the request stream closes once its body is read.
      reply.raw.once('close', () => gone.abort());
      record = await awaitPrediction(deps, record, waitMs, gone.signal);
    }
    reply.headers(result.headers);
    if (!result.created) reply.header('idempotent-replayed', 'true');
    return reply.code(200).send(await serialize(deps, record));
  };
  app.post('/v1/predictions', { schema: createPredictionSchema }, create);
  app.post('/v1/predict', { schema: predictAliasSchema }, create);
  app.get('/v1/predictions', { schema: listPredictionsSchema }, async (request) =>
    list(deps, principalOf(request), request.query as Query),
  );
  rejectOtherMethods(app, '/v1/predictions', ['GET', 'POST']);
  rejectOtherMethods(app, '/v1/predict', ['POST']);

  app.get<{ Params: IdParams }>('/v1/predictions/:id', { schema: getPredictionSchema }, async (request) =>
    serialize(deps, await ownedPrediction(deps, principalOf(request), request.params.id)),
  );
  const remove = async (request: FastifyRequest<{ Params: IdParams }>) => {
    await deletePrediction(deps, principalOf(request), request.params.id);
    return { success: true };
  };
  app.delete<{ Params: IdParams }>('/v1/predictions/:id', { schema: deletePredictionSchema }, remove);
  rejectOtherMethods(app, '/v1/predictions/:id', ['GET', 'DELETE']);
  // Cancel and delete take no body; an empty one is accepted whatever its Content-Type (src/app.ts).
  app.route<{ Params: IdParams }>({
    method: ['DELETE', 'POST'],
    url: '/v1/predictions/:id/delete',
    schema: deletePredictionActionSchema,
    handler: remove,
  });
  rejectOtherMethods(app, '/v1/predictions/:id/delete', ['DELETE', 'POST']);
  app.post<{ Params: IdParams }>(
    '/v1/predictions/:id/cancel',
    { schema: cancelPredictionSchema },
    async (request) => {
      const record = await cancelPrediction(deps, principalOf(request), request.params.id);
      return { success: true, status: record.status, prediction: await serialize(deps, record) };
    },
  );
  rejectOtherMethods(app, '/v1/predictions/:id/cancel', ['POST']);

  app.get<{ Params: IdParams }>(
    '/v1/predictions/:id/stream',
    { schema: streamPredictionSchema },
    async (request, reply) => {
      const record = await ownedPrediction(deps, principalOf(request), request.params.id);
      if (!record.stream) {
        throw new GantryError('INVALID_REQUEST', {
          status: 400,
          message: 'This prediction was created without stream: true, so it has no stream',
          details: 'Create the prediction with "stream": true, or poll GET /v1/predictions/{id}.',
        });
      }
      await streamPrediction(deps, record, request, reply);
    },
  );
  rejectOtherMethods(app, '/v1/predictions/:id/stream', ['GET']);

  // Gantry extension: the webhook delivery log of one prediction (each attempt's outcome).
  app.get<{ Params: IdParams }>(
    '/v1/predictions/:id/webhooks',
    { schema: predictionWebhooksSchema },
    async (request) => {
      const record = await ownedPrediction(deps, principalOf(request), request.params.id);
      const deliveries = await deps.store.deliveries(record.id);
      return {
        data: deliveries.map((d) => ({
          id: d.id,
          event: d.event,
          state: d.state,
          attempts: d.attempts,
          created_at: new Date(d.createdAt).toISOString(),
          next_attempt_at: d.nextAttemptAt === null ? null : new Date(d.nextAttemptAt).toISOString(),
          log: d.log.map((l) => ({ ...l, at: new Date(l.at).toISOString() })),
        })),
      };
    },
  );
  rejectOtherMethods(app, '/v1/predictions/:id/webhooks', ['GET']);

  // The account's signing secret, to verify webhook-signature / Gantry-Signature.
  app.get('/v1/webhooks/secret', { schema: webhookSecretSchema }, async (request) => ({
    key: webhookSecretFor(deps.secretKey, principalOf(request).account.id),
  }));
  rejectOtherMethods(app, '/v1/webhooks/secret', ['GET']);
}

async function list(deps: PredictionDeps, caller: Principal, query: Query) {
  const perPage = readInt(query, 'per_page', DEFAULT_PER_PAGE, 1, MAX_PER_PAGE);
  const page = readInt(query, 'page', 1, 1, 1_000_000);
  const from = query.from === undefined ? undefined : readDate(query.from, 'from');
  const to = query.to === undefined ? undefined : readDate(query.to, 'to');
  if (from !== undefined && to !== undefined && from > to) {
    throw new GantryError('INVALID_DATE_RANGE', {
      message: `from (${query.from}) is after to (${query.to})`,
    });
  }
  if (query.model !== undefined && !deps.catalog.get(query.model, caller.account)) {
    throw new GantryError('MODEL_NOT_FOUND', { message: `Model ${query.model} not found` });
  }
  const { records, total } = await deps.store.list({
    accountId: caller.account.id,
    ...(query.model === undefined ? {} : { model: query.model }),
    ...(from === undefined ? {} : { from }),
    // `to` names a whole day: everything before the next midnight (UTC).
    ...(to === undefined ? {} : { to: to + DAY_MS }),
    offset: (page - 1) * perPage,
    limit: perPage,
  });
  return {
    data: await Promise.all(records.map((r) => serialize(deps, r))),
    pagination: {
      current_page: page,
      per_page: perPage,
      total,
      last_page: Math.max(1, Math.ceil(total / perPage)),
    },
  };
}

function readInt(query: Query, name: string, fallback: number, min: number, max: number): number {
  const raw = query[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!/^\d+$/.test(raw) || value < min || value > max) {
    throw new GantryError('INVALID_PARAMETER', {
      message: `${name} must be an integer from ${min} to ${max}`,
      param: name,
      details: name,
    });
  }
  return value;
}

/** Epoch ms of midnight UTC of a YYYY-MM-DD date that exists. */
function readDate(raw: string, name: string): number {
  const match = DATE.exec(raw);
  const ms = match ? Date.UTC(Number(match[1]), Number(match[2]) - 1, Number(match[3])) : Number.NaN;
  if (!match || Number.isNaN(ms) || new Date(ms).toISOString().slice(0, 10) !== raw) {
    throw new GantryError('INVALID_DATE_FORMAT', {
      message: `${name} must be a date as YYYY-MM-DD, got ${JSON.stringify(raw.slice(0, 32))}`,
      details: name,
    });
  }
  return ms;
}

function header(request: FastifyRequest, name: string): string | undefined {
  const value = request.headers[name];
  if (value === undefined) return undefined;
  const text = Array.isArray(value) ? value[0] : value;
  if (text === undefined || text === '' || text.length > 255) {
    throw new GantryError('INVALID_PARAMETER', {
      message: `${name} must be 1 to 255 characters`,
      param: name,
    });
  }
  return text;
}
