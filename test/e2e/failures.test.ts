/**
 * What the client sees when upstreams fail: errors mapped onto the SDK's exception classes, fallbacks
 * to the next provider before the first byte (and never after), clean ends of broken streams, the three
 * timeouts, and client aborts reaching the upstream.
 *
 * undici's first-byte and idle timers are coarse (they tick at ~0.5-1 s), so a 300 ms timeout fires
 * somewhere up to ~1.3 s: the tests give them room and the fakes stall for longer than that.
 */
import { createServer } from 'node:net';
import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type ApiError, errorOf } from '../helpers/api-error.js';
import { anthropicFakeReply, type FakeAnthropic, startFakeAnthropic } from '../helpers/fake-anthropic.js';
import { type FakeOpenAI, fakeReply, replyPieces, startFakeOpenAI } from '../helpers/fake-openai.js';
import { startGantry, type TestGantry } from '../helpers/gantry.js';
import { assertOpenAISchema } from '../helpers/openapi.js';

const KEY_A = 'sk-upstream-a-0123456789';
const KEY_B = 'sk-upstream-b-0123456789';
const KEY_CLAUDE = 'sk-ant-upstream-0123456789';
/** Longest a coarse 300 ms undici timeout may take to fire, plus the request itself. */
const TIMER_SLACK_MS = 2500;
/** Long enough that no undici timer in these tests could outlast it. */
const STALL_MS = 4000;

let a: FakeOpenAI;
let b: FakeOpenAI;
let claude: FakeAnthropic;
let gantry: TestGantry;
let client: OpenAI;

async function closedPort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port } = probe.address() as { port: number };
  await new Promise((resolve) => probe.close(resolve));
  return port;
}

beforeAll(async () => {
  [a, b, claude] = await Promise.all([
    startFakeOpenAI({ apiKey: KEY_A }),
    startFakeOpenAI({ apiKey: KEY_B }),
    startFakeAnthropic({ apiKey: KEY_CLAUDE }),
  ]);
  const quick = '{ connect_ms: 1000, first_byte_ms: 300, idle_ms: 300, total_ms: 10000 }';
  // For the abort tests: no timer of Gantry's may end the upstream call before the client does.
  const patient = '{ connect_ms: 1000, first_byte_ms: 30000, idle_ms: 30000, total_ms: 30000 }';
  gantry = await startGantry(
    `
providers:
  dead:
    kind: openai
    base_url: http://127.0.0.1:${await closedPort()}/v1
    supports_responses: true
  a:
    kind: openai
    base_url: ${a.url}
    api_key_env: KEY_A
    supports_responses: true
    timeouts: ${quick}
  b:
    kind: openai
    base_url: ${b.url}
    api_key_env: KEY_B
    supports_responses: true
    timeouts: ${quick}
  a_chat:
    kind: openai
    base_url: ${a.url}
    api_key_env: KEY_A
    timeouts: ${quick}
  a_patient:
    kind: openai
    base_url: ${a.url}
    api_key_env: KEY_A
    timeouts: ${patient}
  claude_patient:
    kind: anthropic
    base_url: ${claude.url}
    api_key_env: KEY_CLAUDE
    timeouts: ${patient}
  a_total:
    kind: openai
    base_url: ${a.url}
    api_key_env: KEY_A
    timeouts: { connect_ms: 1000, first_byte_ms: 10000, idle_ms: 10000, total_ms: 800 }
  claude:
    kind: anthropic
    base_url: ${claude.url}
    api_key_env: KEY_CLAUDE
    timeouts: ${quick}
# These tests fail the same routes on purpose, many times: circuits would open (test/routing covers that).
routing:
  breaker: { consecutive_failures: 1000000, min_requests: 1000000 }
models:
  - namespace: solo/chat
    name: One OpenAI-compatible provider
    type: text
    routes: [{ provider: a, model: model-a }]
  - namespace: solo/bridged
    name: One provider without native Responses
    type: text
    routes: [{ provider: a_chat, model: model-a }]
  - namespace: patient/chat
    name: One provider with long timeouts
    type: text
    routes: [{ provider: a_patient, model: model-a }]
  - namespace: patient/claude
    name: One Anthropic provider with long timeouts
    type: text
    routes: [{ provider: claude_patient, model: claude-up }]
    defaults: { max_tokens: 64 }
  - namespace: solo/total
    name: One provider with a short total timeout
    type: text
    routes: [{ provider: a_total, model: model-a }]
  - namespace: solo/claude
    name: One Anthropic provider
    type: text
    routes: [{ provider: claude, model: claude-up }]
    defaults: { max_tokens: 64 }
  - namespace: fb/chat
    name: A, then B
    type: text
    routes: [{ provider: a, model: model-a }, { provider: b, model: model-b }]
  - namespace: fb/claude
    name: Anthropic, then B
    type: text
    routes: [{ provider: claude, model: claude-up }, { provider: b, model: model-b }]
    defaults: { max_tokens: 64 }
  - namespace: fb/refused
    name: A closed port, then B
    type: text
    routes: [{ provider: dead, model: model-dead }, { provider: b, model: model-b }]
`,
    { KEY_A, KEY_B, KEY_CLAUDE },
  );
  client = new OpenAI({ baseURL: gantry.baseURL, apiKey: gantry.key, maxRetries: 0 });
});
afterAll(async () => {
  await gantry?.close();
  await Promise.all([a?.close(), b?.close(), claude?.close()]);
});
beforeEach(() => {
  a.reset();
  b.reset();
  claude.reset();
});

