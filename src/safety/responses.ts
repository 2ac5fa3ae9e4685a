/**
 * The safety layer on POST /v1/responses (README, "Safety" → "Responses"): redaction of the input, the
 * prompt check, and the completion check of a whole Response. Azure OpenAI reports both on the Response
 * object as `content_filters`: a list of entries, one per source (`prompt`, then `completion`), each
 * `{blocked, source_type, content_filter_raw, content_filter_results, content_filter_offsets}` where the
 * results are the shapes of azure.ts and the offsets say which characters the check covered
 * (`start_offset`, `end_offset`, and `check_offset` where checking began). A blocked completion ends the
 * Response `incomplete` with `incomplete_details.reason: "content_filter"`, its text removed.
 * Streams are in responses-stream.ts.
 */
import type { JsonObject } from '../../providers/types.js';
import { GantryError } from '../errors.js';
import type { Metrics } from '../metrics.js';
import { type ContentFilterResults, evaluate } from './azure.js';
import type { PiiKind } from './categories.js';
import { ClassifierUnavailable, type Findings, mergeFindings, type TextSource } from './classifier.js';
import {
  type ActiveSafety,
  blockedPromptError,
  checkCompletion,
  checkPrompt,
  recordCheck,
  type SafetyCheck,
  type SafetyOutcome,
} from './engine.js';
import type { SafetyPolicy } from './policy.js';
import { responsesPromptParts } from './prompt-text.js';
import { maskText } from './redact.js';

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
}

export function contentFilterEntry(
  source: 'prompt' | 'completion',
  check: SafetyCheck,
  length: number,
  checkOffset = 0,
): ContentFilterEntry {
  return {
    blocked: check.blocked,
    source_type: source,
    content_filter_raw: [],
    content_filter_results: check.results,
    content_filter_offsets: { start_offset: 0, end_offset: length, check_offset: checkOffset },
  };
}

/** The kinds `redact` masks, as a set made once per policy (policies are built at start and kept). */
const redactKinds = new WeakMap<SafetyPolicy, ReadonlySet<PiiKind>>();
function kindsOf(policy: SafetyPolicy): ReadonlySet<PiiKind> {
  let kinds = redactKinds.get(policy);
  if (kinds === undefined) {
    kinds = new Set(policy.redact);
    redactKinds.set(policy, kinds);
  }
  return kinds;
}

/**
 * The request with personal data masked in `instructions` and every text of `input` (message texts and
 * function_call_output), so neither the upstream nor the stored conversation ever holds the original.
 * The request itself is left as it was. Unchanged (the same object) when the policy redacts nothing.
 */
export async function redactResponsesRequest(s: ResponsesSafety, req: JsonObject): Promise<JsonObject> {
  const { policy } = s.active;
  if (policy.redact.length === 0) return req;
  const kinds = kindsOf(policy);
  const mask = async (text: string, source: Extract<TextSource, 'prompt' | 'document'>): Promise<string> => {
    if (text === '') return text;
    const findings = await classifyForRedaction(s.active, text, source);
    if (findings?.pii === undefined) return text;
    const masked = maskText(text, findings.pii, kinds);
    s.outcome.redacted += masked.masked;
    return masked.text;
  };
  const out: JsonObject = { ...req };
  if (typeof req.instructions === 'string') out.instructions = await mask(req.instructions, 'prompt');
  if (typeof req.input === 'string') {
    out.input = await mask(req.input, 'prompt');
  } else if (Array.isArray(req.input)) {
    const items: unknown[] = [];
    for (const item of req.input) items.push(await maskItem(item, mask));
    out.input = items;
  }
  return out;
}

type Mask = (text: string, source: Extract<TextSource, 'prompt' | 'document'>) => Promise<string>;

async function maskItem(item: unknown, mask: Mask): Promise<unknown> {
  if (!isObject(item)) return item;
  if (item.type === 'function_call_output') {
    if (typeof item.output === 'string') return { ...item, output: await mask(item.output, 'document') };
    if (Array.isArray(item.output))
      return { ...item, output: await maskParts(item.output, mask, 'document') };
    return item;
  }
  if (item.type !== undefined && item.type !== 'message') return item;
  if (typeof item.content === 'string') return { ...item, content: await mask(item.content, 'prompt') };
  if (Array.isArray(item.content)) return { ...item, content: await maskParts(item.content, mask, 'prompt') };
  return item;
}

async function maskParts(
  parts: unknown[],
  mask: Mask,
  source: Extract<TextSource, 'prompt' | 'document'>,
): Promise<unknown[]> {
  const out: unknown[] = [];
  for (const part of parts) {
    if (isObject(part) && typeof part.text === 'string')
      out.push({ ...part, text: await mask(part.text, source) });
    else out.push(part);
  }
  return out;
}

/** The classifier's findings for masking; undefined when it could not run and the policy fails open. */
async function classifyForRedaction(
  active: ActiveSafety,
  text: string,
  source: TextSource,
): Promise<Findings | undefined> {
  try {
    return await active.classifier.classify(text, source);
  } catch (err) {
    if (!(err instanceof ClassifierUnavailable)) throw err;
    if (active.onFailure === 'closed') {
      throw new GantryError('SERVICE_UNAVAILABLE', {
        message: 'The safety classifier is unavailable and the policy fails closed; retry later',
        code: 'content_filter_unavailable',
        cause: err,
      });
    }
    return undefined;
  }
}

/**
 * Checks this request's `instructions` and `input` (the conversation before it was checked when it was
 * sent) and returns its `content_filters` entry; throws the 400 `content_filter` when the policy blocks it.
 */
export async function checkResponsesPrompt(s: ResponsesSafety, req: JsonObject): Promise<ContentFilterEntry> {
  const parts = responsesPromptParts(req.instructions, req.input);
  const started = performance.now();
  const check = await checkPrompt(s.active, parts);
  recordCheck(
    s.metrics,
    s.outcome,
    'responses',
    'prompt',
    s.active.classifier.name,
    check,
    (performance.now() - started) / 1000,
  );
  if (check.blocked) throw blockedPromptError(check);
  let length = 0;
  for (const part of parts) length += part.text.length;
  return contentFilterEntry('prompt', check, length);
}

/** Checks one completion text and counts it. */
export async function checkCompletionText(s: ResponsesSafety, text: string): Promise<SafetyCheck> {
  const started = performance.now();
  const check = await checkCompletion(s.active, text);
  recordCheck(
    s.metrics,
    s.outcome,
    'responses',
    'completion',
    s.active.classifier.name,
    check,
    (performance.now() - started) / 1000,
  );
  return check;
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

/** The completion text of Response output items: message texts and function call arguments. */
export function outputCompletionText(output: unknown): string {
  if (!Array.isArray(output)) return '';
  let text = '';
  for (const item of output) {
    if (!isObject(item)) continue;
    if (item.type === 'function_call' && typeof item.arguments === 'string') text += item.arguments;
    if (item.type !== 'message' || !Array.isArray(item.content)) continue;
    for (const part of item.content) {
      if (isObject(part) && part.type === 'output_text' && typeof part.text === 'string') text += part.text;
    }
  }
  return text;
}

/**
 * A whole Response (JSON answer) checked: `content_filters` added; when the policy blocks the completion,
 * the Response made `incomplete` (content_filter), message items emptied and the other output items
 * (function calls, reasoning) dropped, `output_text` empty. Usage stays: the upstream did the work.
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
