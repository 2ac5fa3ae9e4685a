/**
 * Gantry in front of an OpenAI-compatible upstream (the fake), driven with the official SDK: renaming,
 * credentials, request defaults, pass-through of unknown parameters, streams, embeddings and the native
 * Responses pass-through.
 */
import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { errorOf } from '../helpers/api-error.js';
import {
  encodeFloat32Base64,
  type FakeOpenAI,
  fakeEmbedding,
  fakeReply,
  type RecordedRequest,
  replyPieces,
  startFakeOpenAI,
} from '../helpers/fake-openai.js';
import { startGantry, type TestGantry } from '../helpers/gantry.js';
import { assertOpenAISchema } from '../helpers/openapi.js';

const UPSTREAM_KEY = 'sk-upstream-openai-0123456789';
const CHAT = 'acme/chat';
const PLAIN = 'acme/plain-chat';
const BRIDGED = 'acme/bridged-chat';
const EMBED = 'acme/embed';

let fake: FakeOpenAI;
let plainFake: FakeOpenAI;
let gantry: TestGantry;
let client: OpenAI;

beforeAll(async () => {
  fake = await startFakeOpenAI({ apiKey: UPSTREAM_KEY });
  plainFake = await startFakeOpenAI({ apiKey: UPSTREAM_KEY });
  gantry = await startGantry(
    `
providers:
  up:
    kind: openai
    base_url: ${fake.url}
    api_key_env: UP_KEY
    supports_responses: true
    timeouts: { connect_ms: 1000, first_byte_ms: 5000, idle_ms: 5000, total_ms: 10000 }
  plain:
    kind: openai
    base_url: ${plainFake.url}
    api_key_env: UP_KEY
models:
  - namespace: ${CHAT}
    name: Chat
    type: text
    apis: [chat, responses]
    routes: [{ provider: up, model: fake-model }]
    defaults: { temperature: 0.3, top_p: 0.9, max_tokens: 50 }
  - namespace: ${PLAIN}
    name: Chat without defaults
    type: text
    routes: [{ provider: up, model: fake-model }]
  - namespace: ${BRIDGED}
    name: Chat bridged for Responses
    type: text
    routes: [{ provider: plain, model: plain-model }]
  - namespace: ${EMBED}
    name: Embeddings
    type: text
    apis: [embeddings]
    routes: [{ provider: up, model: fake-embedding }]
`,
    { UP_KEY: UPSTREAM_KEY },
  );
  client = new OpenAI({ baseURL: gantry.baseURL, apiKey: gantry.key, maxRetries: 0 });
});
afterAll(async () => {
  await gantry?.close();
  await fake?.close();
  await plainFake?.close();
});
beforeEach(() => {
  fake.reset();
  plainFake.reset();
});

const user = (content: string) => [{ role: 'user' as const, content }];

function only(requests: RecordedRequest[]): RecordedRequest {
  expect(requests).toHaveLength(1);
  const req = requests[0];
  if (!req) throw new Error('the fake upstream received no request');
  return req;
}

/** The upstream was called with Gantry's credential and nothing of the client's key. */
function expectGantryCredential(req: RecordedRequest): void {
  expect(req.headers.authorization).toBe(`Bearer ${UPSTREAM_KEY}`);
  expect(req.headers['x-api-key']).toBeUndefined();
  expect(JSON.stringify(req.headers)).not.toContain(gantry.key);
  expect(req.rawBody.toString('utf8')).not.toContain(gantry.key);
}

