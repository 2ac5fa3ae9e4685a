import { createServer } from 'node:net';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { OpenAIProvider } from '../../providers/openai.js';
import type {
  CallContext,
  JsonObject,
  ProviderConfig,
  ProviderResult,
  ProviderTimeouts,
  SseEvent,
} from '../../providers/types.js';
import { UpstreamError } from '../../providers/upstream-error.js';
import {
  type FakeOpenAI,
  fakeEmbedding,
  fakeReply,
  replyPieces,
  startFakeOpenAI,
} from '../helpers/fake-openai.js';

/** undici's headers/body timeouts tick at ~0.5 s, so a 150 ms timeout fires after up to ~1.2 s. */
const UNDICI_TIMER_SLACK_MS = 1600;

let fake: FakeOpenAI;
const providers: OpenAIProvider[] = [];

beforeAll(async () => {
  fake = await startFakeOpenAI({ apiKey: 'sk-upstream' });
});
afterAll(async () => {
  await fake.close();
});
beforeEach(() => {
  fake.reset();
});
afterEach(async () => {
  await Promise.all(providers.splice(0).map((p) => p.close()));
});

function config(
  timeouts: Partial<ProviderTimeouts> = {},
  extra: Partial<ProviderConfig> = {},
): ProviderConfig {
  return {
    name: 'vllm-a',
    kind: 'openai',
    baseUrl: fake.url,
    apiKey: 'sk-upstream',
    timeouts: { connectMs: 1000, firstByteMs: 1000, idleMs: 1000, totalMs: 5000, ...timeouts },
    maxConnections: 4,
    supportsResponses: true,
    headers: { 'x-extra': 'yes' },
    ...extra,
  };
}

function provider(
  timeouts: Partial<ProviderTimeouts> = {},
  extra: Partial<ProviderConfig> = {},
): OpenAIProvider {
  const p = new OpenAIProvider(config(timeouts, extra));
  providers.push(p);
  return p;
}

function ctx(signal: AbortSignal = new AbortController().signal): CallContext {
  return { signal, requestId: 'req-test' };
}

const chat = (text: string, extra: JsonObject = {}): JsonObject => ({
  model: 'served-model',
  messages: [{ role: 'user', content: text }],
  ...extra,
});

function json(result: ProviderResult): JsonObject {
  if (result.kind !== 'json') throw new Error(`expected a json result, got ${result.kind}`);
  return result.body;
}

/** Iterates a stream result to its end, returning the events seen and the error that ended it, if any. */
async function drain(result: ProviderResult): Promise<{ events: SseEvent[]; error: unknown }> {
  if (result.kind !== 'stream') throw new Error(`expected a stream result, got ${result.kind}`);
  const events: SseEvent[] = [];
  try {
    for await (const event of result.events) events.push(event);
  } catch (error) {
    return { events, error };
  }
  return { events, error: undefined };
}

async function upstreamError(promise: Promise<unknown>): Promise<UpstreamError> {
  try {
    await promise;
  } catch (err) {
    if (err instanceof UpstreamError) return err;
    throw err;
  }
  throw new Error('expected an UpstreamError, but the call succeeded');
}

function streamError(error: unknown): UpstreamError {
  if (error instanceof UpstreamError) return error;
  throw new Error(`expected the stream to end with an UpstreamError, got ${String(error)}`);
}

function chunkContent(event: SseEvent): string {
  const chunk = JSON.parse(event.data) as { choices: { delta: { content?: string | null } }[] };
  return chunk.choices[0]?.delta.content ?? '';
}

