/**
 * The safety layer on a chat completion stream (README, "Safety" → "Chat completions"), after Azure
 * OpenAI's streaming content filter:
 *
 * - a chunk `choices: []` with `prompt_filter_results` comes before the first upstream chunk (or, for a
 *   remote check still running in annotate mode, as soon as it is ready, before `[DONE]` at the latest);
 * - the completion text of each choice (choiceText: content, refusal, reasoning, the audio transcript,
 *   tool call arguments and custom tool input) is cut in windows (window.ts) and each checked window is
 *   followed by an annotation chunk
 *   `choices: [{index, delta: {}, finish_reason: null, content_filter_results, content_filter_offsets}]`
 *   (Azure's asynchronous-filter layout, in both modes; `check_offset` is how far the choice's text has
 *   been checked, never decreasing);
 * - annotate: nothing is held back, annotations follow the text they cover;
 * - block: a choice's chunks are held until the window their text belongs to passed the check, then
 *   released in order; a delta with more text than its window has room for is cut into several chunks
 *   (holdCut), so nothing is released more than a window at a time. A flagged window releases nothing: the choice ends with a chunk
 *   `finish_reason: "content_filter"` carrying the results; once every choice the upstream began is over
 *   (filtered, or finished normally) and one was filtered, the upstream is stopped and a usage chunk for
 *   what was delivered follows (the meter drops it if the client did not ask for usage). A chunk that
 *   is not a JSON object cannot be checked: it is never forwarded, the stream ends with one error event
 *   (an invalid upstream answer) and the held text is not released.
 *
 * Chunks are passed on as the upstream's own event (never re-serialised) unless one chunk carries
 * several choices in block mode, which is split per choice. Annotate mode runs on every chunk of every
 * annotated stream, so it parses as little as it can: a chunk in OpenAI's own layout (simpleChoice) is
 * read by scanning its one choice, and of the others only those that may carry completion text or a
 * finish reason are parsed. Block mode parses every chunk, so nothing unchecked passes.
 */
import type { JsonObject, SseEvent } from '../../providers/types.js';
import { GantryError } from '../errors.js';
import type { ChatSafetyContext } from './chat.js';
import { checkChatCompletion } from './chat.js';
import { promptFilterResults, type SafetyCheck } from './engine.js';
import { TextWindows, type Window } from './window.js';

