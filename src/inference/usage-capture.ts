import type { JsonObject, SseEvent } from '../../providers/types.js';
import { countCompletionTokens } from '../metering/tokens.js';

/** Token counts of one call as the upstream reported them, or as Gantry counted what was delivered. */
export interface TokenUsage {
  inputTokens: number;
  cachedInputTokens: number;
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
    outputTokens: output ?? 0,
    reported: true,
  };
}

function num(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0 ? value : undefined;
}

/**
 * Watches a chat or Responses stream on its way to the client: notes the first content (time to first
 * token), takes the usage (a chat usage chunk, which Gantry always asks upstreams for and drops when the
 * client did not ask, or the usage of `response.completed`), and keeps the event texts so a stream cut
 * short can be metered for what the client received. Events are parsed only in the rare cases that need
 * it, never on the way through.
 */
/** A chat chunk with content, or a Responses text delta. */
const FIRST_TOKEN = /"content":"[^"]|"type":"response\.output_text\.delta"/;

export class StreamMeter {
  firstTokenAt: number | undefined;
  usage: TokenUsage | undefined;
  private readonly delivered: string[] = [];

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
    // One search finds both forms on the usual chunk; a first "usage" that is neither looks further.
    const usageAt = data.indexOf('"usage":');
    const usageIs = usageAt === -1 ? -1 : data.charCodeAt(usageAt + 8);
    if (usageIs === 123 /* { */ || (usageIs !== -1 && data.includes('"usage":{', usageAt + 8))) {
      const parsed = JSON.parse(data) as JsonObject;
      const response = parsed.response as JsonObject | undefined;
      this.usage = readUsage(parsed.usage) ?? readUsage(response?.usage) ?? this.usage;
      const choices = parsed.choices;
      if (!this.clientWantsUsage && Array.isArray(choices) && choices.length === 0) return undefined;
    }
    if (this.firstTokenAt === undefined && FIRST_TOKEN.test(data)) this.firstTokenAt = performance.now();
    if (this.usage === undefined) this.delivered.push(data);
    // Upstreams asked for usage add `"usage":null` to every chunk; a client that did not ask never sees it.
    if (!this.clientWantsUsage && usageAt !== -1) {
      if (usageIs === 110 /* n */ && data.startsWith('null', usageAt + 8)) {
        return { ...event, data: withoutNullUsage(data, usageAt) };
      }
      if (data.includes('"usage":null', usageAt + 8)) {
        return { ...event, data: data.replace(/,"usage":null|"usage":null,?/, '') };
      }
    }
    return event;
  }

  /** Output tokens of what was delivered, for a stream that ended without the upstream's usage. */
  countDelivered(): number {
    let text = '';
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
    return text.length === 0 ? 0 : countCompletionTokens(text);
  }
}

const NULL_USAGE_LAST = ',"usage":null}';

/** `data` without the `"usage":null` member found at `at`; most upstreams put it last. */
function withoutNullUsage(data: string, at: number): string {
  if (at === data.length - NULL_USAGE_LAST.length + 1 && data.endsWith(NULL_USAGE_LAST)) {
    return `${data.slice(0, at - 1)}}`;
  }
  return data.replace(/,"usage":null|"usage":null,?/, '');
}
