/**
 * The safety layer on chat completions (README, "Safety" → "Chat completions"): personal data masked in
 * the prompt before it goes upstream, and Azure OpenAI's content filter fields on a JSON answer:
 * top-level `prompt_filter_results: [{prompt_index: 0, content_filter_results}]` and per choice
 * `content_filter_results`. Streams are in chat-stream.ts.
 */
import type { JsonObject } from '../../providers/types.js';
import type { Metrics } from '../metrics.js';
import type { PiiKind } from './categories.js';
import type { Findings, TextClassifier } from './classifier.js';
import {
  type ActiveSafety,
  checkCompletion,
  checkPrompt,
  promptFilterResults,
  recordCheck,
  type SafetyCheck,
  type SafetyOutcome,
} from './engine.js';
import type { SafetyPolicy } from './policy.js';
import { chatPromptParts } from './prompt-text.js';
import { maskText } from './redact.js';

/** Roles whose text is masked: everything but the model's own (assistant) turns. */
const MASKED_ROLES: ReadonlySet<unknown> = new Set(['user', 'system', 'developer', 'tool', 'function']);

/** Each policy's `redact` as a set, made once per policy (policies are built at start and kept). */
const KINDS = new WeakMap<SafetyPolicy, ReadonlySet<PiiKind>>();

export function redactKinds(policy: SafetyPolicy): ReadonlySet<PiiKind> {
  let kinds = KINDS.get(policy);
  if (kinds === undefined) {
    kinds = new Set(policy.redact);
    KINDS.set(policy, kinds);
  }
  return kinds;
}

export interface Redacted {
  /** The messages with the listed kinds masked (the same array when nothing was found). */
  messages: unknown;
  masked: number;
}

/**
 * Masks `kinds` in the text of the prompt's messages (string content and text parts). Spans come from
 * the offline classifier, which runs in process: the original text goes nowhere else.
 */
export function redactMessages(
  messages: unknown,
  kinds: ReadonlySet<PiiKind>,
  offline: TextClassifier,
): Redacted {
  if (!Array.isArray(messages)) return { messages, masked: 0 };
  let masked = 0;
  const mask = (text: string): string => {
    // The offline classifier answers synchronously (classifier.ts).
    const findings = offline.classify(text, 'prompt') as Findings;
    const out = maskText(text, findings.pii ?? [], kinds);
    masked += out.masked;
    return out.text;
  };
  const out = messages.map((message: unknown) => {
    if (message === null || typeof message !== 'object') return message;
    const m = message as JsonObject;
    if (!MASKED_ROLES.has(m.role)) return message;
    const content = m.content;
    if (typeof content === 'string') {
      const text = mask(content);
      return text === content ? message : { ...m, content: text };
    }
    if (!Array.isArray(content)) return message;
    let changed = false;
    const parts = content.map((part: unknown) => {
      if (part === null || typeof part !== 'object') return part;
      const p = part as JsonObject;
      if (p.type !== 'text' || typeof p.text !== 'string') return part;
      const text = mask(p.text);
      if (text === p.text) return part;
      changed = true;
      return { ...p, text };
    });
    return changed ? { ...m, content: parts } : message;
  });
  return masked === 0 ? { messages, masked: 0 } : { messages: out, masked };
}

/** What one request's checks need: where they are counted and what they run under. */
export interface ChatSafetyContext {
  active: ActiveSafety;
  outcome: SafetyOutcome;
  metrics: Metrics;
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
  const started = performance.now();
  const check = await checkPrompt(
    ctx.active,
    chatPromptParts(messages),
    signal,
    masked > 0 ? { harm: {}, detected: { pii: true } } : undefined,
  );
  recordCheck(
    ctx.metrics,
    ctx.outcome,
    'chat',
    'prompt',
    ctx.active.classifier.name,
    check,
    (performance.now() - started) / 1000,
  );
  return check;
}

/** Checks one completion text and counts the check. */
export async function checkChatCompletion(
  ctx: ChatSafetyContext,
  text: string,
  signal?: AbortSignal,
): Promise<SafetyCheck> {
  const started = performance.now();
  const check = await checkCompletion(ctx.active, text, signal);
  recordCheck(
    ctx.metrics,
    ctx.outcome,
    'chat',
    'completion',
    ctx.active.classifier.name,
    check,
    (performance.now() - started) / 1000,
  );
  return check;
}

/** The text of a chat message the completion check reads: content, refusal and tool call arguments. */
export function messageCheckText(message: unknown): string {
  if (message === null || typeof message !== 'object') return '';
  const m = message as { content?: unknown; refusal?: unknown; tool_calls?: unknown };
  const texts: string[] = [];
  if (typeof m.content === 'string' && m.content !== '') texts.push(m.content);
  if (typeof m.refusal === 'string' && m.refusal !== '') texts.push(m.refusal);
  if (Array.isArray(m.tool_calls)) {
    for (const call of m.tool_calls) {
      const args = (call as { function?: { arguments?: unknown } } | null)?.function?.arguments;
      if (typeof args === 'string' && args !== '') texts.push(args);
    }
  }
  return texts.join('\n');
}

/**
 * A JSON chat completion with Azure's fields: `prompt_filter_results` and each choice's
 * `content_filter_results`. In block mode a flagged choice loses its content and tool calls and ends
 * with `finish_reason: "content_filter"` (its usage is still what the upstream reported).
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
    const message: JsonObject = { ...(choice.message as JsonObject), content: null };
    delete message.tool_calls;
    delete message.function_call;
    return { ...choice, message, finish_reason: 'content_filter', content_filter_results: check.results };
  });
  return {
    ...body,
    choices: annotated,
    prompt_filter_results: promptFilterResults(await prompt),
  };
}
