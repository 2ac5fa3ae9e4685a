/**
 * The safety layer on a Responses event stream (README, "Safety" → "Responses"), whether the events come
 * from a chat upstream through the bridge (responses/stream.ts) or from an upstream that speaks the
 * Responses API. All completion text is checked in windows (window.ts): the deltas of output_text,
 * refusal, reasoning_text, reasoning_summary_text, function_call_arguments, custom_tool_call_input and
 * mcp_call_arguments, and any text that arrives only whole: in an added event (an item or part that
 * comes with its text filled), a done event (output_text.done, function_call_arguments.done,
 * output_item.done, …) or the terminal Response's output, without a delta having carried it. Azure
 * documents no event that carries content filter results in a Responses stream, so the results reach the
 * client as `content_filters` on the Response of the terminal event (response.completed /
 * response.incomplete), the same shape as a JSON answer (responses.ts).
 *
 * annotate: every event goes out as it came (its bytes untouched); only the events that carry text are
 * read (an output_text delta in its usual layout with one match, the others parsed), and windows are
 * checked beside the stream. The terminal event waits for their results and is
 * the one event written anew. A check that cannot run is reported as the error result in
 * `content_filters`, whatever the classifier's on_failure: the text already went out.
 * block: from the first unchecked text on, events wait until their window is checked; a flagged window
 * is dropped with everything held behind it, the upstream call is aborted, and the stream ends with
 * `response.incomplete` (content_filter) holding only what was released. A check that cannot run under a
 * policy that fails closed ends the stream with an error event, releasing nothing unchecked, and so does
 * an event that is not JSON (it cannot be checked). A delta longer than its window has room for goes out
 * as several deltas, each released once its window passed. The items a blocked stream closes carry only
 * text that was released, and all of that was checked. Sequence
 * numbers are counted here, so they stay consecutive whatever is held or dropped.
 */
import type { JsonObject, SseEvent } from '../../providers/types.js';
import { GantryError } from '../errors.js';
import { unavailableResults } from './azure.js';
import { ClassifierUnavailable } from './classifier.js';
import { recordCheck, type SafetyCheck } from './engine.js';
import {
  blockResponse,
  type ContentFilterEntry,
  checkCompletionText,
  combineChecks,
  contentFilterEntry,
  itemTexts,
  partText,
  type ResponsesSafety,
} from './responses.js';
import { MAX_WINDOW, TextWindows } from './window.js';

export interface StreamSafety extends ResponsesSafety {
  /** Characters per checked window (`safety.stream_window_chars`). */
  windowChars: number;
  /** The prompt's entry of `content_filters`. */
  prompt: ContentFilterEntry;
  /** Told the Response of the terminal event as the client gets it (the bridge keeps it as history). */
  onComplete?: (response: JsonObject) => void;
  /** Stops the upstream call once the stream is blocked. */
  abort: () => void;
}

/** Delta events whose text is completion text, and where in an output item the text goes. */
const DELTAS: Readonly<Record<string, (e: JsonObject) => string>> = {
  'response.output_text.delta': (e) => `c${num(e.content_index)}`,
  'response.refusal.delta': (e) => `c${num(e.content_index)}`,
  'response.reasoning_text.delta': (e) => `c${num(e.content_index)}`,
  'response.reasoning_summary_text.delta': (e) => `s${num(e.summary_index)}`,
  'response.function_call_arguments.delta': () => 'a',
  'response.custom_tool_call_input.delta': () => 'i',
  'response.mcp_call_arguments.delta': () => 'a',
};

/**
 * Events that repeat (or bring for the first time) a whole text, and where it goes: the done events, and
 * the added events, whose item or part may arrive with its text already filled.
 */
const DONE_TEXTS: Readonly<Record<string, (e: JsonObject) => Array<{ at: string; text: string }>>> = {
  'response.output_text.done': (e) => one(`c${num(e.content_index)}`, e.text),
  'response.refusal.done': (e) => one(`c${num(e.content_index)}`, e.refusal),
  'response.reasoning_text.done': (e) => one(`c${num(e.content_index)}`, e.text),
  'response.reasoning_summary_text.done': (e) => one(`s${num(e.summary_index)}`, e.text),
  'response.function_call_arguments.done': (e) => one('a', e.arguments),
  'response.content_part.done': (e) => one(`c${num(e.content_index)}`, partText(e.part)),
  'response.reasoning_summary_part.done': (e) =>
    one(`s${num(e.summary_index)}`, isObject(e.part) ? e.part.text : undefined),
  'response.custom_tool_call_input.done': (e) => one('i', e.input),
  'response.mcp_call_arguments.done': (e) => one('a', e.arguments),
  'response.output_item.done': (e) => streamItemTexts(e.item),
  'response.output_item.added': (e) => streamItemTexts(e.item),
  'response.content_part.added': (e) => one(`c${num(e.content_index)}`, partText(e.part)),
  'response.reasoning_summary_part.added': (e) =>
    one(`s${num(e.summary_index)}`, isObject(e.part) ? e.part.text : undefined),
};

