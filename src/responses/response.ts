import { randomBytes } from 'node:crypto';
import type { JsonObject } from '../../providers/types.js';
import { echoReasoning, echoText, echoTools } from './chat-options.js';
import {
  type ChatMessage,
  type ChatToolCall,
  decodeThinking,
  encodeThinking,
  isObject,
  type ResponseMeta,
} from './types.js';

export type ItemStatus = 'in_progress' | 'completed' | 'incomplete';

/** How a chat finish_reason ends a Response. */
export interface Outcome {
  status: 'completed' | 'incomplete';
  /** Set when status is incomplete: OpenAI's incomplete_details.reason. */
  reason?: 'max_output_tokens' | 'content_filter';
}

export function outcomeOf(finishReason: unknown): Outcome {
  if (finishReason === 'length') return { status: 'incomplete', reason: 'max_output_tokens' };
  if (finishReason === 'content_filter') return { status: 'incomplete', reason: 'content_filter' };
  // stop, tool_calls or none at all: the answer is whole.
  return { status: 'completed' };
}

/** `msg_` and 48 hex digits, the shape of OpenAI's item ids (and of the route's `resp_` ids). */
export function newMessageId(): string {
  return newItemId('msg');
}

/** An output item id: `msg`, `fc` (function call) or `rs` (reasoning), `_`, 48 hex digits. */
export function newItemId(prefix: ItemPrefix): string {
  return `${prefix}_${randomBytes(24).toString('hex')}`;
}

export type ItemPrefix = 'msg' | 'fc' | 'rs';

const RESPONSE_HEX = /^resp_([0-9a-f]{48})$/;
const ITEM_OF_RESPONSE = /^(?:msg|fc|rs)_([0-9a-f]{48})[0-9a-f]{2,}$/;

/**
 * The id of output item `index` of response `responseId`: the prefix, the response's 48 hex digits, the
 * index in hex. An `item_reference` to it then leads back to its response without an index of items
 * (responseOfItem). Ids not of the route's shape get a random item id.
 */
export function itemId(responseId: string, prefix: ItemPrefix, index: number): string {
  const hex = RESPONSE_HEX.exec(responseId)?.[1];
  return hex === undefined ? newItemId(prefix) : `${prefix}_${hex}${index.toString(16).padStart(2, '0')}`;
}

/** The response an item id made by itemId belongs to; undefined for any other id. */
export function responseOfItem(id: string): string | undefined {
  const hex = ITEM_OF_RESPONSE.exec(id)?.[1];
  return hex === undefined ? undefined : `resp_${hex}`;
}

/** A function_call output item; `call_id` is the chat tool call's id, which the client answers with. */
export function functionCallItem(
  id: string,
  status: ItemStatus,
  call: { callId: string; name: string; arguments: string },
): JsonObject {
  return {
    id,
    type: 'function_call',
    status,
    arguments: call.arguments,
    call_id: call.callId,
    name: call.name,
  };
}

/**
 * A reasoning output item holding the model's own reasoning text (chat's `reasoning_content`) as one
 * reasoning_text part; chat upstreams give no summary, so `summary` stays empty. `text` undefined gives
 * the empty item announced before any part. `thinking`: the upstream's signed thinking blocks, carried
 * in `encrypted_content` (see encodeThinking).
 */
export function reasoningItem(
  id: string,
  status: ItemStatus,
  text?: string,
  thinking?: readonly unknown[],
): JsonObject {
  const item: JsonObject = {
    id,
    type: 'reasoning',
    status,
    summary: [],
    content: text === undefined ? [] : [reasoningPart(text)],
  };
  if (thinking && thinking.length > 0) item.encrypted_content = encodeThinking(thinking);
  return item;
}

export function reasoningPart(text: string): JsonObject {
  return { type: 'reasoning_text', text };
}

/**
 * The assistant turn the output items make, as a chat message for the response history: its text, its
 * refusal (chat's `refusal` field), its tool calls, and the upstream's thinking blocks when there are any
 * (the reasoning text itself is not sent back: chat upstreams ask that it not be).
 */
export function assistantTurn(output: readonly JsonObject[]): ChatMessage {
  const calls: ChatToolCall[] = [];
  const thinking: unknown[] = [];
  for (const item of output) {
    if (item.type === 'reasoning') thinking.push(...(decodeThinking(item.encrypted_content) ?? []));
    if (item.type !== 'function_call') continue;
    calls.push({
      id: String(item.call_id),
      type: 'function',
      function: { name: String(item.name), arguments: String(item.arguments) },
    });
  }
  const text = outputText(output);
  const turn: ChatMessage =
    calls.length === 0
      ? { role: 'assistant', content: text }
      : { role: 'assistant', content: text === '' ? null : text, tool_calls: calls };
  const refusal = partsText(output, 'refusal');
  if (refusal !== '') turn.refusal = refusal;
  if (thinking.length > 0) turn.thinking_blocks = thinking;
  return turn;
}

