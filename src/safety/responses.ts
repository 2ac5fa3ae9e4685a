/**
 * The safety layer on POST /v1/responses (README, "Safety" → "Responses"): redaction of the input, the
 * prompt check, and the completion check of a whole Response. Azure OpenAI reports both on the Response
 * object as `content_filters`: a list of entries, one per source (`prompt`, then `completion`), each
 * `{blocked, source_type, content_filter_raw, content_filter_results, content_filter_offsets}` where the
 * results are the shapes of azure.ts and the offsets say which characters the check covered
 * (`start_offset`, `end_offset`, and `check_offset`: the position up to which the text has been fully
 * checked, which never decreases). A blocked completion ends the
 * Response `incomplete` with `incomplete_details.reason: "content_filter"`, its text removed.
 * Streams are in responses-stream.ts.
 */
import type { JsonObject } from '../../providers/types.js';
import type { Metrics } from '../metrics.js';
import { type ContentFilterResults, evaluate } from './azure.js';
import { type Findings, mergeFindings } from './classifier.js';
import {
  type ActiveSafety,
  blockedPromptError,
  checkCompletion,
  checkPrompt,
  countedCheck,
  type SafetyCheck,
  type SafetyOutcome,
} from './engine.js';
import { responsesPromptParts } from './prompt-text.js';
import type { Redactor } from './redact.js';

/** One entry of Azure's `content_filters` on a Response. */
export interface ContentFilterEntry {
  blocked: boolean;
  source_type: 'prompt' | 'completion';
  content_filter_raw: unknown[];
  content_filter_results: ContentFilterResults;
  content_filter_offsets: { start_offset: number; end_offset: number; check_offset: number };
}

/** What one Responses request checks with: its policy, its outcome (the usage record's) and the metrics. */
export interface ResponsesSafety {
  active: ActiveSafety;
  outcome: SafetyOutcome;
  metrics: Metrics;
  /** Ends a remote check when the client leaves (undefined with the offline classifier, which never waits). */
  signal?: AbortSignal;
}

export function contentFilterEntry(
  source: 'prompt' | 'completion',
  check: SafetyCheck,
  length: number,
  checkOffset = length,
): ContentFilterEntry {
  return {
    blocked: check.blocked,
    source_type: source,
    content_filter_raw: [],
    content_filter_results: check.results,
    content_filter_offsets: { start_offset: 0, end_offset: length, check_offset: checkOffset },
  };
}

/**
 * The request with personal data masked in `instructions`, a string `input`, the message items of every
 * role but the model's own (assistant) and every function_call_output, so neither the upstream, a
 * classifier nor the stored conversation ever holds the original. The spans come from the offline
 * classifier through `redactor` (redact.ts), whatever classifier the policy names. The request itself is
 * left as it was; the count of masked pieces goes to the outcome.
 */
export function redactResponsesRequest(s: ResponsesSafety, req: JsonObject, redactor: Redactor): JsonObject {
  const out: JsonObject = { ...req };
  if (typeof req.instructions === 'string') out.instructions = redactor.mask(req.instructions, 'prompt');
  if (typeof req.input === 'string') {
    out.input = redactor.mask(req.input, 'prompt');
  } else if (Array.isArray(req.input)) {
    out.input = req.input.map((item: unknown) => maskItem(item, redactor));
  }
  s.outcome.redacted += redactor.masked;
  return out;
}

function maskItem(item: unknown, redactor: Redactor): unknown {
  if (!isObject(item)) return item;
  if (item.type === 'function_call_output') {
    if (typeof item.output === 'string') return { ...item, output: redactor.mask(item.output, 'document') };
    if (Array.isArray(item.output)) return { ...item, output: maskParts(item.output, redactor, 'document') };
    return item;
  }
  if (item.type !== undefined && item.type !== 'message') return item;
  // The model's own turns are its words, not the user's data: left as they were.
  if (item.role === 'assistant') return item;
  if (typeof item.content === 'string') return { ...item, content: redactor.mask(item.content, 'prompt') };
  if (Array.isArray(item.content)) return { ...item, content: maskParts(item.content, redactor, 'prompt') };
  return item;
}

function maskParts(parts: unknown[], redactor: Redactor, source: 'prompt' | 'document'): unknown[] {
  return parts.map((part) =>
    isObject(part) && typeof part.text === 'string'
      ? { ...part, text: redactor.mask(part.text, source) }
      : part,
  );
}

/**
 * Checks this request's `instructions` and `input` (the conversation before it was checked when it was
 * sent) and returns its `content_filters` entry; throws the 400 `content_filter` when the policy blocks it.
 */
export async function checkResponsesPrompt(s: ResponsesSafety, req: JsonObject): Promise<ContentFilterEntry> {
  const parts = responsesPromptParts(req.instructions, req.input);
  // Personal data masked before the check is no longer in the text: the results still report it found.
  const known: Findings | undefined =
    s.outcome.redacted > 0 ? { harm: {}, detected: { pii: true } } : undefined;
  const check = await countedCheck(
    s.metrics,
    s.outcome,
    'responses',
    'prompt',
    s.active.classifier.name,
    () => checkPrompt(s.active, parts, s.signal, known),
  );
  if (check.blocked) throw blockedPromptError(check);
  let length = 0;
  for (const part of parts) length += part.text.length;
  return contentFilterEntry('prompt', check, length);
}