/** An output item's completion texts (itemTexts), with a custom tool call's input and an MCP call's arguments. */
function streamItemTexts(item: unknown): Array<{ at: string; text: string }> {
  const texts = itemTexts(item);
  if (!isObject(item)) return texts;
  if (item.type === 'custom_tool_call' && typeof item.input === 'string')
    texts.push({ at: 'i', text: item.input });
  if (item.type === 'mcp_call' && typeof item.arguments === 'string')
    texts.push({ at: 'a', text: item.arguments });
  return texts;
}

const TERMINAL: ReadonlySet<string> = new Set([
  'response.completed',
  'response.incomplete',
  'response.failed',
]);

/** Events an annotated stream has to read; all others pass as they came without being parsed. */
const READ: ReadonlySet<string> = new Set([...Object.keys(DELTAS), ...Object.keys(DONE_TEXTS), ...TERMINAL]);

export async function* safeResponseEvents(
  events: AsyncIterable<SseEvent>,
  s: StreamSafety,
): AsyncGenerator<SseEvent> {
  const blocking = s.active.policy.mode === 'block';
  const windows = new TextWindows(s.windowChars);
  const checks: SafetyCheck[] = [];
  /**
   * The text seen so far at each place (`<output_index>:<place in the item>`), from deltas and done
   * events. block keeps the text, to check a done text whole when it differs from what the deltas said;
   * annotate (nothing held back, the text already out) keeps only how long it is.
   */
  const seen = new Map<string, string>();
  const seenLength = new Map<string, number>();
  /** Events waiting for their window's check (block mode). */
  let held: JsonObject[] = [];
  /** The Response as created (its settings), for the incomplete Response of a blocked stream. */
  let snapshot: JsonObject | undefined;
  /** Output items as the client has them so far, by output_index (block mode). */
  const released = new Map<number, JsonObject>();
  /** The output indexes whose output_item.done went out (items without a status, custom tool calls). */
  const closed = new Set<number>();
  let sequence = 0;

  /** The part of a whole text no delta or earlier event carried (block: all of it when it differs). */
  const unseen = (place: string, text: unknown): string => {
    if (typeof text !== 'string') return '';
    if (!blocking) {
      const length = seenLength.get(place) ?? 0;
      if (text.length <= length) return '';
      seenLength.set(place, text.length);
      return text.slice(length);
    }
    const before = seen.get(place) ?? '';
    if (text === before || before.startsWith(text)) return '';
    seen.set(place, text);
    return text.startsWith(before) ? text.slice(before.length) : text;
  };
  /** The completion text an event adds (its delta, or what its done texts bring unseen). */
  const textOf = (type: string, event: JsonObject): string => {
    const index = num(event.output_index);
    const delta = DELTAS[type];
    if (delta !== undefined) {
      if (typeof event.delta !== 'string') return '';
      const place = `${index}:${delta(event)}`;
      if (blocking) seen.set(place, (seen.get(place) ?? '') + event.delta);
      else seenLength.set(place, (seenLength.get(place) ?? 0) + event.delta.length);
      return event.delta;
    }
    const done = DONE_TEXTS[type];
    let text = '';
    if (done !== undefined) {
      for (const t of done(event)) text += unseen(`${index}:${t.at}`, t.text);
    } else if (TERMINAL.has(type) && isObject(event.response) && Array.isArray(event.response.output)) {
      event.response.output.forEach((item: unknown, i) => {
        for (const t of streamItemTexts(item)) text += unseen(`${i}:${t.at}`, t.text);
      });
    }
    return text;
  };

  const checkWindow = async (): Promise<SafetyCheck> => {
    const window = windows.take();
    const check = await checkCompletionText(s, window.text);
    checks.push(check);
    return check;
  };

  /** annotate: checks run beside the stream (a remote classifier's latency delays no event). */
  const running: Promise<SafetyCheck>[] = [];
  const startCheck = (): void => {
    const check = annotatedCheck(s, windows.take().text);
    // Awaited at the terminal event; until then a failure must not count as unhandled.
    check.catch(() => {});
    running.push(check);
  };

  const completionEntry = async (): Promise<ContentFilterEntry> => {
    if (checks.length === 0) await checkWindow();
    const check = combineChecks(s.active, checks);
    // check_offset: the text up to there has been fully checked (never more than what arrived).
    return contentFilterEntry(
      'completion',
      check,
      windows.checkedUpTo + windows.waiting,
      windows.checkedUpTo,
    );
  };

  const out = (event: JsonObject, name: string | undefined): SseEvent => {
    event.sequence_number = sequence++;
    track(event, released, closed);
    return { ...(name === undefined ? {} : { event: name }), data: JSON.stringify(event) };
  };

  /** The terminal event with `content_filters` on its Response. */
  const finish = async (event: JsonObject): Promise<void> => {
    const response = isObject(event.response) ? event.response : undefined;
    if (response === undefined) return;
    response.content_filters = [s.prompt, await completionEntry()];
    s.onComplete?.(response);
  };

  for await (const raw of events) {
    if (!blocking && raw.event !== undefined && !READ.has(raw.event)) {
      yield raw;
      continue;
    }
    if (!blocking && (raw.event === undefined || raw.event === 'response.output_text.delta')) {
      // Nearly every event of an annotated stream: read without parsing when its layout is the usual one.
      const d = textDelta(raw.data);
      if (d !== undefined) {
        const place = `${d.output}:c${d.content}`;
        seenLength.set(place, (seenLength.get(place) ?? 0) + d.delta.length);
        if (d.delta !== '' && windows.add(d.delta)) startCheck();
        yield raw;
        continue;
      }
    }
    const event = parse(raw);
    if (event === undefined) {
      // Not a JSON event: block cannot check it, so it ends the stream (README, "Responses"), dropping
      // what is held; annotate passes it on untouched (the upstream's problem, reported where relayed).
      if (blocking) throw unreadableEvent();
      yield raw;
      continue;
    }
    const type = typeof event.type === 'string' ? event.type : '';
    const text = textOf(type, event);

    if (!blocking) {
      if (text !== '' && windows.add(text)) startCheck();
      if (!TERMINAL.has(type)) {
        yield raw;
        continue;
      }
      // An empty completion is checked too: its entry reports a check, not nothing.
      if (windows.waiting > 0 || (running.length === 0 && checks.length === 0)) startCheck();
      checks.push(...(await Promise.all(running)));
      running.length = 0;
      await finish(event);
      yield { ...(raw.event === undefined ? {} : { event: raw.event }), data: JSON.stringify(event) };
      continue;
    }

    if (type === 'response.created' || type === 'response.in_progress') {
      if (isObject(event.response)) snapshot = event.response;
    }
    if (DELTAS[type] !== undefined) {
      if (text === '') {
        if (held.length === 0) {
          yield out(event, raw.event);
          continue;
        }
        held.push(event);
        continue;
      }
      // A delta longer than the window has room for goes out as several deltas carrying consecutive
      // parts of its text, each released once its window passed (no window exceeds MAX_WINDOW).
      let blocked = false;
      for (const piece of cutDelta(event, text, windows.room)) {
        held.push(piece.event);
        // A window is checked once it is full; the rest waits for more text or for the next other event.
        if (!windows.add(piece.text)) continue;
        if (yield* checkAndRelease()) {
          blocked = true;
          break;
        }
      }
      if (blocked) return;
      continue;
    }
    // Text only this event carries is checked (in windows no longer than MAX_WINDOW) before it goes out.
    for (let from = 0; from < text.length; ) {
      const to = Math.min(text.length, from + windows.room);
      windows.add(text.slice(from, to));
      from = to;
      if (from < text.length && (yield* checkHeld())) return;
    }
    if (held.length === 0 && windows.waiting === 0) {
      if (TERMINAL.has(type)) await finish(event);
      yield out(event, raw.event);
      continue;
    }
    // Whatever follows unchecked text (its done events repeat it whole) waits for its check.
    held.push(event);
    if (yield* checkAndRelease()) return;
  }
  // The upstream ended with text still unchecked and no terminal event after it (a cut stream): what
  // passes its check is released; the stream's end is reported where it is relayed.
  if (held.length > 0) yield* checkAndRelease();

  /**
   * Checks the waiting text; flagged, the stream ends blocked (true): the upstream stops, the open items
   * are closed with what was released, and nothing held goes out.
   */
  async function* checkHeld(): AsyncGenerator<SseEvent, boolean> {
    const check = windows.waiting > 0 ? await checkWindow() : undefined;
    if (!check?.blocked) return false;
    s.abort();
    held = [];
    for (const e of closeOpenItems(released, closed)) yield out(e, String(e.type));
    yield out(await blockedEnd(), 'response.incomplete');
    return true;
  }

  /** checkHeld, then, when the text passed, the held events go out. */
  async function* checkAndRelease(): AsyncGenerator<SseEvent, boolean> {
    if (yield* checkHeld()) return true;
    const release = held;
    held = [];
    for (const e of release) {
      if (TERMINAL.has(String(e.type))) await finish(e);
      yield out(e, String(e.type));
    }
    return false;
  }

  /** The response.incomplete event of a blocked stream: what was released, the filters' verdict. */
  async function blockedEnd(): Promise<JsonObject> {
    const response: JsonObject = { ...(snapshot ?? { object: 'response' }) };
    const output = [...released.entries()].sort((a, b) => a[0] - b[0]).map(([, item]) => item);
    blockResponse(response, output);
    response.content_filters = [s.prompt, await completionEntry()];
    s.onComplete?.(response);
    return { type: 'response.incomplete', response };
  }
}