export function textPart(text: string): JsonObject {
  return { type: 'output_text', annotations: [], logprobs: [], text };
}

export function refusalPart(refusal: string): JsonObject {
  return { type: 'refusal', refusal };
}

/**
 * The assistant message item: output_text and refusal parts, in the order the model wrote them. No
 * parts gives the empty item OpenAI announces before any part.
 */
export function messageItem(id: string, status: ItemStatus, parts: JsonObject[] = []): JsonObject {
  return { id, type: 'message', status, content: parts, role: 'assistant' };
}

/** Chat usage → Responses usage; undefined when the upstream reported none (rather than invented zeros). */
export function responseUsage(usage: unknown): JsonObject | undefined {
  if (!isObject(usage)) return undefined;
  const input = count(usage.prompt_tokens);
  const output = count(usage.completion_tokens);
  const promptDetails = isObject(usage.prompt_tokens_details) ? usage.prompt_tokens_details : {};
  const completionDetails = isObject(usage.completion_tokens_details) ? usage.completion_tokens_details : {};
  return {
    input_tokens: input,
    input_tokens_details: {
      cached_tokens: count(promptDetails.cached_tokens),
      cache_write_tokens: count(promptDetails.cache_write_tokens),
    },
    output_tokens: output,
    output_tokens_details: { reasoning_tokens: count(completionDetails.reasoning_tokens) },
    total_tokens: typeof usage.total_tokens === 'number' ? count(usage.total_tokens) : input + output,
  };
}

function count(v: unknown): number {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0 ? v : 0;
}

export interface ResponseState {
  status: ItemStatus;
  reason?: Outcome['reason'];
  output: JsonObject[];
  usage?: JsonObject | undefined;
}

/** The text of every output_text part, joined as the SDKs build their `output_text`. */
function outputText(output: readonly JsonObject[]): string {
  return partsText(output, 'output_text');
}

/** The texts of the message items' parts of one type (output_text: `text`, refusal: `refusal`), joined. */
function partsText(output: readonly JsonObject[], type: 'output_text' | 'refusal'): string {
  const field = type === 'refusal' ? 'refusal' : 'text';
  let text = '';
  for (const item of output) {
    if (item.type !== 'message' || !Array.isArray(item.content)) continue;
    for (const part of item.content) {
      if (isObject(part) && part.type === type && typeof part[field] === 'string') text += part[field];
    }
  }
  return text;
}

const orNull = (v: unknown): unknown => v ?? null;

/**
 * A Response object with every field OpenAI sends, the request's settings echoed back. Fields this
 * bridge never varies (truncation, top_logprobs) show the only values it accepts.
 */
export function responseObject(meta: ResponseMeta, state: ResponseState): JsonObject {
  const req = meta.request;
  const response: JsonObject = {
    id: meta.id,
    object: 'response',
    created_at: meta.createdAt,
    status: state.status,
    background: false,
    completed_at: state.status === 'completed' ? Math.floor(Date.now() / 1000) : null,
    error: null,
    incomplete_details: state.reason ? { reason: state.reason } : null,
    instructions: orNull(req.instructions),
    max_output_tokens: orNull(req.max_output_tokens),
    max_tool_calls: orNull(req.max_tool_calls),
    model: meta.model,
    output: state.output,
    output_text: outputText(state.output),
    parallel_tool_calls: req.parallel_tool_calls ?? true,
    previous_response_id: orNull(req.previous_response_id),
    prompt_cache_key: orNull(req.prompt_cache_key),
    reasoning: echoReasoning(req),
    safety_identifier: orNull(req.safety_identifier),
    store: req.store ?? true,
    temperature: orNull(req.temperature),
    text: echoText(req),
    tool_choice: req.tool_choice ?? 'auto',
    tools: echoTools(req),
    top_logprobs: 0,
    top_p: orNull(req.top_p),
    truncation: 'disabled',
    metadata: req.metadata ?? {},
  };
  // OpenAI sends `usage: null` and `user: null` while in progress, but its published schema allows
  // neither null: leave them out until there is a value.
  if (state.usage) response.usage = state.usage;
  if (typeof req.user === 'string') response.user = req.user;
  return response;
}
