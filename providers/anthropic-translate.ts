/**
 * The pure half of the Anthropic adapter: OpenAI chat completions to Anthropic's Messages API and back.
 * No I/O here, so every mapping decision can be unit-tested: anthropic.ts only does the HTTP.
 *
 * Wire format: https://docs.anthropic.com/en/api/messages and /en/docs/build-with-claude/streaming.
 */
import { invalidParameter, ProviderRequestError } from './request-error.js';
import type { JsonObject, SseEvent } from './types.js';
import { UpstreamError } from './upstream-error.js';

export const ANTHROPIC_DEFAULT_BASE_URL = 'https://api.anthropic.com';
export const ANTHROPIC_DEFAULT_VERSION = '2023-06-01';
export const ANTHROPIC_MESSAGES_PATH = '/v1/messages';

export interface AnthropicTextBlock {
  type: 'text';
  text: string;
}

export interface AnthropicMessageParam {
  role: 'user' | 'assistant';
  content: string | AnthropicTextBlock[];
}

/** The subset of the Messages API request this adapter produces. */
export interface AnthropicRequest {
  model: string;
  messages: AnthropicMessageParam[];
  max_tokens: number;
  system?: string;
  stop_sequences?: string[];
  temperature?: number;
  top_p?: number;
  stream?: boolean;
  metadata?: { user_id: string };
}

type OpenAIFinishReason = 'stop' | 'length' | 'tool_calls' | 'content_filter';

// ---------------------------------------------------------------------------------------------------
// Request
// ---------------------------------------------------------------------------------------------------

/**
 * OpenAI parameters this adapter cannot honour, each with the values that mean "feature off" and so
 * may pass. Anything else is an honest 400: a silently ignored `seed` or `tools` would look like it
 * worked while changing the answer's meaning.
 */
const UNSUPPORTED: ReadonlyArray<{ param: string; harmless: (value: unknown) => boolean; why: string }> = [
  { param: 'n', harmless: (v) => v === 1, why: 'only n = 1 is supported' },
  { param: 'logprobs', harmless: (v) => v === false, why: 'log probabilities are not available' },
  { param: 'top_logprobs', harmless: (v) => v === 0, why: 'log probabilities are not available' },
  { param: 'tools', harmless: isEmptyArray, why: 'tool calling is not supported' },
  { param: 'functions', harmless: isEmptyArray, why: 'function calling is not supported' },
  { param: 'tool_choice', harmless: (v) => v === 'none', why: 'tool calling is not supported' },
  { param: 'function_call', harmless: (v) => v === 'none', why: 'function calling is not supported' },
  {
    param: 'response_format',
    harmless: (v) => isObject(v) && v.type === 'text',
    why: 'structured output (json_object, json_schema) is not supported',
  },
  { param: 'audio', harmless: () => false, why: 'audio output is not supported' },
  {
    param: 'modalities',
    harmless: (v) => Array.isArray(v) && v.every((m) => m === 'text'),
    why: 'only text output is supported',
  },
  { param: 'presence_penalty', harmless: (v) => v === 0, why: 'presence_penalty is not supported' },
  { param: 'frequency_penalty', harmless: (v) => v === 0, why: 'frequency_penalty is not supported' },
  {
    param: 'logit_bias',
    harmless: (v) => isObject(v) && Object.keys(v).length === 0,
    why: 'logit_bias is not supported',
  },
  { param: 'seed', harmless: () => false, why: 'seeded sampling is not supported' },
  { param: 'prediction', harmless: () => false, why: 'predicted outputs are not supported' },
  { param: 'web_search_options', harmless: () => false, why: 'web search is not supported' },
  { param: 'reasoning_effort', harmless: () => false, why: 'reasoning_effort is not supported' },
  { param: 'verbosity', harmless: () => false, why: 'verbosity is not supported' },
  { param: 'store', harmless: (v) => v === false, why: 'stored completions are not supported' },
];

/** Anthropic's temperature range is 0..1; OpenAI's is 0..2 and means something else above 1. */
const MAX_TEMPERATURE = 1;

/**
 * Maps a validated OpenAI chat request (defaults applied, `model` already the upstream's name) onto a
 * Messages API request. Throws ProviderRequestError for anything the backend cannot honour, before any network.
 */
