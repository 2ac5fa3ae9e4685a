import type { JsonObject, SseEvent } from '../../providers/types.js';

/** The client sees the model name it asked for, not the upstream's internal one. */
export function renameModel(body: JsonObject, requested: string): JsonObject {
  if (typeof body.model === 'string' && body.model !== requested) body.model = requested;
  return body;
}

/** A JSON answer as the upstream's own text, sent as it is (fast path and fastify alike). */
export class JsonText {
  constructor(readonly text: string) {}
}

/**
 * The answer for a JSON result: the upstream's own bytes when they already name the model the client
 * asked for (nothing to change: no re-serialising, and the client gets exactly what the upstream said),
 * otherwise the parsed body with the model renamed.
 */
export function jsonAnswer(
  result: { body: JsonObject; text?: string },
  requested: string,
): JsonObject | JsonText {
  const model = result.body.model;
  if (result.text !== undefined && (typeof model !== 'string' || model === requested)) {
    return new JsonText(result.text);
  }
  return renameModel(result.body, requested);
}

/**
 * Stream chunks are rewritten as text, not parsed: `"model":"name"` as upstreams serialise it, compactly
 * or (Python's json.dumps) with a space after the colon.
 */
export function renameModelInEvent(upstream: string, requested: string): (event: SseEvent) => SseEvent {
  const name = JSON.stringify(upstream);
  const compact = `"model":${name}`;
  const to = `"model":${JSON.stringify(requested)}`;
  const spaced = new RegExp(`"model"\\s*:\\s*${escapeRegExp(name)}`);
  return (event) => {
    const data = event.data;
    if (data.includes(compact)) return { ...event, data: data.replace(compact, () => to) };
    return spaced.test(data) ? { ...event, data: data.replace(spaced, () => to) } : event;
  };
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
