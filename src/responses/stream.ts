import type { JsonObject, SseEvent } from '../../providers/types.js';
import { GantryError } from '../errors.js';
import {
  functionCallItem,
  type ItemStatus,
  itemId,
  messageItem,
  outcomeOf,
  reasoningItem,
  reasoningPart,
  refusalPart,
  responseObject,
  responseUsage,
  textPart,
} from './response.js';
import { isObject, type ResponseMeta, reasoningOf } from './types.js';

/** A reasoning item streams one content part. */
const CONTENT_INDEX = 0;

/** A part of the message item: output_text or refusal, and its text so far. */
interface MessagePart {
  kind: 'text' | 'refusal';
  text: string;
}

/** An output item being streamed: what it has said so far, and how to announce and close it. */
interface OpenItem {
  /** `message`, `reasoning`, or `call:<slot>` (see slotOf). */
  key: string;
  id: string;
  outputIndex: number;
  /** Reasoning text, or function arguments so far. */
  text: string;
  /** The message only: its parts so far, the last one open. */
  parts?: MessagePart[];
  /** Function calls only. */
  callId?: string;
  name?: string;
  /** Reasoning only: the upstream's signed thinking blocks (see reasoningItem). */
  thinking?: unknown[];
}

/** One piece of a chat chunk, in the order the bridge emits them. */
type Piece =
  | { kind: 'reasoning'; delta: string }
  | { kind: 'thinking'; blocks: unknown[] }
  | { kind: 'text'; delta: string }
  | { kind: 'refusal'; delta: string }
  | { kind: 'call'; index: number; id?: string; name?: string; delta: string };

