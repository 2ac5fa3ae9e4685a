/**
 * The safety layer on a Responses event stream (README, "Safety" → "Responses"), whether the events come
 * from a chat upstream through the bridge (responses/stream.ts) or from an upstream that speaks the
 * Responses API. The completion text (output_text and function_call_arguments deltas) is checked in
 * windows (window.ts). Azure documents no event that carries content filter results in a Responses
 * stream, so the results reach the client as `content_filters` on the Response of the terminal event
 * (response.completed / response.incomplete), the same shape as a JSON answer (responses.ts).
 *
 * annotate: every event goes out as it comes; windows are checked beside the stream, and the terminal
 * event waits for their results.
 * block: from the first unchecked delta on, events wait until their window is checked; a flagged window
 * is dropped with everything held behind it, the upstream call is aborted, and the stream ends with
 * `response.incomplete` (content_filter) holding only what was released. Sequence numbers are counted
 * here, so they stay consecutive whatever is held or dropped.
 */
import type { JsonObject, SseEvent } from '../../providers/types.js';
import type { SafetyCheck } from './engine.js';
import {
  blockResponse,
  type ContentFilterEntry,
  checkCompletionText,
  combineChecks,
  contentFilterEntry,
  type ResponsesSafety,
} from './responses.js';
import { TextWindows } from './window.js';

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

const DELTAS: ReadonlySet<string> = new Set([
  'response.output_text.delta',
  'response.function_call_arguments.delta',
]);
const TERMINAL: ReadonlySet<string> = new Set([
  'response.completed',
  'response.incomplete',
  'response.failed',
]);

