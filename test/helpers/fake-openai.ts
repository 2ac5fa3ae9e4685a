/**
 * A fake OpenAI-compatible upstream (standing in for OpenAI, vLLM, llama.cpp server...): a real
 * node:http server on 127.0.0.1 that speaks the OpenAI wire format, records every request, and can be
 * scripted per request to fail in the ways real upstreams do (error statuses, slow headers, stalls,
 * cut streams, garbage, in-stream error events).
 *
 * Replies are derived from the request: the assistant says `fakeReply(last user text)`, so tests can
 * assert on what came back. Streams are cut into one piece per word (see `replyPieces`).
 */
import type {
  FakeServerControls,
  JsonObject,
  Pacing,
  RecordedExchange,
  Exchange as ServerExchange,
} from './fake-server.js';
import { isObject, sendJson, sleep, startRecordingServer, writePaced } from './fake-server.js';

export type { JsonObject } from './fake-server.js';

/** How the fake answers one request. Everything is optional: `{}` is a normal, successful answer. */
export interface FakeBehavior {
  /** Answer with this HTTP status and an OpenAI error body (`{"error": {...}}`) instead. */
  status?: number;
  /** Overrides of the error body's fields (defaults depend on the status). */
  error?: { message?: string; type?: string; code?: string | null; param?: string | null };
  /** Raw error body text, replacing the JSON one (e.g. an HTML page from a proxy). */
  errorBody?: string;
  /** Retry-After header value; 429 answers send `1` unless this says otherwise. */
  retryAfter?: string;
  /** Wait this long before sending the response headers. */
  delayHeadersMs?: number;
  /** Wait this long before each stream event (and between the parts of a JSON body). */
  delayBetweenChunksMs?: number;
  /** Send N stream events (or, without streaming, part of the JSON body when N > 0), then go silent until the client leaves. */
  stallAfterChunks?: number;
  /** Send N stream events (or part of the JSON body), then destroy the socket: no `[DONE]`, no terminal event. */
  closeAfterChunks?: number;
  /** Send garbage that is not valid JSON: a broken event after the first one in a stream, a broken JSON body otherwise. */
  malformed?: boolean;
  /** Destroy the socket after reading the request, before any response. */
  hangUp?: boolean;
  /**
   * Stream an error event after `afterChunks` events and end the stream there. Chat: the vLLM framing
   * `data: {"error": {"object": "error", "message", "type", "param": null, "code": 500}}` (code is an
   * HTTP status number unless given). Responses: OpenAI's `event: error` with a ResponseErrorEvent.
   */
  errorEvent?: { afterChunks?: number; message?: string; type?: string; code?: number | string | null };
  /** The assistant's text, instead of `fakeReply(last user text)`. */
  reply?: string;
  /**
   * Chat only: the assistant's text in exactly these streamed pieces (their concatenation is the reply),
   * e.g. to cut a stream in the middle of a word.
   */
  pieces?: string[];
  /** Chat only: answer with one function tool call instead of text. */
  toolCall?: { name: string; arguments: string };
  /**
   * Chat only: answer with these function tool calls (parallel) instead of text. Streamed in OpenAI's
   * chunk form: a call's first delta carries index, id, type, name and `arguments: ''`, then its
   * arguments come in three pieces (`{index, function: {arguments}}`), one call after the other.
   */
  toolCalls?: Array<{ name: string; arguments: string }>;
  /**
   * Chat only: the model's reasoning, sent as `reasoning_content` (the field vLLM and DeepSeek use) on
   * the message, or streamed one word per delta before the answer.
   */
  reasoning?: string;
  /**
   * Chat only: the model refuses, saying this in `message.refusal`, streamed one word per `delta.refusal`.
   * Content is null, unless `reply` or `pieces` give text too: then the text comes first, as OpenAI
   * orders the message's fields.
   */
  refusal?: string;
  /** Replace the response's Content-Type header (e.g. `application/json` for a stream request). */
  contentType?: string;
  /**
   * Chat and Responses, not streamed: answer 200 with exactly this body, for shapes the fake does not
   * build (custom tool calls, content parts, audio, MCP calls...).
   */
  json?: JsonObject;
}

