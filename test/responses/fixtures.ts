import type { JsonObject, SseEvent } from '../../providers/types.js';
import type { ResponseMeta } from '../../src/responses/bridge.js';

export const RESPONSE_ID = 'resp_0123456789abcdef0123456789abcdef0123456789abcdef';

export function meta(request: JsonObject = {}): ResponseMeta {
  return {
    id: RESPONSE_ID,
    model: 'gantry/llama',
    createdAt: 1_750_000_000,
    request: { model: 'gantry/llama', input: 'Hi', ...request },
  };
}

export const chatUsage = {
  prompt_tokens: 12,
  completion_tokens: 5,
  total_tokens: 17,
  prompt_tokens_details: { cached_tokens: 4, audio_tokens: 0 },
  completion_tokens_details: { reasoning_tokens: 1 },
};

const header = { id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 1_750_000_000, model: 'llama' };

/** A chat stream as an OpenAI-compatible upstream sends it with include_usage: role, texts, finish, usage. */
export function chatChunks(
  texts: string[],
  finishReason = 'stop',
  usage: JsonObject | null = chatUsage,
): SseEvent[] {
  const chunk = (choices: JsonObject[], extra: JsonObject = {}): SseEvent => ({
    data: JSON.stringify({ ...header, choices, ...extra }),
  });
  const events = [chunk([{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }])];
  for (const text of texts) events.push(chunk([{ index: 0, delta: { content: text }, finish_reason: null }]));
  events.push(chunk([{ index: 0, delta: {}, finish_reason: finishReason }]));
  if (usage) events.push(chunk([], { usage }));
  return events;
}

export async function* iterate(events: SseEvent[], failWith?: Error): AsyncGenerator<SseEvent> {
  for (const event of events) yield event;
  if (failWith) throw failWith;
}

export interface Parsed {
  event: string | undefined;
  data: JsonObject;
}

export async function collect(events: AsyncIterable<SseEvent>, into: Parsed[] = []): Promise<Parsed[]> {
  for await (const e of events) into.push({ event: e.event, data: JSON.parse(e.data) as JsonObject });
  return into;
}