export async function* safeResponseEvents(
  events: AsyncIterable<SseEvent>,
  s: StreamSafety,
): AsyncGenerator<SseEvent> {
  const blocking = s.active.policy.mode === 'block';
  const windows = new TextWindows(s.windowChars);
  const checks: SafetyCheck[] = [];
  /** Events waiting for their window's check (block mode). */
  let held: JsonObject[] = [];
  /** The Response as created (its settings), for the incomplete Response of a blocked stream. */
  let snapshot: JsonObject | undefined;
  /** Output items as the client has them so far, by output_index. */
  const released = new Map<number, JsonObject>();
  let sequence = 0;
  let total = 0;

  const checkWindow = async (): Promise<SafetyCheck> => {
    const window = windows.take();
    const check = await checkCompletionText(s, window.text);
    checks.push(check);
    return check;
  };

  /** annotate: checks run beside the stream (a remote classifier's latency delays no event). */
  const running: Promise<SafetyCheck>[] = [];
  const startCheck = (): void => {
    const check = checkCompletionText(s, windows.take().text);
    // Awaited at the terminal event; until then a failure must not count as unhandled.
    check.catch(() => {});
    running.push(check);
  };

  const completionEntry = async (): Promise<ContentFilterEntry> => {
    if (checks.length === 0) await checkWindow();
    const check = combineChecks(s.active, checks);
    return contentFilterEntry('completion', check, total);
  };

  const out = (event: JsonObject, name: string | undefined): SseEvent => {
    event.sequence_number = sequence++;
    track(event, released);
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
    const event = parse(raw);
    if (event === undefined) {
      // Not a JSON event (the upstream's problem, reported where it is relayed): passed on untouched.
      yield raw;
      continue;
    }
    const type = typeof event.type === 'string' ? event.type : '';
    if (type === 'response.created' || type === 'response.in_progress') {
      if (isObject(event.response)) snapshot = event.response;
    }
    const delta = DELTAS.has(type) && typeof event.delta === 'string' ? event.delta : undefined;
    if (delta !== undefined) total += delta.length;

    if (!blocking) {
      if (TERMINAL.has(type)) {
        if (windows.waiting > 0) startCheck();
        checks.push(...(await Promise.all(running)));
        running.length = 0;
        await finish(event);
        yield out(event, raw.event);
        continue;
      }
      yield out(event, raw.event);
      if (delta !== undefined && windows.add(delta)) startCheck();
      continue;
    }

    if (delta !== undefined) {
      held.push(event);
      // A window is checked once it is full; the rest waits for more text or for the next other event.
      if (!windows.add(delta)) continue;
    } else if (held.length > 0) {
      // Whatever follows unchecked text (its done events repeat it whole) waits for its check.
      held.push(event);
    } else {
      if (TERMINAL.has(type)) await finish(event);
      yield out(event, raw.event);
      continue;
    }
    const check = windows.waiting > 0 ? await checkWindow() : undefined;
    if (check?.blocked) {
      s.abort();
      held = [];
      for (const e of closeOpenItems(released)) yield out(e, String(e.type));
      yield out(await blockedEnd(), 'response.incomplete');
      return;
    }
    for (const e of held) {
      if (TERMINAL.has(String(e.type))) await finish(e);
      yield out(e, String(e.type));
    }
    held = [];
  }
  // The upstream ended with text still unchecked and no terminal event after it (a cut stream): what
  // passes its check is released; the stream's end is reported where it is relayed.
  if (held.length > 0) {
    const check = windows.waiting > 0 ? await checkWindow() : undefined;
    if (check?.blocked) {
      s.abort();
      for (const e of closeOpenItems(released)) yield out(e, String(e.type));
      yield out(await blockedEnd(), 'response.incomplete');
      return;
    }
    for (const e of held) yield out(e, String(e.type));
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
 * The done events of the items still open when a blocked stream stops, as OpenAI closes the items of an
 * incomplete Response: each ends `incomplete` with the text the client was given.
 */
function closeOpenItems(released: ReadonlyMap<number, JsonObject>): JsonObject[] {
  const events: JsonObject[] = [];
  for (const [index, item] of [...released.entries()].sort((a, b) => a[0] - b[0])) {
    if (item.status !== 'in_progress') continue;
    const at = { item_id: item.id, output_index: index };
    if (item.type === 'message' && Array.isArray(item.content)) {
      item.content.forEach((part: unknown, contentIndex) => {
        if (!isObject(part) || part.type !== 'output_text') return;
        const where = { ...at, content_index: contentIndex };
        events.push({ type: 'response.output_text.done', ...where, text: part.text, logprobs: [] });
        events.push({ type: 'response.content_part.done', ...where, part });
      });
    } else if (item.type === 'function_call') {
      events.push({
        type: 'response.function_call_arguments.done',
        ...at,
        ...(typeof item.name === 'string' ? { name: item.name } : {}),
        arguments: item.arguments,
      });
    }
    events.push({
      type: 'response.output_item.done',
      output_index: index,
      item: { ...item, status: 'incomplete' },
    });
  }
  return events;
}

/** Keeps `released` as the client's view of the output items (what the SDKs accumulate). */
function track(event: JsonObject, released: Map<number, JsonObject>): void {
  const index = typeof event.output_index === 'number' ? event.output_index : undefined;
  if (index === undefined) return;
  switch (event.type) {
    case 'response.output_item.added':
    case 'response.output_item.done':
      if (isObject(event.item)) released.set(index, structuredClone(event.item));
      return;
    case 'response.content_part.added': {
      const item = released.get(index);
      if (item && Array.isArray(item.content) && isObject(event.part)) {
        item.content[Number(event.content_index ?? 0)] = structuredClone(event.part);
      }
      return;
    }
    case 'response.output_text.delta': {
      const item = released.get(index);
      const part =
        item && Array.isArray(item.content) ? item.content[Number(event.content_index ?? 0)] : undefined;
      if (isObject(part) && typeof part.text === 'string') part.text += String(event.delta);
      return;
    }
    case 'response.function_call_arguments.delta': {
      const item = released.get(index);
      if (item && typeof item.arguments === 'string') item.arguments += String(event.delta);
      return;
    }
    default:
      return;
  }
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