/**
 * An annotated stream's window check. The text already went out, so a classifier that cannot run gives
 * the error result (reported in `content_filters`) instead of failing a stream that was answered.
 */
async function annotatedCheck(s: StreamSafety, text: string): Promise<SafetyCheck> {
  const started = performance.now();
  try {
    return await checkCompletionText(s, text);
  } catch (err) {
    const cause = err instanceof GantryError ? err.cause : err;
    if (!(cause instanceof ClassifierUnavailable)) throw err;
    const check: SafetyCheck = {
      results: unavailableResults(cause.message),
      flagged: [],
      blocked: false,
      findings: undefined,
    };
    const seconds = (performance.now() - started) / 1000;
    recordCheck(s.metrics, s.outcome, 'responses', 'completion', s.active.classifier.name, check, seconds);
    return check;
  }
}

/**
 * The done events of the items still open when a blocked stream stops, as OpenAI closes the items of an
 * incomplete Response: each ends `incomplete` with the text the client was given.
 */
function closeOpenItems(
  released: ReadonlyMap<number, JsonObject>,
  closed: ReadonlySet<number>,
): JsonObject[] {
  const events: JsonObject[] = [];
  for (const [index, item] of [...released.entries()].sort((a, b) => a[0] - b[0])) {
    // A custom tool call has no status: it is open until its output_item.done went out.
    if (item.status === undefined ? closed.has(index) : item.status !== 'in_progress') continue;
    const at = { item_id: item.id, output_index: index };
    if (item.type === 'message' && Array.isArray(item.content)) {
      item.content.forEach((part: unknown, contentIndex) => {
        if (!isObject(part)) return;
        const where = { ...at, content_index: contentIndex };
        if (part.type === 'output_text') {
          events.push({ type: 'response.output_text.done', ...where, text: part.text, logprobs: [] });
        } else if (part.type === 'refusal') {
          events.push({ type: 'response.refusal.done', ...where, refusal: part.refusal });
        } else {
          return;
        }
        events.push({ type: 'response.content_part.done', ...where, part });
      });
    } else if (item.type === 'function_call') {
      events.push({
        type: 'response.function_call_arguments.done',
        ...at,
        ...(typeof item.name === 'string' ? { name: item.name } : {}),
        arguments: typeof item.arguments === 'string' ? item.arguments : '',
      });
    } else if (item.type === 'custom_tool_call' && typeof item.input === 'string') {
      events.push({ type: 'response.custom_tool_call_input.done', ...at, input: item.input });
    } else if (item.type === 'mcp_call' && typeof item.arguments === 'string') {
      events.push({ type: 'response.mcp_call_arguments.done', ...at, arguments: item.arguments });
    }
    events.push({
      type: 'response.output_item.done',
      output_index: index,
      item: item.status === undefined ? item : { ...item, status: 'incomplete' },
    });
  }
  return events;
}

