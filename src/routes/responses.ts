import { randomBytes } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { countResponsesInputTokens } from '../../providers/tokens.js';
import type { InferenceProvider, JsonObject, SseEvent } from '../../providers/types.js';
import { UpstreamError } from '../../providers/upstream-error.js';
import type { CatalogModel } from '../catalog.js';
import type { Gantry } from '../context.js';
import { rejectOtherMethods } from '../error-handler.js';
import { type ErrorId, GantryError, inferenceEnvelope, invalidParameter } from '../errors.js';
import { clientGoneSignal } from '../inference/client.js';
import { dispatch } from '../inference/dispatch.js';
import type { InferenceAnswer, InferenceReply, InferenceRequest } from '../inference/exchange.js';
import { isResponsesPreamble, isRoleOnlyChunk } from '../inference/preamble.js';
import { jsonAnswer, renameModel, renameModelInEvent } from '../inference/rename.js';
import { principalOf, resolveInferenceModel } from '../inference/resolve.js';
import { sendStream } from '../inference/stream-reply.js';
import { maxOutputTokens, openTicket } from '../inference/ticket.js';
import { readUsage } from '../inference/usage-capture.js';
import {
  applyDefaults,
  fillOutputLimit,
  IMAGE_CAPABILITY,
  rejectImagesUnlessCapable,
  takesImages,
} from '../inference/validate.js';
import { createResponseSchema } from '../openapi/schemas/responses.js';
import {
  assistantTurn,
  type ChatMessage,
  chatCompletionToResponse,
  chatStreamToResponseEvents,
  type ResponseMeta,
  responseOfItem,
  responsesToChat,
  validateResponsesRequest,
} from '../responses/bridge.js';
import { type ActiveSafety, activeSafety, newSafetyOutcome } from '../safety/engine.js';
import { redactorFor } from '../safety/redact.js';
import {
  type ContentFilterEntry,
  checkResponseObject,
  checkResponsesPrompt,
  type ResponsesSafety,
  redactResponsesRequest,
} from '../safety/responses.js';
import { safeResponseEvents } from '../safety/responses-stream.js';
import type { StoredResponse } from '../store/types.js';
import { sendAnswer } from './answer.js';
import {
  passthroughProvider,
  passthroughRecord,
  registerStoredResponseRoutes,
  responseNotFound,
} from './responses-stored.js';

const hasNativeResponses = (p: InferenceProvider) => p.responses !== undefined;

/**
 * POST /v1/responses (spec 4.10). Passed through where every provider of the model speaks the Responses
 * API; otherwise bridged onto chat completions, with `previous_response_id` served from Gantry's history.
 */
export function registerResponsesRoutes(app: FastifyInstance, gantry: Gantry): void {
  app.post('/v1/responses', { schema: createResponseSchema }, async (request, reply) =>
    sendAnswer(reply, await createResponse(gantry, request, reply)),
  );
  rejectOtherMethods(app, '/v1/responses', ['POST']);

  registerStoredResponseRoutes(app, gantry);
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
  // Undefined when the policy is off: then nothing of the safety layer runs for this request.
  const active = activeSafety(gantry.safety, model.entry.namespace, principalOf(request));
  return native
    ? passThrough(gantry, model, req, request, reply, active)
    : bridge(gantry, model, req, request, reply, active);
}

/**
 * The request's safety context, and its input with personal data masked where the policy redacts (by
 * the offline classifier, in process: the original reaches no other classifier).
 */
function safetyFor(
  gantry: Gantry,
  active: ActiveSafety | undefined,
  req: JsonObject,
  reply: InferenceReply,
): { s: ResponsesSafety | undefined; req: JsonObject } {
  if (active === undefined) return { s: undefined, req };
  const s: ResponsesSafety = { active, outcome: newSafetyOutcome(), metrics: gantry.services.metrics };
  // A remote check ends when the client leaves; the offline classifier never waits.
  if (active.classifier.name !== 'offline') s.signal = clientGoneSignal(reply);
  const redactor = redactorFor(gantry.safety, active.policy);
  return { s, req: redactor === undefined ? req : redactResponsesRequest(s, req, redactor) };
}