/**
 * Chat completion chunks → the Responses event stream, in OpenAI's order: response.created,
 * response.in_progress, then each output item in turn (output_item.added, its deltas and done events,
 * output_item.done), then response.completed (or response.incomplete) carrying the same items.
 *
 * Items: a `reasoning` item for chat's `reasoning_content`, a `message` item for the text and the
 * refusal (an output_text and a refusal part, each at its own content_index, in the order they come), a
 * `function_call` item per tool call. One item is open at a time: the next one closes it, as OpenAI's
 * own streams do. An item is announced at its first delta, so an upstream that fails at once has
 * emitted no empty item; a stream with nothing at all still ends with one (empty) message item.
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
  const output: JsonObject[] = [];
  const seenCalls = new Set<number>();
  // Chat tool call index → the bridge's call slot. Ollama reuses index 0 for every call of a parallel
  // answer, telling them apart only by id: a new id at a known index opens a new slot.
  const slots = new Map<number, { slot: number; id: string | undefined }>();
  const slotOf = (piece: Extract<Piece, { kind: 'call' }>): number => {
    const known = slots.get(piece.index);
    if (known && (piece.id === undefined || piece.id === known.id)) return known.slot;
    const slot = slots.size === 0 ? 0 : Math.max(...[...slots.values()].map((s) => s.slot)) + 1;
    slots.set(piece.index, { slot, id: piece.id });
    return slot;
  };
  let open: OpenItem | undefined;
  let finishReason: unknown;
  let usage: JsonObject | undefined;

  function* opening(item: OpenItem): Generator<SseEvent> {
    const at = { item_id: item.id, output_index: item.outputIndex, content_index: CONTENT_INDEX };
    if (item.key === 'message') {
      // Its parts are announced as they begin (see messageDelta).
      yield event('response.output_item.added', {
        output_index: item.outputIndex,
        item: messageItem(item.id, 'in_progress'),
      });
    } else if (item.key === 'reasoning') {
      yield event('response.output_item.added', {
        output_index: item.outputIndex,
        item: reasoningItem(item.id, 'in_progress'),
      });
      yield event('response.content_part.added', { ...at, part: reasoningPart('') });
    } else {
      yield event('response.output_item.added', {
        output_index: item.outputIndex,
        item: callItem(item, 'in_progress'),
      });
    }
  }

  function* closing(item: OpenItem, status: ItemStatus): Generator<SseEvent> {
    const at = { item_id: item.id, output_index: item.outputIndex, content_index: CONTENT_INDEX };
    let done: JsonObject;
    if (item.key === 'message') {
      const parts = item.parts ?? [];
      const last = parts.at(-1);
      if (last) yield* closingPart(item, last, parts.length - 1);
      done = messageItem(item.id, status, parts.map(partOf));
    } else if (item.key === 'reasoning') {
      done = reasoningItem(item.id, status, item.text, item.thinking);
      yield event('response.reasoning_text.done', { ...at, text: item.text });
      yield event('response.content_part.done', { ...at, part: reasoningPart(item.text) });
    } else {
      done = callItem(item, status);
      yield event('response.function_call_arguments.done', {
        item_id: item.id,
        output_index: item.outputIndex,
        name: item.name ?? '',
        arguments: item.text,
      });
    }
    output.push(done);
    yield event('response.output_item.done', { output_index: item.outputIndex, item: done });
  }

  function* closingPart(item: OpenItem, part: MessagePart, contentIndex: number): Generator<SseEvent> {
    const at = { item_id: item.id, output_index: item.outputIndex, content_index: contentIndex };
    if (part.kind === 'text') {
      yield event('response.output_text.done', { ...at, text: part.text, logprobs: [] });
    } else {
      yield event('response.refusal.done', { ...at, refusal: part.text });
    }
    yield event('response.content_part.done', { ...at, part: partOf(part) });
  }

  /** A text or refusal delta: closing the message's open part and opening the piece's own when they differ. */
  function* messageDelta(
    item: OpenItem,
    piece: { kind: MessagePart['kind']; delta: string },
  ): Generator<SseEvent> {
    const parts = item.parts ?? [];
    item.parts = parts;
    let part = parts.at(-1);
    if (part?.kind !== piece.kind) {
      if (part) yield* closingPart(item, part, parts.length - 1);
      part = { kind: piece.kind, text: '' };
      parts.push(part);
      yield event('response.content_part.added', {
        item_id: item.id,
        output_index: item.outputIndex,
        content_index: parts.length - 1,
        part: partOf(part),
      });
    }
    if (piece.delta === '') return;
    part.text += piece.delta;
    const at = { item_id: item.id, output_index: item.outputIndex, content_index: parts.length - 1 };
    if (piece.kind === 'text') {
      yield event('response.output_text.delta', { ...at, delta: piece.delta, logprobs: [] });
    } else {
      yield event('response.refusal.delta', { ...at, delta: piece.delta });
    }
  }

  /** The events for one piece: closing the open item and opening the piece's own when they differ. */
  function* take(piece: Piece): Generator<SseEvent> {
    const slot = piece.kind === 'call' ? slotOf(piece) : -1;
    const key = piece.kind === 'call' ? `call:${slot}` : itemKey(piece.kind);
    if (open?.key !== key) {
      if (piece.kind === 'call' && seenCalls.has(slot)) {
        throw new GantryError('UPSTREAM_ERROR', {
          message: 'The upstream sent more of a tool call after the next output had begun',
        });
      }
      if (open) yield* closing(open, 'completed');
      const outputIndex = output.length;
      open = { key, id: itemId(meta.id, itemPrefix(piece.kind), outputIndex), outputIndex, text: '' };
      if (piece.kind === 'call') {
        seenCalls.add(slot);
        open.callId = piece.id ?? `call_${open.id.slice(3)}`;
        open.name = piece.name ?? '';
      }
      yield* opening(open);
    }
    const item = open as OpenItem;
    if (piece.kind === 'thinking') {
      item.thinking = [...(item.thinking ?? []), ...piece.blocks];
      return;
    }
    if (piece.kind === 'text' || piece.kind === 'refusal') {
      yield* messageDelta(item, piece);
      return;
    }
    if (piece.kind === 'call' && piece.name && !item.name) item.name = piece.name;
    if (piece.delta === '') return;
    item.text += piece.delta;
    if (piece.kind === 'reasoning') {
      yield event('response.reasoning_text.delta', {
        item_id: item.id,
        output_index: item.outputIndex,
        content_index: CONTENT_INDEX,
        delta: piece.delta,
      });
    } else {
      yield event('response.function_call_arguments.delta', {
        item_id: item.id,
        output_index: item.outputIndex,
        delta: piece.delta,
      });
    }
  }

  const snapshot = responseObject(meta, { status: 'in_progress', output: [] });
  yield event('response.created', { response: snapshot });
  yield event('response.in_progress', { response: snapshot });

  for await (const chunk of chunks) {
    const parsed = parseChunk(chunk);
    if (!parsed) continue;
    // Usage arrives on the last chunk (include_usage); some upstreams repeat it, the last one wins.
    usage = responseUsage(parsed.usage) ?? usage;
    const choice = Array.isArray(parsed.choices)
      ? parsed.choices.find((c: unknown) => isObject(c) && (c.index ?? 0) === 0)
      : undefined;
    if (!isObject(choice)) continue;
    if (typeof choice.finish_reason === 'string') finishReason = choice.finish_reason;
    for (const piece of piecesOf(choice.delta)) yield* take(piece);
  }
  if (!open && output.length === 0) yield* take({ kind: 'text', delta: '' });

  const outcome = outcomeOf(finishReason);
  if (open) yield* closing(open, outcome.status);
  const final = responseObject(meta, {
    status: outcome.status,
    ...(outcome.reason ? { reason: outcome.reason } : {}),
    output,
    usage,
  });
  onComplete(final);
  yield event(outcome.status === 'completed' ? 'response.completed' : 'response.incomplete', {
    response: final,
  });
}

