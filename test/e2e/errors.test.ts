import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { errorOf } from '../helpers/api-error.js';
import { type FakeAnthropic, startFakeAnthropic } from '../helpers/fake-anthropic.js';
import { type FakeOpenAI, fakeReply, startFakeOpenAI } from '../helpers/fake-openai.js';
import { LOCAL_CONFIG, startGantry, type TestGantry } from '../helpers/gantry.js';
import { assertOpenAISchema } from '../helpers/openapi.js';
import { ledgerRecords } from '../helpers/usage.js';

let gantry: TestGantry;
beforeAll(async () => {
  gantry = await startGantry(
    LOCAL_CONFIG.replace('providers:', 'server: { body_limit_bytes: 2048 }\nproviders:'),
  );
});
afterAll(() => gantry.close());

async function send(method: string, path: string, body?: string, contentType = 'application/json') {
  const res = await fetch(gantry.origin + path, {
    method,
    headers: { 'x-api-key': gantry.key, ...(body === undefined ? {} : { 'content-type': contentType }) },
    ...(body === undefined ? {} : { body }),
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: JSON.parse(text) as Record<string, unknown> };
}

const inferenceError = (errorId: string, status: number) => ({
  error: { error_id: errorId, http_status: status, code: errorId.toLowerCase() },
});

describe('errors are always enveloped', () => {
  it('malformed JSON is 400 INVALID_REQUEST in the inference envelope', async () => {
    const res = await send('POST', '/v1/chat/completions', '{"model": "gantry/local-chat", "messages": [');
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject(inferenceError('INVALID_REQUEST', 400));
    expect(res.body).not.toHaveProperty('status');
    expect((res.body.error as { type: string }).type).toBe('invalid_request_error');
  });

  it('a body that is not an object is 400 INVALID_REQUEST', async () => {
    for (const body of ['[]', '"text"', '42', 'null']) {
      const res = await send('POST', '/v1/embeddings', body);
      expect(res.status, body).toBe(400);
      expect(res.body, body).toMatchObject(inferenceError('INVALID_REQUEST', 400));
    }
  });

  it('a wrong Content-Type is 400 UNSUPPORTED_MEDIA_TYPE', async () => {
    const res = await send('POST', '/v1/chat/completions', 'hello', 'text/plain');
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject(inferenceError('UNSUPPORTED_MEDIA_TYPE', 400));
  });

  it('an oversized body is 413 PAYLOAD_TOO_LARGE', async () => {
    const big = JSON.stringify({
      model: 'gantry/local-chat',
      messages: [{ role: 'user', content: 'x'.repeat(5000) }],
    });
    const res = await send('POST', '/v1/chat/completions', big);
    expect(res.status).toBe(413);
    expect(res.body).toMatchObject(inferenceError('PAYLOAD_TOO_LARGE', 413));
  });

  it('an unknown route is 404 NOT_FOUND in the REST envelope', async () => {
    const res = await send('GET', '/v1/nothing-here');
    expect(res.status).toBe(404);
    expect(res.body).toMatchObject({ status: false, error: { error_id: 'NOT_FOUND', http_status: 404 } });
    const outside = await send('GET', '/elsewhere');
    expect(outside.status).toBe(404);
    expect(outside.body).toMatchObject({ status: false, error: { error_id: 'NOT_FOUND' } });
  });

  it('a wrong method is 405 with Allow', async () => {
    const res = await send('GET', '/v1/chat/completions');
    expect(res.status).toBe(405);
    expect(res.headers.get('allow')).toBe('POST');
    expect(res.body).toMatchObject(inferenceError('METHOD_NOT_ALLOWED', 405));
    const models = await send('DELETE', '/v1/models');
    expect(models.status).toBe(405);
    expect(models.body).toMatchObject({ status: false, error: { error_id: 'METHOD_NOT_ALLOWED' } });
  });

  it('an unauthenticated unknown route is 401, not 404', async () => {
    const res = await fetch(`${gantry.origin}/v1/nothing-here`);
    expect(res.status).toBe(401);
  });

  it('the health check needs no key', async () => {
    const res = await fetch(`${gantry.origin}/healthz`);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ status: 'ok' });
  });
});