async function passThrough(
  gantry: Gantry,
  model: CatalogModel,
  asked: JsonObject,
  request: InferenceRequest,
  reply: InferenceReply,
  active: ActiveSafety | undefined,
): Promise<InferenceAnswer> {
  rejectPassedImages(model.entry, asked.input);
  const { s, req } = safetyFor(gantry, active, asked, reply);
  const requested = req.model as string;
  const body = applyDefaults(req, responsesDefaults(model.entry.defaults));
  const ticket = await openTicket(gantry, request, reply, {
    api: 'responses',
    model,
    countInputTokens: () =>
      countResponsesInputTokens(req.input, stringOrUndefined(req.instructions), [], req.tools),
    outputTokens: maxOutputTokens(body, gantry.config.limits.defaultMaxOutputTokens),
    stream: req.stream === true,
  });
  let prompt: ContentFilterEntry | undefined;
  if (s) {
    ticket.safety = s.outcome;
    prompt = await checkResponsesPrompt(s, req);
  }
  const { result, upstreamModel, provider, cancel } = await dispatch(
    gantry,
    request,
    reply,
    model,
    body,
    (p, b, ctx) => (p.responses as NonNullable<InferenceProvider['responses']>)(b, ctx),
    { isPreamble: isResponsesPreamble, accepts: continuesOn(gantry, request, req, model) },
  ).catch((err: unknown) => {
    throw relayClientError(err);
  });
  ticket.servedBy(provider.name);
  // GET/DELETE /v1/responses/{id} find the upstream that keeps it through this record.
  const remember = (id: unknown, filtered?: JsonObject) => {
    if (req.store === false || typeof id !== 'string') return;
    gantry.store.putResponse(
      passthroughRecord(id, principalOf(request).account.id, requested, provider.name, filtered),
    );
  };
  // A blocked completion is kept as the client got it: the upstream's copy still holds the text.
  const rememberFiltered = (response: JsonObject) => {
    if (s?.outcome.blocked) remember(response.id, response);
  };
  if (result.kind === 'json') {
    ticket.usage = readUsage(result.body.usage);
    remember(result.body.id);
    if (s === undefined || prompt === undefined) return jsonAnswer(result, requested);
    const checked = await checkResponseObject(s, result.body, prompt);
    rememberFiltered(checked);
    return renameModel(checked, requested);
  }
  if (s !== undefined && prompt !== undefined) {
    // The meter sees the upstream's events before any is held or dropped: what was generated is billed.
    const upstream = ticket.meterStream(rememberCreated(result.events, remember), true);
    const events = safeResponseEvents(upstream, {
      ...s,
      windowChars: gantry.safety.streamWindowChars,
      prompt,
      onComplete: rememberFiltered,
      abort: () => cancel.abort(),
    });
    await sendStream(request, reply, events, {
      cancel,
      writeDone: false,
      errorEvent: responsesErrorEvent,
      onFailure: ticket.markStreamFailed,
      ...(upstreamModel === requested ? {} : { transform: renameModelInEvent(upstreamModel, requested) }),
    });
    return undefined;
  }
  await sendStream(request, reply, rememberCreated(result.events, remember), {
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
  asked: JsonObject,
  request: InferenceRequest,
  reply: InferenceReply,
  active: ActiveSafety | undefined,
): Promise<JsonObject | undefined> {
  validateResponsesRequest(asked);
  // Masked before the conversation is built: neither the upstream nor the stored history sees the original.
  const { s, req } = safetyFor(gantry, active, asked, reply);
  const account = principalOf(request).account;
  let previous: ChatMessage[] = [];
  if (typeof req.previous_response_id === 'string') {
    const stored = gantry.store.getResponse(req.previous_response_id, account.id);
    if (!stored) throw responseNotFound(req.previous_response_id, 'previous_response_id');
    previous = stored.conversation as unknown as ChatMessage[];
  }
  const { chatBody, conversation } = responsesToChat(req, previous, (id) => {
    // An item_reference names an output item of one of the account's bridged responses (itemId).
    const responseId = responseOfItem(id);
    const stored = responseId === undefined ? undefined : gantry.store.getResponse(responseId, account.id);
    const output = stored?.response.output;
    return Array.isArray(output) ? output.find((item: JsonObject) => item.id === id) : undefined;
  });
  rejectBridgedImages(model.entry, chatBody.messages);
  const meta: ResponseMeta = {
    id: `resp_${randomBytes(24).toString('hex')}`,
    model: req.model as string,
    createdAt: Math.floor(Date.now() / 1000),
    request: req,
  };
  const remember = (response: JsonObject) => {
    if (req.store === false) return;
    const output = Array.isArray(response.output) ? (response.output as JsonObject[]) : [];
    // The answer's text and tool calls join the history, so a next request holding only the
    // function_call_output items continues the same conversation.
    const history: ChatMessage[] = [...conversation, assistantTurn(output)];
    gantry.store.putResponse({
      id: meta.id,
      accountId: account.id,
      model: meta.model,
      createdAt: meta.createdAt,
      conversation: history as unknown as StoredResponse['conversation'],
      response,
    });
  };

  const upstreamBody = applyDefaults(chatBody, model.entry.defaults);
  const ticket = await openTicket(gantry, request, reply, {
    api: 'responses',
    model,
    countInputTokens: () =>
      countResponsesInputTokens(
        req.input,
        stringOrUndefined(req.instructions),
        previous.map(countable),
        req.tools,
      ),
    outputTokens: maxOutputTokens(upstreamBody, gantry.config.limits.defaultMaxOutputTokens),
    stream: req.stream === true,
  });
  let prompt: ContentFilterEntry | undefined;
  if (s) {
    ticket.safety = s.outcome;
    prompt = await checkResponsesPrompt(s, req);
  }
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
    if (s !== undefined && prompt !== undefined) await checkResponseObject(s, response, prompt);
    remember(response);
    return response;
  }
  // The bridge needs the chat usage chunk to build the final Response, so the meter keeps it.
  const bridged = chatStreamToResponseEvents(
    ticket.meterStream(result.events, true),
    meta,
    s === undefined ? remember : () => {},
  );
  // With safety, the history is the Response as the client got it (filtered when blocked).
  const events =
    s === undefined || prompt === undefined
      ? bridged
      : safeResponseEvents(bridged, {
          ...s,
          windowChars: gantry.safety.streamWindowChars,
          prompt,
          onComplete: remember,
          abort: () => cancel.abort(),
        });
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

/**
 * The providers a passed-through call may go to: those that speak Responses, and, when it continues a
 * response one of them made (previous_response_id), only that one, which alone knows the previous response.
 */
function continuesOn(
  gantry: Gantry,
  request: InferenceRequest,
  req: JsonObject,
  model: CatalogModel,
): (p: InferenceProvider) => boolean {
  const previous = req.previous_response_id;
  if (typeof previous !== 'string') return hasNativeResponses;
  const stored = gantry.store.getResponse(previous, principalOf(request).account.id);
  const maker = stored && passthroughProvider(stored);
  if (maker === undefined || !model.entry.routes.some((r) => r.provider === maker)) return hasNativeResponses;
  return (p) => p.name === maker && hasNativeResponses(p);
}

/** A history message as the token estimate reads it: its text, its tool calls' names and arguments. */
function countable(m: ChatMessage): { role: string; content: string } {
  let content = '';
  if (typeof m.content === 'string') content = m.content;
  else if (Array.isArray(m.content)) {
    content = m.content.map((p) => (p.type === 'text' ? p.text : '')).join('\n');
  }
  for (const call of m.tool_calls ?? []) content += `\n${call.function.name} ${call.function.arguments}`;
  return { role: m.role, content };
}

/** Calls `remember` with the id of the stream's response.created event, then passes every event on. */
async function* rememberCreated(
  events: AsyncIterable<SseEvent>,
  remember: (id: unknown) => void,
): AsyncGenerator<SseEvent> {
  let seen = false;
  for await (const event of events) {
    if (!seen && event.event === 'response.created') {
      seen = true;
      try {
        const parsed = JSON.parse(event.data) as { response?: { id?: unknown } };
        remember(parsed.response?.id);
      } catch {
        // a malformed event is the stream's problem, reported where it is relayed
      }
    }
    yield event;
  }
}

/** Upstream 4xx statuses that are about the client's request, relayed with the upstream's words. */
const RELAYED: Record<number, ErrorId> = {
  400: 'INVALID_REQUEST',
  404: 'RESPONSE_NOT_FOUND',
  409: 'INVALID_REQUEST',
  413: 'PAYLOAD_TOO_LARGE',
  422: 'UNPROCESSABLE_ENTITY',
};

/**
 * A passed-through Responses call's upstream 4xx reaches the client with the upstream's status, message,
 * param and code (e.g. 404 previous_response_not_found), so the SDK raises the matching error and does
 * not retry. 401/403/429 keep their mapping (Gantry's credentials and limits), and so does a 404 that
 * is not about a previous response (the model is missing upstream: Gantry's routing, not the client).
 * Where fromUpstream already relayed the error with the upstream's code, it is left as it is.
 */
function relayClientError(err: unknown): unknown {
  if (!(err instanceof GantryError) || !(err.cause instanceof UpstreamError)) return err;
  const upstream = err.cause;
  if (err.errorId !== 'UPSTREAM_ERROR' && (err.code !== err.errorId.toLowerCase() || !upstream.code)) {
    return err;
  }
  const status = upstream.status;
  if (upstream.failure !== 'status' || status === undefined) return err;
  const errorId = RELAYED[status];
  if (errorId === undefined) return err;
  if (
    status === 404 &&
    upstream.param !== 'previous_response_id' &&
    upstream.code !== 'previous_response_not_found'
  ) {
    return err;
  }
  return new GantryError(errorId, {
    status,
    message: upstream.upstreamMessage ?? err.message,
    param: upstream.param ?? null,
    ...(upstream.code ? { code: upstream.code } : {}),
    cause: upstream,
  });
}

/**
 * The chat route's image checks for a bridged request's `input_image` items. They are found in the chat
 * messages built from the input (and history), whose positions the client never saw: the error names
 * `input`.
 */
function rejectBridgedImages(model: CatalogModel['entry'], messages: unknown): void {
  try {
    rejectImagesUnlessCapable(model, messages);
  } catch (err) {
    if (!(err instanceof GantryError)) throw err;
    throw new GantryError(err.errorId, { message: err.message, param: 'input', cause: err });
  }
}

/**
 * The same capability check for a passed-through request, on its own items: an `input_image` part of a
 * message's `content` or of a `function_call_output`'s `output` sent to a model that does not take images
 * is the bridged path's 400, `param: input`, and never reaches (nor is billed by) the upstream.
 */
function rejectPassedImages(model: CatalogModel['entry'], input: unknown): void {
  if (!Array.isArray(input) || takesImages(model)) return;
  for (const [i, item] of input.entries()) {
    if (item === null || typeof item !== 'object') continue;
    for (const field of ['content', 'output'] as const) {
      const parts: unknown = (item as JsonObject)[field];
      if (!Array.isArray(parts)) continue;
      const j = parts.findIndex((p) => p !== null && typeof p === 'object' && p.type === 'input_image');
      if (j < 0) continue;
      const path = `input[${i}].${field}[${j}]`;
      throw invalidParameter(
        'input',
        `${path} is an image, and model ${model.namespace} does not take images ` +
          `(its capabilities do not include ${IMAGE_CAPABILITY})`,
      );
    }
  }
}
