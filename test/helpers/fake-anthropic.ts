/**
 * A fake Anthropic Messages API: a real node:http server on 127.0.0.1 that answers POST /v1/messages
 * with Anthropic's JSON and SSE wire format (`event: <type>\ndata: <json>\n\n`, with a `ping`), records
 * every request, and can be scripted to fail the ways the real API does (error statuses with Anthropic's
 * error body, slow headers, cut streams, `error` events mid-stream).
 *
 * It validates requests about as strictly as Anthropic does (unknown top-level fields, missing
 * max_tokens, roles that do not alternate, empty text blocks, temperature above 1 are all 400s), so a
 * translation that leaks an OpenAI field or breaks alternation fails loudly.
 *
 * Replies are derived from the request: the assistant says `anthropicFakeReply(last user text)`, one
 * word per streamed text_delta and per output token. `stop_sequences` end the reply before the first
 * match (stop_reason `stop_sequence`), `max_tokens` cuts it after that many words (`max_tokens`).
 */
import type {
  FakeServerControls,
  JsonObject,
  RecordedExchange,
  Exchange as ServerExchange,
} from './fake-server.js';
import { isObject, sendJson, sleep, startRecordingServer, writePaced } from './fake-server.js';

export type { JsonObject } from './fake-server.js';

/** How the fake answers one request. `{}` is a normal, successful answer. */
export interface FakeAnthropicBehavior {
  /** Answer with this HTTP status and Anthropic's error body; type and message default per status. */
  error?: { status: number; type?: string; message?: string };
  /** Retry-After header value on error answers; 429 sends `7` unless this says otherwise. */
  retryAfter?: string;
  /** Wait this long before sending the response headers. */
  delayHeadersMs?: number;
  /** Wait this long before each stream event, so that a test can act mid-stream. */
  delayBetweenEventsMs?: number;
  /** Streams: send this many events, then destroy the socket (no message_stop). */
  closeAfterEvents?: number;
  /** Streams: send this many events, then end the response properly, but without message_stop. */
  endAfterEvents?: number;
  /** Streams: send `afterEvents` events (default 1), then an `error` event, then end the response. */
  errorEvent?: { afterEvents?: number; type?: string; message?: string };
  /** The assistant's text, instead of `anthropicFakeReply(last user text)`. */
  reply?: string;
  /** Report this stop_reason instead of the one the reply earned (e.g. `refusal`, `pause_turn`). */
  stopReason?: string;
  /** Prompt-cache token counts to report beside input_tokens. */
  cacheReadTokens?: number;
  cacheCreationTokens?: number;
}

export type RecordedAnthropicRequest = RecordedExchange<FakeAnthropicBehavior>;

export interface FakeAnthropicOptions {
  /** Required `x-api-key`; other requests get 401 authentication_error. */
  apiKey?: string;
  /** The behaviour used when the queue is empty. */
  behavior?: FakeAnthropicBehavior;
}

export interface FakeAnthropic extends FakeServerControls<FakeAnthropicBehavior> {
  /** The provider's base_url: `http://127.0.0.1:PORT` (the API's paths start with `/v1`). */
  url: string;
  port: number;
}

/** What the fake assistant answers to `userText`. */
export function anthropicFakeReply(userText: string): string {
  return `You said: ${userText}`;
}

/** How the fake cuts text into streamed pieces and tokens: one word with its leading whitespace each. */
export function anthropicPieces(text: string): string[] {
  return text.match(/\s*\S+|\s+/g) ?? [];
}

/** The fake's input token count: whitespace-separated words. */
export function countWords(text: string): number {
  return text.split(/\s+/).filter((w) => w !== '').length;
}

const KNOWN_FIELDS = new Set([
  'model',
  'messages',
  'max_tokens',
  'system',
  'metadata',
  'stop_sequences',
  'stream',
  'temperature',
  'top_p',
  'top_k',
  'tools',
  'tool_choice',
  'thinking',
  'service_tier',
]);

const ERROR_DEFAULTS: Record<number, { type: string; message: string }> = {
  400: { type: 'invalid_request_error', message: 'Invalid request.' },
  401: { type: 'authentication_error', message: 'invalid x-api-key' },
  403: { type: 'permission_error', message: 'Your API key does not have permission to use this model.' },
  404: { type: 'not_found_error', message: 'Not found.' },
  413: { type: 'request_too_large', message: 'Request exceeds the maximum allowed number of bytes.' },
  429: { type: 'rate_limit_error', message: 'Number of request tokens has exceeded your rate limit.' },
  500: { type: 'api_error', message: 'Internal server error' },
  529: { type: 'overloaded_error', message: 'Overloaded' },
};

class RequestInvalid extends Error {}