export type RecordedRequest = RecordedExchange<FakeBehavior>;

export interface FakeOpenAIOptions {
  /** The ids GET /v1/models lists. */
  models?: string[];
  /** Required `Authorization: Bearer` key; requests without it get 401. */
  apiKey?: string;
  /** Native size of embedding vectors when the request gives no `dimensions`. */
  embeddingDimensions?: number;
  /** The behaviour used when the queue is empty. */
  behavior?: FakeBehavior;
}

/**
 * What the fake's native Responses API keeps: every response it made with store not false, by id, and
 * its input items. POST with an unknown previous_response_id answers OpenAI's 404
 * previous_response_not_found; GET/DELETE /v1/responses/{id} and GET …/input_items serve this map.
 */
export type FakeResponseStore = Map<string, { response: JsonObject; inputItems: JsonObject[] }>;

export interface FakeOpenAI extends FakeServerControls<FakeBehavior> {
  /** The responses its native Responses API keeps (see FakeResponseStore). */
  storedResponses: FakeResponseStore;
  /** Base URL including `/v1`, e.g. `http://127.0.0.1:PORT/v1`. */
  url: string;
  /** `http://127.0.0.1:PORT` */
  origin: string;
  port: number;
}

/** What the fake assistant answers to `userText`. */
export function fakeReply(userText: string): string {
  return userText.trim() === '' ? 'Hello from the fake upstream.' : `You said: ${userText}`;
}

/** How the fake cuts text into streamed pieces (one per word, with its leading whitespace). */
export function replyPieces(text: string): string[] {
  return text.match(/\s*\S+/g) ?? (text === '' ? [] : [text]);
}

/** The fake's token count: whitespace-separated words. */
export function countWords(text: string): number {
  return text.split(/\s+/).filter((w) => w !== '').length;
}

/** The unit-length vector the fake returns for `input` (text or token ids), cut to `dimensions`. */
export function fakeEmbedding(input: string | number[], dimensions: number): number[] {
  const seedText = typeof input === 'string' ? input : input.join(',');
  let state = 2166136261;
  for (let i = 0; i < seedText.length; i++) state = Math.imul(state ^ seedText.charCodeAt(i), 16777619) >>> 0;
  const raw: number[] = [];
  for (let i = 0; i < dimensions; i++) {
    // xorshift32
    state ^= state << 13;
    state >>>= 0;
    state ^= state >>> 17;
    state ^= state << 5;
    state >>>= 0;
    raw.push(state / 0xffffffff - 0.5);
  }
  const norm = Math.hypot(...raw) || 1;
  // Round through float32 so base64 and float encodings carry the same numbers.
  return raw.map((v) => Math.fround(v / norm));
}

/** Little-endian float32 bytes, base64: OpenAI's `encoding_format: base64`. */
export function encodeFloat32Base64(vector: number[]): string {
  const buf = Buffer.alloc(vector.length * 4);
  vector.forEach((v, i) => {
    buf.writeFloatLE(v, i * 4);
  });
  return buf.toString('base64');
}

