import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { AnthropicProvider } from '../../providers/anthropic.js';
import { ProviderRequestError } from '../../providers/request-error.js';
import type {
  CallContext,
  InferenceProvider,
  JsonObject,
  ProviderConfig,
  ProviderResult,
} from '../../providers/types.js';
import { UpstreamError } from '../../providers/upstream-error.js';
import { toGantryError } from '../../src/error-handler.js';
import { anthropicFakeReply, type FakeAnthropic, startFakeAnthropic } from '../helpers/fake-anthropic.js';
import { assertOpenAISchema } from '../helpers/openapi.js';

const API_KEY = 'sk-ant-test-key';
let fake: FakeAnthropic;
let provider: AnthropicProvider;

function config(overrides: Partial<ProviderConfig> = {}): ProviderConfig {
  return {
    name: 'claude',
    kind: 'anthropic',
    baseUrl: fake.url,
    apiKey: API_KEY,
    timeouts: { connectMs: 1000, firstByteMs: 2000, idleMs: 2000, totalMs: 10_000 },
    maxConnections: 4,
    supportsResponses: false,
    headers: {},
    ...overrides,
  };
}

function ctx(signal: AbortSignal = new AbortController().signal): CallContext {
  return { signal, requestId: 'req-test' };
}

beforeAll(async () => {
  fake = await startFakeAnthropic({ apiKey: API_KEY });
  provider = new AnthropicProvider(config());
});
afterAll(async () => {
  await provider.close();
  await fake.close();
});
beforeEach(() => fake.reset());

function chatBody(extra: JsonObject = {}): JsonObject {
  return {
    model: 'claude-test',
    messages: [
      { role: 'system', content: 'You are terse.' },
      { role: 'user', content: 'Tell me about gantries' },
    ],
    max_tokens: 100,
    ...extra,
  };
}

function jsonOf(result: ProviderResult): JsonObject {
  if (result.kind !== 'json') throw new Error(`expected a JSON result, got ${result.kind}`);
  assertOpenAISchema('CreateChatCompletionResponse', result.body);
  return result.body;
}

interface Collected {
  chunks: JsonObject[];
  text: string;
  finishReasons: (string | null)[];
  error: unknown;
}

/** Reads a stream to its end, validating every chunk; a thrown error is returned, not rethrown. */
async function collect(result: ProviderResult, stopAfter?: number): Promise<Collected> {
  if (result.kind !== 'stream') throw new Error(`expected a stream result, got ${result.kind}`);
  const out: Collected = { chunks: [], text: '', finishReasons: [], error: undefined };
  try {
    for await (const event of result.events) {
      expect(event.event).toBeUndefined();
      const chunk = JSON.parse(event.data) as JsonObject;
      assertOpenAISchema('CreateChatCompletionStreamResponse', chunk);
      out.chunks.push(chunk);
      const choice = (chunk.choices as { delta: { content?: string }; finish_reason: string | null }[])[0];
      if (choice) {
        out.text += choice.delta.content ?? '';
        out.finishReasons.push(choice.finish_reason);
      }
      if (stopAfter !== undefined && out.chunks.length >= stopAfter) break;
    }
  } catch (err) {
    out.error = err;
  }
  return out;
}

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (err) {
    return err;
  }
  throw new Error('expected a rejection');
}

function deltaOf(chunk: JsonObject | undefined): unknown {
  return ((chunk?.choices ?? []) as { delta: unknown }[])[0]?.delta;
}

function choiceOf(body: JsonObject): { message: { content: string }; finish_reason: string } {
  return (body.choices as { message: { content: string }; finish_reason: string }[])[0]!;
}

