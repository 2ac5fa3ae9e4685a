import { countCompletionTokens } from '../../providers/tokens.js';
import type { JsonObject, SseEvent } from '../../providers/types.js';
import { CONTENT } from './preamble.js';

/** Token counts of one call as the upstream reported them, or as Gantry counted what was delivered. */
export interface TokenUsage {
  inputTokens: number;
  cachedInputTokens: number;
  /** Tokens written to the prompt cache (OpenAI's `cache_write_tokens`): part of inputTokens. */
  cacheWriteInputTokens: number;
  outputTokens: number;
  /** true when the upstream reported the numbers; false when Gantry counted them. */
  reported: boolean;
}

/** Reads OpenAI chat `usage` (`prompt_tokens`…) or Responses `usage` (`input_tokens`…). */
export function readUsage(usage: unknown): TokenUsage | undefined {
  if (usage === null || typeof usage !== 'object') return undefined;
  const u = usage as Record<string, unknown>;
  const input = num(u.prompt_tokens ?? u.input_tokens);
  const output = num(u.completion_tokens ?? u.output_tokens);
  if (input === undefined && output === undefined) return undefined;
  const details = (u.prompt_tokens_details ?? u.input_tokens_details) as Record<string, unknown> | undefined;
  return {
    inputTokens: input ?? 0,
    cachedInputTokens: num(details?.cached_tokens) ?? 0,
    cacheWriteInputTokens: num(details?.cache_write_tokens) ?? 0,
    outputTokens: output ?? 0,
    reported: true,
  };
}

function num(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0 ? value : undefined;
}

/**
 * The first generated token (compact JSON or with spaces): a chat chunk with content, reasoning or a
 * tool call (a tool-call-only answer has no content at all), or a Responses delta of text, arguments or
 * reasoning.
 */
const FIRST_TOKEN = new RegExp(
  [
    CONTENT.source,
    '"reasoning_content"\\s*:\\s*"[^"]',
    '"tool_calls"\\s*:\\s*\\[\\s*\\{',
    '"type"\\s*:\\s*"response\\.(?:output_text|function_call_arguments|reasoning_text|reasoning_summary_text)\\.delta"',
  ].join('|'),
);
/** Event text kept for metering a cut stream before it is reduced to its content (see fold). */
const FOLD_AT = 256 * 1024;

/**
 * Watches a chat or Responses stream on its way to the client: notes the first content (time to first
 * token), takes the usage (a chat usage chunk, which Gantry always asks upstreams for and drops when the
 * client did not ask, or the usage of `response.completed`), and keeps what was delivered so a stream cut
 * short can be metered for what the client received. Events are read as text and parsed only in the
 * rare cases that need it (the usage, a long stream's kept events), never on the way through.
 */
export class StreamMeter {
  firstTokenAt: number | undefined;
  usage: TokenUsage | undefined;
  /** Event texts delivered while no usage has come, and their length. */
  private delivered: string[] = [];
  private deliveredLength = 0;
  /** The content of delivered events already reduced by fold(). */
  private deliveredContent = '';

  constructor(private readonly clientWantsUsage: boolean) {}

  /** The stream as the client gets it; for a stream consumed as an iterable (see `see`). */
  async *wrap(events: AsyncIterable<SseEvent>): AsyncGenerator<SseEvent> {
    for await (const event of events) {
      const out = this.see(event);
      if (out !== undefined) yield out;
    }
  }