export async function startFakeOpenAI(options: FakeOpenAIOptions = {}): Promise<FakeOpenAI> {
  const models = options.models ?? ['fake-model', 'fake-embedding'];
  const nativeDimensions = options.embeddingDimensions ?? 16;
  const storedResponses: FakeResponseStore = new Map();
  async function handle(ctx: Exchange): Promise<void> {
    const { req, behavior, body, rawBody } = ctx;
    if (behavior.hangUp) {
      ctx.cut();
      return;
    }
    if (behavior.delayHeadersMs) {
      await sleep(behavior.delayHeadersMs, ctx.gone);
      if (ctx.gone.aborted) return;
    }
    if (options.apiKey !== undefined && req.headers.authorization !== `Bearer ${options.apiKey}`) {
      sendError(ctx, 401, {});
      return;
    }
    if (behavior.status !== undefined && behavior.status >= 400) {
      sendError(ctx, behavior.status, behavior.error ?? {});
      return;
    }

    const url = new URL(req.url ?? '/', 'http://fake');
    const route = `${req.method} ${url.pathname}`;
    if (route === 'POST /v1/chat/completions') return chatCompletions(ctx);
    if (route === 'POST /v1/embeddings') return embeddings(ctx);
    if (route === 'POST /v1/responses') return responses(ctx);
    const storedMatch = /^\/v1\/responses\/([^/]+)(\/input_items)?$/.exec(url.pathname);
    if (storedMatch && (req.method === 'GET' || req.method === 'DELETE')) {
      return storedResponse(ctx, decodeURIComponent(storedMatch[1] ?? ''), storedMatch[2] !== undefined);
    }
    if (route === 'GET /v1/models') {
      return sendBody(ctx, 200, { object: 'list', data: models.map(modelObject) });
    }
    const modelMatch = /^\/v1\/models\/(.+)$/.exec(url.pathname);
    if (req.method === 'GET' && modelMatch) {
      const modelId = decodeURIComponent(modelMatch[1] ?? '');
      if (!models.includes(modelId)) {
        return sendError(ctx, 404, {
          message: `The model '${modelId}' does not exist`,
          code: 'model_not_found',
          param: 'model',
        });
      }
      return sendBody(ctx, 200, modelObject(modelId));
    }
    // Anything else: echo, so tests can check what was forwarded.
    const contentType = String(req.headers['content-type'] ?? '');
    return sendBody(ctx, 200, {
      echo: true,
      method: req.method,
      path: req.url,
      headers: req.headers,
      body: body ?? (contentType.startsWith('text/') ? rawBody.toString('utf8') : undefined),
      bodyBase64: body === undefined && rawBody.length > 0 ? rawBody.toString('base64') : undefined,
    });
  }

  function modelObject(id: string): JsonObject {
    return { id, object: 'model', created: 1_700_000_000, owned_by: 'fake' };
  }

  // ---- chat completions ----

  async function chatCompletions(ctx: Exchange): Promise<void> {
    const body = ctx.body;
    if (!body || typeof body.model !== 'string') {
      return sendError(ctx, 400, { message: 'you must provide a model parameter', param: 'model' });
    }
    if (!Array.isArray(body.messages) || body.messages.length === 0) {
      return sendError(ctx, 400, {
        message: "'messages' must contain at least one message",
        param: 'messages',
      });
    }
    if (ctx.behavior.json !== undefined && body.stream !== true) return sendBody(ctx, 200, ctx.behavior.json);
    const messages: unknown[] = body.messages;
    const model = body.model;
    const id = `chatcmpl-fake${ctx.id}`;
    const created = Math.floor(Date.now() / 1000);
    const b = ctx.behavior;
    // vLLM's continuation (its chat completion extra parameters): the final assistant message is left
    // open and the model goes on with it; the answer holds only the new text. The two flags exclude
    // each other.
    const continued = body.continue_final_message === true ? finalAssistantText(messages) : undefined;
    if (body.continue_final_message === true && body.add_generation_prompt !== false) {
      return sendError(ctx, 400, {
        message: 'Cannot set both `continue_final_message` and `add_generation_prompt` to True.',
      });
    }
    if (body.continue_final_message === true && continued === undefined) {
      return sendError(ctx, 400, {
        message: 'continue_final_message needs a final assistant message to continue',
        param: 'messages',
      });
    }
    const refusal = b.refusal;
    const refusalOnly = refusal !== undefined && b.reply === undefined && b.pieces === undefined;
    const whole = refusalOnly
      ? ''
      : (b.reply ?? (b.pieces ? b.pieces.join('') : fakeReply(lastChatUserText(messages))));
    // The fake's model goes on where the prefill stops when the prefill is the start of its answer.
    const text =
      continued !== undefined && whole.startsWith(continued) ? whole.slice(continued.length) : whole;
    const limit = firstInteger(body.max_completion_tokens, body.max_tokens);
    const allPieces = b.pieces && continued === undefined ? b.pieces : replyPieces(text);
    const pieces = limit === undefined ? allPieces : allPieces.slice(0, limit);
    const calls = b.toolCalls ?? (b.toolCall ? [b.toolCall] : []);
    const reasoning = b.reasoning;
    const finishReason =
      calls.length > 0 ? 'tool_calls' : pieces.length < allPieces.length ? 'length' : 'stop';
    const promptTokens = messages.reduce<number>((n, m) => n + countWords(messageText(m)), 0);
    const completionTokens =
      (calls.length > 0
        ? calls.reduce<number>((n, c) => n + countWords(c.arguments) + 1, 0)
        : pieces.length) +
      (reasoning === undefined ? 0 : countWords(reasoning)) +
      (refusal === undefined ? 0 : countWords(refusal));
    const usage = {
      prompt_tokens: promptTokens,
      completion_tokens: completionTokens,
      total_tokens: promptTokens + completionTokens,
      prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 },
      completion_tokens_details: {
        reasoning_tokens: reasoning === undefined ? 0 : countWords(reasoning),
        audio_tokens: 0,
        accepted_prediction_tokens: 0,
        rejected_prediction_tokens: 0,
      },
    };
    // The first call keeps the id the fake has always given its one call; the next ones are numbered.
    const toolCallId = (i: number) => `call_fake${ctx.id}${i === 0 ? '' : `_${i}`}`;

    if (body.stream !== true) {
      const message: JsonObject =
        calls.length > 0
          ? {
              role: 'assistant',
              content: null,
              refusal: null,
              annotations: [],
              tool_calls: calls.map((call, i) => ({
                id: toolCallId(i),
                type: 'function',
                function: { name: call.name, arguments: call.arguments },
              })),
            }
          : {
              role: 'assistant',
              content: refusalOnly ? null : pieces.join(''),
              refusal: refusal ?? null,
              annotations: [],
            };
      if (reasoning !== undefined) message.reasoning_content = reasoning;
      return sendBody(ctx, 200, {
        id,
        object: 'chat.completion',
        created,
        model,
        choices: [{ index: 0, message, logprobs: null, finish_reason: finishReason }],
        usage,
        service_tier: 'default',
        system_fingerprint: 'fp_fake',
      });
    }

    const includeUsage = isObject(body.stream_options) && body.stream_options.include_usage === true;
    const chunk = (choices: JsonObject[], extra: JsonObject = {}): string =>
      `data: ${JSON.stringify({
        id,
        object: 'chat.completion.chunk',
        created,
        model,
        service_tier: 'default',
        system_fingerprint: 'fp_fake',
        choices,
        ...(includeUsage ? { usage: null } : {}),
        ...extra,
      })}\n\n`;
    const choice = (delta: JsonObject, finish: string | null = null): JsonObject => ({
      index: 0,
      delta,
      logprobs: null,
      finish_reason: finish,
    });

    const frames: string[] = [];
    const roleDelta: JsonObject = {
      role: 'assistant',
      content: calls.length > 0 || refusalOnly ? null : '',
      refusal: null,
    };
    let roleSent = false;
    if (reasoning !== undefined) {
      frames.push(chunk([choice(roleDelta)]));
      roleSent = true;
      for (const piece of replyPieces(reasoning)) frames.push(chunk([choice({ reasoning_content: piece })]));
    }
    if (calls.length > 0) {
      calls.forEach((call, i) => {
        const first = {
          tool_calls: [
            { index: i, id: toolCallId(i), type: 'function', function: { name: call.name, arguments: '' } },
          ],
        };
        // OpenAI's first chunk: role, content null, the first call's opening delta, refusal null.
        frames.push(
          chunk([choice(roleSent ? first : { role: 'assistant', content: null, ...first, refusal: null })]),
        );
        roleSent = true;
        for (const piece of splitInto(call.arguments, 3)) {
          frames.push(chunk([choice({ tool_calls: [{ index: i, function: { arguments: piece } }] })]));
        }
      });
    } else {
      if (!roleSent) frames.push(chunk([choice(roleDelta)]));
      for (const piece of pieces) frames.push(chunk([choice({ content: piece })]));
      for (const piece of replyPieces(refusal ?? '')) frames.push(chunk([choice({ refusal: piece })]));
    }
    frames.push(chunk([choice({}, finishReason)]));
    if (includeUsage) frames.push(chunk([], { usage }));
    frames.push('data: [DONE]\n\n');

    const errorEvent = ctx.behavior.errorEvent;
    const errorFrame = errorEvent
      ? `data: ${JSON.stringify({
          error: {
            object: 'error',
            message: errorEvent.message ?? 'The fake upstream failed mid-stream',
            type: errorEvent.type ?? 'InternalServerError',
            param: null,
            code: errorEvent.code === undefined ? 500 : errorEvent.code,
          },
        })}\n\n`
      : undefined;
    return sendStream(ctx, frames, errorFrame, 'data: {"id": "chatcmpl-broken", "choices": [{"delta": {\n\n');
  }

  // ---- embeddings ----

  async function embeddings(ctx: Exchange): Promise<void> {
    const body = ctx.body;
    if (!body || typeof body.model !== 'string') {
      return sendError(ctx, 400, { message: 'you must provide a model parameter', param: 'model' });
    }
    const inputs = embeddingInputs(body.input);
    if (inputs === undefined) {
      return sendError(ctx, 400, { message: "'input' is a required property", param: 'input' });
    }
    const dimensions = typeof body.dimensions === 'number' ? body.dimensions : nativeDimensions;
    if (!Number.isInteger(dimensions) || dimensions < 1) {
      return sendError(ctx, 400, { message: 'dimensions must be a positive integer', param: 'dimensions' });
    }
    const base64 = body.encoding_format === 'base64';
    const tokens = inputs.reduce<number>((n, i) => n + (typeof i === 'string' ? countWords(i) : i.length), 0);
    return sendBody(ctx, 200, {
      object: 'list',
      data: inputs.map((input, index) => {
        const vector = fakeEmbedding(input, dimensions);
        return { object: 'embedding', index, embedding: base64 ? encodeFloat32Base64(vector) : vector };
      }),
      model: body.model,
      usage: { prompt_tokens: tokens, total_tokens: tokens },
    });
  }

  // ---- responses ----

  async function responses(ctx: Exchange): Promise<void> {
    const body = ctx.body;
    if (!body || typeof body.model !== 'string') {
      return sendError(ctx, 400, { message: 'you must provide a model parameter', param: 'model' });
    }
    if (ctx.behavior.json !== undefined && body.stream !== true) return sendBody(ctx, 200, ctx.behavior.json);
    const userText = responsesUserText(body.input);
    if (userText === undefined) {
      return sendError(ctx, 400, { message: "'input' is a required property", param: 'input' });
    }
    const previous = body.previous_response_id;
    if (typeof previous === 'string' && !storedResponses.has(previous)) {
      return sendError(ctx, 404, {
        message: `Previous response with id '${previous}' not found.`,
        param: 'previous_response_id',
        code: 'previous_response_not_found',
      });
    }
    const text = ctx.behavior.reply ?? fakeReply(userText);
    const limit = firstInteger(body.max_output_tokens);
    const allPieces = replyPieces(text);
    const pieces = limit === undefined ? allPieces : allPieces.slice(0, limit);
    const incomplete = pieces.length < allPieces.length;
    const finalText = pieces.join('');
    const responseId = `resp_fake${ctx.id}`;
    const itemId = `msg_fake${ctx.id}`;
    const createdAt = Math.floor(Date.now() / 1000);
    const inputTokens =
      countWords(userText) + (typeof body.instructions === 'string' ? countWords(body.instructions) : 0);

    const part = (t: string): JsonObject => ({ type: 'output_text', annotations: [], logprobs: [], text: t });
    const item = (status: string, content: JsonObject[]): JsonObject => ({
      id: itemId,
      type: 'message',
      status,
      content,
      role: 'assistant',
    });
    const responseObject = (status: string, output: JsonObject[], done: boolean): JsonObject => ({
      id: responseId,
      object: 'response',
      created_at: createdAt,
      status,
      background: false,
      completed_at: status === 'completed' ? Math.floor(Date.now() / 1000) : null,
      error: null,
      incomplete_details: status === 'incomplete' ? { reason: 'max_output_tokens' } : null,
      instructions: typeof body.instructions === 'string' ? body.instructions : null,
      max_output_tokens: limit ?? null,
      max_tool_calls: null,
      model: body.model,
      output,
      parallel_tool_calls: true,
      previous_response_id: typeof body.previous_response_id === 'string' ? body.previous_response_id : null,
      reasoning: { effort: null, summary: null },
      service_tier: 'default',
      store: body.store !== false,
      temperature: typeof body.temperature === 'number' ? body.temperature : 1,
      text: { format: { type: 'text' }, verbosity: 'medium' },
      tool_choice: 'auto',
      tools: [],
      top_logprobs: 0,
      top_p: typeof body.top_p === 'number' ? body.top_p : 1,
      truncation: 'disabled',
      metadata: isObject(body.metadata) ? body.metadata : {},
      // The spec wants usage to be an object when present, so it is left out until the response is done.
      ...(done
        ? {
            usage: {
              input_tokens: inputTokens,
              input_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 },
              output_tokens: pieces.length,
              output_tokens_details: { reasoning_tokens: 0 },
              total_tokens: inputTokens + pieces.length,
            },
          }
        : {}),
    });
    const finalStatus = incomplete ? 'incomplete' : 'completed';
    const itemStatus = incomplete ? 'incomplete' : 'completed';
    const finalItem = item(itemStatus, [part(finalText)]);
    if (body.store !== false) {
      storedResponses.set(responseId, {
        response: responseObject(finalStatus, [finalItem], true),
        inputItems: inputItemsOf(body.input, ctx.id),
      });
    }

    if (body.stream !== true) {
      return sendBody(ctx, 200, responseObject(finalStatus, [finalItem], true));
    }

    let seq = 0;
    const events: string[] = [];
    const emit = (type: string, fields: JsonObject): void => {
      events.push(`event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: seq++, ...fields })}\n\n`);
    };
    emit('response.created', { response: responseObject('in_progress', [], false) });
    emit('response.in_progress', { response: responseObject('in_progress', [], false) });
    emit('response.output_item.added', { output_index: 0, item: item('in_progress', []) });
    const where = { item_id: itemId, output_index: 0, content_index: 0 };
    emit('response.content_part.added', { ...where, part: part('') });
    for (const piece of pieces) emit('response.output_text.delta', { ...where, delta: piece, logprobs: [] });
    emit('response.output_text.done', { ...where, text: finalText, logprobs: [] });
    emit('response.content_part.done', { ...where, part: part(finalText) });
    emit('response.output_item.done', { output_index: 0, item: finalItem });
    emit(`response.${finalStatus}`, { response: responseObject(finalStatus, [finalItem], true) });

    const errorEvent = ctx.behavior.errorEvent;
    let errorFrame: string | undefined;
    if (errorEvent) {
      const errorSeq = Math.min(errorEvent.afterChunks ?? 1, events.length);
      errorFrame = `event: error\ndata: ${JSON.stringify({
        type: 'error',
        code:
          errorEvent.code === undefined
            ? 'server_error'
            : errorEvent.code === null
              ? null
              : String(errorEvent.code),
        message: errorEvent.message ?? 'The fake upstream failed mid-stream',
        param: null,
        sequence_number: errorSeq,
      })}\n\n`;
    }
    return sendStream(
      ctx,
      events,
      errorFrame,
      'event: response.output_text.delta\ndata: {"type": "response.output_text.delta", "delta": \n\n',
    );
  }

  /** GET/DELETE /v1/responses/{id} and GET /v1/responses/{id}/input_items, as OpenAI answers them. */
  function storedResponse(ctx: Exchange, id: string, inputItems: boolean): Promise<void> | void {
    const stored = storedResponses.get(id);
    if (!stored) {
      return sendError(ctx, 404, { message: `Response with id '${id}' not found.`, param: 'response_id' });
    }
    if (inputItems) {
      const data = stored.inputItems;
      return sendBody(ctx, 200, {
        object: 'list',
        data,
        first_id: data[0]?.id ?? null,
        last_id: data[data.length - 1]?.id ?? null,
        has_more: false,
      });
    }
    if (ctx.req.method === 'DELETE') {
      storedResponses.delete(id);
      return sendBody(ctx, 200, { id, object: 'response', deleted: true });
    }
    return sendBody(ctx, 200, stored.response);
  }

  // ---- sending ----

  function sendError(ctx: Exchange, status: number, overrides: NonNullable<FakeBehavior['error']>): void {
    const headers: Record<string, string> = {};
    const retryAfter = ctx.behavior.retryAfter ?? (status === 429 ? '1' : undefined);
    if (retryAfter !== undefined) headers['retry-after'] = retryAfter;
    if (ctx.behavior.errorBody !== undefined) {
      ctx.res.writeHead(status, {
        ...headers,
        'content-type': ctx.behavior.contentType ?? 'text/html',
        'x-request-id': `req_fake${ctx.id}`,
      });
      ctx.res.end(ctx.behavior.errorBody);
      return;
    }
    sendJson(ctx.res, status, errorBody(status, overrides), {
      ...headers,
      'x-request-id': `req_fake${ctx.id}`,
    });
  }

  /** A JSON answer, honouring the chunk behaviours (stall/close/malformed) on its body. */
  async function sendBody(ctx: Exchange, status: number, value: unknown): Promise<void> {
    const b = ctx.behavior;
    let text = JSON.stringify(value);
    if (b.malformed) text = `${text.slice(0, Math.floor(text.length / 2))} <html>garbage`;
    const cutAt = b.closeAfterChunks ?? b.stallAfterChunks;
    if (cutAt === undefined && !b.delayBetweenChunksMs) {
      sendJson(ctx.res, status, text, { 'x-request-id': `req_fake${ctx.id}` }, b.contentType);
      return;
    }
    // Send the body in two parts so that chunk behaviours have something to act between.
    ctx.res.writeHead(status, {
      'content-type': b.contentType ?? 'application/json',
      'x-request-id': `req_fake${ctx.id}`,
    });
    ctx.res.flushHeaders();
    const half = Math.floor(text.length / 2);
    return writePaced(ctx, [text.slice(0, half), text.slice(half)], chunkPacing(b));
  }

  async function sendStream(
    ctx: Exchange,
    frames: string[],
    errorFrame: string | undefined,
    garbageFrame: string,
  ): Promise<void> {
    const b = ctx.behavior;
    let plan = frames;
    if (errorFrame !== undefined) {
      const at = Math.min(b.errorEvent?.afterChunks ?? 1, frames.length);
      plan = [...frames.slice(0, at), errorFrame];
    }
    if (b.malformed) plan = [...plan.slice(0, 1), garbageFrame, ...plan.slice(1)];
    ctx.res.writeHead(200, {
      'content-type': b.contentType ?? 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      'x-request-id': `req_fake${ctx.id}`,
    });
    ctx.res.flushHeaders();
    return writePaced(ctx, plan, chunkPacing(b));
  }

  const server = await startRecordingServer<FakeBehavior>(handle, {
    name: 'fake upstream',
    behavior: options.behavior ?? {},
    errorBody: (message) => errorBody(500, { message }),
  });
  return { ...server, url: `${server.origin}/v1`, storedResponses };
}

