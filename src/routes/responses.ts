import { randomBytes } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { countResponsesInputTokens } from '../../providers/tokens.js';
import type { InferenceProvider, JsonObject, SseEvent } from '../../providers/types.js';
import type { CatalogModel } from '../catalog.js';
import type { Gantry } from '../context.js';
import { rejectOtherMethods } from '../error-handler.js';
import { GantryError, inferenceEnvelope } from '../errors.js';
import { dispatch } from '../inference/dispatch.js';
import type { InferenceAnswer, InferenceReply, InferenceRequest } from '../inference/exchange.js';
import { isResponsesPreamble, isRoleOnlyChunk } from '../inference/preamble.js';
import { jsonAnswer, renameModelInEvent } from '../inference/rename.js';
import { principalOf, resolveInferenceModel } from '../inference/resolve.js';
import { sendStream } from '../inference/stream-reply.js';
import { maxOutputTokens, openTicket } from '../inference/ticket.js';
import { readUsage } from '../inference/usage-capture.js';
import { applyDefaults, fillOutputLimit } from '../inference/validate.js';
import {
  type ChatMessage,
  chatCompletionToResponse,
  chatStreamToResponseEvents,
  type ResponseMeta,
  responsesToChat,
  validateResponsesRequest,
} from '../responses/bridge.js';
import { sendAnswer } from './answer.js';

const hasNativeResponses = (p: InferenceProvider) => p.responses !== undefined;

/**
 * POST /v1/responses (spec 4.10). Passed through where every provider of the model speaks the Responses
 * API; otherwise bridged onto chat completions, with `previous_response_id` served from Gantry's history.
 */
export function registerResponsesRoutes(app: FastifyInstance, gantry: Gantry): void {
  app.post('/v1/responses', async (request, reply) =>
    sendAnswer(reply, await createResponse(gantry, request, reply)),
  );
  rejectOtherMethods(app, '/v1/responses', ['POST']);

  app.get('/v1/responses/:id', async (request) => {
    const { id } = request.params as { id: string };
    const stored = gantry.store.getResponse(id, principalOf(request).account.id);
    if (!stored) throw responseNotFound(id, 'id');
    return stored.response;
  });
}

/** POST /v1/responses: the Response object, or undefined once a stream was written. Fastify and fast path. */
export async function createResponse(
  gantry: Gantry,
  request: InferenceRequest,
  reply: InferenceReply,
): Promise<InferenceAnswer> {
  const req = validateResponsesRequest(request.body, { bridged: false });
  const requested = req.model as string;
  const model = resolveInferenceModel(gantry, request, requested, 'responses');
  const native = model.entry.routes.every((r) => {
    const provider = gantry.providers.get(r.provider);
    return provider !== undefined && hasNativeResponses(provider);
  });
  return native
    ? passThrough(gantry, model, req, request, reply)
    : bridge(gantry, model, req, request, reply);
}

async function passThrough(
  gantry: Gantry,
  model: CatalogModel,
  req: JsonObject,
  request: InferenceRequest,
  reply: InferenceReply,
): Promise<InferenceAnswer> {
  const requested = req.model as string;
  const body = applyDefaults(req, responsesDefaults(model.entry.defaults));
  const ticket = await openTicket(gantry, request, reply, {
    api: 'responses',
    model,
    countInputTokens: () => countResponsesInputTokens(req.input, stringOrUndefined(req.instructions)),
    outputTokens: maxOutputTokens(body, gantry.config.limits.defaultMaxOutputTokens),
    stream: req.stream === true,
  });
  const { result, upstreamModel, provider, cancel } = await dispatch(
    gantry,
    request,
    reply,
    model,
    body,
    (p, b, ctx) => (p.responses as NonNullable<InferenceProvider['responses']>)(b, ctx),
    { isPreamble: isResponsesPreamble, accepts: hasNativeResponses },
  );
  ticket.servedBy(provider.name);
  if (result.kind === 'json') {
    ticket.usage = readUsage(result.body.usage);
    return jsonAnswer(result, requested);
  }
  await sendStream(request, reply, result.events, {
    cancel,
    writeDone: false,
    meter: ticket.streamMeter(true),
    errorEvent: responsesErrorEvent,
    onFailure: ticket.markStreamFailed,
    ...(upstreamModel === requested ? {} : { transform: renameModelInEvent(upstreamModel, requested) }),
  });
  return undefined;
}