export function toAnthropicRequest(body: JsonObject): AnthropicRequest {
  rejectUnsupported(body);
  const { system, messages } = mapMessages(body.messages);
  const request: AnthropicRequest = {
    model: String(body.model),
    messages,
    max_tokens: maxTokens(body),
  };
  if (system !== undefined) request.system = system;
  const stop = stopSequences(body.stop);
  if (stop.length > 0) request.stop_sequences = stop;
  const temperature = temperatureOf(body.temperature);
  if (temperature !== undefined) request.temperature = temperature;
  if (typeof body.top_p === 'number') request.top_p = body.top_p;
  if (body.stream === true) request.stream = true;
  // safety_identifier is OpenAI's newer name for the same end-user id.
  const user = nonEmptyString(body.user) ?? nonEmptyString(body.safety_identifier);
  if (user !== undefined) request.metadata = { user_id: user };
  return request;
}

function rejectUnsupported(body: JsonObject): void {
  for (const { param, harmless, why } of UNSUPPORTED) {
    const value = body[param];
    if (value === undefined || value === null || harmless(value)) continue;
    throw invalidParameter(param, `${param}: ${why} by this model's provider`);
  }
}

function maxTokens(body: JsonObject): number {
  // max_completion_tokens is the newer spelling; prefer it when a client sends both.
  const value = body.max_completion_tokens ?? body.max_tokens;
  if (typeof value === 'number' && Number.isInteger(value) && value > 0) return value;
  throw new ProviderRequestError(
    'missing_required_field',
    'max_tokens (or max_completion_tokens) is required for this model',
    'max_tokens',
  );
}

function temperatureOf(value: unknown): number | undefined {
  if (typeof value !== 'number') return undefined;
  if (value > MAX_TEMPERATURE) {
    throw invalidParameter(
      'temperature',
      `temperature must be from 0 to ${MAX_TEMPERATURE} for this model (its provider's range)`,
    );
  }
  return value;
}

function stopSequences(stop: unknown): string[] {
  if (typeof stop === 'string') return [stop];
  if (Array.isArray(stop)) return stop.filter((s): s is string => typeof s === 'string');
  return [];
}

/**
 * System and developer messages become the top-level `system`; the rest must alternate user/assistant,
 * so consecutive messages of one role are merged into one message of several text blocks.
 */
function mapMessages(raw: unknown): { system: string | undefined; messages: AnthropicMessageParam[] } {
  const systemParts: string[] = [];
  const turns: { role: 'user' | 'assistant'; texts: string[] }[] = [];
  const list = Array.isArray(raw) ? raw : [];
  list.forEach((m: unknown, i) => {
    const where = `messages[${i}]`;
    if (!isObject(m)) throw invalidParameter(where, `${where} must be an object`);
    const role = m.role;
    if (role === 'system' || role === 'developer') {
      systemParts.push(textParts(m.content, where).join('\n'));
      return;
    }
    if (role !== 'user' && role !== 'assistant') {
      throw invalidParameter(
        `${where}.role`,
        `${where}.role: ${String(role)} messages are not supported by this model's provider`,
      );
    }
    for (const field of ['tool_calls', 'function_call', 'audio'] as const) {
      if (m[field] !== undefined && m[field] !== null) {
        throw invalidParameter(
          `${where}.${field}`,
          `${where}.${field} is not supported by this model's provider`,
        );
      }
    }
    const texts = textParts(m.content, where);
    const last = turns.at(-1);
    if (last?.role === role) last.texts.push(...texts);
    else turns.push({ role, texts });
  });
  return {
    system: systemParts.length > 0 ? systemParts.join('\n\n') : undefined,
    messages: turns.map(({ role, texts }) => ({ role, content: blocks(texts) })),
  };
}

/** The texts of a message's content: a string, or an array of text parts (other part types: 400). */
function textParts(content: unknown, where: string): string[] {
  if (content === undefined || content === null) return [];
  if (typeof content === 'string') return [content];
  if (!Array.isArray(content)) {
    throw invalidParameter(`${where}.content`, `${where}.content must be a string or an array of parts`);
  }
  return content.map((part: unknown, j) => {
    if (isObject(part) && part.type === 'text' && typeof part.text === 'string') return part.text;
    const type = isObject(part) ? String(part.type) : typeof part;
    throw invalidParameter(
      `${where}.content[${j}]`,
      `${where}.content[${j}]: ${type} content parts are not supported by this model's provider`,
    );
  });
}

/**
 * Anthropic rejects empty text blocks, so they are dropped; a message left with no text is sent as ''
 * so that Anthropic itself reports it, rather than the adapter silently changing the conversation.
 */
