import type { FastifyInstance } from 'fastify';
import { countEmbeddingInputTokens } from '../../providers/tokens.js';
import type { JsonObject } from '../../providers/types.js';
import type { Gantry } from '../context.js';
import { rejectOtherMethods } from '../error-handler.js';
import { invalidParameter } from '../errors.js';
import { dispatch } from '../inference/dispatch.js';
import type { InferenceReply, InferenceRequest } from '../inference/exchange.js';
import { type JsonText, jsonAnswer } from '../inference/rename.js';
import { principalOf, resolveInferenceModel } from '../inference/resolve.js';
import { openTicket } from '../inference/ticket.js';
import { readUsage } from '../inference/usage-capture.js';
import { applyDefaults, validateEmbeddings } from '../inference/validate.js';
import { embeddingsSchema } from '../openapi/schemas/embeddings.js';
import { activeSafety, newSafetyOutcome, type SafetyOutcome } from '../safety/engine.js';
import { redactEmbeddingInput, redactorFor } from '../safety/redact.js';
import { sendAnswer } from './answer.js';

export function registerEmbeddingRoutes(app: FastifyInstance, gantry: Gantry): void {
  app.post('/v1/embeddings', { schema: embeddingsSchema }, async (request, reply) =>
    sendAnswer(reply, await createEmbeddings(gantry, request, reply)),
  );
  rejectOtherMethods(app, '/v1/embeddings', ['POST']);
}

/**
 * POST /v1/embeddings (spec 4.11). Served by fastify and by the fast path alike.
 *
 * Under a policy that masks personal data (README, "Safety" → "Embeddings") the inputs go upstream
 * masked; nothing else of the safety layer runs here: an embedding is no text a reader sees, and Azure
 * OpenAI's embeddings answers carry no content filter results either.
 */
export async function createEmbeddings(
  gantry: Gantry,
  request: InferenceRequest,
  reply: InferenceReply,
): Promise<JsonObject | JsonText> {
  const body = validateEmbeddings(request.body);
  const requested = body.model as string;
  const model = resolveInferenceModel(gantry, request, requested, 'embeddings');
  const { sent, safety } = redactInput(gantry, request, model.entry.namespace, body);
  const ticket = await openTicket(gantry, request, reply, {
    api: 'embeddings',
    model,
    countInputTokens: () => countEmbeddingInputTokens(sent.input),
    outputTokens: 0,
    stream: false,
  });
  ticket.safety = safety;
  const { result, provider } = await dispatch(
    gantry,
    request,
    reply,
    model,
    applyDefaults(sent, model.entry.defaults),
    (p, b, ctx) => p.embeddings(b, ctx),
  );
  ticket.servedBy(provider.name);
  if (result.kind !== 'json') throw new Error('an embeddings provider returned a stream');
  ticket.usage = readUsage(result.body.usage);
  return jsonAnswer(result, requested);
}

/**
 * The body as it goes upstream: `input` with personal data masked when the request's policy says so, and
 * the outcome for its usage record (undefined when nothing was looked for). Token arrays cannot be read,
 * so under such a policy they are refused rather than sent unmasked.
 */
function redactInput(
  gantry: Gantry,
  request: InferenceRequest,
  namespace: string,
  body: JsonObject,
): { sent: JsonObject; safety: SafetyOutcome | undefined } {
  const active = activeSafety(gantry.safety, namespace, principalOf(request));
  const redactor = active && redactorFor(gantry.safety, active.policy);
  if (active === undefined || redactor === undefined) return { sent: body, safety: undefined };
  const input = redactEmbeddingInput(body.input, redactor);
  if (input === undefined) {
    throw invalidParameter(
      'input',
      `The safety policy "${active.policy.name}" masks personal data, which token arrays cannot be checked for: send input as text`,
    );
  }
  const safety = newSafetyOutcome();
  safety.redacted = redactor.masked;
  return { sent: input === body.input ? body : { ...body, input }, safety };
}