type Chunk = OpenAI.ChatCompletionChunk;

const user = (content: string): OpenAI.ChatCompletionMessageParam[] => [{ role: 'user', content }];
const LONG = 'one two three four five six seven eight nine ten eleven twelve';

/** Iterates an SDK stream to its end, keeping what arrived before it threw. */
async function collect<T>(stream: AsyncIterable<T>): Promise<{ items: T[]; error: unknown }> {
  const items: T[] = [];
  try {
    for await (const item of stream) items.push(item);
  } catch (error) {
    return { items, error };
  }
  return { items, error: undefined };
}

function text(chunks: Chunk[]): string {
  return chunks.map((c) => c.choices[0]?.delta.content ?? '').join('');
}

/**
 * The inference envelope, all of it: the SDK's class comes from `type`, spec clients read error_id.
 * `code` is the error id in lower case unless an upstream's own code is relayed.
 */
function expectEnvelope(
  error: unknown,
  errorId: string,
  status: number,
  type: string,
  code: string | null = errorId.toLowerCase(),
): void {
  expect(error).toEqual({
    message: expect.any(String),
    type,
    param: error !== null && typeof error === 'object' && 'param' in error ? error.param : 'missing',
    code,
    error_id: errorId,
    details: expect.any(String),
    http_status: status,
  });
  const param = (error as { param: unknown }).param;
  expect(param === null || typeof param === 'string').toBe(true);
}

async function chatError(model: string, extra: Partial<OpenAI.ChatCompletionCreateParamsNonStreaming> = {}) {
  return errorOf(client.chat.completions.create({ model, messages: user('hello'), ...extra }));
}

interface RawStream {
  status: number;
  contentType: string | null;
  body: string;
  /** The `data:` of each event, in order. */
  data: string[];
}