type Exchange = ServerExchange<FakeBehavior>;

function chunkPacing(b: FakeBehavior): Pacing {
  return { delayMs: b.delayBetweenChunksMs, closeAfter: b.closeAfterChunks, stallAfter: b.stallAfterChunks };
}

const ERROR_DEFAULTS: Record<number, { message: string; type: string; code: string | null }> = {
  400: { message: 'Invalid request.', type: 'invalid_request_error', code: null },
  401: {
    message:
      'Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys.',
    type: 'invalid_request_error',
    code: 'invalid_api_key',
  },
  403: { message: 'You are not allowed to use this model.', type: 'invalid_request_error', code: null },
  404: {
    message: 'The model does not exist or you do not have access to it.',
    type: 'invalid_request_error',
    code: 'model_not_found',
  },
  429: { message: 'Rate limit reached for requests.', type: 'requests', code: 'rate_limit_exceeded' },
  500: {
    message: 'The server had an error while processing your request.',
    type: 'server_error',
    code: null,
  },
  502: { message: 'Bad gateway.', type: 'server_error', code: null },
  503: {
    message: 'The engine is currently overloaded, please try again later.',
    type: 'server_error',
    code: null,
  },
};

function errorBody(status: number, overrides: NonNullable<FakeBehavior['error']>): JsonObject {
  const defaults = ERROR_DEFAULTS[status] ?? {
    message: `The fake upstream answered ${status}.`,
    type: status >= 500 ? 'server_error' : 'invalid_request_error',
    code: null,
  };
  return {
    error: {
      message: overrides.message ?? defaults.message,
      type: overrides.type ?? defaults.type,
      param: overrides.param ?? null,
      code: overrides.code === undefined ? defaults.code : overrides.code,
    },
  };
}

