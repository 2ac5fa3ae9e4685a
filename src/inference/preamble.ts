import type { SseEvent } from '../../providers/types.js';

/**
 * Events an upstream sends before it has committed to an answer. They are held back until the first real
 * event, so an upstream that fails right after its preamble can still be replaced by the next provider.
 * Checked on the text, not parsed: this runs on the streaming hot path.
 */
export function isRoleOnlyChunk(event: SseEvent): boolean {
  const d = event.data;
  return d.includes('"role"') && !CONTENT.test(d) && !FINISHED.test(d);
}

/**
 * A chat chunk with non-empty content, and one with a finish reason, in compact JSON or with spaces
 * (Python's json.dumps). CONTENT is also the meter's first-token test (usage-capture.ts).
 */
export const CONTENT = /"content"\s*:\s*"[^"]/;
const FINISHED = /"finish_reason"\s*:\s*"/;

const RESPONSES_PREAMBLE = new Set(['response.created', 'response.in_progress']);

export function isResponsesPreamble(event: SseEvent): boolean {
  return event.event !== undefined && RESPONSES_PREAMBLE.has(event.event);
}
