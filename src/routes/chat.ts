import type { FastifyInstance } from 'fastify';
import { countChatInputTokens } from '../../providers/tokens.js';
import type { JsonObject } from '../../providers/types.js';
import type { Gantry } from '../context.js';
import { rejectOtherMethods } from '../error-handler.js';
import { clientGoneSignal } from '../inference/client.js';
import { dispatch } from '../inference/dispatch.js';
import type { InferenceAnswer, InferenceReply, InferenceRequest } from '../inference/exchange.js';
import { isRoleOnlyChunk } from '../inference/preamble.js';
import { jsonAnswer, renameModel, renameModelInEvent } from '../inference/rename.js';
import { streamRescue } from '../inference/rescue.js';
import { principalOf, resolveInferenceModel } from '../inference/resolve.js';
import { sendStream } from '../inference/stream-reply.js';
import { maxOutputTokens, openTicket } from '../inference/ticket.js';
import { readUsage } from '../inference/usage-capture.js';
import {
  applyDefaults,
  fillOutputLimit,
  requireImageCapability,
  validateChatRequest,
} from '../inference/validate.js';
import {
  annotateChatCompletion,
  type ChatSafetyContext,
  checkChatPrompt,
  redactKinds,
  redactMessages,
} from '../safety/chat.js';
import { safeChatStream } from '../safety/chat-stream.js';
import { type ActiveSafety, activeSafety, blockedPromptError, newSafetyOutcome } from '../safety/engine.js';
import { sendAnswer } from './answer.js';

export function registerChatRoutes(app: FastifyInstance, gantry: Gantry): void {
  app.post('/v1/chat/completions', async (request, reply) =>
    sendAnswer(reply, await chatCompletions(gantry, request, reply)),
  );
  rejectOtherMethods(app, '/v1/chat/completions', ['POST']);
}

/**
 * POST /v1/chat/completions (spec 4.9): JSON or SSE, through the model's providers in order. Returns the
 * JSON answer, or undefined once a stream was written. Served by fastify and by the fast path alike.
 */
export async function chatCompletions(
  gantry: Gantry,
  request: InferenceRequest,
  reply: InferenceReply,
): Promise<InferenceAnswer> {
  const { body, firstImage } = validateChatRequest(request.body);
  const requested = body.model as string;
  const model = resolveInferenceModel(gantry, request, requested, 'chat');
  requireImageCapability(model.entry, firstImage);
  const active = activeSafety(gantry.safety, model.entry.namespace, principalOf(request));
  if (active !== undefined)
    return safeChatCompletions(gantry, request, reply, body, model, requested, active);
  const defaultOutputLimit = gantry.config.limits.defaultMaxOutputTokens;
  const withDefaults = applyDefaults(body, model.entry.defaults);
  const stream = body.stream === true;
  const clientWantsUsage = stream && (body.stream_options as JsonObject | undefined)?.include_usage === true;
  // Streams are always metered from the upstream's own usage chunk, dropped again if the client did not ask.
  const upstreamBody =
    stream && !clientWantsUsage
      ? {
          ...withDefaults,
          stream_options: { ...(withDefaults.stream_options as JsonObject), include_usage: true },
        }
      : withDefaults;
  const ticket = await openTicket(gantry, request, reply, {
    api: 'chat',
    model,
    countInputTokens: () => countChatInputTokens(body.messages, { tools: body.tools }),
    outputTokens: maxOutputTokens(upstreamBody, defaultOutputLimit),
    stream,
  });
  const call = fillOutputLimit((p, b, ctx) => p.chat(b, ctx), defaultOutputLimit);
  // Stream rescue (inference/rescue.ts): undefined unless the model has a continuation route or a stall limit.
  const rescue = streamRescue(gantry, request, model, upstreamBody, call, ticket);
  const { result, upstreamModel, provider, cancel } = await dispatch(
    gantry,
    request,
    reply,
    model,
    upstreamBody,
    rescue?.call ?? call,
    { isPreamble: isRoleOnlyChunk },
  );
  ticket.servedBy(provider.name);
  if (result.kind === 'json') {
    ticket.usage = readUsage(result.body.usage);
    return jsonAnswer(result, requested);
  }
  const events = rescue
    ? rescue.events(result.events, { provider: provider.name, upstreamModel, cancel })
    : result.events;
  await sendStream(request, reply, events, {
    cancel,
    writeDone: true,
    meter: ticket.streamMeter(clientWantsUsage),
    onFailure: ticket.markStreamFailed,
    ...(upstreamModel === requested ? {} : { transform: renameModelInEvent(upstreamModel, requested) }),
  });
  return undefined;
}