function itemPrefix(kind: Piece['kind']): 'msg' | 'rs' | 'fc' {
  if (kind === 'text' || kind === 'refusal') return 'msg';
  return kind === 'call' ? 'fc' : 'rs';
}

/** The item a piece belongs to, but for calls (one item each, see slotOf). */
function itemKey(kind: Exclude<Piece['kind'], 'call'>): 'message' | 'reasoning' {
  return kind === 'text' || kind === 'refusal' ? 'message' : 'reasoning';
}

function partOf(part: MessagePart): JsonObject {
  return part.kind === 'text' ? textPart(part.text) : refusalPart(part.text);
}

function callItem(item: OpenItem, status: ItemStatus): JsonObject {
  return functionCallItem(item.id, status, {
    callId: item.callId ?? '',
    name: item.name ?? '',
    arguments: item.text,
  });
}

/**
 * A chat delta's pieces: reasoning (see reasoningOf), text, refusal, then
 * tool call deltas in OpenAI's form (index; id, type and name on a call's first delta; arguments in pieces).
 */
function piecesOf(delta: unknown): Piece[] {
  if (!isObject(delta)) return [];
  const pieces: Piece[] = [];
  const reasoning = reasoningOf(delta);
  if (reasoning !== '') pieces.push({ kind: 'reasoning', delta: reasoning });
  // Complete signed thinking blocks, sent once each is done (Gantry's Anthropic adapter).
  if (Array.isArray(delta.thinking_blocks) && delta.thinking_blocks.length > 0) {
    pieces.push({ kind: 'thinking', blocks: delta.thinking_blocks });
  }
  if (typeof delta.content === 'string' && delta.content !== '') {
    pieces.push({ kind: 'text', delta: delta.content });
  }
  if (typeof delta.refusal === 'string' && delta.refusal !== '') {
    pieces.push({ kind: 'refusal', delta: delta.refusal });
  }
  if (Array.isArray(delta.tool_calls)) {
    delta.tool_calls.forEach((call: unknown, position) => {
      if (!isObject(call)) return;
      const fn = isObject(call.function) ? call.function : {};
      pieces.push({
        kind: 'call',
        index: typeof call.index === 'number' ? call.index : position,
        ...(typeof call.id === 'string' ? { id: call.id } : {}),
        ...(typeof fn.name === 'string' ? { name: fn.name } : {}),
        delta: typeof fn.arguments === 'string' ? fn.arguments : '',
      });
    });
  }
  return pieces;
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