function firstInteger(...values: unknown[]): number | undefined {
  for (const v of values) if (typeof v === 'number' && Number.isInteger(v)) return v;
  return undefined;
}

/** Text of a chat message's content: a string, or the text parts of an array. */
function messageText(message: unknown): string {
  if (!isObject(message)) return '';
  return contentText(message.content);
}

function contentText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content
    .map((part: unknown) => (isObject(part) && typeof part.text === 'string' ? part.text : ''))
    .filter((t) => t !== '')
    .join(' ');
}

/** The text of the conversation's final message when it is the assistant's, else undefined. */
function finalAssistantText(messages: unknown[]): string | undefined {
  const last = messages.at(-1);
  return isObject(last) && last.role === 'assistant' ? contentText(last.content) : undefined;
}

function lastChatUserText(messages: unknown[]): string {
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i];
    if (isObject(m) && m.role === 'user') return contentText(m.content);
  }
  return '';
}

/** The last user text of a Responses `input` (a string or a list of items); undefined when missing. */
function responsesUserText(input: unknown): string | undefined {
  if (typeof input === 'string') return input;
  if (!Array.isArray(input)) return undefined;
  for (let i = input.length - 1; i >= 0; i--) {
    const item: unknown = input[i];
    if (isObject(item) && item.role === 'user') return contentText(item.content);
  }
  return '';
}

