import type { JsonObject } from '../../providers/types.js';

/** A chat tool call as chat completions carries it on an assistant message. */
export interface ChatToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

/** A chat content part the bridge writes: text, or an image (from a Responses input_image). */
export type ChatContentPart =
  | { type: 'text'; text: string }
  | { type: 'image_url'; image_url: { url: string; detail?: string } };

/**
 * One turn of a bridged conversation, as sent to chat completions and kept as response history: a
 * message (text, or parts when it holds images), an assistant turn that called tools, or a tool's result.
 */
export interface ChatMessage {
  role: 'system' | 'developer' | 'user' | 'assistant' | 'tool';
  /** null only on an assistant message that holds tool calls and no text. */
  content: string | ChatContentPart[] | null;
  tool_calls?: ChatToolCall[];
  /** On a `tool` message: the call it answers. */
  tool_call_id?: string;
  /** On an assistant message: what the model said in refusing, chat's own field for it. */
  refusal?: string;
  /**
   * On an assistant message: the upstream's signed thinking blocks (Gantry's Anthropic adapter, as
   * LiteLLM does), sent back unchanged on the next turn, which Anthropic requires around tool use.
   */
  thinking_blocks?: unknown[];
}

/** What a bridged Response needs besides the upstream's answer. */
export interface ResponseMeta {
  /** `resp_…`, chosen by the route before the upstream call so streams and history agree on it. */
  id: string;
  /** The model name the client asked for (never the upstream's name). */
  model: string;
  /** Unix seconds. */
  createdAt: number;
  /**
   * The validated Responses request. Its instructions, temperature, top_p, max_output_tokens,
   * previous_response_id, metadata, store, user, tools, text … are echoed into the Response object; apply
   * the model's defaults to it first if the echo should show the values actually used.
   */
  request: JsonObject;
}

export function isObject(value: unknown): value is JsonObject {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

/**
 * The reasoning text of a chat message or delta: `reasoning_content` (DeepSeek, older vLLM, Gantry's
 * Anthropic adapter) or `reasoning` (vLLM since its rename, OpenRouter). Servers that send both send the
 * same text twice, so one is read.
 */
export function reasoningOf(message: JsonObject): string {
  const text = message.reasoning_content ?? message.reasoning;
  return typeof text === 'string' ? text : '';
}

/**
 * Thinking blocks travel in a reasoning item's `encrypted_content` (opaque to clients, as OpenAI's is):
 * base64 of their JSON. A client that sends the item back (stateless, store false) gets them replayed.
 */
export function encodeThinking(blocks: readonly unknown[]): string {
  return Buffer.from(JSON.stringify(blocks)).toString('base64');
}

/** The thinking blocks of an `encrypted_content`; undefined for anything that is not Gantry's. */
export function decodeThinking(value: unknown): unknown[] | undefined {
  if (typeof value !== 'string' || value === '') return undefined;
  try {
    const blocks: unknown = JSON.parse(Buffer.from(value, 'base64').toString('utf8'));
    return Array.isArray(blocks) && blocks.every(isObject) ? blocks : undefined;
  } catch {
    return undefined;
  }
}
