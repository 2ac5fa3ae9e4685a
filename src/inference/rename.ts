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
 * Stream chunks are rewritten as text, not parsed: upstreams serialise `"model":"name"` compactly, and a
 * chunk that spells it otherwise keeps the upstream name, which is harmless.
 */
export function renameModelInEvent(upstream: string, requested: string): (event: SseEvent) => SseEvent {
  const from = `"model":${JSON.stringify(upstream)}`;
  const to = `"model":${JSON.stringify(requested)}`;
  return (event) => (event.data.includes(from) ? { ...event, data: event.data.replace(from, to) } : event);
}