/** POSTs with fetch and reads the whole body: resolves only if the response really ends. */
async function rawPost(path: string, body: unknown): Promise<RawStream> {
  const res = await fetch(gantry.baseURL + path, {
    method: 'POST',
    headers: { authorization: `Bearer ${gantry.key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  const data = text
    .split('\n\n')
    .filter((frame) => frame.trim() !== '')
    .map((frame) =>
      frame
        .split('\n')
        .filter((line) => line.startsWith('data: '))
        .map((line) => line.slice('data: '.length))
        .join('\n'),
    );
  return { status: res.status, contentType: res.headers.get('content-type'), body: text, data };
}

/** A chat stream that broke after some content: content chunks first, then one error event, no [DONE]. */
function expectErrorEventLast(
  raw: RawStream,
  errorId: string,
  status: number,
  code: string = errorId.toLowerCase(),
): Record<string, unknown> {
  expect(raw.status).toBe(200);
  expect(raw.contentType).toMatch(/^text\/event-stream/);
  expect(raw.body.endsWith('\n\n')).toBe(true);
  expect(raw.body).not.toContain('[DONE]');
  const last = JSON.parse(raw.data.at(-1) ?? '{}') as { error?: Record<string, unknown> };
  const type = status === 504 ? 'timeout_error' : 'server_error';
  expectEnvelope(last.error, errorId, status, type, code);
  for (const data of raw.data.slice(0, -1)) {
    const chunk = JSON.parse(data) as Chunk;
    assertOpenAISchema('CreateChatCompletionStreamResponse', chunk);
  }
  return last.error ?? {};
}

describe('upstream errors become the right SDK exceptions', () => {
  it('a 400 is a BadRequestError carrying the upstream message and param', async () => {
    a.enqueue({ status: 400, error: { message: "Invalid value for 'logit_bias'.", param: 'logit_bias' } });
    const err = await chatError('solo/chat');
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect(err.status).toBe(400);
    expect(err.message).toContain("Invalid value for 'logit_bias'.");
    expect(err.param).toBe('logit_bias');
    // The upstream's `"code": null` is relayed as it is, not replaced by Gantry's.
    expect(err.code).toBeNull();
    expectEnvelope(err.error, 'INVALID_REQUEST', 400, 'invalid_request_error', null);

    // The same for a stream request: the error comes before any byte of a stream.
    a.enqueue({ status: 400, error: { message: 'messages[0] is too long' } });
    const streamed = await errorOf(
      client.chat.completions.create({ model: 'solo/chat', messages: user('x'), stream: true }),
    );
    expect(streamed).toBeInstanceOf(OpenAI.BadRequestError);
    expect(streamed.message).toContain('messages[0] is too long');
  });

  it('a 429 is a RateLimitError with Retry-After relayed, without the upstream’s text about its account', async () => {
    const upstreamText =
      'Rate limit reached for gpt-4o in organization org-GantrysOwnOrg on tokens per min (TPM): Limit 30000';
    a.enqueue({ status: 429, retryAfter: '17', error: { message: upstreamText } });
    const err = await chatError('solo/chat');
    expect(err).toBeInstanceOf(OpenAI.RateLimitError);
    expect(err.status).toBe(429);
    expect(err.headers?.get('retry-after')).toBe('17');
    expect(err.message).toContain('retry after 17 s');
    expect(JSON.stringify(err.error)).not.toContain('org-GantrysOwnOrg');
    expectEnvelope(err.error, 'RATE_LIMIT_EXCEEDED', 429, 'rate_limit_error');
  });

  it('a 401 from the upstream is a 502 (Gantry’s credential is wrong, not the client’s key)', async () => {
    a.enqueue({ status: 401, error: { message: `Incorrect API key provided: ${KEY_A}` } });
    const res = await fetch(`${gantry.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${gantry.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'solo/chat', messages: user('x') }),
    });
    expect(res.status).toBe(502);
    const body = await res.text();
    // Nothing of the upstream's credential complaint (which may quote the key) reaches the client.
    expect(body).not.toContain(KEY_A);
    expect(body).not.toMatch(/API key/i);
    expectEnvelope((JSON.parse(body) as { error: unknown }).error, 'UPSTREAM_ERROR', 502, 'server_error');

    a.enqueue({ status: 401 });
    const err = await chatError('solo/chat');
    expect(err).toBeInstanceOf(OpenAI.InternalServerError);
    expect(err).not.toBeInstanceOf(OpenAI.AuthenticationError);
    expect(err.status).toBe(502);

    a.enqueue({ status: 403 }, { status: 404, error: { message: "The model 'model-a' does not exist" } });
    const forbidden = await chatError('solo/chat');
    expect(forbidden).toBeInstanceOf(OpenAI.InternalServerError);
    expect(forbidden.status).toBe(502);
    // A 404 from the upstream is Gantry's routing at fault: a 502, naming no internal model.
    const missing = await chatError('solo/chat');
    expect(missing).toBeInstanceOf(OpenAI.InternalServerError);
    expect(missing.status).toBe(502);
    expect(JSON.stringify(missing.error)).not.toContain('model-a');
  });

  it('a 500 or an HTML error page is a 502 UPSTREAM_ERROR', async () => {
    a.enqueue({ status: 500 }, { status: 502, errorBody: '<html><body>Bad gateway</body></html>' });
    for (const upstream of [500, 502]) {
      const err = await chatError('solo/chat');
      expect(err, String(upstream)).toBeInstanceOf(OpenAI.InternalServerError);
      expect(err.status, String(upstream)).toBe(502);
      expectEnvelope(err.error, 'UPSTREAM_ERROR', 502, 'server_error');
    }
    expect(a.requests).toHaveLength(2);
  });

  it('a 503 is a 503 UPSTREAM_OVERLOADED with the upstream’s Retry-After, else 1 s', async () => {
    a.enqueue(
      { status: 503, retryAfter: '12', error: { message: 'engine overloaded' } },
      { status: 503, error: { message: 'engine overloaded', code: 'server_is_overloaded' } },
    );
    const err = await chatError('solo/chat');
    expect(err).toBeInstanceOf(OpenAI.InternalServerError);
    expect(err.status).toBe(503);
    expect(err.headers?.get('retry-after')).toBe('12');
    expect(err.code).toBe('server_is_overloaded');
    expectEnvelope(err.error, 'UPSTREAM_OVERLOADED', 503, 'server_error', 'server_is_overloaded');
    expect((err.error as { details: string }).details).toBe('engine overloaded');

    const again = await chatError('solo/chat');
    expect(again.status).toBe(503);
    expect(again.headers?.get('retry-after')).toBe('1');
    expect(a.requests).toHaveLength(2);
  });

  it('a JSON body that is not JSON is a 502', async () => {
    a.enqueue({ malformed: true });
    const err = await chatError('solo/chat');
    expect(err).toBeInstanceOf(OpenAI.InternalServerError);
    expectEnvelope(err.error, 'UPSTREAM_ERROR', 502, 'server_error');
  });

  it('maps Anthropic’s errors the same way', async () => {
    claude.enqueue(
      { error: { status: 400, message: 'messages: text content blocks must be non-empty' } },
      { error: { status: 429 } },
      { error: { status: 401 } },
      { error: { status: 529 } },
    );
    const bad = await chatError('solo/claude');
    expect(bad).toBeInstanceOf(OpenAI.BadRequestError);
    expect(bad.message).toContain('text content blocks must be non-empty');
    // OpenAI sends no code for a plain invalid request, and neither does Gantry for Anthropic's.
    expectEnvelope(bad.error, 'INVALID_REQUEST', 400, 'invalid_request_error', null);

    const limited = await chatError('solo/claude');
    expect(limited).toBeInstanceOf(OpenAI.RateLimitError);
    expect(limited.headers?.get('retry-after')).toBe('7');

    const auth = await chatError('solo/claude');
    expect(auth).toBeInstanceOf(OpenAI.InternalServerError);
    expect(auth.status).toBe(502);

    const overloaded = await chatError('solo/claude');
    expect(overloaded).toBeInstanceOf(OpenAI.InternalServerError);
    expect(overloaded.status).toBe(503);
    expect(overloaded.headers?.get('retry-after')).toBe('1');
    expectEnvelope(overloaded.error, 'UPSTREAM_OVERLOADED', 503, 'server_error', 'server_is_overloaded');
  });
});

