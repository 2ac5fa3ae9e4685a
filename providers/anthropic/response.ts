/**
 * Anthropic Messages API answer → OpenAI `chat.completion`, and the pieces the stream translation
 * shares (finish reasons, usage, errors). Pure; tested in test/providers/anthropic-response.test.ts.
 *
 * Content blocks: text → message.content (message.refusal for structured output); tool_use →
 * message.tool_calls (or, for structured output, the JSON text of message.content); thinking → message.reasoning_content plus message.thinking_blocks
 * (with signatures, to be sent back in the next turn); redacted_thinking → thinking_blocks only.
 */
import type { JsonObject } from '../types.js';
import { UpstreamError } from '../upstream-error.js';
import { isObject, nowSeconds } from './util.js';

export type OpenAIFinishReason = 'stop' | 'length' | 'tool_calls' | 'content_filter';

export interface TranslateOptions {
  /** The provider's name, for UpstreamError. */
  provider: string;
  /**
   * The model name to report: the request's (the upstream model Gantry asked for), not Anthropic's
   * resolved snapshot, so that Gantry's renaming to the client's model name also matches in streams.
   */
  model: string;
  /** Unix seconds; defaults to now. */
  created?: number;
  /** Structured output: the forced tool whose input is the answer (see request.ts). */
  jsonTool?: string | undefined;
}

/** Anthropic's stop_reason as an OpenAI finish_reason; a structured answer's tool_use is its `stop`. */
export function finishReasonOf(stopReason: unknown, structured = false): OpenAIFinishReason {
  switch (stopReason) {
    case 'max_tokens':
    case 'model_context_window_exceeded':
      return 'length';
    case 'tool_use':
      return structured ? 'stop' : 'tool_calls';
    case 'refusal':
      return 'content_filter';
    default:
      // end_turn, stop_sequence, pause_turn and reasons added later: the model stopped of its own accord.
      return 'stop';
  }
}

export interface AnthropicUsage {
  input: number;
  output: number;
  cacheRead: number;
  cacheCreation: number;
  /** output_tokens_details.thinking_tokens, where the API reports it: part of `output`. */
  thinking: number | undefined;
}

export const NO_USAGE: AnthropicUsage = {
  input: 0,
  output: 0,
  cacheRead: 0,
  cacheCreation: 0,
  thinking: undefined,
};

export function readUsage(value: unknown, base: AnthropicUsage): AnthropicUsage {
  if (!isObject(value)) return base;
  const num = (key: string, fallback: number): number => {
    const v = value[key];
    return typeof v === 'number' && Number.isFinite(v) ? v : fallback;
  };
  return {
    input: num('input_tokens', base.input),
    output: num('output_tokens', base.output),
    cacheRead: num('cache_read_input_tokens', base.cacheRead),
    cacheCreation: num('cache_creation_input_tokens', base.cacheCreation),
    thinking: thinkingTokens(value.output_tokens_details) ?? base.thinking,
  };
}

function thinkingTokens(details: unknown): number | undefined {
  const n = isObject(details) ? details.thinking_tokens : undefined;
  return typeof n === 'number' && Number.isFinite(n) ? n : undefined;
}

/**
 * Anthropic counts cached input apart from `input_tokens`; OpenAI's prompt_tokens includes it. Cache
 * reads are OpenAI's cached_tokens and cache writes its cache_write_tokens, both part of prompt_tokens
 * (priced at the model's cached_input and cache_write rates: README.md, "Anthropic models").
 */
export function usageOf(value: unknown): JsonObject {
  return openAIUsage(readUsage(value, NO_USAGE));
}

export function openAIUsage(u: AnthropicUsage): JsonObject {
  const prompt = u.input + u.cacheRead + u.cacheCreation;
  const usage: JsonObject = {
    prompt_tokens: prompt,
    completion_tokens: u.output,
    total_tokens: prompt + u.output,
    prompt_tokens_details: { cached_tokens: u.cacheRead, cache_write_tokens: u.cacheCreation },
  };
  if (u.thinking !== undefined) usage.completion_tokens_details = { reasoning_tokens: u.thinking };
  return usage;
}