describe('OpenAIProvider: success paths', () => {
  it('sends a non-stream chat request with credentials and headers, and returns the JSON', async () => {
    const body = json(await provider().chat(chat('hello upstream', { temperature: 0.5 }), ctx()));
    expect(body).toMatchObject({
      object: 'chat.completion',
      model: 'served-model',
      choices: [
        { message: { role: 'assistant', content: fakeReply('hello upstream') }, finish_reason: 'stop' },
      ],
    });
    const [req] = fake.requests;
    expect(req?.path).toBe('/v1/chat/completions');
    expect(req?.headers.authorization).toBe('Bearer sk-upstream');
    expect(req?.headers['x-extra']).toBe('yes');
    expect(req?.headers['content-type']).toBe('application/json');
    expect(req?.body).toEqual(chat('hello upstream', { temperature: 0.5 }));
  });

  it('streams chat chunks as bare data events and stops before [DONE]', async () => {
    const result = await provider().chat(
      chat('stream this', { stream: true, stream_options: { include_usage: true } }),
      ctx(),
    );
    const { events, error } = await drain(result);
    expect(error).toBeUndefined();
    expect(events.every((e) => e.event === undefined)).toBe(true);
    expect(events.some((e) => e.data === '[DONE]')).toBe(false);
    expect(events.map(chunkContent).join('')).toBe(fakeReply('stream this'));
    // role chunk + one per word + finish chunk + usage chunk
    expect(events).toHaveLength(replyPieces(fakeReply('stream this')).length + 3);
    const last = JSON.parse(events.at(-1)?.data ?? '{}') as {
      choices: unknown[];
      usage?: { total_tokens: number };
    };
    expect(last.choices).toEqual([]);
    expect(last.usage?.total_tokens).toBeGreaterThan(0);
    expect(await fake.requests[0]?.settled).toBe('finished');
  });

  it('sends embeddings without a stream flag and returns the vectors', async () => {
    const body = json(
      await provider().embeddings({ model: 'emb', input: ['a', 'b'], dimensions: 4, stream: true }, ctx()),
    );
    expect(fake.requests[0]?.body).toEqual({ model: 'emb', input: ['a', 'b'], dimensions: 4 });
    expect(body).toMatchObject({
      object: 'list',
      data: [
        { index: 0, embedding: fakeEmbedding('a', 4) },
        { index: 1, embedding: fakeEmbedding('b', 4) },
      ],
    });
  });

  it('returns a native Responses JSON body', async () => {
    const p = provider();
    if (!p.responses) throw new Error('responses missing');
    const body = json(await p.responses({ model: 'served-model', input: 'native' }, ctx()));
    expect(body).toMatchObject({ object: 'response', status: 'completed' });
    expect(fake.requests[0]?.path).toBe('/v1/responses');
  });

  it('streams native Responses events with their names, ending at response.completed', async () => {
    const p = provider();
    if (!p.responses) throw new Error('responses missing');
    const { events, error } = await drain(
      await p.responses({ model: 'served-model', input: 'native stream', stream: true }, ctx()),
    );
    expect(error).toBeUndefined();
    expect(events[0]?.event).toBe('response.created');
    expect(events.at(-1)?.event).toBe('response.completed');
    for (const e of events) expect((JSON.parse(e.data) as { type: string }).type).toBe(e.event);
    const text = events
      .filter((e) => e.event === 'response.output_text.delta')
      .map((e) => (JSON.parse(e.data) as { delta: string }).delta)
      .join('');
    expect(text).toBe(fakeReply('native stream'));
  });

  it('ends a Responses stream at response.incomplete too', async () => {
    const p = provider();
    if (!p.responses) throw new Error('responses missing');
    const { events, error } = await drain(
      await p.responses({ model: 'm', input: 'a b c d', stream: true, max_output_tokens: 2 }, ctx()),
    );
    expect(error).toBeUndefined();
    expect(events.at(-1)?.event).toBe('response.incomplete');
  });

  it('offers responses only when configured, and exposes the forward target', () => {
    expect(provider({}, { supportsResponses: false }).responses).toBeUndefined();
    const p = provider({}, { baseUrl: `${fake.url}/` });
    expect(p.forward).toEqual({
      baseUrl: fake.url,
      headers: { authorization: 'Bearer sk-upstream', 'x-extra': 'yes' },
      timeouts: config().timeouts,
    });
  });

  it('refuses a config without base_url', () => {
    expect(() => new OpenAIProvider(config({}, { baseUrl: undefined }))).toThrow(/base_url/);
  });
});