/** Keeps `released` as the client's view of the output items (what the SDKs accumulate). */
function track(event: JsonObject, released: Map<number, JsonObject>, closed: Set<number>): void {
  const index = typeof event.output_index === 'number' ? event.output_index : undefined;
  if (index === undefined) return;
  switch (event.type) {
    case 'response.output_item.done':
      closed.add(index);
      if (isObject(event.item)) released.set(index, structuredClone(event.item));
      return;
    case 'response.output_item.added':
      if (isObject(event.item)) released.set(index, structuredClone(event.item));
      return;
    case 'response.content_part.added': {
      const item = released.get(index);
      if (item && Array.isArray(item.content) && isObject(event.part)) {
        item.content[Number(event.content_index ?? 0)] = structuredClone(event.part);
      }
      return;
    }
    case 'response.output_text.delta':
    case 'response.reasoning_text.delta':
    case 'response.refusal.delta': {
      const item = released.get(index);
      const part =
        item && Array.isArray(item.content) ? item.content[Number(event.content_index ?? 0)] : undefined;
      if (!isObject(part)) return;
      if (part.type === 'refusal' && typeof part.refusal === 'string') part.refusal += String(event.delta);
      else if (typeof part.text === 'string') part.text += String(event.delta);
      return;
    }
    case 'response.reasoning_summary_part.added': {
      const item = released.get(index);
      if (item && Array.isArray(item.summary) && isObject(event.part)) {
        item.summary[Number(event.summary_index ?? 0)] = structuredClone(event.part);
      }
      return;
    }
    case 'response.reasoning_summary_text.delta': {
      const item = released.get(index);
      const part =
        item && Array.isArray(item.summary) ? item.summary[Number(event.summary_index ?? 0)] : undefined;
      if (isObject(part) && typeof part.text === 'string') part.text += String(event.delta);
      return;
    }
    case 'response.function_call_arguments.delta':
    case 'response.mcp_call_arguments.delta': {
      // An item announced without its arguments member gets them from the deltas, so the done event
      // that closes it (closeOpenItems) carries what was released.
      const item = released.get(index);
      if (item)
        item.arguments = (typeof item.arguments === 'string' ? item.arguments : '') + String(event.delta);
      return;
    }
    case 'response.custom_tool_call_input.delta': {
      const item = released.get(index);
      if (item) item.input = (typeof item.input === 'string' ? item.input : '') + String(event.delta);
      return;
    }
    default:
      return;
  }
}