/** Chunks that may carry completion text or end a choice (compact JSON or with spaces). */
const TEXT_OR_FINISH =
  /"(?:content|refusal|reasoning_content|reasoning|arguments|input|transcript)"\s*:\s*"[^"]|"content"\s*:\s*\[|"finish_reason"\s*:\s*"/;

export interface ChatStreamSafety {
  ctx: ChatSafetyContext;
  /** Characters per checked window (`safety.stream_window_chars`). */
  windowChars: number;
  /** The prompt check: settled already in block mode, maybe still running in annotate mode. */
  prompt: Promise<SafetyCheck>;
  /** The usage chunk's `usage` for a stream the filter ended (what was delivered). */
  deliveredUsage: () => JsonObject;
  /** Stops the upstream call (a stream the filter ended). */
  abort: () => void;
  signal?: AbortSignal;
}

interface Ids {
  id: unknown;
  object: unknown;
  created: unknown;
  model: unknown;
}

/** A check running while the stream goes on (annotate mode): its annotation is written once it is ready. */
class Pending<T> {
  done = false;
  value: T | undefined;
  error: unknown;
  readonly promise: Promise<void>;

  constructor(promise: Promise<T>) {
    this.promise = promise.then(
      (value) => {
        this.done = true;
        this.value = value;
      },
      (error: unknown) => {
        this.done = true;
        this.error = error ?? new Error('safety check failed');
      },
    );
  }

  /** The value; throws what the check threw. Call only when done. */
  get(): T {
    if (this.error !== undefined) throw this.error;
    return this.value as T;
  }
}

interface ChoiceState {
  windows: TextWindows;
  /** Block mode: chunks waiting for their window's check. */
  held: SseEvent[];
  /** The choice's finish chunk went out, or the filter ended it. */
  over: boolean;
  filtered: boolean;
}

/** The stream as the client gets it. */
export async function* safeChatStream(
  events: AsyncIterable<SseEvent>,
  s: ChatStreamSafety,
): AsyncGenerator<SseEvent> {
  const block = s.ctx.active.policy.mode === 'block';
  const states = new Map<number, ChoiceState>();
  const annotations: Array<Pending<SseEvent>> = [];
  const prompt = new Pending(s.prompt);
  let promptSent = false;
  let ids: Ids | undefined;
  let filteredChoices = 0;

  const state = (index: number): ChoiceState => {
    let st = states.get(index);
    if (st === undefined) {
      st = { windows: new TextWindows(s.windowChars), held: [], over: false, filtered: false };
      states.set(index, st);
    }
    return st;
  };
  /** The stream's own members (`{"id":…,"object":…,"created":…,"model":…,`), written once. */
  let head: string | undefined;
  const chunk = (extra: JsonObject): SseEvent => {
    head ??= `${JSON.stringify(ids as Ids).slice(0, -1)},`;
    return { data: head + JSON.stringify(extra).slice(1) };
  };
  const promptChunk = (): SseEvent =>
    chunk({ choices: [], prompt_filter_results: promptFilterResults(prompt.get()) });
  const annotation = (index: number, window: Window, check: SafetyCheck, finish: string | null): SseEvent =>
    chunk({
      choices: [
        {
          index,
          delta: {},
          finish_reason: finish,
          content_filter_results: check.results,
          content_filter_offsets: {
            // Azure: how far the text has been fully checked, an exclusive lower bound on the end_offset
            // of later annotations (README, "Chat completions").
            check_offset: window.end,
            start_offset: window.start,
            end_offset: window.end,
          },
        },
      ],
    });

  /** Block mode: checks the choice's waiting text; its held chunks go out, or the filter ends it. */
  async function* settle(index: number, st: ChoiceState): AsyncGenerator<SseEvent> {
    let check: SafetyCheck | undefined;
    let window: Window | undefined;
    if (st.windows.waiting > 0) {
      window = st.windows.take();
      check = await checkChatCompletion(s.ctx, window.text, s.signal);
    }
    if (check?.blocked === true && window !== undefined) {
      st.held = [];
      st.over = true;
      st.filtered = true;
      filteredChoices++;
      yield annotation(index, window, check, 'content_filter');
      return;
    }
    const held = st.held;
    st.held = [];
    yield* held;
    if (check !== undefined && window !== undefined) yield annotation(index, window, check, null);
  }

  /** Annotate mode: starts the check of the choice's waiting text; its annotation follows when ready. */
  const annotate = (index: number, st: ChoiceState): void => {
    if (st.windows.waiting === 0) return;
    const window = st.windows.take();
    annotations.push(
      new Pending(
        checkChatCompletion(s.ctx, window.text, s.signal).then((check) =>
          annotation(index, window, check, null),
        ),
      ),
    );
  };

  /** Something ready() would write (tested first: most chunks have nothing to add after them). */
  const readyDue = (): boolean =>
    (!promptSent && prompt.done && ids !== undefined) ||
    (annotations.length > 0 && (annotations[0] as Pending<SseEvent>).done);

  /** Annotations (and the prompt's results) that are ready, in order. */
  function* ready(): Generator<SseEvent> {
    if (!promptSent && prompt.done && ids !== undefined) {
      promptSent = true;
      yield promptChunk();
    }
    while (annotations.length > 0 && (annotations[0] as Pending<SseEvent>).done) {
      yield (annotations.shift() as Pending<SseEvent>).get();
    }
  }

  /**
   * Every choice's waiting text checked and its annotations written: before a chunk without choices (the
   * usage chunk comes last, as in any chat stream), and at the end.
   */
  async function* flushAll(): AsyncGenerator<SseEvent> {
    for (const [index, st] of states) {
      if (st.filtered) continue;
      if (block) yield* settle(index, st);
      else annotate(index, st);
    }
    for (const pending of annotations.splice(0)) {
      await pending.promise;
      yield pending.get();
    }
  }

  /** Annotate mode: notes one choice's text; the chunk itself has gone out already. */
  const note = (choice: JsonObject): void => {
    const index = typeof choice.index === 'number' ? choice.index : 0;
    const st = state(index);
    const text = choiceText(choice.delta);
    if (text !== '' && st.windows.add(text)) annotate(index, st);
    if (typeof choice.finish_reason === 'string') {
      st.over = true;
      annotate(index, st);
    }
  };

  /**
   * Block mode: one choice of a chunk; `event` is a chunk carrying only this choice, `whole` that chunk
   * parsed (to cut a delta longer than the window has room for into several chunks).
   */
  async function* hold(event: SseEvent, whole: JsonObject, choice: JsonObject): AsyncGenerator<SseEvent> {
    const index = typeof choice.index === 'number' ? choice.index : 0;
    const st = state(index);
    if (st.filtered) return;
    const text = choiceText(choice.delta);
    const finishes = typeof choice.finish_reason === 'string';
    if (text === '' && !finishes && st.held.length === 0) {
      yield event;
      return;
    }
    if (text.length > st.windows.room) {
      yield* holdCut(event, whole, choice, index, st, text.length);
      return;
    }
    st.held.push(event);
    const due = text !== '' && st.windows.add(text);
    if (finishes) st.over = true;
    if (due || finishes) yield* settle(index, st);
  }

  /**
   * Block mode: a choice whose delta holds more text than its window has room for goes out as several
   * chunks carrying consecutive parts of that text, each released once its window passed (README,
   * "Chat completions": no window is longer than 1,000 characters). The finish reason, logprobs and usage
   * go on the last part.
   */
  async function* holdCut(
    event: SseEvent,
    whole: JsonObject,
    choice: JsonObject,
    index: number,
    st: ChoiceState,
    length: number,
  ): AsyncGenerator<SseEvent> {
    const delta = choice.delta as JsonObject;
    const { usage, ...rest } = whole;
    for (let from = 0; from < length && !st.filtered; ) {
      const to = Math.min(length, from + st.windows.room);
      const last = to === length;
      const part: JsonObject = {
        ...choice,
        delta: sliceDelta(delta, from, to, from === 0),
        ...(last ? {} : { finish_reason: null }),
        ...(!last && 'logprobs' in choice ? { logprobs: null } : {}),
      };
      const chunk: JsonObject = { ...rest, choices: [part] };
      if (last && usage !== undefined) chunk.usage = usage;
      st.held.push({ ...event, data: JSON.stringify(chunk) });
      const due = st.windows.add(choiceText(part.delta));
      const finishes = last && typeof choice.finish_reason === 'string';
      if (finishes) st.over = true;
      if (due || finishes) yield* settle(index, st);
      from = to;
    }
  }

  const it = events[Symbol.asyncIterator]();
  try {
    for (;;) {
      const next = await it.next();
      if (next.done) break;
      const event = next.value;
      const data = event.data;
      if (ids === undefined) {
        const first = parseChunk(data);
        ids = {
          id: first?.id ?? '',
          object: 'chat.completion.chunk',
          created: first?.created ?? 0,
          model: first?.model ?? '',
        };
        if (block) {
          // The prompt was checked before the upstream was called: its results come first.
          await prompt.promise;
        }
        yield* ready();
      }
      if (!block) {
        const choice = simpleChoice(data);
        if (choice !== undefined) {
          // Annotate mode, OpenAI's own chunk layout: read without parsing the chunk (note() otherwise).
          yield event;
          if (choice.text !== '' || choice.finish !== null) {
            const st = state(choice.index);
            if (choice.text !== '' && st.windows.add(choice.text)) annotate(choice.index, st);
            if (choice.finish !== null) {
              st.over = true;
              annotate(choice.index, st);
            }
          }
          if (readyDue()) yield* ready();
          continue;
        }
      }
      if (!block && !TEXT_OR_FINISH.test(data)) {
        // Annotate mode, no text: a role chunk, the usage chunk. A chunk without choices (usage) waits
        // for the annotations of the text still unchecked.
        if (states.size > 0 && /"choices"\s*:\s*\[\s*\]/.test(data)) yield* flushAll();
        yield event;
        if (readyDue()) yield* ready();
        continue;
      }
      const parsed = parseChunk(data);
      const choices =
        parsed !== undefined && Array.isArray(parsed.choices) ? (parsed.choices as JsonObject[]) : [];
      if (parsed === undefined) {
        // Block mode never forwards text it could not check (annotate forwards it as the upstream sent it).
        if (block) throw unreadableChunk();
        yield event;
      } else if (choices.length === 0) {
        yield* flushAll();
        yield event;
      } else if (!block) {
        yield event;
        for (const choice of choices) note(choice);
      } else if (choices.length === 1) {
        yield* hold(event, parsed, choices[0] as JsonObject);
      } else {
        // Held per choice: a chunk carrying several is split, and its usage (if any) goes on the last part
        // only, so it is counted once.
        const { usage, ...rest } = parsed;
        const last = choices.length - 1;
        for (let i = 0; i <= last; i++) {
          const choice = choices[i] as JsonObject;
          const part =
            i === last && usage !== undefined
              ? { ...rest, choices: [choice], usage }
              : { ...rest, choices: [choice] };
          yield* hold({ ...event, data: JSON.stringify(part) }, part, choice);
        }
      }
      if (block && filteredChoices > 0 && allOver(states)) {
        // Every choice still open was filtered (the others finished, or never began: some servers ignore
        // `n`): nothing more goes to the client, and the upstream stops generating text no one gets.
        s.abort();
        yield chunk({ choices: [], usage: s.deliveredUsage() });
        return;
      }
      if (readyDue()) yield* ready();
    }
    yield* flushAll();
    if (!promptSent) {
      await prompt.promise;
      if (ids === undefined) ids = { id: '', object: 'chat.completion.chunk', created: 0, model: '' };
      promptSent = true;
      yield promptChunk();
    }
  } finally {
    // The client left or the filter ended the stream: the upstream's connection is let go.
    await it.return?.();
  }
}

/** The error a block-mode stream ends with at a chunk it cannot read (so cannot check). */
function unreadableChunk(): GantryError {
  return new GantryError('UPSTREAM_ERROR', { message: 'The model provider sent an invalid response' });
}

function allOver(states: ReadonlyMap<number, ChoiceState>): boolean {
  for (const st of states.values()) if (!st.over) return false;
  return true;
}

/** The members of a chunk's one choice in OpenAI's own compact layout and key order (simpleChoice). */
const CHOICE_HEAD = '"choices":[{"index":';
const DELTA_CONTENT = ',"delta":{"content":"';
const DELTA_EMPTY = ',"delta":{}';
const CHOICE_TAIL = ',"logprobs":null,"finish_reason":';

export interface SimpleChoice {
  index: number;
  /** The delta's content ('' when none). */
  text: string;
  finish: string | null;
}

/**
 * The one choice of a chunk in OpenAI's own compact layout and key order, with a delta that is only
 * content or empty (what OpenAI and many OpenAI-compatible servers send for every chunk of a plain
 * answer but the first): `"choices":[{"index":0,"delta":{"content":"…"},"logprobs":null,
 * "finish_reason":null}]`, or `"delta":{}` and a finish reason. Read as JSON.parse would read it, without
 * parsing the chunk (a scan of the choice alone); undefined for any other chunk, which is then parsed.
 * The chunk must be one object with one `"choices"` member: such a member name cannot sit inside a
 * string (its closing quote would end the string), so the one found is the chunk's own.
 */
export function simpleChoice(data: string): SimpleChoice | undefined {
  if (data.charCodeAt(0) !== 123 /* { */ || data.charCodeAt(data.length - 1) !== 125 /* } */)
    return undefined;
  const at = data.indexOf('"choices"');
  if (at === -1 || !data.startsWith(CHOICE_HEAD, at)) return undefined;
  let i = at + CHOICE_HEAD.length;
  const digits = i;
  let index = 0;
  for (let c = data.charCodeAt(i); c >= 48 && c <= 57 && i - digits < 9; c = data.charCodeAt(++i)) {
    index = index * 10 + (c - 48);
  }
  // JSON numbers have no leading zero.
  if (i === digits || (i - digits > 1 && data.charCodeAt(digits) === 48)) return undefined;
  let text = '';
  if (data.startsWith(DELTA_CONTENT, i)) {
    const start = i + DELTA_CONTENT.length;
    let end = start;
    let escapes = false;
    for (;;) {
      const c = data.charCodeAt(end);
      if (c === 34 /* " */) break;
      // The end of the data (NaN) or a raw control character: not a JSON string.
      if (!(c >= 32)) return undefined;
      if (c === 92 /* \ */) {
        escapes = true;
        end += 2;
      } else {
        end++;
      }
    }
    text = data.slice(start, end);
    if (escapes) {
      try {
        text = JSON.parse(`"${text}"`) as string;
      } catch {
        return undefined;
      }
    }
    i = end + 1;
    if (data.charCodeAt(i) !== 125 /* } */) return undefined;
    i++;
  } else if (data.startsWith(DELTA_EMPTY, i)) {
    i += DELTA_EMPTY.length;
  } else {
    return undefined;
  }
  if (!data.startsWith(CHOICE_TAIL, i)) return undefined;
  i += CHOICE_TAIL.length;
  let finish: string | null = null;
  if (data.startsWith('null', i)) {
    i += 4;
  } else {
    if (data.charCodeAt(i) !== 34) return undefined;
    const start = ++i;
    // A finish reason: lowercase letters and underscores (stop, length, tool_calls, content_filter, …).
    for (let c = data.charCodeAt(i); (c >= 97 && c <= 122) || c === 95; c = data.charCodeAt(++i));
    if (i === start || i - start > 40 || data.charCodeAt(i) !== 34) return undefined;
    finish = data.slice(start, i);
    i++;
  }
  if (!data.startsWith('}]', i) || data.indexOf('"choices"', i) !== -1) return undefined;
  return { index, text, finish };
}

function parseChunk(data: string): JsonObject | undefined {
  try {
    const value: unknown = JSON.parse(data);
    return value !== null && typeof value === 'object' && !Array.isArray(value)
      ? (value as JsonObject)
      : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The text of a delta the completion check reads: content (a string, or the text of its parts), refusal,
 * reasoning, the audio transcript, and the arguments or input of tool calls (function, custom, and the
 * deprecated function_call), in the delta's key order (sliceDelta cuts the same sequence).
 */
export function choiceText(delta: unknown): string {
  if (delta === null || typeof delta !== 'object') return '';
  const d = delta as JsonObject;
  let text = '';
  for (const key in d) {
    const v = d[key];
    if (typeof v === 'string') {
      if (TEXT_KEYS.has(key)) text += v;
    } else if (key === 'content' && Array.isArray(v)) {
      for (const part of v) if (isTextPart(part)) text += part.text;
    } else if (key === 'audio' || key === 'function_call') {
      const inner = isObject(v) ? v[key === 'audio' ? 'transcript' : 'arguments'] : undefined;
      if (typeof inner === 'string') text += inner;
    } else if (key === 'tool_calls' && Array.isArray(v)) {
      for (const call of v) {
        if (!isObject(call)) continue;
        const args = isObject(call.function) ? call.function.arguments : undefined;
        if (typeof args === 'string') text += args;
        const input = isObject(call.custom) ? call.custom.input : undefined;
        if (typeof input === 'string') text += input;
      }
    }
  }
  return text;
}

/** Delta members that are completion text when they are strings. */
const TEXT_KEYS: ReadonlySet<string> = new Set(['content', 'refusal', 'reasoning_content', 'reasoning']);

/**
 * The delta carrying characters [from, to) of its choiceText, in the same members. The first piece keeps
 * the members that are not text (role, tool call ids, types and names, audio data); later ones carry
 * only their text, with the index of the tool call it belongs to.
 */
export function sliceDelta(delta: JsonObject, from: number, to: number, first: boolean): JsonObject {
  let at = 0;
  /** This piece's part of the next text in order, or undefined when none of it falls in the piece. */
  const cut = (text: string): string | undefined => {
    const a = Math.max(from - at, 0);
    const b = Math.min(to - at, text.length);
    at += text.length;
    if (a < b) return text.slice(a, b);
    return first && text === '' ? '' : undefined;
  };
  /** An object with its text member cut: the others only in the first piece (`keep` always). */
  const inner = (o: JsonObject, member: string, keep: readonly string[]): JsonObject | undefined => {
    const piece: JsonObject = {};
    for (const k in o) if (first || keep.includes(k)) piece[k] = o[k];
    delete piece[member];
    const text = typeof o[member] === 'string' ? cut(o[member] as string) : undefined;
    if (text !== undefined) piece[member] = text;
    else if (!first) return undefined;
    return piece;
  };
  const out: JsonObject = {};
  for (const key in delta) {
    const v = delta[key];
    if (typeof v === 'string' && TEXT_KEYS.has(key)) {
      const text = cut(v);
      if (text !== undefined) out[key] = text;
    } else if (key === 'content' && Array.isArray(v)) {
      const parts: unknown[] = [];
      for (const part of v) {
        if (!isTextPart(part)) {
          if (first) parts.push(part);
          continue;
        }
        const text = cut(part.text);
        if (text !== undefined) parts.push({ ...part, text });
      }
      if (first || parts.length > 0) out[key] = parts;
    } else if ((key === 'audio' || key === 'function_call') && isObject(v)) {
      const piece = inner(v, key === 'audio' ? 'transcript' : 'arguments', ['id']);
      if (piece !== undefined) out[key] = piece;
    } else if (key === 'tool_calls' && Array.isArray(v)) {
      const calls: unknown[] = [];
      for (const call of v) {
        if (!isObject(call)) {
          if (first) calls.push(call);
          continue;
        }
        const piece: JsonObject = first ? { ...call } : { index: call.index };
        let text = false;
        for (const [k, member] of [
          ['function', 'arguments'],
          ['custom', 'input'],
        ] as const) {
          const o = call[k];
          if (!isObject(o)) continue;
          const part = inner(o, member, []);
          if (part === undefined) delete piece[k];
          else {
            piece[k] = part;
            if (typeof part[member] === 'string') text = true;
          }
        }
        if (first || text) calls.push(piece);
      }
      if (first || calls.length > 0) out[key] = calls;
    } else if (first) {
      out[key] = v;
    }
  }
  return out;
}

function isTextPart(part: unknown): part is { type: 'text'; text: string } {
  return isObject(part) && part.type === 'text' && typeof part.text === 'string';
}

function isObject(value: unknown): value is JsonObject {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}