  /** Watches one event: returns it as the client gets it, or undefined when the client does not get it. */
  see(event: SseEvent): SseEvent | undefined {
    const data = event.data;
    // Usually no "usage" member or one; an upstream asked for usage gives each chunk `"usage":null`.
    let usageObject = false;
    let nullKey = -1;
    let nullEnd = -1;
    for (let key = memberKey(data, '"usage"', 0); key !== -1; key = memberKey(data, '"usage"', key + 7)) {
      const value = memberValue(data, key + 7);
      const first = data.charCodeAt(value);
      if (first === 123 /* { */) usageObject = true;
      else if (first === 110 /* n */ && nullKey === -1 && data.startsWith('null', value)) {
        nullKey = key;
        nullEnd = value + 4;
      }
    }
    if (usageObject) {
      const parsed = JSON.parse(data) as JsonObject;
      const response = parsed.response as JsonObject | undefined;
      this.usage = readUsage(parsed.usage) ?? readUsage(response?.usage) ?? this.usage;
      const choices = parsed.choices;
      if (!this.clientWantsUsage && Array.isArray(choices) && choices.length === 0) return undefined;
    }
    if (this.firstTokenAt === undefined && FIRST_TOKEN.test(data)) this.firstTokenAt = performance.now();
    if (this.usage === undefined) {
      this.delivered.push(data);
      this.deliveredLength += data.length;
      if (this.deliveredLength > FOLD_AT) this.fold();
    }
    // Upstreams asked for usage add `"usage":null` to every chunk; a client that did not ask never sees it.
    if (!this.clientWantsUsage && nullKey !== -1) {
      return { ...event, data: withoutMember(data, nullKey, nullEnd) };
    }
    return event;
  }

  /** Output tokens of what was delivered, for a stream that ended without the upstream's usage. */
  countDelivered(): number {
    this.fold();
    const text = this.deliveredContent;
    return text.length === 0 ? 0 : countCompletionTokens(text);
  }

  /**
   * Forgets what was delivered so far: a rescued stream (rescue.ts) has metered it as its broken call,
   * and what comes next belongs to the call that continues it. Time to first token stays.
   */
  restart(): void {
    this.delivered = [];
    this.deliveredLength = 0;
    this.deliveredContent = '';
  }

  /**
   * Reduces the kept event texts to their content: a long stream would otherwise hold every event it
   * delivered (a few hundred bytes each, for a token or two of content) until it ends.
   */
  private fold(): void {
    let text = this.deliveredContent;
    for (const data of this.delivered) {
      try {
        const event = JSON.parse(data) as {
          type?: string;
          delta?: unknown;
          choices?: Array<{ delta?: { content?: unknown } }>;
        };
        if (event.type === 'response.output_text.delta' && typeof event.delta === 'string')
          text += event.delta;
        for (const choice of event.choices ?? []) {
          if (typeof choice.delta?.content === 'string') text += choice.delta.content;
        }
      } catch {
        // a chunk that is not JSON carried nothing the client could use
      }
    }
    this.deliveredContent = text;
    this.delivered = [];
    this.deliveredLength = 0;
  }
}

/** Where `key` (a quoted name) next appears as a member name (a colon follows) from `from`, or -1. */
function memberKey(data: string, key: string, from: number): number {
  for (let at = data.indexOf(key, from); at !== -1; at = data.indexOf(key, at + key.length)) {
    if (data.charCodeAt(skipSpace(data, at + key.length)) === 58 /* : */) return at;
  }
  return -1;
}

/** Where the value begins of the member whose name ends at `nameEnd`. */
function memberValue(data: string, nameEnd: number): number {
  return skipSpace(data, skipSpace(data, nameEnd) + 1);
}

function skipSpace(data: string, at: number): number {
  let i = at;
  while (isSpace(data.charCodeAt(i))) i++;
  return i;
}

/** `data` without the member from `key` to `end`, and the comma that joined it to its neighbour. */
function withoutMember(data: string, key: number, end: number): string {
  let before = key - 1;
  while (isSpace(data.charCodeAt(before))) before--;
  if (data.charCodeAt(before) === 44 /* , */) return data.slice(0, before) + data.slice(end);
  const after = skipSpace(data, end);
  return data.slice(0, key) + data.slice(data.charCodeAt(after) === 44 ? after + 1 : end);
}

function isSpace(c: number): boolean {
  return c === 32 || c === 10 || c === 13 || c === 9;
}