export async function startFakeAnthropic(options: FakeAnthropicOptions = {}): Promise<FakeAnthropic> {
  async function handle(exchange: ServerExchange<FakeAnthropicBehavior>): Promise<void> {
    const { req, behavior, body } = exchange;
    const ex: Exchange = {
      ...exchange,
      requestId: `req_fake${exchange.id}`,
      messageId: `msg_fake${exchange.id}`,
    };

    if (behavior.delayHeadersMs) {
      await sleep(behavior.delayHeadersMs, ex.gone);
      if (ex.gone.aborted) return;
    }
    if (req.method !== 'POST' || new URL(req.url ?? '/', 'http://fake').pathname !== '/v1/messages') {
      return sendError(ex, 404, 'not_found_error', 'Not found');
    }
    if (options.apiKey !== undefined && req.headers['x-api-key'] !== options.apiKey) {
      return sendError(ex, 401, 'authentication_error', 'invalid x-api-key');
    }
    if (typeof req.headers['anthropic-version'] !== 'string') {
      return sendError(ex, 400, 'invalid_request_error', 'anthropic-version: header is required');
    }
    if (behavior.error) {
      const defaults = ERROR_DEFAULTS[behavior.error.status] ?? ERROR_DEFAULTS[500]!;
      return sendError(
        ex,
        behavior.error.status,
        behavior.error.type ?? defaults.type,
        behavior.error.message ?? defaults.message,
      );
    }
    let plan: Plan;
    try {
      plan = planReply(body, behavior);
    } catch (err) {
      if (err instanceof RequestInvalid) return sendError(ex, 400, 'invalid_request_error', err.message);
      throw err;
    }
    return body?.stream === true ? sendStream(ex, plan) : sendMessage(ex, plan);
  }

  function sendError(ex: Exchange, status: number, type: string, message: string): void {
    const retryAfter = ex.behavior.retryAfter ?? (status === 429 ? '7' : undefined);
    sendJson(ex.res, status, errorBody(type, message, ex.requestId), {
      'request-id': ex.requestId,
      ...(retryAfter === undefined ? {} : { 'retry-after': retryAfter }),
      ...(status === 529 ? { 'x-should-retry': 'true' } : {}),
    });
  }

  function sendMessage(ex: Exchange, plan: Plan): void {
    const text = plan.pieces.join('');
    sendJson(
      ex.res,
      200,
      {
        id: ex.messageId,
        type: 'message',
        role: 'assistant',
        model: plan.model,
        content: text === '' ? [] : [{ type: 'text', text }],
        stop_reason: plan.stopReason,
        stop_sequence: plan.stopSequence,
        usage: { ...plan.inputUsage, output_tokens: plan.pieces.length },
      },
      { 'request-id': ex.requestId },
    );
  }

  async function sendStream(ex: Exchange, plan: Plan): Promise<void> {
    const frames: string[] = [];
    const emit = (type: string, fields: JsonObject): void => {
      frames.push(`event: ${type}\ndata: ${JSON.stringify({ type, ...fields })}\n\n`);
    };
    emit('message_start', {
      message: {
        id: ex.messageId,
        type: 'message',
        role: 'assistant',
        model: plan.model,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: { ...plan.inputUsage, output_tokens: 1 },
      },
    });
    emit('content_block_start', { index: 0, content_block: { type: 'text', text: '' } });
    emit('ping', {});
    for (const piece of plan.pieces) {
      emit('content_block_delta', { index: 0, delta: { type: 'text_delta', text: piece } });
    }
    emit('content_block_stop', { index: 0 });
    emit('message_delta', {
      delta: { stop_reason: plan.stopReason, stop_sequence: plan.stopSequence },
      usage: { output_tokens: plan.pieces.length },
    });
    emit('message_stop', {});

    const b = ex.behavior;
    let sequence = frames;
    if (b.errorEvent) {
      const at = Math.min(b.errorEvent.afterEvents ?? 1, frames.length);
      const error = {
        type: b.errorEvent.type ?? 'overloaded_error',
        message: b.errorEvent.message ?? 'Overloaded',
      };
      sequence = [
        ...frames.slice(0, at),
        `event: error\ndata: ${JSON.stringify({ type: 'error', error })}\n\n`,
      ];
    }
    ex.res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      'request-id': ex.requestId,
    });
    ex.res.flushHeaders();
    return writePaced(ex, sequence, {
      delayMs: b.delayBetweenEventsMs,
      closeAfter: b.closeAfterEvents,
      endAfter: b.endAfterEvents,
    });
  }

  const { origin, port, ...controls } = await startRecordingServer<FakeAnthropicBehavior>(handle, {
    name: 'fake Anthropic',
    behavior: options.behavior ?? {},
    errorBody: (message) => errorBody('api_error', message, 'req_bug'),
    resetIds: true,
  });
  return { ...controls, url: origin, port };
}

interface Exchange extends ServerExchange<FakeAnthropicBehavior> {
  requestId: string;
  messageId: string;
}

interface Plan {
  model: string;
  pieces: string[];
  stopReason: string;
  stopSequence: string | null;
  inputUsage: {
    input_tokens: number;
    cache_creation_input_tokens: number;
    cache_read_input_tokens: number;
  };
}