describe('OpenAIProvider: upstream error statuses', () => {
  it.each([
    [400, false],
    [401, false],
    [404, false],
    [429, true],
    [500, true],
    [503, true],
  ])('HTTP %i becomes UpstreamError(status), retryable=%s', async (status, retryable) => {
    fake.enqueue({ status, error: { message: `upstream says ${status}` } });
    const err = await upstreamError(provider().chat(chat('x'), ctx()));
    expect(err.failure).toBe('status');
    expect(err.status).toBe(status);
    expect(err.upstreamMessage).toBe(`upstream says ${status}`);
    expect(err.retryable).toBe(retryable);
    expect(err.provider).toBe('vllm-a');
    expect(err.retryAfter).toBe(status === 429 ? '1' : undefined);
  });

  it('carries param and Retry-After', async () => {
    fake.enqueue(
      { status: 429, retryAfter: '7' },
      { status: 400, error: { message: 'bad', param: 'messages' } },
    );
    const limited = await upstreamError(provider().chat(chat('x'), ctx()));
    expect(limited.retryAfter).toBe('7');
    const bad = await upstreamError(provider().chat(chat('x'), ctx()));
    expect(bad.param).toBe('messages');
  });

  it('reports the status of a stream request too, before any event', async () => {
    fake.enqueue({ status: 503 });
    const err = await upstreamError(provider().chat(chat('x', { stream: true }), ctx()));
    expect(err).toMatchObject({ failure: 'status', status: 503, retryable: true });
  });

  it('keeps a short non-JSON error body as the message', async () => {
    fake.enqueue({ status: 502, errorBody: 'Bad Gateway from nginx' });
    const err = await upstreamError(provider().chat(chat('x'), ctx()));
    expect(err).toMatchObject({ failure: 'status', status: 502, upstreamMessage: 'Bad Gateway from nginx' });
  });

  it('a wrong API key is a non-retryable 401', async () => {
    const err = await upstreamError(provider({}, { apiKey: 'sk-wrong' }).chat(chat('x'), ctx()));
    expect(err).toMatchObject({ failure: 'status', status: 401, retryable: false });
  });
});

describe('OpenAIProvider: broken upstreams', () => {
  it('a closed port is a retryable connect failure', async () => {
    const port = await closedPort();
    const p = provider({}, { baseUrl: `http://127.0.0.1:${port}/v1` });
    const err = await upstreamError(p.chat(chat('x'), ctx()));
    expect(err.failure).toBe('connect');
    expect(err.retryable).toBe(true);
  });

  it('an upstream that hangs up before answering is a retryable connect failure', async () => {
    fake.enqueue({ hangUp: true });
    const err = await upstreamError(provider().chat(chat('x'), ctx()));
    expect(err.failure).toBe('connect');
    expect(err.retryable).toBe(true);
  });

  it('slow headers hit the first-byte timeout', async () => {
    fake.enqueue({ delayHeadersMs: 5000 });
    const start = performance.now();
    const err = await upstreamError(provider({ firstByteMs: 150 }).chat(chat('x'), ctx()));
    expect(err.failure).toBe('timeout');
    expect(err.message).toMatch(/no response in time/);
    expect(err.retryable).toBe(true);
    // undici runs headers/body timeouts on its coarse "fast timers" (~0.5 s ticks): allow the slack.
    expect(performance.now() - start).toBeLessThan(UNDICI_TIMER_SLACK_MS);
    // The upstream call was given up: the fake saw the connection go.
    expect(await fake.requests[0]?.settled).toBe('aborted');
  });

  it('a stream that goes silent hits the idle timeout while iterating', async () => {
    fake.enqueue({ stallAfterChunks: 2 });
    const start = performance.now();
    const result = await provider({ idleMs: 150 }).chat(chat('x', { stream: true }), ctx());
    const { events, error } = await drain(result);
    expect(events).toHaveLength(2);
    expect(streamError(error).failure).toBe('timeout');
    expect(streamError(error).message).toMatch(/silent/);
    expect(performance.now() - start).toBeLessThan(UNDICI_TIMER_SLACK_MS);
    expect(await fake.requests[0]?.settled).toBe('aborted');
  });

  it('a slow but steady stream hits the total timeout', async () => {
    fake.enqueue({ delayBetweenChunksMs: 80 });
    const start = performance.now();
    const result = await provider({ idleMs: 1000, totalMs: 300 }).chat(
      chat('one two three four five six seven eight', { stream: true }),
      ctx(),
    );
    const { events, error } = await drain(result);
    const err = streamError(error);
    expect(err.failure).toBe('timeout');
    expect(err.message).toMatch(/total/);
    expect(events.length).toBeGreaterThan(0);
    expect(events.length).toBeLessThan(10);
    expect(performance.now() - start).toBeLessThan(1000);
    expect(await fake.requests[0]?.settled).toBe('aborted');
  });

  it('the total timeout also covers waiting for headers', async () => {
    fake.enqueue({ delayHeadersMs: 1500 });
    const err = await upstreamError(provider({ firstByteMs: 5000, totalMs: 200 }).chat(chat('x'), ctx()));
    expect(err.failure).toBe('timeout');
    expect(err.message).toMatch(/total/);
  });

  it('a connection cut mid-stream is a protocol failure while iterating', async () => {
    fake.enqueue({ closeAfterChunks: 2 });
    const result = await provider().chat(chat('cut me', { stream: true }), ctx());
    const { events, error } = await drain(result);
    expect(events).toHaveLength(2);
    const err = streamError(error);
    expect(err.failure).toBe('protocol');
    expect(err.retryable).toBe(false);
  });

  it('a connection cut mid-body of a JSON answer is a protocol failure', async () => {
    fake.enqueue({ closeAfterChunks: 1 });
    const err = await upstreamError(provider().chat(chat('x'), ctx()));
    expect(err.failure).toBe('protocol');
  });

  it('a body that is not JSON is a protocol failure', async () => {
    fake.enqueue({ malformed: true });
    const err = await upstreamError(provider().chat(chat('x'), ctx()));
    expect(err.failure).toBe('protocol');
  });

  it('a malformed stream frame is a protocol failure after the frames before it', async () => {
    fake.enqueue({ malformed: true });
    const { events, error } = await drain(await provider().chat(chat('x', { stream: true }), ctx()));
    expect(events).toHaveLength(1);
    expect(streamError(error).failure).toBe('protocol');
  });

  it('a stream request answered with JSON is a protocol failure', async () => {
    fake.enqueue({ contentType: 'application/json' });
    const err = await upstreamError(provider().chat(chat('x', { stream: true }), ctx()));
    expect(err.failure).toBe('protocol');
  });

  it('a vLLM error event in a chat stream becomes UpstreamError(status) with its code and message', async () => {
    fake.enqueue({ errorEvent: { afterChunks: 2, message: 'CUDA out of memory', code: 503 } });
    const { events, error } = await drain(await provider().chat(chat('x', { stream: true }), ctx()));
    expect(events).toHaveLength(2);
    expect(streamError(error)).toMatchObject({
      failure: 'status',
      status: 503,
      upstreamMessage: 'CUDA out of memory',
      retryable: true,
    });
  });

  it('an OpenAI-style error event (string code) becomes a 502', async () => {
    fake.enqueue({ errorEvent: { afterChunks: 1, message: 'server exploded', code: 'server_error' } });
    const { error } = await drain(await provider().chat(chat('x', { stream: true }), ctx()));
    expect(streamError(error)).toMatchObject({
      failure: 'status',
      status: 502,
      upstreamMessage: 'server exploded',
    });
  });

  it('a Responses `error` event becomes an UpstreamError carrying its message', async () => {
    fake.enqueue({ errorEvent: { afterChunks: 2, message: 'overloaded' } });
    const p = provider();
    if (!p.responses) throw new Error('responses missing');
    const { events, error } = await drain(await p.responses({ model: 'm', input: 'x', stream: true }, ctx()));
    expect(events.map((e) => e.event)).toEqual(['response.created', 'response.in_progress']);
    expect(streamError(error).failure).toBe('status');
    expect(streamError(error).upstreamMessage).toBe('overloaded');
  });
});