describe('AnthropicProvider: the request on the wire', () => {
  it('posts to /v1/messages with the key, the default version and a translated body', async () => {
    await provider.chat(
      chatBody({ stop: ['zzz'], user: 'u-1', temperature: 0.3, stream_options: undefined }),
      ctx(),
    );
    const [req] = await fake.waitForRequests(1);
    expect(req?.method).toBe('POST');
    expect(req?.path).toBe('/v1/messages');
    expect(req?.headers['x-api-key']).toBe(API_KEY);
    expect(req?.headers['anthropic-version']).toBe('2023-06-01');
    expect(req?.headers['content-type']).toBe('application/json');
    expect(req?.headers.authorization).toBeUndefined();
    expect(req?.body).toEqual({
      model: 'claude-test',
      system: 'You are terse.',
      messages: [{ role: 'user', content: 'Tell me about gantries' }],
      max_tokens: 100,
      stop_sequences: ['zzz'],
      temperature: 0.3,
      metadata: { user_id: 'u-1' },
    });
  });

  it('lets the config override anthropic-version, whatever its case, and tolerates a /v1 base URL', async () => {
    const custom = new AnthropicProvider(
      config({
        baseUrl: `${fake.url}/v1/`,
        headers: { 'Anthropic-Version': '2099-01-01', 'anthropic-beta': 'x' },
      }),
    );
    try {
      jsonOf(await custom.chat(chatBody(), ctx()));
    } finally {
      await custom.close();
    }
    const [req] = await fake.waitForRequests(1);
    expect(req?.path).toBe('/v1/messages');
    expect(req?.headers['anthropic-version']).toBe('2099-01-01');
    expect(req?.headers['anthropic-beta']).toBe('x');
  });

  it('sends merged, alternating turns that the API accepts', async () => {
    const body = chatBody({
      messages: [
        { role: 'user', content: 'first' },
        { role: 'user', content: [{ type: 'text', text: 'second' }] },
        { role: 'assistant', content: 'ok' },
        { role: 'user', content: 'third' },
      ],
    });
    const out = jsonOf(await provider.chat(body, ctx()));
    expect(choiceOf(out).message.content).toBe(anthropicFakeReply('third'));
    expect(fake.requests[0]?.body?.messages).toEqual([
      {
        role: 'user',
        content: [
          { type: 'text', text: 'first' },
          { type: 'text', text: 'second' },
        ],
      },
      { role: 'assistant', content: 'ok' },
      { role: 'user', content: 'third' },
    ]);
  });

  it.each<[string, JsonObject]>([
    ['n', { n: 2 }],
    ['tools[0]', { tools: [{ type: 'custom', custom: { name: 'f' } }] }],
    ['response_format', { response_format: { type: 'grammar' } }],
    ['reasoning_effort', { reasoning_effort: 'high', temperature: 0.2 }],
    ['logprobs', { logprobs: true }],
    ['seed', { seed: 1 }],
    ['temperature', { temperature: 1.7 }],
  ])('refuses %s with a 400 before calling Anthropic', async (param, extra) => {
    const err = await rejection(provider.chat(chatBody(extra), ctx()));
    expect(err).toBeInstanceOf(ProviderRequestError);
    expect(toGantryError(err as ProviderRequestError).status).toBe(400);
    expect((err as ProviderRequestError).param).toBe(param);
    expect(fake.requests).toHaveLength(0);
  });
});

describe('AnthropicProvider: JSON answers', () => {
  it('answers a chat.completion with the reply, the usage and the request model', async () => {
    const before = Math.floor(Date.now() / 1000);
    const out = jsonOf(await provider.chat(chatBody(), ctx()));
    const reply = anthropicFakeReply('Tell me about gantries');
    expect(out.id).toBe('chatcmpl-msg_fake1');
    expect(out.object).toBe('chat.completion');
    expect(out.model).toBe('claude-test');
    expect(out.created).toBeGreaterThanOrEqual(before);
    expect(choiceOf(out)).toEqual({
      index: 0,
      message: { role: 'assistant', content: reply, refusal: null, annotations: [] },
      logprobs: null,
      finish_reason: 'stop',
    });
    // Prompt: "You are terse." + "Tell me about gantries" = 7 words; reply: 6 words.
    expect(out.usage).toEqual({
      prompt_tokens: 7,
      completion_tokens: 6,
      total_tokens: 13,
      prompt_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 },
    });
  });

  it('adds cached input to prompt_tokens and reports the cache reads and writes', async () => {
    fake.setBehavior({ cacheReadTokens: 100, cacheCreationTokens: 20 });
    const out = jsonOf(await provider.chat(chatBody(), ctx()));
    expect(out.usage).toEqual({
      prompt_tokens: 127,
      completion_tokens: 6,
      total_tokens: 133,
      prompt_tokens_details: { cached_tokens: 100, cache_write_tokens: 20 },
    });
  });

  it('ends before a stop sequence with finish_reason stop', async () => {
    const out = jsonOf(await provider.chat(chatBody({ stop: 'about' }), ctx()));
    expect(choiceOf(out).message.content).toBe('You said: Tell me ');
    expect(choiceOf(out).finish_reason).toBe('stop');
  });

  it('cuts at max_tokens with finish_reason length', async () => {
    const out = jsonOf(await provider.chat(chatBody({ max_tokens: 50, max_completion_tokens: 3 }), ctx()));
    expect(fake.requests[0]?.body?.max_tokens).toBe(3);
    expect(choiceOf(out).message.content).toBe('You said: Tell');
    expect(choiceOf(out).finish_reason).toBe('length');
    expect((out.usage as JsonObject).completion_tokens).toBe(3);
  });

  it.each([
    ['refusal', 'content_filter'],
    ['tool_use', 'tool_calls'],
    ['pause_turn', 'stop'],
  ])('maps stop_reason %s to %s', async (stopReason, finish) => {
    fake.setBehavior({ stopReason });
    expect(choiceOf(jsonOf(await provider.chat(chatBody(), ctx()))).finish_reason).toBe(finish);
  });
});

