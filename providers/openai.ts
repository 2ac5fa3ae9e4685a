import { requireEventStream, UpstreamClient } from './http.js';
import { SseDecoder } from './sse.js';
import type {
  CallContext,
  ForwardTarget,
  InferenceProvider,
  JsonObject,
  ProviderConfig,
  ProviderResult,
  SseEvent,
} from './types.js';
import { UpstreamError } from './upstream-error.js';

const RESPONSES_TERMINAL_EVENTS = new Set(['response.completed', 'response.failed', 'response.incomplete']);

/**
 * Any OpenAI-compatible upstream (OpenAI, vLLM, llama.cpp server, Ollama, TGI). The fast path: the body
 * goes out as Gantry received it (model renamed), and SSE events come back parsed only into frames.
 */
export class OpenAIProvider implements InferenceProvider {
  readonly kind = 'openai';
  readonly name: string;
  readonly forward: ForwardTarget;
  readonly responses?: (body: JsonObject, ctx: CallContext) => Promise<ProviderResult>;
  readonly responseResource?: (
    method: 'GET' | 'DELETE',
    path: string,
    signal: AbortSignal,
  ) => Promise<JsonObject>;
  private readonly client: UpstreamClient;
  private readonly headers: Record<string, string>;

  constructor(config: ProviderConfig) {
    if (!config.baseUrl) throw new Error(`provider ${config.name}: base_url is required`);
    this.name = config.name;
    this.client = new UpstreamClient(config.name, config.baseUrl, config.timeouts, config.maxConnections);
    const auth: Record<string, string> = config.apiKey ? { authorization: `Bearer ${config.apiKey}` } : {};
    this.headers = { 'content-type': 'application/json', ...auth, ...config.headers };
    this.forward = {
      baseUrl: config.baseUrl.replace(/\/+$/, ''),
      headers: { ...auth, ...config.headers },
      timeouts: config.timeouts,
    };
    if (config.supportsResponses) {
      this.responses = (body, ctx) => this.post('/responses', body, ctx, isResponsesEnd, ctx.bodyText);
      this.responseResource = (method, path, signal) => this.resource(method, path, signal);
    }
  }

  chat(body: JsonObject, ctx: CallContext): Promise<ProviderResult> {
    return this.post('/chat/completions', body, ctx, null, ctx.bodyText);
  }

  embeddings(body: JsonObject, ctx: CallContext): Promise<ProviderResult> {
    return this.post('/embeddings', { ...body, stream: undefined }, ctx, null);
  }

  close(): Promise<void> {
    return this.client.close();
  }

  /** GET/DELETE of a stored response: the gateway routes them to the upstream that made it. */
  private async resource(method: 'GET' | 'DELETE', path: string, signal: AbortSignal): Promise<JsonObject> {
    const { value } = await this.client.requestJson(method, path, this.headers, undefined, signal);
    if (value === null || typeof value !== 'object' || Array.isArray(value)) {
      throw new UpstreamError('protocol', this.name, `${this.name} sent a JSON body that is not an object`);
    }
    return value as JsonObject;
  }

  /**
   * `isEnd` recognises the last event of a stream with no `[DONE]` (Responses); null: chat framing.
   * `bodyText`: the client's own JSON text of `body` (CallContext), sent instead of serialising it again.
   */
  private async post(
    path: string,
    body: JsonObject,
    ctx: CallContext,
    isEnd: ((event: SseEvent) => boolean) | null,
    bodyText?: string,
  ): Promise<ProviderResult> {
    const payload = bodyText ?? JSON.stringify(body);
    if (body.stream !== true) {
      const { value: json, text } = await this.client.requestJson(
        'POST',
        path,
        this.headers,
        payload,
        ctx.cancel ?? ctx.signal,
      );
      if (json === null || typeof json !== 'object' || Array.isArray(json)) {
        throw new UpstreamError('protocol', this.name, `${this.name} sent a JSON body that is not an object`);
      }
      return { kind: 'json', body: json as JsonObject, text };
    }
    const res = await this.client.request('POST', path, this.headers, payload, ctx.cancel ?? ctx.signal);
    await requireEventStream(res, this.name);
    return { kind: 'stream', events: this.events(res.body, isEnd) };
  }

  private async *events(
    body: AsyncIterable<Uint8Array>,
    isEnd: ((event: SseEvent) => boolean) | null,
  ): AsyncGenerator<SseEvent> {
    const decoder = new SseDecoder();
    for await (const chunk of body) {
      for (const event of decoder.push(chunk)) {
        if (this.isDone(event)) return;
        yield event;
        if (isEnd?.(event)) return;
      }
    }
    for (const event of decoder.end()) {
      if (this.isDone(event)) return;
      yield event;
      if (isEnd?.(event)) return;
    }
    throw new UpstreamError('protocol', this.name, `${this.name} ended the stream before it was complete`);
  }

  /** true at `[DONE]`; throws when the event reports an error or is not one JSON object. */
  private isDone(event: SseEvent): boolean {
    const d = event.data;
    if (d === '[DONE]') return true;
    if (event.event === 'error') throw this.streamedError(d);
    // Every event is one JSON object. Checking its ends is enough to stop garbage reaching the client
    // without parsing each chunk on the hot path.
    if (d.charCodeAt(0) !== 123 || d.charCodeAt(d.length - 1) !== 125) {
      throw new UpstreamError('protocol', this.name, `${this.name} sent a malformed stream event`);
    }
    // A chunk's text holds `"error"` unescaped only as a key or as that exact value: parse just then.
    if (d.includes('"error"')) {
      const failure = this.streamedErrorIn(d);
      if (failure) throw failure;
    }
    return false;
  }

  /** vLLM and others report failures inside a chat stream as `data: {"error": {...}}`. */
  private streamedErrorIn(data: string): UpstreamError | undefined {
    let parsed: unknown;
    try {
      parsed = JSON.parse(data);
    } catch {
      return undefined;
    }
    const error = (parsed as { error?: unknown }).error;
    return error !== null && typeof error === 'object' ? this.streamedError(data) : undefined;
  }

  /**
   * Error events: vLLM's `{"error": {message, type, code: <HTTP status>}}`, or a Responses `error` event
   * `{message, code: <OpenAI code>}` whose code says the status where it is one of overload or rate limit.
   */
  private streamedError(data: string): UpstreamError {
    let message = 'upstream error';
    let status = 502;
    let code: string | undefined;
    try {
      type ErrorBody = { message?: unknown; code?: unknown };
      const parsed = JSON.parse(data) as ErrorBody & { error?: ErrorBody };
      const body: ErrorBody = parsed.error ?? parsed;
      if (typeof body.message === 'string') message = body.message;
      if (typeof body.code === 'number') status = body.code;
      else if (typeof body.code === 'string') {
        code = body.code;
        status = STATUS_OF_STREAMED_CODE[code] ?? 502;
      }
    } catch {
      // keep the generic message
    }
    return new UpstreamError('status', this.name, `${this.name} reported an error in the stream`, {
      status,
      upstreamMessage: message,
      ...(code === undefined ? {} : { code }),
    });
  }
}

/** OpenAI error codes of a stream `error` event that stand for an HTTP status (docs: "Error codes"). */
const STATUS_OF_STREAMED_CODE: Readonly<Record<string, number>> = {
  server_is_overloaded: 503,
  rate_limit_exceeded: 429,
  slow_down: 429,
};

function isResponsesEnd(event: SseEvent): boolean {
  return event.event !== undefined && RESPONSES_TERMINAL_EVENTS.has(event.event);
}