function blocks(texts: string[]): string | AnthropicTextBlock[] {
  const nonEmpty = texts.filter((t) => t !== '');
  if (nonEmpty.length === 0) return '';
  if (nonEmpty.length === 1) return nonEmpty[0] as string;
  return nonEmpty.map((text) => ({ type: 'text', text }));
}

// ---------------------------------------------------------------------------------------------------
// Response
// ---------------------------------------------------------------------------------------------------

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
}

/** Anthropic's stop_reason as an OpenAI finish_reason. */
export function finishReasonOf(stopReason: unknown): OpenAIFinishReason {
  switch (stopReason) {
    case 'max_tokens':
    case 'model_context_window_exceeded':
      return 'length';
    case 'tool_use':
      return 'tool_calls';
    case 'refusal':
      return 'content_filter';
    default:
      // end_turn, stop_sequence, pause_turn and reasons added later: the model stopped of its own accord.
      return 'stop';
  }
}

interface AnthropicUsage {
  input: number;
  output: number;
  cacheRead: number;
  cacheCreation: number;
}

function readUsage(value: unknown, base: AnthropicUsage): AnthropicUsage {
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
  };
}

const NO_USAGE: AnthropicUsage = { input: 0, output: 0, cacheRead: 0, cacheCreation: 0 };

/** Anthropic counts cached input apart from `input_tokens`; OpenAI's prompt_tokens includes it. */
export function usageOf(value: unknown): JsonObject {
  return openAIUsage(readUsage(value, NO_USAGE));
}

function openAIUsage(u: AnthropicUsage): JsonObject {
  const prompt = u.input + u.cacheRead + u.cacheCreation;
  return {
    prompt_tokens: prompt,
    completion_tokens: u.output,
    total_tokens: prompt + u.output,
    prompt_tokens_details: { cached_tokens: u.cacheRead },
  };
}