describe('AnthropicProvider: streams', () => {
  it('streams role, text and finish chunks that add up to the JSON answer, without usage', async () => {
    const result = await provider.chat(chatBody({ stream: true }), ctx());
    expect(fake.requests[0]?.body?.stream).toBe(true);
    const { chunks, text, finishReasons, error } = await collect(result);
    expect(error).toBeUndefined();
    expect(text).toBe(anthropicFakeReply('Tell me about gantries'));
    // role chunk + 6 words + finish chunk
    expect(chunks).toHaveLength(8);
    expect(deltaOf(chunks[0])).toEqual({ role: 'assistant', content: '' });
    expect(deltaOf(chunks.at(-1))).toEqual({});
    expect(finishReasons).toEqual([null, null, null, null, null, null, null, 'stop']);
    const { id, created, model } = chunks[0] as JsonObject;
    expect(id).toBe('chatcmpl-msg_fake1');
    expect(model).toBe('claude-test');
    for (const c of chunks) {
      expect({ id: c.id, created: c.created, model: c.model, object: c.object }).toEqual({
        id,
        created,
        model,
        object: 'chat.completion.chunk',
      });
      expect(c).not.toHaveProperty('usage');
    }
  });

  it('ends with a usage chunk when stream_options.include_usage is true', async () => {
    fake.setBehavior({ cacheReadTokens: 4 });
    const result = await provider.chat(
      chatBody({ stream: true, stream_options: { include_usage: true } }),
      ctx(),
    );
    expect(fake.requests[0]?.body).not.toHaveProperty('stream_options');
    const { chunks, error } = await collect(result);
    expect(error).toBeUndefined();
    expect(chunks).toHaveLength(9);
    for (const c of chunks.slice(0, -1)) expect(c.usage).toBeNull();
    expect(chunks.at(-1)?.choices).toEqual([]);
    expect(chunks.at(-1)?.usage).toEqual({
      prompt_tokens: 11,
      completion_tokens: 6,
      total_tokens: 17,
      prompt_tokens_details: { cached_tokens: 4, cache_write_tokens: 0 },
    });
  });

  it('stops at a stop sequence and at max_tokens', async () => {
    const stopped = await collect(await provider.chat(chatBody({ stream: true, stop: ['gantries'] }), ctx()));
    expect(stopped.text).toBe('You said: Tell me about ');
    expect(stopped.finishReasons.at(-1)).toBe('stop');
    const cut = await collect(await provider.chat(chatBody({ stream: true, max_tokens: 2 }), ctx()));
    expect(cut.text).toBe('You said:');
    expect(cut.finishReasons.at(-1)).toBe('length');
  });

  it('turns an error event mid-stream into a retryable UpstreamError', async () => {
    fake.setBehavior({ errorEvent: { afterEvents: 4, type: 'overloaded_error', message: 'Overloaded' } });
    const { chunks, error } = await collect(await provider.chat(chatBody({ stream: true }), ctx()));
    // message_start, content_block_start, ping, one delta: role chunk + one text chunk.
    expect(chunks).toHaveLength(2);
    expect(error).toBeInstanceOf(UpstreamError);
    const err = error as UpstreamError;
    expect(err.failure).toBe('status');
    expect(err.status).toBe(503);
    expect(err.upstreamMessage).toBe('Overloaded');
    expect(err.retryable).toBe(true);
  });

  it('reports a stream cut before message_stop as a protocol failure', async () => {
    fake.setBehavior({ closeAfterEvents: 5 });
    const { chunks, finishReasons, error } = await collect(
      await provider.chat(chatBody({ stream: true }), ctx()),
    );
    // message_start, content_block_start, ping, two deltas: role chunk + two text chunks.
    expect(chunks).toHaveLength(3);
    expect(finishReasons.every((f) => f === null)).toBe(true);
    expect(error).toBeInstanceOf(UpstreamError);
    expect((error as UpstreamError).failure).toBe('protocol');
  });

  it('reports a stream that ends cleanly but without message_stop as a protocol failure', async () => {
    // Every event up to message_delta: the stop reason is known, but message_stop never came.
    fake.setBehavior({ endAfterEvents: 11 });
    const { error, chunks, finishReasons } = await collect(
      await provider.chat(chatBody({ stream: true }), ctx()),
    );
    expect(chunks).toHaveLength(7);
    expect(finishReasons.every((f) => f === null)).toBe(true);
    expect(error).toBeInstanceOf(UpstreamError);
    expect((error as UpstreamError).failure).toBe('protocol');
    expect((error as UpstreamError).message).toContain('message_stop');
  });
});

