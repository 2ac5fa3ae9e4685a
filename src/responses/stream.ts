import type { JsonObject, SseEvent } from '../../providers/types.js';
import { GantryError } from '../errors.js';
import { messageItem, newMessageId, outcomeOf, responseObject, responseUsage, textPart } from './response.js';
import { isObject, type ResponseMeta } from './types.js';

/** The one message item the bridge produces: output 0, content part 0. */
const OUTPUT_INDEX = 0;
const CONTENT_INDEX = 0;

/** What the chat chunks have said so far. */
interface ChunkState {
  text: string;
  finishReason: unknown;
  usage: JsonObject | undefined;
}

/**
 * Chat completion chunks → the Responses event stream, in OpenAI's order: response.created,
 * response.in_progress, output_item.added, content_part.added, output_text.delta…, output_text.done,
 * content_part.done, output_item.done, then response.completed (or response.incomplete). The message
 * item is announced at the first text, so an upstream that fails at once has emitted no empty item.
 */
export async function* chatStreamToResponseEvents(
  chunks: AsyncIterable<SseEvent>,
  meta: ResponseMeta,
  onComplete: (response: JsonObject) => void,
): AsyncGenerator<SseEvent> {
  let sequence = 0;
  const event = (type: string, fields: JsonObject): SseEvent => ({
    event: type,
    data: JSON.stringify({ type, sequence_number: sequence++, ...fields }),
  });
  const itemId = newMessageId();
  const at = { item_id: itemId, output_index: OUTPUT_INDEX, content_index: CONTENT_INDEX };
  const opening = (): SseEvent[] => [
    event('response.output_item.added', {
      output_index: OUTPUT_INDEX,
      item: messageItem(itemId, 'in_progress'),
    }),
    event('response.content_part.added', { ...at, part: textPart('') }),
  ];

  const snapshot = responseObject(meta, { status: 'in_progress', output: [] });
  yield event('response.created', { response: snapshot });
  yield event('response.in_progress', { response: snapshot });

  const state: ChunkState = { text: '', finishReason: undefined, usage: undefined };
  let opened = false;
  for await (const chunk of chunks) {
    const delta = absorb(state, chunk);
    if (delta === '') continue;
    if (!opened) {
      yield* opening();
      opened = true;
    }
    yield event('response.output_text.delta', { ...at, delta, logprobs: [] });
  }
  if (!opened) yield* opening();

  const outcome = outcomeOf(state.finishReason);
  const item = messageItem(itemId, outcome.status, state.text);
  yield event('response.output_text.done', { ...at, text: state.text, logprobs: [] });
  yield event('response.content_part.done', { ...at, part: textPart(state.text) });
  yield event('response.output_item.done', { output_index: OUTPUT_INDEX, item });
  const final = responseObject(meta, {
    status: outcome.status,
    ...(outcome.reason ? { reason: outcome.reason } : {}),
    output: [item],
    usage: state.usage,
  });
  onComplete(final);
  yield event(outcome.status === 'completed' ? 'response.completed' : 'response.incomplete', {
    response: final,
  });
}

/** Folds one chunk into the state; returns the text it adds ('' for none). */
function absorb(state: ChunkState, chunk: SseEvent): string {
  const parsed = parseChunk(chunk);
  if (!parsed) return '';
  // Usage arrives on the last chunk (include_usage); some upstreams repeat it, the last one wins.
  state.usage = responseUsage(parsed.usage) ?? state.usage;
  const choice = Array.isArray(parsed.choices)
    ? parsed.choices.find((c: unknown) => isObject(c) && (c.index ?? 0) === 0)
    : undefined;
  if (!isObject(choice)) return '';
  if (typeof choice.finish_reason === 'string') state.finishReason = choice.finish_reason;
  const content = isObject(choice.delta) ? choice.delta.content : undefined;
  if (typeof content !== 'string' || content === '') return '';
  state.text += content;
  return content;
}

function parseChunk(chunk: SseEvent): JsonObject | undefined {
  if (chunk.data === '[DONE]') return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(chunk.data);
  } catch (err) {
    throw new GantryError('UPSTREAM_ERROR', {
      message: 'The upstream sent a malformed stream chunk',
      cause: err,
    });
  }
  if (!isObject(parsed)) {
    throw new GantryError('UPSTREAM_ERROR', { message: 'The upstream sent a malformed stream chunk' });
  }
  // Some OpenAI-compatible servers report a failure mid-stream as a chunk holding only `error`.
  if (isObject(parsed.error)) {
    const message =
      typeof parsed.error.message === 'string' ? parsed.error.message : 'Upstream stream failed';
    throw new GantryError('UPSTREAM_ERROR', { message });
  }
  return parsed;
}