describe('fallback to the next provider before the first byte', () => {
  it('moves on when the first provider refuses the connection, for JSON and streams', async () => {
    const completion = await client.chat.completions.create({ model: 'fb/refused', messages: user('hi') });
    expect(completion.model).toBe('fb/refused');
    expect(completion.choices[0]?.message.content).toBe(fakeReply('hi'));

    const stream = await client.chat.completions.create({
      model: 'fb/refused',
      messages: user('stream hi'),
      stream: true,
    });
    const { items, error } = await collect(stream);
    expect(error).toBeUndefined();
    expect(text(items)).toBe(fakeReply('stream hi'));
    expect(items.every((c) => c.model === 'fb/refused')).toBe(true);
    expect(b.requests.map((r) => r.body?.model)).toEqual(['model-b', 'model-b']);
  });

  it.each([
    ['503', { status: 503 }],
    ['429', { status: 429 }],
    ['500', { status: 500 }],
  ])('moves on when the first provider answers %s', async (_name, behavior) => {
    a.enqueue(behavior, behavior);
    const completion = await client.chat.completions.create({ model: 'fb/chat', messages: user('json') });
    expect(completion.choices[0]?.message.content).toBe(fakeReply('json'));
    expect(completion.model).toBe('fb/chat');

    const stream = await client.chat.completions.create({
      model: 'fb/chat',
      messages: user('sse'),
      stream: true,
    });
    const { items, error } = await collect(stream);
    expect(error).toBeUndefined();
    expect(text(items)).toBe(fakeReply('sse'));
    expect(a.requests).toHaveLength(2);
    expect(b.requests.map((r) => [r.body?.model, r.headers.authorization])).toEqual([
      ['model-b', `Bearer ${KEY_B}`],
      ['model-b', `Bearer ${KEY_B}`],
    ]);
  });

  it('moves on when the first provider sends no headers in time, and lets that request go', async () => {
    a.setBehavior({ delayHeadersMs: STALL_MS });
    const started = Date.now();
    // JSON and stream side by side, so that the coarse timers are waited for once.
    const [completion, { items, error }] = await Promise.all([
      client.chat.completions.create({ model: 'fb/chat', messages: user('slow') }),
      client.chat.completions
        .create({ model: 'fb/chat', messages: user('slow'), stream: true })
        .then((stream) => collect(stream)),
    ]);
    expect(completion.choices[0]?.message.content).toBe(fakeReply('slow'));
    expect(error).toBeUndefined();
    expect(text(items)).toBe(fakeReply('slow'));
    expect(Date.now() - started).toBeLessThan(TIMER_SLACK_MS);
    expect(b.requests).toHaveLength(2);
    expect(await a.requests[0]?.settled).toBe('aborted');
    expect(await a.requests[1]?.settled).toBe('aborted');
  }, 10_000);

  it('moves on when the first provider fails right after its role chunk (preamble)', async () => {
    a.enqueue({ errorEvent: { afterChunks: 1, message: 'worker died', code: 500 } });
    const stream = await client.chat.completions.create({
      model: 'fb/chat',
      messages: user('preamble'),
      stream: true,
    });
    const { items, error } = await collect(stream);
    expect(error).toBeUndefined();
    expect(text(items)).toBe(fakeReply('preamble'));
    // One role chunk only: the failed provider's preamble was held back, not sent.
    expect(items.filter((c) => c.choices[0]?.delta.role !== undefined)).toHaveLength(1);
    // Every chunk comes from the one answer that succeeded.
    expect(new Set(items.map((c) => c.id)).size).toBe(1);
    expect(a.requests).toHaveLength(1);
    expect(b.requests).toHaveLength(1);
  });

  it('moves on when the first provider’s connection drops right after its role chunk', async () => {
    a.enqueue({ closeAfterChunks: 1 });
    const stream = await client.chat.completions.create({
      model: 'fb/chat',
      messages: user('dropped'),
      stream: true,
    });
    const { items, error } = await collect(stream);
    expect(error).toBeUndefined();
    expect(text(items)).toBe(fakeReply('dropped'));
    expect(items.filter((c) => c.choices[0]?.delta.role !== undefined)).toHaveLength(1);
    expect(b.requests).toHaveLength(1);
  });

  it('moves on from Anthropic overloaded (529), or its stream dropping after message_start', async () => {
    claude.enqueue({ error: { status: 529 } }, { closeAfterEvents: 2 });
    const completion = await client.chat.completions.create({ model: 'fb/claude', messages: user('over') });
    expect(completion.choices[0]?.message.content).toBe(fakeReply('over'));
    expect(completion.model).toBe('fb/claude');

    const stream = await client.chat.completions.create({
      model: 'fb/claude',
      messages: user('drop'),
      stream: true,
    });
    const { items, error } = await collect(stream);
    expect(error).toBeUndefined();
    expect(text(items)).toBe(fakeReply('drop'));
    expect(items.every((c) => c.model === 'fb/claude')).toBe(true);
    expect(items.filter((c) => c.choices[0]?.delta.role !== undefined)).toHaveLength(1);
    expect(claude.requests).toHaveLength(2);
    expect(b.requests.map((r) => r.body?.model)).toEqual(['model-b', 'model-b']);
  });

  it('moves on when a native Responses stream fails after response.created', async () => {
    a.enqueue({ errorEvent: { afterChunks: 2, message: 'overloaded' } });
    const stream = client.responses.stream({ model: 'fb/chat', input: 'native fallback' });
    const types: string[] = [];
    for await (const event of stream) types.push(event.type);
    const final = await stream.finalResponse();
    expect(final.output_text).toBe(fakeReply('native fallback'));
    expect(final.model).toBe('fb/chat');
    expect(types.filter((t) => t === 'response.created')).toHaveLength(1);
    expect(a.requests[0]?.path).toBe('/v1/responses');
    expect(b.requests[0]?.path).toBe('/v1/responses');
  });

  it('does not move on after a 400: the request itself is wrong', async () => {
    a.enqueue({ status: 400, error: { message: 'bad request body' } }, { status: 400 });
    const err = await chatError('fb/chat');
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect(err.message).toContain('bad request body');
    const streamed = await errorOf(
      client.chat.completions.create({ model: 'fb/chat', messages: user('x'), stream: true }),
    );
    expect(streamed).toBeInstanceOf(OpenAI.BadRequestError);
    expect(a.requests).toHaveLength(2);
    expect(b.requests).toHaveLength(0);
  });

  it('reports the last failure when every provider fails', async () => {
    a.enqueue({ status: 503 });
    b.enqueue({ status: 500 });
    const err = await chatError('fb/chat');
    expect(err).toBeInstanceOf(OpenAI.InternalServerError);
    expect(err.status).toBe(502);
    expect(a.requests).toHaveLength(1);
    expect(b.requests).toHaveLength(1);
  });

  it('does not retry once content reached the client', async () => {
    a.enqueue(
      { closeAfterChunks: 3 },
      { errorEvent: { afterChunks: 3, message: 'CUDA out of memory', code: 503 } },
    );
    for (const label of ['cut', 'error event']) {
      const stream = await client.chat.completions.create({
        model: 'fb/chat',
        messages: user(LONG),
        stream: true,
      });
      const { items, error } = await collect(stream);
      expect(error, label).toBeInstanceOf(OpenAI.APIError);
      expect(text(items), label).toBe(replyPieces(fakeReply(LONG)).slice(0, 2).join(''));
    }
    expect(a.requests).toHaveLength(2);
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(b.requests).toHaveLength(0);
  });
});