/** Validates the request as Anthropic would and works out the reply. Throws RequestInvalid for a 400. */
function planReply(body: JsonObject | undefined, behavior: FakeAnthropicBehavior): Plan {
  if (!body) throw new RequestInvalid('The request body is not valid JSON.');
  for (const key of Object.keys(body)) {
    if (!KNOWN_FIELDS.has(key)) throw new RequestInvalid(`${key}: Extra inputs are not permitted`);
  }
  if (typeof body.model !== 'string') throw new RequestInvalid('model: Field required');
  const maxTokens = body.max_tokens;
  if (typeof maxTokens !== 'number' || !Number.isInteger(maxTokens) || maxTokens < 1) {
    throw new RequestInvalid('max_tokens: Field required');
  }
  const temperature = body.temperature;
  if (temperature !== undefined && (typeof temperature !== 'number' || temperature < 0 || temperature > 1)) {
    throw new RequestInvalid('temperature: Input should be less than or equal to 1');
  }
  const stops = body.stop_sequences ?? [];
  if (!Array.isArray(stops) || stops.some((s) => typeof s !== 'string')) {
    throw new RequestInvalid('stop_sequences: Input should be a valid list of strings');
  }
  const systemText = systemOf(body.system);
  const messages = checkMessages(body.messages);

  const lastUser = [...messages].reverse().find((m) => m.role === 'user');
  const allPieces = anthropicPieces(behavior.reply ?? anthropicFakeReply(lastUser?.texts.join('\n') ?? ''));
  const full = allPieces.join('');
  const stop = firstStop(full, stops as string[]);
  let pieces = stop ? anthropicPieces(full.slice(0, stop.index)) : allPieces;
  let stopReason = stop ? 'stop_sequence' : 'end_turn';
  let stopSequence = stop ? stop.sequence : null;
  if (pieces.length > maxTokens) {
    pieces = pieces.slice(0, maxTokens);
    stopReason = 'max_tokens';
    stopSequence = null;
  }
  const promptText = [systemText, ...messages.flatMap((m) => m.texts)].join(' ');
  return {
    model: body.model,
    pieces,
    stopReason: behavior.stopReason ?? stopReason,
    stopSequence,
    inputUsage: {
      input_tokens: countWords(promptText),
      cache_creation_input_tokens: behavior.cacheCreationTokens ?? 0,
      cache_read_input_tokens: behavior.cacheReadTokens ?? 0,
    },
  };
}

function firstStop(text: string, stops: string[]): { index: number; sequence: string } | undefined {
  let best: { index: number; sequence: string } | undefined;
  for (const sequence of stops) {
    const index = text.indexOf(sequence);
    if (index !== -1 && (best === undefined || index < best.index)) best = { index, sequence };
  }
  return best;
}

function systemOf(system: unknown): string {
  if (system === undefined) return '';
  if (typeof system === 'string') return system;
  if (Array.isArray(system)) return textBlocks(system, 'system').join('\n');
  throw new RequestInvalid('system: Input should be a valid string or list of text blocks');
}

function checkMessages(raw: unknown): { role: string; texts: string[] }[] {
  if (!Array.isArray(raw) || raw.length === 0) throw new RequestInvalid('messages: Field required');
  const out: { role: string; texts: string[] }[] = [];
  raw.forEach((m: unknown, i) => {
    if (!isObject(m)) throw new RequestInvalid(`messages.${i}: Input should be a valid dictionary`);
    const role = m.role;
    if (role !== 'user' && role !== 'assistant') {
      throw new RequestInvalid(`messages.${i}.role: Input should be 'user' or 'assistant'`);
    }
    if (out.at(-1)?.role === role) {
      throw new RequestInvalid(
        `messages: roles must alternate between "user" and "assistant", but found multiple "${role}" roles in a row`,
      );
    }
    const texts =
      typeof m.content === 'string' ? [m.content] : textBlocks(m.content, `messages.${i}.content`);
    const isFinalAssistant = i === raw.length - 1 && role === 'assistant';
    if (!isFinalAssistant && texts.join('') === '') {
      throw new RequestInvalid(
        `messages.${i}: all messages must have non-empty content except for the optional final assistant message`,
      );
    }
    out.push({ role, texts });
  });
  return out;
}

function textBlocks(value: unknown, where: string): string[] {
  if (!Array.isArray(value)) throw new RequestInvalid(`${where}: Input should be a valid list`);
  return value.map((block: unknown, j) => {
    if (!isObject(block) || block.type !== 'text' || typeof block.text !== 'string') {
      throw new RequestInvalid(`${where}.${j}: only text blocks are understood by this fake`);
    }
    if (block.text === '') throw new RequestInvalid(`${where}.${j}: text content blocks must be non-empty`);
    return block.text;
  });
}

function errorBody(type: string, message: string, requestId: string): JsonObject {
  return { type: 'error', error: { type, message }, request_id: requestId };
}