describe('OpenAIProvider: client aborts', () => {
  it('aborting the signal mid-stream aborts the upstream request', async () => {
    fake.enqueue({ delayBetweenChunksMs: 50 });
    const controller = new AbortController();
    const result = await provider().chat(
      chat('a b c d e f g h i j k l m n o p', { stream: true }),
      ctx(controller.signal),
    );
    if (result.kind !== 'stream') throw new Error('expected a stream');
    const seen: SseEvent[] = [];
    let error: unknown;
    try {
      for await (const event of result.events) {
        seen.push(event);
        if (seen.length === 2) controller.abort();
      }
    } catch (err) {
      error = err;
    }
    expect(seen.length).toBeLessThan(5);
    expect(streamError(error).failure).toBe('aborted');
    expect(streamError(error).retryable).toBe(false);
    expect(await fake.requests[0]?.settled).toBe('aborted');
    expect(fake.requests[0]?.aborted).toBe(true);
  });

  it('aborting while waiting for headers aborts the upstream request', async () => {
    fake.enqueue({ delayHeadersMs: 1500 });
    const controller = new AbortController();
    const pending = provider().chat(chat('x'), ctx(controller.signal));
    await fake.waitForRequests(1);
    controller.abort();
    const err = await upstreamError(pending);
    expect(err.failure).toBe('aborted');
    expect(await fake.requests[0]?.settled).toBe('aborted');
    expect(fake.requests[0]?.aborted).toBe(true);
  });

  it('a signal aborted before the call never reaches the upstream', async () => {
    const err = await upstreamError(provider().chat(chat('x'), ctx(AbortSignal.abort())));
    expect(err.failure).toBe('aborted');
    expect(fake.requests).toHaveLength(0);
  });
});

/** A port on 127.0.0.1 where nothing listens (bound, then released). */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (address === null || typeof address === 'string') throw new Error('no port');
  return address.port;
}