describe('broken streams end cleanly', () => {
  it('an upstream closing mid-stream: the SDK throws after the earlier chunks, the bytes end with an error event', async () => {
    a.enqueue({ closeAfterChunks: 4 });
    const stream = await client.chat.completions.create({
      model: 'solo/chat',
      messages: user(LONG),
      stream: true,
    });
    const { items, error } = await collect(stream);
    expect(items).toHaveLength(4);
    expect(text(items)).toBe(replyPieces(fakeReply(LONG)).slice(0, 3).join(''));
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect((error as ApiError).error).toMatchObject({ error_id: 'UPSTREAM_ERROR', http_status: 502 });

    a.enqueue({ closeAfterChunks: 4 });
    const raw = await rawPost('/chat/completions', {
      model: 'solo/chat',
      messages: user(LONG),
      stream: true,
    });
    expect(raw.data).toHaveLength(5);
    expectErrorEventLast(raw, 'UPSTREAM_ERROR', 502);
  });

  it('a vLLM-style error event mid-stream: relayed as one error event in the inference envelope', async () => {
    a.enqueue({ errorEvent: { afterChunks: 3, message: 'CUDA out of memory', code: 503 } });
    const raw = await rawPost('/chat/completions', {
      model: 'solo/chat',
      messages: user(LONG),
      stream: true,
    });
    expect(raw.data).toHaveLength(4);
    // vLLM's code is the HTTP status: 503 is an overload, reported as such (message, status and code agree).
    const error = expectErrorEventLast(raw, 'UPSTREAM_OVERLOADED', 503, 'server_is_overloaded');
    expect(error.details).toContain('CUDA out of memory');
    expect(error.message).not.toContain('HTTP');

    a.enqueue({ errorEvent: { afterChunks: 3, message: 'CUDA out of memory', code: 503 } });
    const stream = await client.chat.completions.create({
      model: 'solo/chat',
      messages: user(LONG),
      stream: true,
    });
    const { items, error: thrown } = await collect(stream);
    expect(items).toHaveLength(3);
    expect(thrown).toBeInstanceOf(OpenAI.APIError);
  });

  it('a native Responses stream failing after content: one `error` event the SDK throws on', async () => {
    a.enqueue({ errorEvent: { afterChunks: 6, message: 'overloaded' } });
    const stream = client.responses.stream({ model: 'solo/chat', input: LONG });
    const { items, error } = await collect(stream);
    expect(items.map((e) => e.type)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.delta',
      'response.output_text.delta',
    ]);
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect((error as ApiError).error).toMatchObject({ error_id: 'UPSTREAM_ERROR', type: 'server_error' });

    a.enqueue({ errorEvent: { afterChunks: 6, message: 'overloaded' } });
    const raw = await rawPost('/responses', { model: 'solo/chat', input: LONG, stream: true });
    expect(raw.status).toBe(200);
    expect(raw.data).toHaveLength(7);
    expect(raw.body).toMatch(/event: error\ndata: [^\n]+\n\n$/);
    const last = JSON.parse(raw.data.at(-1) ?? '{}') as Record<string, unknown>;
    expect(last).toMatchObject({ type: 'error', code: 'upstream_error', sequence_number: 6 });
    expectEnvelope(last.error, 'UPSTREAM_ERROR', 502, 'server_error');
    expect(b.requests).toHaveLength(0);
  });

  it('an Anthropic error event mid-stream: the same', async () => {
    claude.enqueue({ errorEvent: { afterEvents: 5, type: 'overloaded_error', message: 'Overloaded' } });
    const stream = await client.chat.completions.create({
      model: 'solo/claude',
      messages: user(LONG),
      stream: true,
    });
    const { items, error } = await collect(stream);
    // message_start, content_block_start, ping, two text deltas → role chunk + two content chunks
    expect(text(items)).toBe(anthropicFakeReply(LONG).split(' ').slice(0, 2).join(' '));
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect((error as ApiError).error).toMatchObject({
      error_id: 'UPSTREAM_OVERLOADED',
      http_status: 503,
      code: 'server_is_overloaded',
    });

    claude.enqueue({ closeAfterEvents: 5 });
    const raw = await rawPost('/chat/completions', {
      model: 'solo/claude',
      messages: user(LONG),
      stream: true,
    });
    expect(raw.data).toHaveLength(4);
    expectErrorEventLast(raw, 'UPSTREAM_ERROR', 502);
  });

  it('a malformed frame from an OpenAI-compatible upstream never reaches the client', async () => {
    // The garbage comes right after the held role chunk: nothing was sent, so the client gets a plain 502.
    a.enqueue({ malformed: true });
    const raw = await rawPost('/chat/completions', {
      model: 'solo/chat',
      messages: user('x y'),
      stream: true,
    });
    expect(raw.status).toBe(502);
    expect(raw.body).not.toContain('garbage');

    a.enqueue({ malformed: true });
    const err = await errorOf(
      client.chat.completions.create({ model: 'solo/chat', messages: user('x y'), stream: true }),
    );
    expect(err).toBeInstanceOf(OpenAI.InternalServerError);
    expect((err as ApiError).error).toMatchObject({ error_id: 'UPSTREAM_ERROR' });
  });

  it('a malformed frame in a stream Gantry translates (Responses bridged onto chat) is a 502 before any event', async () => {
    a.enqueue({ malformed: true });
    const stream = client.responses.stream({ model: 'solo/bridged', input: 'x y' });
    const { items, error } = await collect(stream);
    expect(items).toEqual([]);
    expect(error).toBeInstanceOf(OpenAI.InternalServerError);
    expect((error as ApiError).error).toMatchObject({ error_id: 'UPSTREAM_ERROR' });
  });
});

