import type { FastifyInstance } from 'fastify';
import { countEmbeddingInputTokens } from '../../providers/tokens.js';
import type { JsonObject } from '../../providers/types.js';
import type { Gantry } from '../context.js';
import { rejectOtherMethods } from '../error-handler.js';
import { dispatch } from '../inference/dispatch.js';
import type { InferenceReply, InferenceRequest } from '../inference/exchange.js';
import { type JsonText, jsonAnswer } from '../inference/rename.js';
import { resolveInferenceModel } from '../inference/resolve.js';
import { openTicket } from '../inference/ticket.js';
import { readUsage } from '../inference/usage-capture.js';
import { applyDefaults, validateEmbeddings } from '../inference/validate.js';
import { embeddingsSchema } from '../openapi/schemas/embeddings.js';
import { sendAnswer } from './answer.js';

export function registerEmbeddingRoutes(app: FastifyInstance, gantry: Gantry): void {
  app.post('/v1/embeddings', { schema: embeddingsSchema }, async (request, reply) =>
    sendAnswer(reply, await createEmbeddings(gantry, request, reply)),
  );
  rejectOtherMethods(app, '/v1/embeddings', ['POST']);
}

/** POST /v1/embeddings (spec 4.11). Served by fastify and by the fast path alike. */
export async function createEmbeddings(
  gantry: Gantry,
  request: InferenceRequest,
  reply: InferenceReply,
): Promise<JsonObject | JsonText> {
  const body = validateEmbeddings(request.body);
  const requested = body.model as string;
  const model = resolveInferenceModel(gantry, request, requested, 'embeddings');
  const ticket = await openTicket(gantry, request, reply, {
    api: 'embeddings',
    model,
    countInputTokens: () => countEmbeddingInputTokens(body.input),
    outputTokens: 0,
    stream: false,
  });
  const { result, provider } = await dispatch(
    gantry,
    request,
    reply,
    model,
    applyDefaults(body, model.entry.defaults),
    (p, b, ctx) => p.embeddings(b, ctx),
  );
  ticket.servedBy(provider.name);
  if (result.kind !== 'json') throw new Error('an embeddings provider returned a stream');
  ticket.usage = readUsage(result.body.usage);
  return jsonAnswer(result, requested);
}