describe('AnthropicProvider: upstream errors', () => {
  it.each<[number, string, boolean]>([
    [400, 'invalid_request_error', false],
    [401, 'authentication_error', false],
    [429, 'rate_limit_error', true],
    [500, 'api_error', true],
    [529, 'overloaded_error', true],
  ])('HTTP %d %s becomes UpstreamError(status), retryable: %s', async (status, type, retryable) => {
    fake.setBehavior({ error: { status, type, message: `fake ${type}` } });
    const err = await rejection(provider.chat(chatBody(), ctx()));
    expect(err).toBeInstanceOf(UpstreamError);
    const e = err as UpstreamError;
    expect(e.failure).toBe('status');
    expect(e.status).toBe(status);
    expect(e.upstreamMessage).toBe(`fake ${type}`);
    expect(e.retryable).toBe(retryable);
    if (status === 429) expect(e.retryAfter).toBe('7');
  });

  it('fails a stream request the same way before any event', async () => {
    fake.setBehavior({ error: { status: 529 } });
    const err = await rejection(provider.chat(chatBody({ stream: true }), ctx()));
    expect((err as UpstreamError).status).toBe(529);
    expect((err as UpstreamError).upstreamMessage).toBe('Overloaded');
  });

  it('is refused by the API without the key', async () => {
    const keyless = new AnthropicProvider(config({ apiKey: undefined }));
    try {
      const err = await rejection(keyless.chat(chatBody(), ctx()));
      expect((err as UpstreamError).status).toBe(401);
      expect(fake.requests[0]?.headers['x-api-key']).toBeUndefined();
    } finally {
      await keyless.close();
    }
  });

  it('times out when the headers are late', async () => {
    const impatient = new AnthropicProvider(
      config({ timeouts: { connectMs: 1000, firstByteMs: 100, idleMs: 1000, totalMs: 5000 } }),
    );
    fake.setBehavior({ delayHeadersMs: 3000 });
    try {
      const err = await rejection(impatient.chat(chatBody(), ctx()));
      expect((err as UpstreamError).failure).toBe('timeout');
    } finally {
      await impatient.close();
    }
  });
});

describe('AnthropicProvider: cancellation', () => {
  it('aborts the upstream call mid-stream when ctx.signal aborts', async () => {
    fake.setBehavior({ delayBetweenEventsMs: 50 });
    const controller = new AbortController();
    const result = await provider.chat(chatBody({ stream: true }), ctx(controller.signal));
    if (result.kind !== 'stream') throw new Error('expected a stream');
    const it = result.events[Symbol.asyncIterator]();
    const first = await it.next();
    expect(first.done).toBe(false);
    controller.abort();
    const err = await rejection(it.next());
    expect((err as UpstreamError).failure).toBe('aborted');
    const [req] = await fake.waitForRequests(1);
    expect(await req?.settled).toBe('aborted');
    expect(req?.aborted).toBe(true);
  });

  it('aborts while waiting for the headers', async () => {
    fake.setBehavior({ delayHeadersMs: 2000 });
    const controller = new AbortController();
    const pending = provider.chat(chatBody(), ctx(controller.signal));
    const [req] = await fake.waitForRequests(1);
    controller.abort();
    const err = await rejection(pending);
    expect((err as UpstreamError).failure).toBe('aborted');
    expect(await req?.settled).toBe('aborted');
  });

  it('releases the upstream when the consumer stops reading', async () => {
    // Long enough that it cannot end within the short drain Gantry allows a stream it stopped reading.
    fake.setBehavior({ delayBetweenEventsMs: 50, reply: 'word '.repeat(40).trim() });
    const result = await provider.chat(chatBody({ stream: true }), ctx());
    const { chunks } = await collect(result, 2);
    expect(chunks).toHaveLength(2);
    const [req] = await fake.waitForRequests(1);
    expect(await req?.settled).toBe('aborted');
  });
});

describe('AnthropicProvider: what it does not offer', () => {
  it('refuses embeddings with MODEL_NOT_SUPPORTED', async () => {
    const err = await rejection(provider.embeddings({ model: 'claude-test', input: 'x' }, ctx()));
    expect(err).toBeInstanceOf(ProviderRequestError);
    expect(toGantryError(err as ProviderRequestError).errorId).toBe('MODEL_NOT_SUPPORTED');
    expect(fake.requests).toHaveLength(0);
  });

  it('has no native Responses and no forward target', () => {
    const contract: InferenceProvider = provider;
    expect(contract.kind).toBe('anthropic');
    expect(contract.name).toBe('claude');
    expect(contract.responses).toBeUndefined();
    expect(contract.forward).toBeUndefined();
  });
});
