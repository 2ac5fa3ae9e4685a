/**
 * The safety layer on chat completions (README, "Safety" → "Chat completions"): personal data masked in
 * the prompt before it goes upstream, and Azure OpenAI's content filter fields on a JSON answer:
 * top-level `prompt_filter_results: [{prompt_index: 0, content_filter_results}]` and per choice
 * `content_filter_results`. Streams are in chat-stream.ts.
 */
import type { JsonObject } from '../../providers/types.js';
import type { Metrics } from '../metrics.js';
import {
  type ActiveSafety,
  checkCompletion,
  checkPrompt,
  countedCheck,
  promptFilterResults,
  type SafetyCheck,
  type SafetyOutcome,
} from './engine.js';
import { chatPromptParts } from './prompt-text.js';
import type { Redactor } from './redact.js';

/** Roles whose text is masked: everything but the model's own (assistant) turns. */
const MASKED_ROLES: ReadonlySet<unknown> = new Set(['user', 'system', 'developer', 'tool', 'function']);

/**
 * The prompt's messages with personal data masked by `redactor` (redact.ts) in their text (string content
 * and text parts); the same array when nothing was found. The client's body is never changed in place.
 */
export function redactMessages(messages: unknown, redactor: Redactor): unknown {
  if (!Array.isArray(messages)) return messages;
  const before = redactor.masked;
  const out = messages.map((message: unknown) => {
    if (message === null || typeof message !== 'object') return message;
    const m = message as JsonObject;
    if (!MASKED_ROLES.has(m.role)) return message;
    const source = m.role === 'tool' || m.role === 'function' ? 'document' : 'prompt';
    const content = m.content;
    if (typeof content === 'string') {
      const text = redactor.mask(content, source);
      return text === content ? message : { ...m, content: text };
    }
    if (!Array.isArray(content)) return message;
    let changed = false;
    const parts = content.map((part: unknown) => {
      if (part === null || typeof part !== 'object') return part;
      const p = part as JsonObject;
      if (p.type !== 'text' || typeof p.text !== 'string') return part;
      const text = redactor.mask(p.text, source);
      if (text === p.text) return part;
      changed = true;
      return { ...p, text };
    });
    return changed ? { ...m, content: parts } : message;
  });
  return redactor.masked === before ? messages : out;
}

/** What one request's checks need: where they are counted and what they run under. */
export interface ChatSafetyContext {
  active: ActiveSafety;
  /**
   * What the completion checks run under: `active`, except that in annotate mode a classifier failing
   * after the upstream answered is reported in the results (`{error}`), never as an error that would
   * throw away an answer already billed (or break a stream already under way).
   */
  completion: ActiveSafety;
  outcome: SafetyOutcome;
  metrics: Metrics;
}

export function chatSafetyContext(
  active: ActiveSafety,
  outcome: SafetyOutcome,
  metrics: Metrics,
): ChatSafetyContext {
  const completion =
    active.policy.mode === 'annotate' && active.onFailure === 'closed'
      ? { ...active, onFailure: 'open' as const }
      : active;
  return { active, completion, outcome, metrics };
}

/**
 * Checks the prompt (the messages as sent upstream) and counts the check. `masked` > 0: personal data
 * was found and masked, which the results report (`pii` detected) though the checked text no longer has it.
 */
export async function checkChatPrompt(
  ctx: ChatSafetyContext,
  messages: unknown,
  masked: number,
  signal?: AbortSignal,
): Promise<SafetyCheck> {
  return countedCheck(ctx.metrics, ctx.outcome, 'chat', 'prompt', ctx.active.classifier.name, () =>
    checkPrompt(
      ctx.active,
      chatPromptParts(messages),
      signal,
      masked > 0 ? { harm: {}, detected: { pii: true } } : undefined,
    ),
  );
}

/** Checks one completion text and counts the check. */
export async function checkChatCompletion(
  ctx: ChatSafetyContext,
  text: string,
  signal?: AbortSignal,
): Promise<SafetyCheck> {
  return countedCheck(ctx.metrics, ctx.outcome, 'chat', 'completion', ctx.active.classifier.name, () =>
    checkCompletion(ctx.completion, text, signal),
  );
}

/**
 * The text of a chat message the completion check reads: content (a string, or the text of its parts, as
 * some OpenAI-compatible servers send it), refusal, reasoning (`reasoning_content` as vLLM and DeepSeek
 * send it, or a string `reasoning`), the audio's transcript, tool call arguments (function) and inputs
 * (custom), and a legacy `function_call`'s arguments.
 */
export function messageCheckText(message: unknown): string {
  if (message === null || typeof message !== 'object') return '';
  const m = message as {
    content?: unknown;
    refusal?: unknown;
    reasoning_content?: unknown;
    reasoning?: unknown;
    audio?: { transcript?: unknown } | null;
    tool_calls?: unknown;
    function_call?: { arguments?: unknown } | null;
  };
  const texts: string[] = [];
  const add = (text: unknown): void => {
    if (typeof text === 'string' && text !== '') texts.push(text);
  };
  if (Array.isArray(m.content)) {
    for (const part of m.content) {
      if (part === null || typeof part !== 'object') continue;
      const p = part as { text?: unknown; refusal?: unknown };
      add(p.text);
      add(p.refusal);
    }
  } else {
    add(m.content);
  }
  add(m.refusal);
  add(m.reasoning_content);
  add(m.reasoning);
  add(m.audio?.transcript);
  if (Array.isArray(m.tool_calls)) {
    for (const call of m.tool_calls) {
      const c = call as { function?: { arguments?: unknown }; custom?: { input?: unknown } } | null;
      add(c?.function?.arguments);
      add(c?.custom?.input);
    }
  }
  add(m.function_call?.arguments);
  return texts.join('\n');
}

/** Message fields of a filtered choice that carry the model's words (or its voice). */
const WITHHELD = ['tool_calls', 'function_call', 'reasoning_content', 'reasoning', 'audio', 'annotations'];

/**
 * A JSON chat completion with Azure's fields: `prompt_filter_results` and each choice's
 * `content_filter_results`. In block mode a flagged choice keeps nothing of what the model wrote:
 * content and refusal null, no tool calls, reasoning, audio or annotations, logprobs null; it ends with
 * `finish_reason: "content_filter"` (the usage is still what the upstream reported).
 */
export async function annotateChatCompletion(
  ctx: ChatSafetyContext,
  body: JsonObject,
  prompt: Promise<SafetyCheck>,
  signal?: AbortSignal,
): Promise<JsonObject> {
  const choices = Array.isArray(body.choices) ? (body.choices as JsonObject[]) : [];
  const checks = await Promise.all(
    choices.map((choice) => checkChatCompletion(ctx, messageCheckText(choice.message), signal)),
  );
  const annotated = choices.map((choice, i) => {
    const check = checks[i] as SafetyCheck;
    if (!check.blocked) return { ...choice, content_filter_results: check.results };
    const message: JsonObject = { ...(choice.message as JsonObject), content: null, refusal: null };
    for (const field of WITHHELD) delete message[field];
    return {
      ...choice,
      message,
      logprobs: null,
      finish_reason: 'content_filter',
      content_filter_results: check.results,
    };
  });
  return {
    ...body,
    choices: annotated,
    prompt_filter_results: promptFilterResults(await prompt),
  };
}