async function bridge(
  gantry: Gantry,
  model: CatalogModel,
  req: JsonObject,
  request: InferenceRequest,
  reply: InferenceReply,
): Promise<JsonObject | undefined> {
  validateResponsesRequest(req);
  const account = principalOf(request).account;
  let previous: ChatMessage[] = [];
  if (typeof req.previous_response_id === 'string') {
    const stored = gantry.store.getResponse(req.previous_response_id, account.id);
    if (!stored) throw responseNotFound(req.previous_response_id, 'previous_response_id');
    previous = stored.conversation as ChatMessage[];
  }
  const { chatBody, conversation } = responsesToChat(req, previous);
  const meta: ResponseMeta = {
    id: `resp_${randomBytes(24).toString('hex')}`,
    model: req.model as string,
    createdAt: Math.floor(Date.now() / 1000),
    request: req,
  };
  const remember = (response: JsonObject) => {
    if (req.store === false) return;
    const text = typeof response.output_text === 'string' ? response.output_text : '';
    gantry.store.putResponse({
      id: meta.id,
      accountId: account.id,
      model: meta.model,
      createdAt: meta.createdAt,
      conversation: [...conversation, { role: 'assistant', content: text }],
      response,
    });
  };

  const upstreamBody = applyDefaults(chatBody, model.entry.defaults);
  const ticket = await openTicket(gantry, request, reply, {
    api: 'responses',
    model,
    countInputTokens: () =>
      countResponsesInputTokens(req.input, stringOrUndefined(req.instructions), previous),
    outputTokens: maxOutputTokens(upstreamBody, gantry.config.limits.defaultMaxOutputTokens),
    stream: req.stream === true,
  });
  const { result, provider, cancel } = await dispatch(
    gantry,
    request,
    reply,
    model,
    upstreamBody,
    fillOutputLimit((p, b, ctx) => p.chat(b, ctx), gantry.config.limits.defaultMaxOutputTokens),
    { isPreamble: isRoleOnlyChunk },
  );
  ticket.servedBy(provider.name);
  if (result.kind === 'json') {
    ticket.usage = readUsage(result.body.usage);
    const response = chatCompletionToResponse(result.body, meta);
    remember(response);
    return response;
  }
  // The bridge needs the chat usage chunk to build the final Response, so the meter keeps it.
  const events = chatStreamToResponseEvents(ticket.meterStream(result.events, true), meta, remember);
  await sendStream(request, reply, events, {
    cancel,
    writeDone: false,
    errorEvent: responsesErrorEvent,
    onFailure: ticket.markStreamFailed,
  });
  return undefined;
}

/**
 * Responses streams report failures as an `error` event; its `error` member (the inference envelope's, as
 * in chat streams) makes the SDKs throw.
 */
function responsesErrorEvent(err: GantryError, eventsWritten: number): SseEvent {
  const body = {
    type: 'error',
    code: err.code,
    message: err.message,
    param: err.param,
    sequence_number: eventsWritten,
    ...inferenceEnvelope(err),
  };
  return { event: 'error', data: JSON.stringify(body) };
}

function stringOrUndefined(value: unknown): string | undefined {
  return typeof value === 'string' ? value : undefined;
}

function responsesDefaults(defaults: Record<string, unknown>): Record<string, unknown> {
  const { max_tokens, ...rest } = defaults;
  return max_tokens === undefined ? rest : { ...rest, max_output_tokens: max_tokens };
}

function responseNotFound(id: string, param: string): GantryError {
  return new GantryError('RESPONSE_NOT_FOUND', {
    message: `No response with id ${id}`,
    param,
    details: 'Responses are kept only for the account that created them, and not when store was false.',
  });
}
