import type { FastifyInstance } from 'fastify';
import { countChatInputTokens } from '../../providers/tokens.js';
import type { JsonObject } from '../../providers/types.js';
import type { Gantry } from '../context.js';
import { rejectOtherMethods } from '../error-handler.js';
import { dispatch } from '../inference/dispatch.js';
import type { InferenceAnswer, InferenceReply, InferenceRequest } from '../inference/exchange.js';
import { isRoleOnlyChunk } from '../inference/preamble.js';
import { jsonAnswer, renameModelInEvent } from '../inference/rename.js';
import { streamRescue } from '../inference/rescue.js';
import { resolveInferenceModel } from '../inference/resolve.js';
import { sendStream } from '../inference/stream-reply.js';
import { maxOutputTokens, openTicket } from '../inference/ticket.js';
import { readUsage } from '../inference/usage-capture.js';
import {
  applyDefaults,
  fillOutputLimit,
  requireImageCapability,
  validateChatRequest,
} from '../inference/validate.js';
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
