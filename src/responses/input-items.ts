/**
 * GET /v1/responses/{id}/input_items of a bridged response: the items used to generate it (its stored
 * conversation less its own answer), as OpenAI lists them, a page at a time.
 */
import { createHash } from 'node:crypto';
import type { JsonObject } from '../../providers/types.js';
import { invalidParameter } from '../errors.js';
import { type ChatMessage, isObject } from './types.js';

const DEFAULT_LIMIT = 20;
const MAX_LIMIT = 100;

/** The conversation before the response's own answer (its last turn), as Responses items, oldest first. */
export function conversationItems(conversation: readonly ChatMessage[], responseId: string): JsonObject[] {
  const items: JsonObject[] = [];
  // Ids are derived from the response and the position, so pages agree on them across calls.
  const idOf = (prefix: string) => {
    const hash = createHash('sha256').update(`${responseId}:${items.length}`).digest('hex').slice(0, 48);
    return `${prefix}_${hash}`;
  };
  for (const m of conversation.slice(0, -1)) {
    if (m.role === 'tool') {
      items.push({
        id: idOf('fco'),
        type: 'function_call_output',
        call_id: m.tool_call_id ?? '',
        output: typeof m.content === 'string' ? m.content : '',
        status: 'completed',
      });
      continue;
    }
    if (m.role === 'assistant') {
      const text = typeof m.content === 'string' ? m.content : '';
      const content: JsonObject[] = [];
      if (text !== '' || (!m.tool_calls && !m.refusal)) {
        content.push({ type: 'output_text', text, annotations: [], logprobs: [] });
      }
      if (m.refusal) content.push({ type: 'refusal', refusal: m.refusal });
      if (content.length > 0) {
        items.push({ id: idOf('msg'), type: 'message', role: 'assistant', status: 'completed', content });
      }
      for (const call of m.tool_calls ?? []) {
        items.push({
          id: idOf('fc'),
          type: 'function_call',
          call_id: call.id,
          name: call.function.name,
          arguments: call.function.arguments,
          status: 'completed',
        });
      }
      continue;
    }
    items.push({
      id: idOf('msg'),
      type: 'message',
      role: m.role,
      status: 'completed',
      content: inputParts(m),
    });
  }
  return items;
}

function inputParts(m: ChatMessage): JsonObject[] {
  if (typeof m.content === 'string') return [{ type: 'input_text', text: m.content }];
  return (m.content ?? []).map((p) =>
    p.type === 'text'
      ? { type: 'input_text', text: p.text }
      : { type: 'input_image', image_url: p.image_url.url, detail: p.image_url.detail ?? 'auto' },
  );
}

/** One page of items as OpenAI's ResponseItemList: `order` (desc by default), `limit`, `after`. */
export function itemPage(items: readonly JsonObject[], query: unknown): JsonObject {
  const q = isObject(query) ? query : {};
  const order = q.order ?? 'desc';
  if (order !== 'asc' && order !== 'desc') throw invalidParameter('order', 'order must be asc or desc');
  const limit = q.limit === undefined ? DEFAULT_LIMIT : Number(q.limit);
  if (!Number.isInteger(limit) || limit < 1 || limit > MAX_LIMIT) {
    throw invalidParameter('limit', `limit must be an integer from 1 to ${MAX_LIMIT}`);
  }
  const ordered = order === 'asc' ? [...items] : [...items].reverse();
  let start = 0;
  if (q.after !== undefined) {
    const at = ordered.findIndex((item) => item.id === q.after);
    if (at === -1) throw invalidParameter('after', `No input item with id ${String(q.after)}`);
    start = at + 1;
  }
  const data = ordered.slice(start, start + limit);
  return {
    object: 'list',
    data,
    first_id: data[0]?.id ?? null,
    last_id: data[data.length - 1]?.id ?? null,
    has_more: start + limit < ordered.length,
  };
}