/** Maps a Messages API response body onto a `chat.completion`. */
export function fromAnthropicMessage(value: unknown, options: TranslateOptions): JsonObject {
  const { provider } = options;
  if (!isObject(value) || value.type !== 'message' || typeof value.id !== 'string') {
    throw protocolError(provider, `${provider} sent a body that is not a Messages API message`);
  }
  if (!Array.isArray(value.content)) {
    throw protocolError(provider, `${provider} sent a message without content`);
  }
  const text = value.content
    .filter((b: unknown): b is JsonObject => isObject(b) && b.type === 'text' && typeof b.text === 'string')
    .map((b) => b.text as string)
    .join('');
  return {
    id: `chatcmpl-${value.id}`,
    object: 'chat.completion',
    created: options.created ?? nowSeconds(),
    model: options.model,
    choices: [
      {
        index: 0,
        message: { role: 'assistant', content: text, refusal: null, annotations: [] },
        logprobs: null,
        finish_reason: finishReasonOf(value.stop_reason),
      },
    ],
    usage: usageOf(value.usage),
  };
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

function streamedError(provider: string, data: JsonObject): UpstreamError {
  const error = isObject(data.error) ? data.error : {};
  const message = typeof error.message === 'string' ? error.message : 'upstream error';
  return new UpstreamError('status', provider, `${provider} reported an error in the stream`, {
    status: statusOfErrorType(error.type),
    upstreamMessage: message,
    ...(typeof error.type === 'string' ? { type: error.type } : {}),
  });
}

function protocolError(provider: string, message: string, cause?: unknown): UpstreamError {
  return new UpstreamError('protocol', provider, message, cause === undefined ? {} : { cause });
}

// ---------------------------------------------------------------------------------------------------
// Stream
// ---------------------------------------------------------------------------------------------------

export interface StreamTranslatorOptions extends TranslateOptions {
  /** The request's `stream_options.include_usage`: a final chunk with `choices: []` and the usage. */
  includeUsage: boolean;
}

type StreamState = 'awaiting_start' | 'streaming' | 'done';

/**
 * Translates Anthropic stream events into `chat.completion.chunk` events, one event at a time:
 *
 *   awaiting_start --message_start--> streaming --message_stop--> done
 *
 * message_start gives the role chunk; each text_delta a content chunk; message_delta only records the
 * stop reason and output tokens, and message_stop emits the finish chunk (and the usage chunk), so a
 * stream cut between the two never shows the client a finish_reason followed by an error.
 */
export class AnthropicStreamTranslator {
  private state: StreamState = 'awaiting_start';
  private id = '';
  private readonly created: number;
  private stopReason: unknown = null;
  private usage: AnthropicUsage = NO_USAGE;

  constructor(private readonly options: StreamTranslatorOptions) {
    this.created = options.created ?? nowSeconds();
  }

  /** True once message_stop was seen: the stream is complete. */
  get done(): boolean {
    return this.state === 'done';
  }

  /** The chunks one Anthropic event becomes (often none). Throws UpstreamError on `error` events. */
  push(event: SseEvent): SseEvent[] {
    const data = this.parse(event);
    const type = typeof data.type === 'string' ? data.type : event.event;
    if (type === 'error') throw streamedError(this.options.provider, data);
    if (type === 'ping' || this.state === 'done') return [];
    if (this.state === 'awaiting_start') {
      if (type !== 'message_start') return this.outOfOrder(type);
      return this.start(data);
    }
    switch (type) {
      case 'content_block_start':
        return this.text(isObject(data.content_block) ? data.content_block : {});
      case 'content_block_delta':
        return this.text(isObject(data.delta) ? data.delta : {});
      case 'message_delta':
        this.messageDelta(data);
        return [];
      case 'message_stop':
        return this.stop();
      case 'message_start':
        return this.outOfOrder(type);
      default:
        // content_block_stop, and event types Anthropic adds later: the docs ask clients to skip them.
        return [];
    }
  }

  /** The upstream's stream ended: a stream without message_stop is incomplete, never a success. */
  end(): void {
    if (this.state !== 'done') {
      const p = this.options.provider;
      throw protocolError(p, `${p} ended the stream before message_stop`);
    }
  }

  private parse(event: SseEvent): JsonObject {
    let data: unknown;
    try {
      data = JSON.parse(event.data);
    } catch (cause) {
      const p = this.options.provider;
      throw protocolError(p, `${p} sent a stream event that is not JSON`, cause);
    }
    if (!isObject(data)) {
      const p = this.options.provider;
      throw protocolError(p, `${p} sent a stream event that is not a JSON object`);
    }
    return data;
  }

  private outOfOrder(type: string | undefined): never {
    const p = this.options.provider;
    throw protocolError(p, `${p} sent ${String(type)} in the wrong place of the stream`);
  }

  private start(data: JsonObject): SseEvent[] {
    const message = isObject(data.message) ? data.message : {};
    if (typeof message.id !== 'string') {
      const p = this.options.provider;
      throw protocolError(p, `${p} sent message_start without a message id`);
    }
    this.id = `chatcmpl-${message.id}`;
    this.usage = readUsage(message.usage, NO_USAGE);
    this.state = 'streaming';
    return [this.chunk([choice({ role: 'assistant', content: '' }, null)])];
  }

  /** Text from a text block's start (normally empty) or a text_delta; other block kinds are not asked for. */
  private text(part: JsonObject): SseEvent[] {
    const isText = part.type === 'text' || part.type === 'text_delta';
    if (!isText || typeof part.text !== 'string' || part.text === '') return [];
    return [this.chunk([choice({ content: part.text }, null)])];
  }

  private messageDelta(data: JsonObject): void {
    const delta = isObject(data.delta) ? data.delta : {};
    if (delta.stop_reason !== undefined && delta.stop_reason !== null) this.stopReason = delta.stop_reason;
    // output_tokens here is the running total; newer API versions repeat the input counts too.
    this.usage = readUsage(data.usage, this.usage);
  }

  private stop(): SseEvent[] {
    this.state = 'done';
    const out = [this.chunk([choice({}, finishReasonOf(this.stopReason))])];
    if (this.options.includeUsage) out.push(this.chunk([], openAIUsage(this.usage)));
    return out;
  }

  private chunk(choices: JsonObject[], usage: JsonObject | null = null): SseEvent {
    const body: JsonObject = {
      id: this.id,
      object: 'chat.completion.chunk',
      created: this.created,
      model: this.options.model,
      choices,
    };
    // OpenAI sends `usage: null` on every chunk but the last when include_usage is on.
    if (this.options.includeUsage) body.usage = usage;
    return { data: JSON.stringify(body) };
  }
}

function choice(delta: JsonObject, finishReason: OpenAIFinishReason | null): JsonObject {
  return { index: 0, delta, logprobs: null, finish_reason: finishReason };
}

// ---------------------------------------------------------------------------------------------------

function isObject(value: unknown): value is JsonObject {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

function isEmptyArray(value: unknown): boolean {
  return Array.isArray(value) && value.length === 0;
}

function nonEmptyString(value: unknown): string | undefined {
  return typeof value === 'string' && value !== '' ? value : undefined;
}

function nowSeconds(): number {
  return Math.floor(Date.now() / 1000);
}
