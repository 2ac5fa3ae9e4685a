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
import { maxOutputTokens, openTicket, type Ticket } from '../inference/ticket.js';
import { readUsage } from '../inference/usage-capture.js';
import {
  applyDefaults,
  fillOutputLimit,
  requireImageCapability,
  validateChatRequest,
} from '../inference/validate.js';
import { chatSchema } from '../openapi/schemas/chat.js';
import {
  annotateChatCompletion,
  type ChatSafetyContext,
  chatSafetyContext,
  checkChatPrompt,
  redactMessages,
} from '../safety/chat.js';
import { safeChatStream } from '../safety/chat-stream.js';
import {
  type ActiveSafety,
  activeSafety,
  blockedPromptError,
  newSafetyOutcome,
  type SafetyCheck,
} from '../safety/engine.js';
import { redactorFor } from '../safety/redact.js';
import { sendAnswer } from './answer.js';

export function registerChatRoutes(app: FastifyInstance, gantry: Gantry): void {
  app.post('/v1/chat/completions', { schema: chatSchema }, async (request, reply) =>
    sendAnswer(reply, await chatCompletions(gantry, request, reply)),
  );
  rejectOtherMethods(app, '/v1/chat/completions', ['POST']);
}

/**
 * POST /v1/chat/completions (spec 4.9): JSON or SSE, through the model's providers in order. Returns the
 * JSON answer, or undefined once a stream was written. Served by fastify and by the fast path alike.
 *
 * Under a safety policy (README, "Safety" → "Chat completions") the same call also masks personal data
 * before the body goes upstream, checks the prompt (before dispatch when the policy blocks or fails
 * closed, beside it otherwise), checks the completion and adds Azure's content filter fields. With the
 * policy `off` (`active` undefined) none of that runs: each safety step is one test of `active`.
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
  let sent = body;
  let masked = 0;
  if (active !== undefined) {
    const redactor = redactorFor(gantry.safety, active.policy);
    if (redactor !== undefined) {
      const messages = redactMessages(body.messages, redactor);
      masked = redactor.masked;
      if (masked > 0) sent = { ...body, messages };
    }
  }
  const defaultOutputLimit = gantry.config.limits.defaultMaxOutputTokens;
  const withDefaults = applyDefaults(sent, model.entry.defaults);
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
  const countInput = () => countChatInputTokens(sent.messages, { tools: body.tools });
  const ticket = await openTicket(gantry, request, reply, {
    api: 'chat',
    model,
    countInputTokens: countInput,
    outputTokens: maxOutputTokens(upstreamBody, defaultOutputLimit),
    stream,
  });
  const checks =
    active === undefined ? undefined : await startChecks(gantry, reply, ticket, active, sent, masked);
  const call = fillOutputLimit((p, b, ctx) => p.chat(b, ctx), defaultOutputLimit);
  // Stream rescue (inference/rescue.ts): undefined unless the model has a continuation route or a stall
  // limit. A continuation is built from upstreamBody: masked, as the first call was.
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
    if (checks === undefined) return jsonAnswer(result, requested);
    const answered = await annotateChatCompletion(checks.ctx, result.body, checks.prompt, checks.gone);
    return renameModel(answered, requested);
  }
  const meter = ticket.streamMeter(clientWantsUsage);
  const upstreamEvents = rescue
    ? rescue.events(result.events, { provider: provider.name, upstreamModel, cancel })
    : result.events;
  const events =
    checks === undefined
      ? upstreamEvents
      : safeChatStream(upstreamEvents, {
          ctx: checks.ctx,
          windowChars: gantry.safety.streamWindowChars,
          prompt: checks.prompt,
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
          ...(checks.gone === undefined ? {} : { signal: cancel.signal }),
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

interface ChatChecks {
  ctx: ChatSafetyContext;
  /** The prompt check: settled when the policy blocks or fails closed, maybe still running otherwise. */
  prompt: Promise<SafetyCheck>;
  /** Aborted when the client leaves, for a remote classifier (a local one never waits). */
  gone: AbortSignal | undefined;
}

/**
 * The request's safety checks begin: the prompt as it goes upstream (masked) is checked, so the original
 * reaches no classifier. A blocked prompt is refused, and a classifier that is down under a policy
 * failing closed is a 503, both before the upstream is called (and billed).
 */
async function startChecks(
  gantry: Gantry,
  reply: InferenceReply,
  ticket: Ticket,
  active: ActiveSafety,
  sent: JsonObject,
  masked: number,
): Promise<ChatChecks> {
  const outcome = newSafetyOutcome();
  outcome.redacted = masked;
  ticket.safety = outcome;
  const ctx = chatSafetyContext(active, outcome, gantry.services.metrics);
  const gone = active.classifier.name === 'offline' ? undefined : clientGoneSignal(reply);
  const mustWait = active.policy.mode === 'block' || active.onFailure === 'closed';
  // Annotating and failing open, nothing waits on the prompt's results before the answer: the check runs
  // once the request is on its way upstream, in the time the upstream takes to answer, instead of before
  // the call. undici writes a request on a reused keep-alive connection only after a turn of the event
  // loop's check phase (it first looks whether the idle socket was closed), queued when the call is
  // dispatched, after this one: so the check waits for the next turn, two setImmediates
  // (test/safety/prompt-overlap.test.ts holds the order).
  const prompt = mustWait
    ? checkChatPrompt(ctx, sent.messages, masked, gone)
    : new Promise<SafetyCheck>((resolve) => {
        setImmediate(() => setImmediate(() => resolve(checkChatPrompt(ctx, sent.messages, masked, gone))));
      });
  if (active.policy.mode === 'block') {
    const check = await prompt;
    if (check.blocked) throw blockedPromptError(check);
  } else if (active.onFailure === 'closed') {
    // Annotate, failing closed: a classifier that is down must answer 503 before anything is billed.
    await prompt;
  } else {
    // Annotate, failing open: the upstream is not kept waiting; the results are attached once ready.
    prompt.catch(() => undefined);
  }
  return { ctx, prompt, gone };
}