async function rawPost(path: string, body: unknown): Promise<Response> {
  return fetch(gantry.origin + path, {
    method: 'POST',
    headers: { authorization: `Bearer ${gantry.key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
}

describe('chat completions through an OpenAI-compatible upstream', () => {
  it('answers JSON under the requested name, having called the upstream by its own name and key', async () => {
    const completion = await client.chat.completions.create({
      model: PLAIN,
      messages: [{ role: 'system', content: 'Be brief.' }, ...user('hello upstream')],
    });
    assertOpenAISchema('CreateChatCompletionResponse', completion);
    expect(completion.model).toBe(PLAIN);
    expect(completion.choices[0]?.message.content).toBe(fakeReply('hello upstream'));
    expect(completion.choices[0]?.finish_reason).toBe('stop');
    expect(completion.usage?.completion_tokens).toBe(replyPieces(fakeReply('hello upstream')).length);

    const req = only(fake.requests);
    expect(req.method).toBe('POST');
    expect(req.path).toBe('/v1/chat/completions');
    expect(req.body?.model).toBe('fake-model');
    expect(req.body?.messages).toEqual([
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'hello upstream' },
    ]);
    expectGantryCredential(req);
  });

  it('streams every chunk in the OpenAI schema under the requested name, ending with [DONE]', async () => {
    const stream = await client.chat.completions.create({
      model: PLAIN,
      messages: user('stream these words to me'),
      stream: true,
    });
    let text = '';
    let chunks = 0;
    let finish: string | null | undefined;
    for await (const chunk of stream) {
      assertOpenAISchema('CreateChatCompletionStreamResponse', chunk);
      expect(chunk.model).toBe(PLAIN);
      chunks++;
      text += chunk.choices[0]?.delta.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
      expect(chunk.usage ?? undefined).toBeUndefined();
    }
    const pieces = replyPieces(fakeReply('stream these words to me'));
    expect(text).toBe(pieces.join(''));
    // role chunk + one per word + finish chunk
    expect(chunks).toBe(pieces.length + 2);
    expect(finish).toBe('stop');
    const req = only(fake.requests);
    expect(req.body).toMatchObject({ model: 'fake-model', stream: true });
    expectGantryCredential(req);

    // The bytes themselves: SSE framing, no trace of the upstream name, [DONE] last.
    const res = await rawPost('/v1/chat/completions', {
      model: PLAIN,
      messages: user('raw bytes'),
      stream: true,
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const raw = await res.text();
    expect(raw).not.toContain('fake-model');
    expect(raw.endsWith('data: [DONE]\n\n')).toBe(true);
    expect(raw.match(/"model":"acme\/plain-chat"/g)).toHaveLength(
      replyPieces(fakeReply('raw bytes')).length + 2,
    );
  });

  it('applies the model defaults only where the client left a field out', async () => {
    await client.chat.completions.create({ model: CHAT, messages: user('defaults please') });
    expect(fake.requests[0]?.body).toMatchObject({ temperature: 0.3, top_p: 0.9, max_tokens: 50 });

    // Given values win, even falsy ones; max_completion_tokens stands for max_tokens.
    await client.chat.completions.create({
      model: CHAT,
      messages: user('my own values'),
      temperature: 0,
      max_completion_tokens: 7,
    });
    const second = fake.requests[1]?.body;
    expect(second).toMatchObject({ temperature: 0, top_p: 0.9, max_completion_tokens: 7 });
    expect(second).not.toHaveProperty('max_tokens');

    // A model without defaults sends the body as the client wrote it.
    await client.chat.completions.create({ model: PLAIN, messages: user('no defaults') });
    expect(fake.requests[2]?.body).toEqual({ model: 'fake-model', messages: user('no defaults') });

    // Defaults are visible in the answer: max_tokens 50 is not reached, max_tokens 2 is.
    const cut = await client.chat.completions.create({
      model: CHAT,
      messages: user('one two three four'),
      max_tokens: 2,
    });
    expect(cut.choices[0]?.finish_reason).toBe('length');
    expect(fake.requests[3]?.body).toMatchObject({ max_tokens: 2, temperature: 0.3 });
  });

  it('passes parameters it does not know through untouched', async () => {
    const unknown = {
      top_k: 40,
      repetition_penalty: 1.1,
      guided_json: { type: 'object', properties: { a: { type: 'integer' } }, required: ['a'] },
      chat_template_kwargs: { enable_thinking: false },
      vendor_extension: [1, 'two', null, { three: [3] }],
    };
    const params: OpenAI.ChatCompletionCreateParamsNonStreaming & Record<string, unknown> = {
      model: PLAIN,
      messages: user('extras'),
      seed: 7,
      logit_bias: { '50256': -100 },
      ...unknown,
    };
    const completion = await client.chat.completions.create(params);
    expect(completion.model).toBe(PLAIN);
    expect(only(fake.requests).body).toEqual({
      model: 'fake-model',
      messages: user('extras'),
      seed: 7,
      logit_bias: { '50256': -100 },
      ...unknown,
    });
  });

  it('relays the usage chunk when stream_options.include_usage is set, and none otherwise', async () => {
    const stream = await client.chat.completions.create({
      model: PLAIN,
      messages: user('count my tokens'),
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks: OpenAI.ChatCompletionChunk[] = [];
    for await (const chunk of stream) {
      assertOpenAISchema('CreateChatCompletionStreamResponse', chunk);
      expect(chunk.model).toBe(PLAIN);
      chunks.push(chunk);
    }
    expect(fake.requests[0]?.body?.stream_options).toEqual({ include_usage: true });
    const last = chunks.at(-1);
    expect(last?.choices).toEqual([]);
    const words = replyPieces(fakeReply('count my tokens')).length;
    expect(last?.usage).toMatchObject({
      prompt_tokens: 3,
      completion_tokens: words,
      total_tokens: 3 + words,
    });
    expect(chunks.slice(0, -1).every((c) => c.usage === null)).toBe(true);

    const plain = await client.chat.completions.create({
      model: PLAIN,
      messages: user('count my tokens'),
      stream: true,
    });
    const without: OpenAI.ChatCompletionChunk[] = [];
    for await (const chunk of plain) without.push(chunk);
    expect(without.length).toBe(chunks.length - 1);
    expect(without.every((c) => c.usage === undefined || c.usage === null)).toBe(true);
    expect(without.every((c) => c.choices.length === 1)).toBe(true);
  });
});

describe('embeddings through an OpenAI-compatible upstream', () => {
  it('returns floats when asked, under the requested name', async () => {
    const res = await client.embeddings.create({
      model: EMBED,
      input: ['alpha beta', 'gamma'],
      encoding_format: 'float',
    });
    assertOpenAISchema('CreateEmbeddingResponse', res);
    expect(res.model).toBe(EMBED);
    expect(res.data.map((d) => d.index)).toEqual([0, 1]);
    expect(res.data[0]?.embedding).toEqual(fakeEmbedding('alpha beta', 16));
    expect(res.data[1]?.embedding).toEqual(fakeEmbedding('gamma', 16));
    expect(res.usage).toEqual({ prompt_tokens: 3, total_tokens: 3 });
    const req = only(fake.requests);
    expect(req.path).toBe('/v1/embeddings');
    expect(req.body).toEqual({
      model: 'fake-embedding',
      input: ['alpha beta', 'gamma'],
      encoding_format: 'float',
    });
    expectGantryCredential(req);
  });

  it('relays base64 as the upstream encoded it (the SDK default) and honours dimensions', async () => {
    const raw = await rawPost('/v1/embeddings', {
      model: EMBED,
      input: 'delta',
      encoding_format: 'base64',
      dimensions: 8,
    });
    expect(raw.status).toBe(200);
    // (OpenAI's schema types `embedding` as floats only, so base64 bodies are checked by hand.)
    const body = (await raw.json()) as { object: string; model: string; data: { embedding: string }[] };
    expect(body.object).toBe('list');
    expect(body.model).toBe(EMBED);
    expect(body.data[0]?.embedding).toBe(encodeFloat32Base64(fakeEmbedding('delta', 8)));
    expect(fake.requests[0]?.body).toMatchObject({ encoding_format: 'base64', dimensions: 8 });

    // The SDK asks for base64 when the caller does not choose, and decodes it back into floats.
    const viaSdk = await client.embeddings.create({ model: EMBED, input: 'delta', dimensions: 8 });
    expect(fake.requests[1]?.body).toEqual({
      model: 'fake-embedding',
      input: 'delta',
      dimensions: 8,
      encoding_format: 'base64',
    });
    expect(viaSdk.data[0]?.embedding).toEqual(fakeEmbedding('delta', 8));
    expect(viaSdk.model).toBe(EMBED);
  });
});

describe('Responses passed through to an upstream that speaks them', () => {
  it('returns the upstream Response under the requested name', async () => {
    const response = await client.responses.create({
      model: CHAT,
      instructions: 'Be brief.',
      input: 'native please',
    });
    assertOpenAISchema('Response', response);
    expect(response.model).toBe(CHAT);
    expect(response.id).toMatch(/^resp_fake/);
    expect(response.output_text).toBe(fakeReply('native please'));
    const req = only(fake.requests);
    expect(req.path).toBe('/v1/responses');
    // The model's max_tokens default becomes max_output_tokens; temperature and top_p keep their names.
    expect(req.body).toEqual({
      model: 'fake-model',
      instructions: 'Be brief.',
      input: 'native please',
      temperature: 0.3,
      top_p: 0.9,
      max_output_tokens: 50,
    });
    expectGantryCredential(req);
  });

  it('streams the upstream events with responses.stream(), each under the requested name', async () => {
    const stream = client.responses.stream({ model: CHAT, input: 'stream natively', max_output_tokens: 3 });
    const types: string[] = [];
    for await (const event of stream) {
      assertOpenAISchema('ResponseStreamEvent', event);
      types.push(event.type);
      if ('response' in event) expect(event.response.model).toBe(CHAT);
    }
    const final = await stream.finalResponse();
    expect(final.model).toBe(CHAT);
    expect(final.status).toBe('incomplete');
    expect(final.output_text).toBe(replyPieces(fakeReply('stream natively')).slice(0, 3).join(''));
    expect(types[0]).toBe('response.created');
    expect(types.at(-1)).toBe('response.incomplete');
    const req = only(fake.requests);
    expect(req.path).toBe('/v1/responses');
    expect(req.body).toMatchObject({ model: 'fake-model', stream: true, max_output_tokens: 3 });

    const raw = await rawPost('/v1/responses', { model: CHAT, input: 'raw native', stream: true });
    const text = await raw.text();
    expect(text).not.toContain('fake-model');
    expect(text).toContain('event: response.completed\n');
    expect(text).not.toContain('[DONE]');
  });

  it('bridges onto chat completions where the upstream does not speak Responses', async () => {
    const response = await client.responses.create({ model: BRIDGED, input: 'bridge me' });
    assertOpenAISchema('Response', response);
    expect(response.model).toBe(BRIDGED);
    expect(response.output_text).toBe(fakeReply('bridge me'));
    const req = only(plainFake.requests);
    expect(req.path).toBe('/v1/chat/completions');
    expect(req.body).toMatchObject({
      model: 'plain-model',
      messages: [{ role: 'user', content: 'bridge me' }],
    });
    expectGantryCredential(req);
    expect(fake.requests).toHaveLength(0);
  });
});

describe('upstream errors reach the SDK as the upstream sent them', () => {
  const chat = (stream = false) =>
    errorOf(client.chat.completions.create({ model: PLAIN, messages: user('x'), stream }));

  it('a 400 keeps its status, message, param and code, for JSON and stream requests', async () => {
    const upstream = {
      status: 400,
      error: {
        message: "This model's maximum context length is 8192 tokens.",
        param: 'messages',
        code: 'context_length_exceeded',
      },
    };
    fake.enqueue(upstream, upstream);
    for (const stream of [false, true]) {
      const err = await chat(stream);
      expect(err, String(stream)).toBeInstanceOf(OpenAI.BadRequestError);
      expect(err.status).toBe(400);
      expect(err.code).toBe('context_length_exceeded');
      expect(err.param).toBe('messages');
      expect(err.type).toBe('invalid_request_error');
      expect(err.message).toContain('maximum context length is 8192 tokens');
      assertOpenAISchema('ErrorResponse', { error: err.error });
      expect(err.error).toMatchObject({ error_id: 'INVALID_REQUEST', http_status: 400 });
    }
    expect(fake.requests).toHaveLength(2);
  });

  it('409, 413 and 422 keep their status and code', async () => {
    fake.enqueue(
      { status: 409, error: { message: 'The response is still in progress.', code: 'conflict' } },
      { status: 413, error: { message: 'The request body is too large.', code: 'request_too_large' } },
      { status: 422, error: { message: 'Cannot process this input.', param: 'input', code: 'bad_input' } },
    );
    const conflict = await chat();
    expect(conflict).toBeInstanceOf(OpenAI.ConflictError);
    expect(conflict.status).toBe(409);
    expect(conflict.code).toBe('conflict');
    expect(conflict.error).toMatchObject({ error_id: 'CONFLICT', http_status: 409 });

    const large = await chat();
    expect(large.status).toBe(413);
    expect(large.code).toBe('request_too_large');
    expect(large.error).toMatchObject({ error_id: 'PAYLOAD_TOO_LARGE', http_status: 413 });

    const unprocessable = await chat();
    expect(unprocessable).toBeInstanceOf(OpenAI.UnprocessableEntityError);
    expect(unprocessable.code).toBe('bad_input');
    expect(unprocessable.param).toBe('input');
  });

  it('a 404 about a resource the client named is a 404 the SDK does not retry; a 404 about the model is a 502', async () => {
    fake.enqueue({
      status: 404,
      error: {
        message: "Previous response with id 'resp_gone' not found.",
        param: 'previous_response_id',
        code: 'previous_response_not_found',
      },
    });
    const retrying = new OpenAI({ baseURL: gantry.baseURL, apiKey: gantry.key, maxRetries: 3 });
    const gone = await errorOf(
      retrying.responses.create({ model: CHAT, input: 'go on', previous_response_id: 'resp_gone' }),
    );
    expect(gone).toBeInstanceOf(OpenAI.NotFoundError);
    expect(gone.status).toBe(404);
    expect(gone.code).toBe('previous_response_not_found');
    expect(gone.param).toBe('previous_response_id');
    expect(gone.message).toContain("Previous response with id 'resp_gone' not found.");
    expect(gone.error).toMatchObject({ error_id: 'RESPONSE_NOT_FOUND', http_status: 404 });
    // One call: a 404 is not retried, as the 502 it used to be was.
    expect(fake.requests).toHaveLength(1);
    expect(fake.requests[0]?.path).toBe('/v1/responses');

    fake.reset();
    fake.enqueue(
      { status: 404 },
      { status: 404, error: { message: 'Not here', code: null } },
      { status: 404, error: { message: "The model 'fake-model' does not exist", code: '404' } },
    );
    for (const label of ['model_not_found', 'no code', 'a status as code (LiteLLM)']) {
      const missing = await chat();
      expect(missing, label).toBeInstanceOf(OpenAI.InternalServerError);
      expect(missing.status, label).toBe(502);
      expect(missing.code, label).toBe('upstream_error');
      expect(JSON.stringify(missing.error), label).not.toContain('fake-model');
    }
  });

  it('401 and 403 stay a 502 that relays nothing the upstream said', async () => {
    fake.enqueue(
      {
        status: 401,
        error: { message: `Incorrect API key provided: ${UPSTREAM_KEY}`, code: 'invalid_api_key' },
      },
      { status: 403, error: { message: 'Project lacks access', code: 'model_access_denied' } },
    );
    for (const label of ['401', '403']) {
      const err = await chat();
      expect(err, label).toBeInstanceOf(OpenAI.InternalServerError);
      expect(err.status, label).toBe(502);
      expect(err.code, label).toBe('upstream_error');
      expect(JSON.stringify(err.error), label).not.toMatch(
        /invalid_api_key|model_access_denied|Incorrect|access/,
      );
    }
  });

  it('a 429 keeps the upstream code and Retry-After', async () => {
    fake.enqueue({ status: 429, retryAfter: '3', error: { code: 'rate_limit_exceeded' } });
    const err = await chat();
    expect(err).toBeInstanceOf(OpenAI.RateLimitError);
    expect(err.code).toBe('rate_limit_exceeded');
    expect(err.headers?.get('retry-after')).toBe('3');
  });
});
