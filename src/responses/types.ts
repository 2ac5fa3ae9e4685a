import type { JsonObject } from '../../providers/types.js';

/** One turn of a bridged conversation, as sent to chat completions and kept as response history. */
export interface ChatMessage {
  role: 'system' | 'developer' | 'user' | 'assistant';
  content: string;
}

/** What a bridged Response needs besides the upstream's answer. */
export interface ResponseMeta {
  /** `resp_…`, chosen by the route before the upstream call so streams and history agree on it. */
  id: string;
  /** The model name the client asked for (never the upstream's name). */
  model: string;
  /** Unix seconds. */
  createdAt: number;
  /**
   * The validated Responses request. Its instructions, temperature, top_p, max_output_tokens,
   * previous_response_id, metadata, store, user … are echoed into the Response object; apply the model's
   * defaults to it first if the echo should show the values actually used.
   */
  request: JsonObject;
}

export function isObject(value: unknown): value is JsonObject {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}