/** A Responses `input` as OpenAI lists it back (input_items): message items with ids, newest last. */
function inputItemsOf(input: unknown, exchangeId: number): JsonObject[] {
  const items: unknown[] =
    typeof input === 'string' ? [{ role: 'user', content: input }] : (input as unknown[]);
  return items.filter(isObject).map((item, i) => {
    const content =
      typeof item.content === 'string' ? [{ type: 'input_text', text: item.content }] : item.content;
    return {
      id: typeof item.id === 'string' ? item.id : `msg_fakein${exchangeId}_${i}`,
      type: item.type ?? 'message',
      status: 'completed',
      ...item,
      ...(item.content === undefined ? {} : { content }),
    };
  });
}

function embeddingInputs(input: unknown): (string | number[])[] | undefined {
  if (typeof input === 'string') return [input];
  if (!Array.isArray(input) || input.length === 0) return undefined;
  if (input.every((i) => typeof i === 'number')) return [input as number[]];
  const out: (string | number[])[] = [];
  for (const i of input as unknown[]) {
    if (typeof i === 'string') out.push(i);
    else if (Array.isArray(i) && i.every((t) => typeof t === 'number')) out.push(i as number[]);
    else return undefined;
  }
  return out;
}

function splitInto(text: string, parts: number): string[] {
  if (text === '') return [];
  const size = Math.ceil(text.length / parts);
  const out: string[] = [];
  for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size));
  return out;
}