describe('timeouts', () => {
  it('first byte: 504 UPSTREAM_TIMEOUT before any byte, for JSON and streams', async () => {
    a.setBehavior({ delayHeadersMs: STALL_MS });
    const started = Date.now();
    const [err, streamed] = await Promise.all([
      chatError('solo/chat'),
      errorOf(client.chat.completions.create({ model: 'solo/chat', messages: user('x'), stream: true })),
    ]);
    expect(Date.now() - started).toBeLessThan(TIMER_SLACK_MS);
    for (const e of [err, streamed]) {
      expect(e).toBeInstanceOf(OpenAI.InternalServerError);
      expect(e.status).toBe(504);
      expectEnvelope(e.error, 'UPSTREAM_TIMEOUT', 504, 'timeout_error');
    }
    expect(await a.requests[0]?.settled).toBe('aborted');
    expect(await a.requests[1]?.settled).toBe('aborted');
  }, 10_000);

  it('idle: a stall before content is a 504', async () => {
    // A stream that stalls after its role chunk (held back, so nothing was sent), a JSON body half-way.
    a.setBehavior({ stallAfterChunks: 1 });
    const started = Date.now();
    const [silent, half] = await Promise.all([
      errorOf(client.chat.completions.create({ model: 'solo/chat', messages: user('x'), stream: true })),
      chatError('solo/chat'),
    ]);
    expect(Date.now() - started).toBeLessThan(TIMER_SLACK_MS);
    for (const e of [silent, half]) {
      expect(e.status).toBe(504);
      expectEnvelope(e.error, 'UPSTREAM_TIMEOUT', 504, 'timeout_error');
    }
    expect(await a.requests[0]?.settled).toBe('aborted');
    expect(await a.requests[1]?.settled).toBe('aborted');
  }, 10_000);

  it('idle: a stall after content is an error event', async () => {
    a.enqueue({ stallAfterChunks: 3 });
    const started = Date.now();
    const raw = await rawPost('/chat/completions', {
      model: 'solo/chat',
      messages: user(LONG),
      stream: true,
    });
    expect(Date.now() - started).toBeLessThan(TIMER_SLACK_MS);
    expect(raw.data).toHaveLength(4);
    expectErrorEventLast(raw, 'UPSTREAM_TIMEOUT', 504);
    expect(await a.requests[0]?.settled).toBe('aborted');
  }, 10_000);

  it('total: 504 before any byte, an error event once the stream has begun', async () => {
    a.enqueue({ delayHeadersMs: STALL_MS });
    const started = Date.now();
    const err = await chatError('solo/total');
    expect(Date.now() - started).toBeLessThan(1500);
    expect(err.status).toBe(504);
    expectEnvelope(err.error, 'UPSTREAM_TIMEOUT', 504, 'timeout_error');

    a.enqueue({ delayBetweenChunksMs: 150 });
    const raw = await rawPost('/chat/completions', {
      model: 'solo/total',
      messages: user(LONG),
      stream: true,
    });
    expect(raw.data.length).toBeGreaterThan(2);
    expect(raw.data.length).toBeLessThan(replyPieces(fakeReply(LONG)).length);
    expectErrorEventLast(raw, 'UPSTREAM_TIMEOUT', 504);
    expect(await a.requests[1]?.settled).toBe('aborted');
  }, 10_000);
});

