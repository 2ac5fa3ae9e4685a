import type { JsonObject, SseEvent } from '../../providers/types.js';

/** The client sees the model name it asked for, not the upstream's internal one. */
export function renameModel(body: JsonObject, requested: string): JsonObject {
  if (typeof body.model === 'string' && body.model !== requested) body.model = requested;
  return body;
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
