/**
 * A fake Anthropic Messages API: a real node:http server on 127.0.0.1 that answers POST /v1/messages
 * with Anthropic's JSON and SSE wire format (`event: <type>\ndata: <json>\n\n`, with a `ping`), records
 * every request, and can be scripted to fail the ways the real API does (error statuses with Anthropic's
 * error body, slow headers, cut streams, `error` events mid-stream).
 *
 * It validates requests about as strictly as Anthropic does (unknown top-level fields, missing
 * max_tokens, roles that do not alternate, empty text blocks, temperature above 1, temperature together
 * with top_p as Anthropic's newer models refuse it are all 400s), so a
 * translation that leaks an OpenAI field or breaks alternation fails loudly.
 *
 * Replies are derived from the request: the assistant says `anthropicFakeReply(last user text)` (tool
 * results count as the user's text), one word per streamed text_delta and per output token.
 * `stop_sequences` end the reply before the first match (stop_reason `stop_sequence`), `max_tokens`
 * cuts it after that many words (`max_tokens`). With `thinking` enabled a signed thinking block comes
 * first; a forced tool_choice (or scripted `toolCalls`) answers with tool_use blocks, their input
 * streamed as input_json_delta pieces. Streams follow Anthropic's streaming docs event for event
 * (content_block_start with `input: {}` / empty thinking and signature, signature_delta before
 * content_block_stop, message_delta with stop_reason and the usage counts).
 */
