import { translateRequest } from './anthropic/request.js';
import { fromAnthropicMessage } from './anthropic/response.js';
import { AnthropicStreamTranslator } from './anthropic/stream.js';
import { requireEventStream, UpstreamClient } from './http.js';
import { ProviderRequestError } from './request-error.js';
import { parseSse } from './sse.js';
import type {
  CallContext,
  InferenceProvider,
  JsonObject,
  ProviderConfig,
  ProviderResult,
  SseEvent,
} from './types.js';

export const ANTHROPIC_DEFAULT_BASE_URL = 'https://api.anthropic.com';
export const ANTHROPIC_DEFAULT_VERSION = '2023-06-01';
export const ANTHROPIC_MESSAGES_PATH = '/v1/messages';

/**
 * Anthropic's Messages API behind OpenAI chat completions. The request, the response and every stream
 * event are translated (anthropic/request.ts, response.ts, stream.ts: tools, structured output, images,
 * thinking and cache usage included); what Anthropic cannot honour is refused with a 400
 * before any network call. No embeddings, no native Responses (Gantry bridges those onto chat), and no
 * `forward`: the other OpenAI endpoints do not exist here.
 */
export class AnthropicProvider implements InferenceProvider {
  readonly kind = 'anthropic';
  readonly name: string;
  private readonly client: UpstreamClient;
  private readonly headers: Record<string, string>;

  constructor(config: ProviderConfig) {
    this.name = config.name;
    this.client = new UpstreamClient(
      config.name,
      messagesBaseUrl(config.baseUrl ?? ANTHROPIC_DEFAULT_BASE_URL),
      config.timeouts,
      config.maxConnections,
    );
    this.headers = {
      'content-type': 'application/json',
      'anthropic-version': ANTHROPIC_DEFAULT_VERSION,
      ...(config.apiKey ? { 'x-api-key': config.apiKey } : {}),
      // Lower-cased so that a configured `Anthropic-Version` replaces the default instead of doubling it.
      ...lowerCaseKeys(config.headers),
    };
  }

  async chat(body: JsonObject, ctx: CallContext): Promise<ProviderResult> {
    const { request, jsonTool } = translateRequest(body);
    const model = request.model;
    const payload = JSON.stringify(request);
    if (request.stream !== true) {
      const { value: json } = await this.client.requestJson(
        'POST',
        ANTHROPIC_MESSAGES_PATH,
        this.headers,
        payload,
        ctx.cancel ?? ctx.signal,
      );
      return { kind: 'json', body: fromAnthropicMessage(json, { provider: this.name, model, jsonTool }) };
    }
    const res = await this.client.request(
      'POST',
      ANTHROPIC_MESSAGES_PATH,
      this.headers,
      payload,
      ctx.cancel ?? ctx.signal,
    );
    await requireEventStream(res, this.name);
    const translator = new AnthropicStreamTranslator({
      provider: this.name,
      model,
      jsonTool,
      includeUsage: includeUsage(body),
    });
    return { kind: 'stream', events: translate(parseSse(res.body), translator) };
  }

  async embeddings(_body: JsonObject, _ctx: CallContext): Promise<ProviderResult> {
    throw new ProviderRequestError('not_supported', 'Embeddings are not available from this model provider');
  }

  close(): Promise<void> {
    return this.client.close();
  }
}

/** Ends at message_stop, without waiting for the upstream to close the body. */
async function* translate(
  events: AsyncIterable<SseEvent>,
  translator: AnthropicStreamTranslator,
): AsyncGenerator<SseEvent> {
  for await (const event of events) {
    yield* translator.push(event);
    if (translator.done) return;
  }
  translator.end();
}

function includeUsage(body: JsonObject): boolean {
  const options = body.stream_options;
  return options !== null && typeof options === 'object' && (options as JsonObject).include_usage === true;
}

/** The paths are `/v1/...`: a base URL configured with a trailing `/v1` must not double it. */
function messagesBaseUrl(baseUrl: string): string {
  return baseUrl.replace(/\/+$/, '').replace(/\/v1$/, '');
}

function lowerCaseKeys(headers: Record<string, string>): Record<string, string> {
  return Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toLowerCase(), v]));
}