/**
 * Checks one completion text and counts it. In annotate mode a classifier failing after the upstream
 * answered gives the error result (reported in `content_filters`), never a 503 that would throw away an
 * answer already billed: the closed policy applies to the prompt only (README, "Safety" → "Policies").
 */
export async function checkCompletionText(s: ResponsesSafety, text: string): Promise<SafetyCheck> {
  const active =
    s.active.policy.mode === 'annotate' && s.active.onFailure === 'closed'
      ? { ...s.active, onFailure: 'open' as const }
      : s.active;
  return countedCheck(s.metrics, s.outcome, 'responses', 'completion', s.active.classifier.name, () =>
    checkCompletion(active, text, s.signal),
  );
}

/**
 * The checks of a stream's windows as one completion result: the worst findings of all windows under
 * the policy, blocked if any window was. A window that could not be checked makes the whole an error.
 */
export function combineChecks(active: ActiveSafety, checks: readonly SafetyCheck[]): SafetyCheck {
  if (checks.length === 1) return checks[0] as SafetyCheck;
  const failed = checks.find((c) => c.findings === undefined);
  if (failed) return { ...failed, blocked: checks.some((c) => c.blocked) };
  const findings = mergeFindings(checks.map((c) => c.findings as Findings));
  const { results, flagged } = evaluate(findings, active.policy, 'completion');
  return { results, flagged, blocked: checks.some((c) => c.blocked), findings };
}

/**
 * The checked texts of one output item, each with its place in the item: `c<i>` a content part (a
 * message's output_text or refusal, a reasoning item's reasoning_text), `s<i>` a reasoning summary part,
 * `a` what the model wrote for a tool (a function or MCP call's arguments, a custom tool call's input),
 * `o` an MCP call's output. The stream check uses the places to find text no delta carried.
 */
export function itemTexts(item: unknown): Array<{ at: string; text: string }> {
  const texts: Array<{ at: string; text: string }> = [];
  if (!isObject(item)) return texts;
  if ((item.type === 'function_call' || item.type === 'mcp_call') && typeof item.arguments === 'string') {
    texts.push({ at: 'a', text: item.arguments });
  }
  if (item.type === 'custom_tool_call' && typeof item.input === 'string') {
    texts.push({ at: 'a', text: item.input });
  }
  if (item.type === 'mcp_call' && typeof item.output === 'string') {
    texts.push({ at: 'o', text: item.output });
  }
  if (Array.isArray(item.content)) {
    item.content.forEach((part: unknown, i) => {
      const text = partText(part);
      if (text !== undefined) texts.push({ at: `c${i}`, text });
    });
  }
  if (item.type === 'reasoning' && Array.isArray(item.summary)) {
    item.summary.forEach((part: unknown, i) => {
      if (isObject(part) && typeof part.text === 'string') texts.push({ at: `s${i}`, text: part.text });
    });
  }
  return texts;
}

/** The text of a content part: output_text and reasoning_text carry `text`, a refusal `refusal`. */
export function partText(part: unknown): string | undefined {
  if (!isObject(part)) return undefined;
  if ((part.type === 'output_text' || part.type === 'reasoning_text') && typeof part.text === 'string') {
    return part.text;
  }
  if (part.type === 'refusal' && typeof part.refusal === 'string') return part.refusal;
  return undefined;
}

/** The completion text of Response output items: message texts and refusals, reasoning, tool calls. */
export function outputCompletionText(output: unknown): string {
  if (!Array.isArray(output)) return '';
  let text = '';
  for (const item of output) for (const t of itemTexts(item)) text += t.text;
  return text;
}

/**
 * A whole Response (JSON answer) checked: `content_filters` added; when the policy blocks the completion,
 * the Response made `incomplete` (content_filter), message items emptied and the other output items
 * (tool calls, reasoning) dropped, `output_text` empty. Usage stays: the upstream did the work.
 * Changes and returns `response`.
 */
export async function checkResponseObject(
  s: ResponsesSafety,
  response: JsonObject,
  prompt: ContentFilterEntry,
): Promise<JsonObject> {
  const text = outputCompletionText(response.output);
  const check = await checkCompletionText(s, text);
  const completion = contentFilterEntry('completion', check, text.length);
  if (check.blocked) blockResponse(response);
  response.content_filters = [prompt, completion];
  return response;
}

/**
 * Makes `response` the filtered, incomplete Response of a blocked completion (in place). `output`: the
 * items the client was given (a stream's released ones); by default the message items emptied and the
 * other items (function calls, reasoning) dropped.
 */
export function blockResponse(response: JsonObject, output?: JsonObject[]): void {
  let kept = output;
  if (kept === undefined) {
    kept = [];
    for (const item of Array.isArray(response.output) ? (response.output as unknown[]) : []) {
      if (isObject(item) && item.type === 'message')
        kept.push({ ...item, status: 'incomplete', content: [] });
    }
  }
  response.output = kept;
  response.status = 'incomplete';
  response.incomplete_details = { reason: 'content_filter' };
  if ('completed_at' in response) response.completed_at = null;
  if ('output_text' in response) response.output_text = joinedText(kept);
}

function joinedText(output: readonly JsonObject[]): string {
  let text = '';
  for (const item of output) {
    if (item.type !== 'message' || !Array.isArray(item.content)) continue;
    for (const part of item.content) {
      if (isObject(part) && part.type === 'output_text' && typeof part.text === 'string') text += part.text;
    }
  }
  return text;
}

function isObject(value: unknown): value is JsonObject {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}