describe('upstream errors: overload and Anthropic’s error types', () => {
  const CLAUDE_KEY = 'sk-ant-errors-0123456789';
  const OPENAI_KEY = 'sk-errors-0123456789';
  const LONG = 'one two three four five six seven eight nine ten';
  let claude: FakeAnthropic;
  let up: FakeOpenAI;
  let g: TestGantry;
  let client: OpenAI;

  beforeAll(async () => {
    [claude, up] = await Promise.all([
      startFakeAnthropic({ apiKey: CLAUDE_KEY }),
      startFakeOpenAI({ apiKey: OPENAI_KEY }),
    ]);
    g = await startGantry(
      `
providers:
  claude: { kind: anthropic, base_url: ${claude.url}, api_key_env: CLAUDE_KEY }
  up: { kind: openai, base_url: ${up.url}, api_key_env: OPENAI_KEY, supports_responses: true }
models:
  - namespace: err/claude
    name: Anthropic
    type: text
    routes: [{ provider: claude, model: claude-up }]
    defaults: { max_tokens: 64 }
  - namespace: err/native
    name: OpenAI-compatible with native Responses
    type: text
    routes: [{ provider: up, model: fake-model }]
  - namespace: err/both
    name: Anthropic, then the OpenAI-compatible one
    type: text
    routes: [{ provider: claude, model: claude-up }, { provider: up, model: fake-model }]
    defaults: { max_tokens: 64 }
`,
      { CLAUDE_KEY, OPENAI_KEY },
    );
    client = new OpenAI({ baseURL: g.baseURL, apiKey: g.key, maxRetries: 0 });
  });
  afterAll(async () => {
    await g?.close();
    await Promise.all([claude?.close(), up?.close()]);
  });
  beforeEach(() => {
    claude.reset();
    up.reset();
  });

  const chat = (model: string) =>
    errorOf(client.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }] }));

  /** POSTs a stream request and returns the parsed data of its events, in order. */
  async function streamEvents(path: string, body: unknown): Promise<Array<Record<string, unknown>>> {
    const res = await fetch(g.baseURL + path, {
      method: 'POST',
      headers: { authorization: `Bearer ${g.key}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    expect(res.status).toBe(200);
    const text = await res.text();
    return text
      .split('\n\n')
      .flatMap((frame) => frame.split('\n').filter((l) => l.startsWith('data: ')))
      .map((line) => line.slice('data: '.length))
      .filter((data) => data !== '[DONE]')
      .map((data) => JSON.parse(data) as Record<string, unknown>);
  }

  /** The overload error, the same wherever it is reported. */
  const OVERLOAD = {
    error_id: 'UPSTREAM_OVERLOADED',
    http_status: 503,
    code: 'server_is_overloaded',
    type: 'server_error',
    message: 'The model provider is overloaded; retry later',
  };

  it('Anthropic’s 529 is a 503 with Retry-After (the upstream’s when it sends one) and no retries of its own', async () => {
    claude.enqueue({ error: { status: 529 }, retryAfter: '20' }, { error: { status: 529 } });
    const err = await chat('err/claude');
    expect(err).toBeInstanceOf(OpenAI.InternalServerError);
    expect(err.status).toBe(503);
    expect(err.headers?.get('retry-after')).toBe('20');
    expect(err.error).toMatchObject({ ...OVERLOAD, details: 'Overloaded' });
    const streamed = await errorOf(
      client.chat.completions.create({
        model: 'err/claude',
        messages: [{ role: 'user', content: 'x' }],
        stream: true,
      }),
    );
    expect(streamed.status).toBe(503);
    expect(streamed.headers?.get('retry-after')).toBe('1');
    expect(streamed.error).toMatchObject(OVERLOAD);
    expect(claude.requests).toHaveLength(2);
  });

  it('an overloaded route falls back to the next; when every route fails, the last one is reported', async () => {
    claude.enqueue({ error: { status: 529 } });
    const ok = await client.chat.completions.create({
      model: 'err/both',
      messages: [{ role: 'user', content: 'fall back' }],
    });
    expect(ok.choices[0]?.message.content).toBe(fakeReply('fall back'));

    claude.enqueue({ error: { status: 500 } });
    up.enqueue({ status: 503, retryAfter: '4' });
    const both = await chat('err/both');
    expect(both.status).toBe(503);
    expect(both.headers?.get('retry-after')).toBe('4');
    expect(both.error).toMatchObject(OVERLOAD);
  });

  it('Anthropic’s error types become OpenAI’s statuses and codes', async () => {
    claude.enqueue(
      { error: { status: 400, message: 'prompt is too long: 208656 tokens > 200000 maximum' } },
      { error: { status: 400, message: 'max_tokens: Field required' } },
      { error: { status: 413, type: 'request_too_large', message: 'Request exceeds the maximum size' } },
      { error: { status: 429 } },
      { error: { status: 404, message: 'model: claude-up' } },
      { error: { status: 500 } },
    );
    const tooLong = await chat('err/claude');
    expect(tooLong).toBeInstanceOf(OpenAI.BadRequestError);
    expect(tooLong.code).toBe('context_length_exceeded');
    expect(tooLong.type).toBe('invalid_request_error');

    const invalid = await chat('err/claude');
    expect(invalid).toBeInstanceOf(OpenAI.BadRequestError);
    expect(invalid.code).toBeNull();

    const large = await chat('err/claude');
    expect(large.status).toBe(413);
    expect(large.code).toBeNull();
    expect(large.error).toMatchObject({ error_id: 'PAYLOAD_TOO_LARGE' });

    const limited = await chat('err/claude');
    expect(limited).toBeInstanceOf(OpenAI.RateLimitError);
    expect(limited.code).toBe('rate_limit_exceeded');
    expect(limited.headers?.get('retry-after')).toBe('7');

    // not_found_error names the upstream model: Gantry's routing, a 502 that names nothing internal.
    const notFound = await chat('err/claude');
    expect(notFound.status).toBe(502);
    expect(JSON.stringify(notFound.error)).not.toContain('claude-up');

    const apiError = await chat('err/claude');
    expect(apiError.status).toBe(502);
    expect(apiError.error).toMatchObject({ error_id: 'UPSTREAM_ERROR', code: 'upstream_error' });
  });

  it('mid-stream overload: the chat error event says 503 and server_is_overloaded, like the JSON answer', async () => {
    claude.enqueue({ errorEvent: { afterEvents: 5, type: 'overloaded_error', message: 'Overloaded' } });
    const events = await streamEvents('/chat/completions', {
      model: 'err/claude',
      messages: [{ role: 'user', content: LONG }],
      stream: true,
    });
    const last = events.at(-1) as { error: Record<string, unknown> };
    expect(last.error).toMatchObject({ ...OVERLOAD, details: 'Overloaded' });
    expect(events.slice(0, -1).every((e) => !('error' in e))).toBe(true);
    // The usage record names the same error as the event.
    const account = g.store.getAccountByName('test');
    const records = await ledgerRecords(g, account?.id ?? '', 1);
    const streamed = records.filter((r) => r.stream && r.status === 200 && r.outcome !== 'ok');
    expect(streamed.at(-1)?.error_id).toBe('UPSTREAM_OVERLOADED');
  });

  it('mid-stream overload in a Responses stream: the event’s own code and its envelope agree', async () => {
    // Bridged onto Anthropic.
    claude.enqueue({ errorEvent: { afterEvents: 5, type: 'overloaded_error', message: 'Overloaded' } });
    const bridged = await streamEvents('/responses', { model: 'err/claude', input: LONG, stream: true });
    const bridgedLast = bridged.at(-1) as Record<string, unknown>;
    expect(bridgedLast).toMatchObject({ type: 'error', code: 'server_is_overloaded' });
    expect(bridgedLast.error).toMatchObject(OVERLOAD);
    assertOpenAISchema('ResponseErrorEvent', { ...bridgedLast, error: undefined });

    // Passed through: OpenAI's own `error` event with code server_is_overloaded.
    up.enqueue({
      errorEvent: { afterChunks: 6, message: 'Model at capacity', code: 'server_is_overloaded' },
    });
    const native = await streamEvents('/responses', { model: 'err/native', input: LONG, stream: true });
    const nativeLast = native.at(-1) as Record<string, unknown>;
    expect(nativeLast).toMatchObject({ type: 'error', code: 'server_is_overloaded' });
    expect(nativeLast.error).toMatchObject({ ...OVERLOAD, details: 'Model at capacity' });
  });
});