describe('client aborts reach the upstream', () => {
  /** The upstream saw the client leave: its request ended as aborted at once, not at some timeout. */
  async function expectAbortedSoon(
    record: { settled: Promise<string>; aborted: boolean } | undefined,
    abortedAt: number,
  ): Promise<void> {
    expect(await record?.settled).toBe('aborted');
    expect(record?.aborted).toBe(true);
    expect(Date.now() - abortedAt).toBeLessThan(1000);
  }

  it('aborting an SDK stream from an OpenAI-compatible upstream aborts the upstream request', async () => {
    a.enqueue({ delayBetweenChunksMs: 100 });
    const controller = new AbortController();
    const stream = await client.chat.completions.create(
      { model: 'patient/chat', messages: user(LONG), stream: true },
      { signal: controller.signal },
    );
    const seen: Chunk[] = [];
    let abortedAt = 0;
    for await (const chunk of stream) {
      seen.push(chunk);
      if (seen.length === 2) {
        abortedAt = Date.now();
        controller.abort();
      }
    }
    expect(seen.length).toBeLessThan(5);
    await expectAbortedSoon(a.requests[0], abortedAt);
  });

  it('destroying a raw stream aborts the upstream request', async () => {
    a.enqueue({ delayBetweenChunksMs: 100 });
    const controller = new AbortController();
    const res = await fetch(`${gantry.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${gantry.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'patient/chat', messages: user(LONG), stream: true }),
      signal: controller.signal,
    });
    const reader = res.body?.getReader();
    const first = await reader?.read();
    expect(new TextDecoder().decode(first?.value)).toMatch(/^data: /);
    const abortedAt = Date.now();
    controller.abort();
    await expectAbortedSoon(a.requests[0], abortedAt);
  });

  it('aborting a non-streaming request aborts the upstream request', async () => {
    a.enqueue({ delayHeadersMs: STALL_MS });
    const controller = new AbortController();
    const pending = client.chat.completions.create(
      { model: 'patient/chat', messages: user('wait') },
      { signal: controller.signal },
    );
    await a.waitForRequests(1);
    const abortedAt = Date.now();
    controller.abort();
    await expect(pending).rejects.toBeInstanceOf(OpenAI.APIUserAbortError);
    await expectAbortedSoon(a.requests[0], abortedAt);
  });

  it('aborting an SDK stream from Anthropic aborts the upstream request', async () => {
    claude.enqueue({ delayBetweenEventsMs: 100 });
    const controller = new AbortController();
    const stream = await client.chat.completions.create(
      { model: 'patient/claude', messages: user(LONG), stream: true },
      { signal: controller.signal },
    );
    const seen: Chunk[] = [];
    let abortedAt = 0;
    for await (const chunk of stream) {
      seen.push(chunk);
      if (seen.length === 2) {
        abortedAt = Date.now();
        controller.abort();
      }
    }
    expect(seen.length).toBeLessThan(5);
    await expectAbortedSoon(claude.requests[0], abortedAt);
  });

  it('aborting a non-streaming request to Anthropic aborts the upstream request', async () => {
    claude.enqueue({ delayHeadersMs: STALL_MS });
    const controller = new AbortController();
    const pending = client.chat.completions.create(
      { model: 'patient/claude', messages: user('wait') },
      { signal: controller.signal },
    );
    await claude.waitForRequests(1);
    const abortedAt = Date.now();
    controller.abort();
    await expect(pending).rejects.toBeInstanceOf(OpenAI.APIUserAbortError);
    await expectAbortedSoon(claude.requests[0], abortedAt);
  });

  it('aborting a stream while the upstream is silent aborts the upstream request at once', async () => {
    a.enqueue({ stallAfterChunks: 2 });
    const controller = new AbortController();
    const stream = await client.chat.completions.create(
      { model: 'patient/chat', messages: user(LONG), stream: true },
      { signal: controller.signal },
    );
    const seen: Chunk[] = [];
    let abortedAt = 0;
    for await (const chunk of stream) {
      seen.push(chunk);
      if (seen.length === 2) {
        // Nothing more will come from the upstream: only the client's leaving can end the call.
        setTimeout(() => {
          abortedAt = Date.now();
          controller.abort();
        }, 100);
      }
    }
    expect(seen).toHaveLength(2);
    await expectAbortedSoon(a.requests[0], abortedAt);
  });

  it('aborting a stream while Gantry holds the Anthropic preamble aborts the upstream request', async () => {
    claude.enqueue({ delayBetweenEventsMs: STALL_MS });
    const controller = new AbortController();
    const pending = client.chat.completions.create(
      { model: 'patient/claude', messages: user(LONG), stream: true },
      { signal: controller.signal },
    );
    await claude.waitForRequests(1);
    await new Promise((resolve) => setTimeout(resolve, 100));
    const abortedAt = Date.now();
    controller.abort();
    await expect(pending).rejects.toBeInstanceOf(OpenAI.APIUserAbortError);
    await expectAbortedSoon(claude.requests[0], abortedAt);
  });

  it('keeps serving after all of the above', async () => {
    const completion = await client.chat.completions.create({
      model: 'patient/chat',
      messages: user('still here'),
    });
    expect(completion.choices[0]?.message.content).toBe(fakeReply('still here'));
  });
});