import { createHash } from 'node:crypto';
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
  /** Streams: send this many events, then go silent until the client leaves. */
  stallAfterEvents?: number;
  /** Streams: send this many events, then end the response properly, but without message_stop. */
  endAfterEvents?: number;
  /** Streams: send `afterEvents` events (default 1), then an `error` event, then end the response. */
  errorEvent?: { afterEvents?: number; type?: string; message?: string };
  /** The assistant's text, instead of `anthropicFakeReply(last user text)`. */
  reply?: string;
  /** Report this stop_reason instead of the one the reply earned (e.g. `refusal`, `pause_turn`). */
  stopReason?: string;
  /**
   * The assistant calls these tools (after saying `reply`, when given) and stops with tool_use; ids
   * default to `toolu_fake<request>_<i>`. Without it, a tool_choice that forces a tool (`tool`, `any`)
   * calls that tool with `toolInput`, else an instance of its input_schema (anthropicSchemaInstance).
   */
  toolCalls?: { id?: string; name: string; input: JsonObject }[];
  toolInput?: JsonObject;
  /** Make every call of `toolCalls` even when tool_choice has disable_parallel_tool_use (a misbehaving model). */
  ignoreParallelLimit?: boolean;
  /** With thinking enabled: the thinking text, instead of `anthropicFakeThinking(last user text)`. */
  thinking?: string;
  /** Add a redacted_thinking block with this data (after the thinking block, if any). */
  redactedThinking?: string;
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
      plan = planReply(body, behavior, exchange.id);
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
    sendJson(
      ex.res,
      200,
      {
        id: ex.messageId,
        type: 'message',
        role: 'assistant',
        model: plan.model,
        content: plan.blocks.filter((b) => !(b.type === 'text' && b.pieces.length === 0)).map(wholeBlock),
        stop_reason: plan.stopReason,
        stop_sequence: plan.stopSequence,
        usage: { ...plan.inputUsage, output_tokens: plan.outputTokens },
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
    plan.blocks.forEach((block, index) => {
      emit('content_block_start', { index, content_block: startBlock(block) });
      if (index === 0) emit('ping', {});
      for (const delta of blockDeltas(block)) emit('content_block_delta', { index, delta });
      emit('content_block_stop', { index });
    });
    // Current API versions repeat the input counts in message_delta (docs' examples and recorded streams).
    emit('message_delta', {
      delta: { stop_reason: plan.stopReason, stop_sequence: plan.stopSequence },
      usage: { ...plan.inputUsage, output_tokens: plan.outputTokens },
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
      stallAfter: b.stallAfterEvents,
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

type PlannedBlock =
  | { type: 'text'; pieces: string[] }
  | { type: 'thinking'; thinking: string; signature: string; pieces: string[] }
  | { type: 'redacted_thinking'; data: string }
  | { type: 'tool_use'; id: string; name: string; input: JsonObject; pieces: string[] };

interface Plan {
  model: string;
  blocks: PlannedBlock[];
  outputTokens: number;
  stopReason: string;
  stopSequence: string | null;
  inputUsage: {
    input_tokens: number;
    cache_creation_input_tokens: number;
    cache_read_input_tokens: number;
  };
}

/** A block as the JSON answer (and content_block_start, before its deltas) shows it. */
function wholeBlock(block: PlannedBlock): JsonObject {
  switch (block.type) {
    case 'text':
      return { type: 'text', text: block.pieces.join('') };
    case 'thinking':
      return { type: 'thinking', thinking: block.thinking, signature: block.signature };
    case 'redacted_thinking':
      return { type: 'redacted_thinking', data: block.data };
    case 'tool_use':
      return { type: 'tool_use', id: block.id, name: block.name, input: block.input };
  }
}

/** content_block_start's block: empty text/thinking, a tool_use with `input: {}` (streaming docs). */
function startBlock(block: PlannedBlock): JsonObject {
  switch (block.type) {
    case 'text':
      return { type: 'text', text: '' };
    case 'thinking':
      return { type: 'thinking', thinking: '', signature: '' };
    case 'redacted_thinking':
      return { type: 'redacted_thinking', data: block.data };
    case 'tool_use':
      return { type: 'tool_use', id: block.id, name: block.name, input: {} };
  }
}

function blockDeltas(block: PlannedBlock): JsonObject[] {
  switch (block.type) {
    case 'text':
      return block.pieces.map((text) => ({ type: 'text_delta', text }));
    case 'thinking':
      return [
        ...block.pieces.map((thinking) => ({ type: 'thinking_delta', thinking })),
        { type: 'signature_delta', signature: block.signature },
      ];
    case 'redacted_thinking':
      return [];
    case 'tool_use':
      // The API opens a tool's input with an empty piece (recorded streams), then the JSON in pieces; a
      // tool called without arguments gets that empty piece only (no "{}"), its input being the block's
      // `input: {}` from content_block_start.
      return ['', ...block.pieces].map((partial_json) => ({ type: 'input_json_delta', partial_json }));
  }
}

/** What the fake thinks about `userText` when thinking is enabled. */
export function anthropicFakeThinking(userText: string): string {
  return `Thinking about: ${userText}`;
}

/** The fake's signature of a thinking text: thinking blocks sent back with any other are refused. */
export function anthropicFakeSignature(thinking: string): string {
  return createHash('sha256').update(`fake-anthropic:${thinking}`).digest('base64');
}

/** How the fake cuts a tool's input JSON into input_json_delta pieces: 8 characters each. */
export function anthropicJsonPieces(json: string): string[] {
  return json.match(/[\s\S]{1,8}/g) ?? [];
}

/** A deterministic instance of a JSON schema: what the fake passes to a forced tool. */
export function anthropicSchemaInstance(schema: unknown): unknown {
  if (!isObject(schema)) return {};
  if (Array.isArray(schema.enum) && schema.enum.length > 0) return schema.enum[0];
  const type = Array.isArray(schema.type) ? schema.type[0] : schema.type;
  switch (type) {
    case 'string':
      return 'text';
    case 'integer':
    case 'number':
      return 1;
    case 'boolean':
      return true;
    case 'null':
      return null;
    case 'array':
      return [anthropicSchemaInstance(schema.items)];
    default: {
      const props = isObject(schema.properties) ? schema.properties : {};
      return Object.fromEntries(Object.entries(props).map(([k, v]) => [k, anthropicSchemaInstance(v)]));
    }
  }
}

interface Checked {
  tools: { name: string; input_schema: JsonObject }[];
  choice: JsonObject | undefined;
  thinking: boolean;
}

/** Validates the request as Anthropic would and works out the reply. Throws RequestInvalid for a 400. */
function planReply(body: JsonObject | undefined, behavior: FakeAnthropicBehavior, id: number): Plan {
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
  // As Anthropic's newer models (Sonnet 4.5, Opus 4.1 and later) do.
  if (temperature !== undefined && body.top_p !== undefined) {
    throw new RequestInvalid(
      '`temperature` and `top_p` cannot both be specified for this model. Please use only one.',
    );
  }
  const stops = body.stop_sequences ?? [];
  if (!Array.isArray(stops) || stops.some((s) => typeof s !== 'string')) {
    throw new RequestInvalid('stop_sequences: Input should be a valid list of strings');
  }
  const checked = checkTools(body, maxTokens);
  const systemText = systemOf(body.system);
  const messages = checkMessages(body.messages, checked.thinking);

  // A final assistant message is a prefill: Anthropic refuses one that ends in whitespace, and its
  // answer holds only what comes after the prefill.
  const last = messages.at(-1);
  const prefill = last?.role === 'assistant' ? last.texts.join('') : undefined;
  if (prefill !== undefined && prefill !== prefill.trimEnd()) {
    throw new RequestInvalid('messages: final assistant content cannot end with trailing whitespace');
  }
  const lastUser = [...messages].reverse().find((m) => m.role === 'user');
  const userText = lastUser?.texts.join('\n') ?? '';
  const blocks: PlannedBlock[] = [];
  if (checked.thinking) {
    const thinking = behavior.thinking ?? anthropicFakeThinking(userText);
    blocks.push({
      type: 'thinking',
      thinking,
      signature: anthropicFakeSignature(thinking),
      pieces: anthropicPieces(thinking),
    });
  }
  if (behavior.redactedThinking !== undefined) {
    blocks.push({ type: 'redacted_thinking', data: behavior.redactedThinking });
  }
  let stopReason: string;
  let stopSequence: string | null = null;
  const calls = toolCallsOf(behavior, checked);
  if (calls.length > 0) {
    if (behavior.reply !== undefined) blocks.push({ type: 'text', pieces: anthropicPieces(behavior.reply) });
    const parallel =
      checked.choice?.disable_parallel_tool_use !== true || behavior.ignoreParallelLimit === true;
    for (const [i, call] of (parallel ? calls : calls.slice(0, 1)).entries()) {
      blocks.push({
        type: 'tool_use',
        id: call.id ?? `toolu_fake${id}_${i}`,
        name: call.name,
        input: call.input,
        // An empty input streams as the opening empty piece alone (blockDeltas), never as "{}".
        pieces: Object.keys(call.input).length === 0 ? [] : anthropicJsonPieces(JSON.stringify(call.input)),
      });
    }
    stopReason = 'tool_use';
  } else {
    const whole = behavior.reply ?? anthropicFakeReply(userText);
    const rest = prefill !== undefined && whole.startsWith(prefill) ? whole.slice(prefill.length) : whole;
    const allPieces = anthropicPieces(rest);
    const full = allPieces.join('');
    const stop = firstStop(full, stops as string[]);
    let pieces = stop ? anthropicPieces(full.slice(0, stop.index)) : allPieces;
    stopReason = stop ? 'stop_sequence' : 'end_turn';
    stopSequence = stop ? stop.sequence : null;
    if (pieces.length > maxTokens) {
      pieces = pieces.slice(0, maxTokens);
      stopReason = 'max_tokens';
      stopSequence = null;
    }
    blocks.push({ type: 'text', pieces });
  }
  const outputTokens = blocks.reduce((n, b) => n + ('pieces' in b ? b.pieces.length : 0), 0);
  const promptText = [systemText, ...messages.flatMap((m) => m.texts)].join(' ');
  return {
    model: body.model,
    blocks,
    outputTokens,
    stopReason: behavior.stopReason ?? stopReason,
    stopSequence,
    inputUsage: {
      input_tokens: countWords(promptText),
      cache_creation_input_tokens: behavior.cacheCreationTokens ?? 0,
      cache_read_input_tokens: behavior.cacheReadTokens ?? 0,
    },
  };
}

/** The tools the assistant calls: the scripted ones, else the one tool_choice forces. */
function toolCallsOf(
  behavior: FakeAnthropicBehavior,
  checked: Checked,
): { id?: string; name: string; input: JsonObject }[] {
  if (behavior.toolCalls) return behavior.toolCalls;
  const choice = checked.choice;
  const forced =
    choice?.type === 'tool'
      ? checked.tools.find((t) => t.name === choice.name)
      : choice?.type === 'any'
        ? checked.tools[0]
        : undefined;
  if (!forced) return [];
  const input = behavior.toolInput ?? anthropicSchemaInstance(forced.input_schema);
  return [{ name: forced.name, input: isObject(input) ? input : {} }];
}

const TOOL_FIELDS = new Set(['name', 'description', 'input_schema', 'cache_control']);

function checkTools(body: JsonObject, maxTokens: number): Checked {
  const raw = body.tools ?? [];
  if (!Array.isArray(raw)) throw new RequestInvalid('tools: Input should be a valid list');
  const tools = raw.map((tool: unknown, i) => {
    if (!isObject(tool)) throw new RequestInvalid(`tools.${i}: Input should be a valid dictionary`);
    for (const key of Object.keys(tool)) {
      if (!TOOL_FIELDS.has(key))
        throw new RequestInvalid(`tools.${i}.custom.${key}: Extra inputs are not permitted`);
    }
    if (typeof tool.name !== 'string' || !/^[a-zA-Z0-9_-]{1,128}$/.test(tool.name)) {
      throw new RequestInvalid(
        `tools.${i}.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'`,
      );
    }
    if (!isObject(tool.input_schema) || tool.input_schema.type !== 'object') {
      throw new RequestInvalid(`tools.${i}.custom.input_schema.type: Input should be 'object'`);
    }
    return { name: tool.name, input_schema: tool.input_schema };
  });
  const names = new Set(tools.map((t) => t.name));
  if (names.size !== tools.length) throw new RequestInvalid('tools: Tool names must be unique.');

  let choice: JsonObject | undefined;
  if (body.tool_choice !== undefined) {
    if (!isObject(body.tool_choice))
      throw new RequestInvalid('tool_choice: Input should be a valid dictionary');
    choice = body.tool_choice;
    if (!['auto', 'any', 'tool', 'none'].includes(String(choice.type))) {
      throw new RequestInvalid("tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none'");
    }
    if (tools.length === 0)
      throw new RequestInvalid('tool_choice may only be specified while providing tools.');
    if (choice.type === 'tool' && !names.has(String(choice.name))) {
      throw new RequestInvalid(`Tool '${String(choice.name)}' not found in provided tools`);
    }
    const extra = Object.keys(choice).filter(
      (k) => k !== 'type' && k !== 'name' && !(k === 'disable_parallel_tool_use' && choice?.type !== 'none'),
    );
    if (extra.length > 0) throw new RequestInvalid(`tool_choice.${extra[0]}: Extra inputs are not permitted`);
  }

  let thinking = false;
  if (body.thinking !== undefined) {
    const t = body.thinking;
    if (!isObject(t) || (t.type !== 'enabled' && t.type !== 'disabled')) {
      throw new RequestInvalid("thinking.type: Input should be 'enabled' or 'disabled'");
    }
    if (t.type === 'enabled') {
      const budget = t.budget_tokens;
      if (typeof budget !== 'number' || !Number.isInteger(budget) || budget < 1024) {
        throw new RequestInvalid(
          'thinking.enabled.budget_tokens: Input should be greater than or equal to 1024',
        );
      }
      if (budget >= maxTokens)
        throw new RequestInvalid('`max_tokens` must be greater than `thinking.budget_tokens`.');
      if (body.temperature !== undefined && body.temperature !== 1) {
        throw new RequestInvalid('`temperature` may only be set to 1 when thinking is enabled.');
      }
      if (choice?.type === 'any' || choice?.type === 'tool') {
        throw new RequestInvalid('Thinking may not be enabled when tool_choice forces tool use.');
      }
      thinking = true;
    }
  }
  return { tools, choice, thinking };
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
  if (Array.isArray(system)) return system.map((b, j) => textOf(b, `system.${j}`)).join('\n');
  throw new RequestInvalid('system: Input should be a valid string or list of text blocks');
}

const IMAGE_TYPES = new Set(['image/jpeg', 'image/png', 'image/gif', 'image/webp']);

/**
 * Checks the conversation as Anthropic does: alternating roles, known block types, tool_result blocks
 * first in the user turn right after the tool_use blocks they answer, each tool_use answered, thinking
 * blocks before the rest of their turn with the signature the fake gave them, and (with thinking on) the
 * assistant turn of a tool loop starting with its thinking. Returns each message's texts (tool results
 * count as the user's text), for the reply and the token count.
 */
function checkMessages(raw: unknown, thinking: boolean): { role: string; texts: string[] }[] {
  if (!Array.isArray(raw) || raw.length === 0) throw new RequestInvalid('messages: Field required');
  const out: { role: string; texts: string[] }[] = [];
  let pendingToolUses: string[] = [];
  let lastToolTurn: { index: number; first: string } | undefined;
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
    const blocks: JsonObject[] =
      typeof m.content === 'string'
        ? m.content === ''
          ? []
          : [{ type: 'text', text: m.content }]
        : blockList(m.content, `messages.${i}.content`);
    const texts: string[] = [];
    const toolUses: string[] = [];
    const answered: string[] = [];
    let seenOther = false;
    blocks.forEach((block, j) => {
      const where = `messages.${i}.content.${j}`;
      switch (block.type) {
        case 'text':
          texts.push(textOf(block, where));
          seenOther = true;
          break;
        case 'image':
          if (role !== 'user') throw new RequestInvalid(`${where}: images are only allowed in user messages`);
          checkImage(block.source, `${where}.image.source`);
          seenOther = true;
          break;
        case 'tool_result':
          if (role !== 'user')
            throw new RequestInvalid(`${where}: tool_result blocks are only allowed in user messages`);
          if (seenOther) {
            throw new RequestInvalid(`messages.${i}: tool_result blocks must come first in the user message`);
          }
          if (typeof block.tool_use_id !== 'string' || !pendingToolUses.includes(block.tool_use_id)) {
            throw new RequestInvalid(
              `messages.${i}.content.${j}: unexpected \`tool_use_id\` found in \`tool_result\` blocks: ${String(block.tool_use_id)}. Each \`tool_result\` block must have a corresponding \`tool_use\` block in the previous message.`,
            );
          }
          answered.push(block.tool_use_id);
          texts.push(...toolResultTexts(block.content, where));
          break;
        case 'tool_use':
          if (role !== 'assistant')
            throw new RequestInvalid(`${where}: tool_use blocks are only allowed in assistant messages`);
          if (typeof block.id !== 'string' || typeof block.name !== 'string' || !isObject(block.input)) {
            throw new RequestInvalid(`${where}.tool_use: id, name and input (an object) are required`);
          }
          toolUses.push(block.id);
          seenOther = true;
          break;
        case 'thinking':
        case 'redacted_thinking':
          if (role !== 'assistant')
            throw new RequestInvalid(`${where}: thinking blocks are only allowed in assistant messages`);
          if (seenOther)
            throw new RequestInvalid(
              `messages.${i}: thinking blocks must come first in the assistant message`,
            );
          if (block.type === 'thinking') {
            if (
              typeof block.thinking !== 'string' ||
              block.signature !== anthropicFakeSignature(block.thinking)
            ) {
              throw new RequestInvalid(`${where}: Invalid \`signature\` in \`thinking\` block`);
            }
          } else if (typeof block.data !== 'string' || block.data === '') {
            throw new RequestInvalid(`${where}.redacted_thinking.data: Field required`);
          }
          break;
        default:
          throw new RequestInvalid(
            `${where}: block type ${String(block.type)} is not understood by this fake`,
          );
      }
    });
    const missing = pendingToolUses.filter((id) => !answered.includes(id));
    if (missing.length > 0) {
      throw new RequestInvalid(
        `messages.${i}: \`tool_use\` ids were found without \`tool_result\` blocks immediately after: ${missing.join(', ')}. Each \`tool_use\` block must have a corresponding \`tool_result\` block in the next message.`,
      );
    }
    pendingToolUses = toolUses;
    if (toolUses.length > 0) lastToolTurn = { index: i, first: String(blocks[0]?.type) };
    const isFinalAssistant = i === raw.length - 1 && role === 'assistant';
    if (!isFinalAssistant && blocks.length === 0) {
      throw new RequestInvalid(
        `messages.${i}: all messages must have non-empty content except for the optional final assistant message`,
      );
    }
    out.push({ role, texts });
  });
  if (pendingToolUses.length > 0 && out.at(-1)?.role === 'assistant') {
    // A final assistant turn with tool_use is a prefill Anthropic refuses.
    throw new RequestInvalid('messages: the final assistant message cannot end with tool_use blocks');
  }
  // With thinking on, the assistant turn that made the tool calls now answered must start with its thinking.
  if (thinking && lastToolTurn && !['thinking', 'redacted_thinking'].includes(lastToolTurn.first)) {
    throw new RequestInvalid(
      `messages.${lastToolTurn.index}.content.0.type: Expected \`thinking\` or \`redacted_thinking\`, but found \`${lastToolTurn.first}\`. When \`thinking\` is enabled, a final \`assistant\` message must start with a thinking block.`,
    );
  }
  return out;
}

function blockList(value: unknown, where: string): JsonObject[] {
  if (!Array.isArray(value)) throw new RequestInvalid(`${where}: Input should be a valid list`);
  return value.map((block: unknown, j) => {
    if (!isObject(block)) throw new RequestInvalid(`${where}.${j}: Input should be a valid dictionary`);
    return block;
  });
}

function textOf(block: unknown, where: string): string {
  if (!isObject(block) || block.type !== 'text' || typeof block.text !== 'string') {
    throw new RequestInvalid(`${where}: Input should be a text block`);
  }
  if (block.text === '') throw new RequestInvalid(`${where}: text content blocks must be non-empty`);
  return block.text;
}

function toolResultTexts(content: unknown, where: string): string[] {
  if (content === undefined) return [];
  if (typeof content === 'string') return [content];
  return blockList(content, `${where}.content`).map((b, k) => textOf(b, `${where}.content.${k}`));
}

function checkImage(source: unknown, where: string): void {
  if (!isObject(source)) throw new RequestInvalid(`${where}: Field required`);
  if (source.type === 'base64') {
    if (!IMAGE_TYPES.has(String(source.media_type))) {
      throw new RequestInvalid(
        `${where}.base64.media_type: Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'`,
      );
    }
    if (
      typeof source.data !== 'string' ||
      source.data === '' ||
      !/^[A-Za-z0-9+/]+={0,2}$/.test(source.data)
    ) {
      throw new RequestInvalid(`${where}.base64.data: The image data is not valid base64`);
    }
    return;
  }
  if (source.type === 'url') {
    if (typeof source.url !== 'string' || !/^https?:\/\//.test(source.url)) {
      throw new RequestInvalid(`${where}.url.url: Input should be a valid URL`);
    }
    return;
  }
  throw new RequestInvalid(`${where}.type: Input should be 'base64' or 'url'`);
}

function errorBody(type: string, message: string, requestId: string): JsonObject {
  return { type: 'error', error: { type, message }, request_id: requestId };
}