/** Maps a Messages API response body onto a `chat.completion`. */
export function fromAnthropicMessage(value: unknown, options: TranslateOptions): JsonObject {
  const { provider, jsonTool } = options;
  if (!isObject(value) || value.type !== 'message' || typeof value.id !== 'string') {
    throw protocolError(provider, `${provider} sent a body that is not a Messages API message`);
  }
  if (!Array.isArray(value.content)) {
    throw protocolError(provider, `${provider} sent a message without content`);
  }
  let text = '';
  let json: string | undefined;
  let reasoning: string | undefined;
  const toolCalls: JsonObject[] = [];
  const thinkingBlocks: JsonObject[] = [];
  for (const block of value.content as unknown[]) {
    if (!isObject(block)) continue;
    switch (block.type) {
      case 'text':
        if (typeof block.text === 'string') text += block.text;
        break;
      case 'tool_use': {
        const args = JSON.stringify(block.input ?? {});
        // The answer is the first call of the answer tool: a second one (the request disables parallel
        // calls, but a model may still make one) would glue two JSON documents into invalid JSON.
        if (jsonTool !== undefined && block.name === jsonTool) json ??= args;
        else toolCalls.push(toolCall(block, args));
        break;
      }
      case 'thinking':
        if (typeof block.thinking === 'string') {
          reasoning = (reasoning ?? '') + block.thinking;
          thinkingBlocks.push({
            type: 'thinking',
            thinking: block.thinking,
            signature: block.signature ?? '',
          });
        }
        break;
      case 'redacted_thinking':
        thinkingBlocks.push({ type: 'redacted_thinking', data: block.data ?? '' });
        break;
      default:
      // Block kinds this adapter never asks for (server tools, citations...): nothing to show.
    }
  }
  const message: JsonObject =
    jsonTool === undefined
      ? {
          role: 'assistant',
          content: text === '' && toolCalls.length > 0 ? null : text,
          refusal: null,
          annotations: [],
        }
      : // Structured output: the content is the JSON alone; what the model said instead of answering
        // through the tool (a refusal) is OpenAI's `refusal`, as with OpenAI's structured outputs.
        { role: 'assistant', content: json ?? null, refusal: text === '' ? null : text, annotations: [] };
  if (toolCalls.length > 0) message.tool_calls = toolCalls;
  if (reasoning !== undefined) message.reasoning_content = reasoning;
  if (thinkingBlocks.length > 0) message.thinking_blocks = thinkingBlocks;
  return {
    id: `chatcmpl-${value.id}`,
    object: 'chat.completion',
    created: options.created ?? nowSeconds(),
    model: options.model,
    choices: [
      {
        index: 0,
        message,
        logprobs: null,
        // A structured answer is the end of the turn, unless the model also called the client's tools.
        finish_reason: finishReasonOf(value.stop_reason, json !== undefined && toolCalls.length === 0),
      },
    ],
    usage: usageOf(value.usage),
  };
}

function toolCall(block: JsonObject, args: string): JsonObject {
  return { id: String(block.id), type: 'function', function: { name: String(block.name), arguments: args } };
}

// ---------------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------------

/**
 * The HTTP status an Anthropic error type stands for (docs: "HTTP errors"). Used for `error` events in
 * a stream, which arrive after a 200. overloaded_error is 529 on the wire, a status only Anthropic uses:
 * 503 says the same ("overloaded, try again") in the standard vocabulary.
 */
export function statusOfErrorType(type: unknown): number {
  switch (type) {
    case 'invalid_request_error':
      return 400;
    case 'authentication_error':
      return 401;
    case 'billing_error':
      return 402;
    case 'permission_error':
      return 403;
    case 'not_found_error':
      return 404;
    case 'request_too_large':
      return 413;
    case 'rate_limit_error':
      return 429;
    case 'api_error':
      return 500;
    case 'overloaded_error':
      return 503;
    case 'timeout_error':
      return 504;
    default:
      return 502;
  }
}

export function streamedError(provider: string, data: JsonObject): UpstreamError {
  const error = isObject(data.error) ? data.error : {};
  const message = typeof error.message === 'string' ? error.message : 'upstream error';
  return new UpstreamError('status', provider, `${provider} reported an error in the stream`, {
    status: statusOfErrorType(error.type),
    upstreamMessage: message,
    ...(typeof error.type === 'string' ? { type: error.type } : {}),
  });
}

export function protocolError(provider: string, message: string, cause?: unknown): UpstreamError {
  return new UpstreamError('protocol', provider, message, cause === undefined ? {} : { cause });
}