/**
 * A whole `response.output_text.delta` event in the layout OpenAI and Gantry's bridge
 * (responses/stream.ts) write it, members in that order and nothing else (OpenAI's optional
 * `obfuscation` padding aside): matched from end to end, so what it reads is what JSON.parse would.
 */
const TEXT_DELTA =
  // biome-ignore lint/suspicious/noControlCharactersInRegex: a JSON string cannot hold them raw
  /^\{"type":"response\.output_text\.delta","sequence_number":\d{1,15},"item_id":"[^"\\\u0000-\u001f]*","output_index":(\d{1,9}),"content_index":(\d{1,9}),"delta":"((?:[^"\\\u0000-\u001f]|\\.)*)","logprobs":\[\](?:,"obfuscation":"[^"\\\u0000-\u001f]*")?\}$/;

/** The output index, content index and text of an output_text delta (TEXT_DELTA); undefined otherwise. */
export function textDelta(data: string): { output: number; content: number; delta: string } | undefined {
  const m = TEXT_DELTA.exec(data);
  if (m === null) return undefined;
  const literal = m[3] as string;
  let delta = literal;
  if (literal.indexOf('\\') !== -1) {
    try {
      delta = JSON.parse(`"${literal}"`) as string;
    } catch {
      return undefined;
    }
  }
  return { output: Number(m[1]), content: Number(m[2]), delta };
}

/**
 * A delta event as the deltas that carry its text in consecutive parts: the first at most `room`
 * characters, the others at most MAX_WINDOW (each part's window is then full). Logprobs stay on the last.
 */
function cutDelta(event: JsonObject, text: string, room: number): Array<{ event: JsonObject; text: string }> {
  if (text.length <= room) return [{ event, text }];
  const pieces: Array<{ event: JsonObject; text: string }> = [];
  for (let from = 0, size = room; from < text.length; from += size, size = MAX_WINDOW) {
    const part = text.slice(from, from + size);
    const last = from + size >= text.length;
    const piece: JsonObject = { ...event, delta: part };
    if (!last && Array.isArray(event.logprobs)) piece.logprobs = [];
    pieces.push({ event: piece, text: part });
  }
  return pieces;
}

/** The error a block-mode stream ends with at an event it cannot read (so cannot check). */
function unreadableEvent(): GantryError {
  return new GantryError('UPSTREAM_ERROR', { message: 'The model provider sent an invalid response' });
}

function num(value: unknown): number {
  return typeof value === 'number' ? value : 0;
}

function one(at: string, text: unknown): Array<{ at: string; text: string }> {
  return typeof text === 'string' ? [{ at, text }] : [];
}

function parse(event: SseEvent): JsonObject | undefined {
  try {
    const value: unknown = JSON.parse(event.data);
    return isObject(value) ? value : undefined;
  } catch {
    return undefined;
  }
}

function isObject(value: unknown): value is JsonObject {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}
