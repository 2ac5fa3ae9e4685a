/**
 * The contract between Gantry and its inference backends. A provider takes a canonical request (the
 * OpenAI wire format, already validated, with defaults applied and `model` set to the upstream's name)
 * and returns either a JSON body or a stream of server-sent events, both in the OpenAI wire format.
 *
 * Providers signal failure by throwing UpstreamError (see upstream-error.ts); Gantry decides from it
 * whether to fall back to the next provider and which error the client sees.
 */

import type { Cancellation } from './abort.js';

export type JsonObject = Record<string, unknown>;

/** One server-sent event. `event` is absent for chat chunks, which OpenAI sends as bare `data:` lines. */
export interface SseEvent {
  event?: string;
  /** The event's data: for chat chunks and Responses events, one JSON object as text. */
  data: string;
}

export type ProviderResult =
  /**
   * `text`: the upstream's own bytes of `body`, where `body` is exactly what it sent (OpenAI-compatible
   * upstreams), so that a route with nothing to change sends them as they are.
   */
  | { kind: 'json'; body: JsonObject; text?: string }
  /**
   * Chat streams yield one `chat.completion.chunk` JSON text per event and end without `[DONE]` (the
   * route writes it). Responses streams yield `{event, data}` pairs. Iteration throws UpstreamError when
   * the upstream breaks mid-stream.
   */
  | { kind: 'stream'; events: AsyncIterable<SseEvent> };

export interface CallContext {
  /** Aborted when the client disconnects or the total timeout passes: abort the upstream call at once. */
  readonly signal: AbortSignal;
  /**
   * The same cancellation without the cost of an AbortSignal, when the caller has one: for listening
   * with onAbort() (abort.ts). Reading `signal` may make the AbortSignal; prefer this where it will do.
   */
  readonly cancel?: Cancellation;
  requestId: string;
  /**
   * The client's JSON text of the body the provider was given, when that body is the request's own,
   * unchanged (no defaults added, no model renamed): an upstream that takes the same JSON can be sent
   * these bytes instead of a new serialisation.
   */
  readonly bodyText?: string | undefined;
}

export interface InferenceProvider {
  /** The provider's name in the config, e.g. `vllm-a`. */
  readonly name: string;
  /** The adapter kind: `openai`, `anthropic`, `local`. */
  readonly kind: string;
  /** POST /v1/chat/completions. `body.stream` says which result kind is expected. */
  chat(body: JsonObject, ctx: CallContext): Promise<ProviderResult>;
  /** POST /v1/embeddings; always a JSON result. */
  embeddings(body: JsonObject, ctx: CallContext): Promise<ProviderResult>;
  /** POST /v1/responses, only where the upstream speaks it natively; otherwise Gantry bridges onto chat. */
  responses?(body: JsonObject, ctx: CallContext): Promise<ProviderResult>;
  /**
   * GET or DELETE of a response this upstream made (`/responses/{id}`, `/responses/{id}/input_items?…`),
   * its JSON answer; only where `responses` is set. Failures throw UpstreamError, as calls do.
   */
  responseResource?(method: 'GET' | 'DELETE', path: string, signal: AbortSignal): Promise<JsonObject>;
  /** Where other OpenAI endpoints (audio, images, ...) are forwarded as they are; OpenAI-compatible only. */
  readonly forward?: ForwardTarget;
  close(): Promise<void>;
}

export interface ForwardTarget {
  /** Upstream origin plus path prefix standing for `/v1`, e.g. `http://127.0.0.1:8000/v1`. */
  baseUrl: string;
  /** Headers added to every forwarded request (credentials). */
  headers: Record<string, string>;
  timeouts: ProviderTimeouts;
}

export interface ProviderTimeouts {
  connectMs: number;
  /** Until the response headers arrive. */
  firstByteMs: number;
  /** Longest silence between two body chunks. */
  idleMs: number;
  /** The whole call, stream included. */
  totalMs: number;
}

export interface ProviderConfig {
  name: string;
  kind: string;
  /** e.g. `https://api.openai.com/v1` or `https://api.anthropic.com` */
  baseUrl?: string;
  /** The credential, already read from the environment variable the config names. */
  apiKey?: string;
  timeouts: ProviderTimeouts;
  /** Upstream connections kept open per provider. */
  maxConnections: number;
  /** openai kind: the upstream serves /v1/responses itself. */
  supportsResponses: boolean;
  /** Extra headers for every upstream call (e.g. `anthropic-version`). */
  headers: Record<string, string>;
  /** local kind: native size of the built-in embedding model's vectors. */
  embeddingDimensions?: number;
  /** local kind: pause between streamed chunks, to make streams observable in demos and tests. */
  chunkDelayMs?: number;
  /** local kind: the most tokens of a chat prompt or of an embeddings request's inputs. */
  contextLength?: number;
  /** local kind: the most tokens one chat answer generates, all its choices together. */
  maxOutputTokens?: number;
  /** cog kind: run predictions asynchronously, the Cog server calling back with webhooks. */
  async?: boolean;
  /** replicate kind: poll interval of running partner predictions. */
  pollIntervalMs?: number;
  /** cog, replicate kinds: output URLs may be on loopback/private addresses (no SSRF guard on downloads). */
  allowPrivateOutputs?: boolean;
}