/**
 * The same call under a safety policy (README, "Safety" → "Chat completions"): personal data masked
 * before the body goes upstream, the prompt checked (before dispatch when the policy blocks, beside it
 * when it only annotates), the completion checked, and Azure's content filter fields in the answer.
 */
async function safeChatCompletions(
  gantry: Gantry,
  request: InferenceRequest,
  reply: InferenceReply,
  body: JsonObject,
  model: ReturnType<typeof resolveInferenceModel>,
  requested: string,
  active: ActiveSafety,
): Promise<InferenceAnswer> {
  const policy = active.policy;
  let messages: unknown = body.messages;
  let masked = 0;
  if (policy.redact.length > 0) {
    // config/load.ts always has the built-in offline classifier (registry.ts).
    const offline = gantry.safety.classifiers.get('offline')?.classifier ?? active.classifier;
    const redacted = redactMessages(messages, redactKinds(policy), offline);
    messages = redacted.messages;
    masked = redacted.masked;
  }
  const sent: JsonObject = masked === 0 ? body : { ...body, messages };
  const defaultOutputLimit = gantry.config.limits.defaultMaxOutputTokens;
  const withDefaults = applyDefaults(sent, model.entry.defaults);
  const stream = body.stream === true;
  const clientWantsUsage = stream && (body.stream_options as JsonObject | undefined)?.include_usage === true;
  const upstreamBody =
    stream && !clientWantsUsage
      ? {
          ...withDefaults,
          stream_options: { ...(withDefaults.stream_options as JsonObject), include_usage: true },
        }
      : withDefaults;
  const countInput = () => countChatInputTokens(messages, { tools: body.tools });
  const ticket = await openTicket(gantry, request, reply, {
    api: 'chat',
    model,
    countInputTokens: countInput,
    outputTokens: maxOutputTokens(upstreamBody, defaultOutputLimit),
    stream,
  });
  const outcome = newSafetyOutcome();
  outcome.redacted = masked;
  ticket.safety = outcome;
  const ctx: ChatSafetyContext = { active, outcome, metrics: gantry.services.metrics };
  // The prompt as it goes upstream (masked) is what is checked: the original reaches no classifier.
  // A remote check stops when the client leaves (a local one never waits).
  const gone = active.classifier.name === 'offline' ? undefined : clientGoneSignal(reply);
  const prompt = checkChatPrompt(ctx, messages, masked, gone);
  if (policy.mode === 'block') {
    const check = await prompt;
    if (check.blocked) throw blockedPromptError(check);
  } else {
    // Annotate mode: the upstream is not kept waiting; the results are attached once ready. A failure is
    // reported where the results are awaited.
    prompt.catch(() => undefined);
  }
  const call = fillOutputLimit((p, b, c) => p.chat(b, c), defaultOutputLimit);
  // The continuation of a rescued stream is built from upstreamBody: masked, as the first call was.
  const rescue = streamRescue(gantry, request, model, upstreamBody, call, ticket);
  const { result, upstreamModel, provider, cancel } = await dispatch(
    gantry,
    request,
    reply,
    model,
    upstreamBody,
    rescue?.call ?? call,
    { isPreamble: isRoleOnlyChunk },
  );
  ticket.servedBy(provider.name);
  if (result.kind === 'json') {
    ticket.usage = readUsage(result.body.usage);
    const answered = await annotateChatCompletion(ctx, result.body, prompt, gone);
    return renameModel(answered, requested);
  }
  const meter = ticket.streamMeter(clientWantsUsage);
  const upstreamEvents = rescue
    ? rescue.events(result.events, { provider: provider.name, upstreamModel, cancel })
    : result.events;
  const events = safeChatStream(upstreamEvents, {
    ctx,
    windowChars: gantry.safety.streamWindowChars,
    prompt,
    choices: typeof body.n === 'number' && body.n > 1 ? body.n : 1,
    deliveredUsage: () => {
      const promptTokens = countInput();
      const completionTokens = meter.countDelivered();
      return {
        prompt_tokens: promptTokens,
        completion_tokens: completionTokens,
        total_tokens: promptTokens + completionTokens,
      };
    },
    abort: () => cancel.abort(),
    ...(gone === undefined ? {} : { signal: cancel.signal }),
  });
  await sendStream(request, reply, events, {
    cancel,
    writeDone: true,
    meter,
    onFailure: ticket.markStreamFailed,
    ...(upstreamModel === requested ? {} : { transform: renameModelInEvent(upstreamModel, requested) }),
  });
  return undefined;
}
