import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { parseSse } from '../../providers/sse.js';
import type { SseEvent } from '../../providers/types.js';
import { type FakeOpenAI, fakeEmbedding, fakeReply, replyPieces, startFakeOpenAI } from './fake-openai.js';
import { assertOpenAISchema } from './openapi.js';

let fake: FakeOpenAI;
let client: OpenAI;

beforeAll(async () => {
  fake = await startFakeOpenAI({ models: ['fake-model', 'fake-embedding'] });
  client = new OpenAI({ baseURL: fake.url, apiKey: 'sk-test', maxRetries: 0, logLevel: 'off' });
});
afterAll(async () => {
  await fake.close();
});
beforeEach(() => {
  fake.reset();
});

async function post(path: string, body: unknown, signal?: AbortSignal): Promise<Response> {
  return fetch(`${fake.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer sk-test' },
    body: JSON.stringify(body),
    ...(signal ? { signal } : {}),
  });
}

async function rawEvents(res: Response): Promise<SseEvent[]> {
  const events: SseEvent[] = [];
  if (!res.body) throw new Error('no body');
  for await (const e of parseSse(res.body)) events.push(e);
  return events;
}

/** The Responses event schema for each event type the fake sends. */
const RESPONSE_EVENT_SCHEMAS: Record<string, string> = {
  'response.created': 'ResponseCreatedEvent',
  'response.in_progress': 'ResponseInProgressEvent',
  'response.output_item.added': 'ResponseOutputItemAddedEvent',
  'response.content_part.added': 'ResponseContentPartAddedEvent',
  'response.output_text.delta': 'ResponseTextDeltaEvent',
  'response.output_text.done': 'ResponseTextDoneEvent',
  'response.content_part.done': 'ResponseContentPartDoneEvent',
  'response.output_item.done': 'ResponseOutputItemDoneEvent',
  'response.completed': 'ResponseCompletedEvent',
  'response.incomplete': 'ResponseIncompleteEvent',
  error: 'ResponseErrorEvent',
};

const messages = (text: string): OpenAI.Chat.ChatCompletionMessageParam[] => [
  { role: 'system', content: 'be brief' },
  { role: 'user', content: text },
];

const chatBody = (
  text: string,
  extra: Partial<OpenAI.Chat.ChatCompletionCreateParamsNonStreaming> = {},
): OpenAI.Chat.ChatCompletionCreateParamsNonStreaming => ({
  model: 'fake-model',
  messages: messages(text),
  ...extra,
});

const streamBody = (
  text: string,
  extra: Partial<OpenAI.Chat.ChatCompletionCreateParamsStreaming> = {},
): OpenAI.Chat.ChatCompletionCreateParamsStreaming => ({
  model: 'fake-model',
  messages: messages(text),
  ...extra,
  stream: true,
});

describe('fake OpenAI: chat completions', () => {
  it('answers a non-stream request with a valid chat.completion echoing the user', async () => {
    const completion = await client.chat.completions.create(chatBody('hello there'));
    expect(completion.choices[0]?.message.content).toBe('You said: hello there');
    expect(completion.choices[0]?.finish_reason).toBe('stop');
    expect(completion.model).toBe('fake-model');
    expect(completion.usage).toMatchObject({ prompt_tokens: 4, completion_tokens: 4, total_tokens: 8 });
    assertOpenAISchema('CreateChatCompletionResponse', completion);

    const [recorded] = fake.requests;
    expect(recorded?.method).toBe('POST');
    expect(recorded?.path).toBe('/v1/chat/completions');
    expect(recorded?.headers.authorization).toBe('Bearer sk-test');
    expect(recorded?.body).toMatchObject({
      model: 'fake-model',
      messages: [{ role: 'system' }, { role: 'user' }],
    });
    expect(await recorded?.settled).toBe('finished');
    expect(recorded?.aborted).toBe(false);
  });

  it('reads text parts of array content', async () => {
    const completion = await client.chat.completions.create({
      model: 'fake-model',
      messages: [{ role: 'user', content: [{ type: 'text', text: 'parts work' }] }],
    });
    expect(completion.choices[0]?.message.content).toBe(fakeReply('parts work'));
  });

  it('streams role, word deltas, finish_reason, usage (when asked) and [DONE]', async () => {
    const stream = await client.chat.completions.create(
      streamBody('stream me please', { stream_options: { include_usage: true } }),
    );
    const chunks: OpenAI.Chat.Completions.ChatCompletionChunk[] = [];
    for await (const chunk of stream) chunks.push(chunk);
    for (const chunk of chunks) assertOpenAISchema('CreateChatCompletionStreamResponse', chunk);

    expect(chunks[0]?.choices[0]?.delta.role).toBe('assistant');
    const text = chunks.map((c) => c.choices[0]?.delta.content ?? '').join('');
    expect(text).toBe(fakeReply('stream me please'));
    const contentChunks = chunks.filter((c) => (c.choices[0]?.delta.content ?? '') !== '');
    expect(contentChunks.length).toBe(replyPieces(text).length);
    const finish = chunks.at(-2);
    expect(finish?.choices[0]?.finish_reason).toBe('stop');
    const usageChunk = chunks.at(-1);
    expect(usageChunk?.choices).toEqual([]);
    expect(usageChunk?.usage?.completion_tokens).toBe(contentChunks.length);
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1);
  });

  it('sends the exact SSE framing and no usage chunk unless include_usage', async () => {
    const res = await post('/chat/completions', streamBody('raw bytes'));
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const text = await res.text();
    expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
    const blocks = text.split('\n\n').filter((b) => b !== '');
    for (const block of blocks) expect(block).toMatch(/^data: [^\n]+$/);
    const chunks = blocks
      .slice(0, -1)
      .map((b) => JSON.parse(b.slice('data: '.length)) as Record<string, unknown>);
    for (const chunk of chunks) {
      assertOpenAISchema('CreateChatCompletionStreamResponse', chunk);
      expect(chunk).not.toHaveProperty('usage');
    }
    expect(chunks.at(-1)).toMatchObject({ choices: [{ finish_reason: 'stop', delta: {} }] });
  });

  it('honours max_tokens with finish_reason length', async () => {
    const completion = await client.chat.completions.create(
      chatBody('one two three four', { max_tokens: 2 }),
    );
    expect(completion.choices[0]?.message.content).toBe('You said:');
    expect(completion.choices[0]?.finish_reason).toBe('length');
  });

  it('answers with a tool call, streamed and not', async () => {
    fake.setBehavior({ toolCall: { name: 'get_weather', arguments: '{"city":"Paris"}' } });
    const completion = await client.chat.completions.create(chatBody('weather?'));
    assertOpenAISchema('CreateChatCompletionResponse', completion);
    const call = completion.choices[0]?.message.tool_calls?.[0];
    expect(call?.type === 'function' ? call.function : undefined).toEqual({
      name: 'get_weather',
      arguments: '{"city":"Paris"}',
    });
    expect(completion.choices[0]?.finish_reason).toBe('tool_calls');

    const stream = await client.chat.completions.create(streamBody('weather?'));
    let args = '';
    let name = '';
    for await (const chunk of stream) {
      assertOpenAISchema('CreateChatCompletionStreamResponse', chunk);
      for (const tc of chunk.choices[0]?.delta.tool_calls ?? []) {
        args += tc.function?.arguments ?? '';
        name += tc.function?.name ?? '';
      }
    }
    expect(name).toBe('get_weather');
    expect(args).toBe('{"city":"Paris"}');
  });

  it('answers with parallel tool calls in OpenAI’s chunk form, which the SDK stream helper assembles', async () => {
    const calls = [
      { name: 'get_weather', arguments: '{"city":"Paris"}' },
      { name: 'get_time', arguments: '{"tz":"CET"}' },
    ];
    fake.setBehavior({ toolCalls: calls });
    const completion = await client.chat.completions.create(chatBody('both?'));
    assertOpenAISchema('CreateChatCompletionResponse', completion);
    const toolCalls = completion.choices[0]?.message.tool_calls ?? [];
    expect(toolCalls.map((c) => (c.type === 'function' ? c.function : undefined))).toEqual(calls);
    expect(new Set(toolCalls.map((c) => c.id)).size).toBe(2);

    const res = await post('/chat/completions', streamBody('both?'));
    const deltas = (await rawEvents(res))
      .filter((e) => e.data !== '[DONE]')
      .map((e) => {
        const chunk = JSON.parse(e.data);
        assertOpenAISchema('CreateChatCompletionStreamResponse', chunk);
        return chunk.choices[0]?.delta;
      });
    // First delta of each call: index, id, type, name, arguments ''; the first one also opens the message.
    expect(deltas[0]).toEqual({
      role: 'assistant',
      content: null,
      tool_calls: [
        {
          index: 0,
          id: expect.any(String),
          type: 'function',
          function: { name: 'get_weather', arguments: '' },
        },
      ],
      refusal: null,
    });
    expect(deltas[1]).toEqual({ tool_calls: [{ index: 0, function: { arguments: expect.any(String) } }] });
    const secondOpen = deltas.findIndex((d) => d?.tool_calls?.[0]?.index === 1);
    expect(deltas[secondOpen]).toEqual({
      tool_calls: [
        { index: 1, id: expect.any(String), type: 'function', function: { name: 'get_time', arguments: '' } },
      ],
    });

    const final = await client.chat.completions.stream(streamBody('both?')).finalChatCompletion();
    expect(
      final.choices[0]?.message.tool_calls?.map((c) => (c.type === 'function' ? c.function : undefined)),
    ).toEqual(calls);
    expect(final.choices[0]?.finish_reason).toBe('tool_calls');
  });

  it('sends reasoning_content on the message and as deltas before the answer', async () => {
    fake.setBehavior({ reasoning: 'Let me think.' });
    const completion = await client.chat.completions.create(chatBody('why?'));
    const message = completion.choices[0]?.message as unknown as Record<string, unknown>;
    expect(message.reasoning_content).toBe('Let me think.');
    expect(message.content).toBe(fakeReply('why?'));
    expect(completion.usage?.completion_tokens_details?.reasoning_tokens).toBe(3);

    const res = await post('/chat/completions', streamBody('why?'));
    const deltas = (await rawEvents(res))
      .filter((e) => e.data !== '[DONE]')
      .map((e) => JSON.parse(e.data).choices[0]?.delta ?? {});
    const reasoning = deltas.map((d) => d.reasoning_content ?? '').join('');
    const firstText = deltas.findIndex((d) => typeof d.content === 'string' && d.content !== '');
    const lastReasoning = deltas.findLastIndex((d) => d.reasoning_content !== undefined);
    expect(reasoning).toBe('Let me think.');
    expect(lastReasoning).toBeLessThan(firstText);
  });

  it('rejects a request without messages like OpenAI does', async () => {
    const res = await post('/chat/completions', { model: 'fake-model', messages: [] });
    expect(res.status).toBe(400);
    const body: unknown = await res.json();
    assertOpenAISchema('ErrorResponse', body);
    expect(body).toMatchObject({ error: { param: 'messages' } });
  });
});

describe('fake OpenAI: embeddings', () => {
  it('returns deterministic float vectors honouring dimensions', async () => {
    const res = await post('/embeddings', {
      model: 'fake-embedding',
      input: ['alpha', 'beta'],
      dimensions: 5,
    });
    const body = (await res.json()) as { data: { embedding: number[]; index: number }[] };
    assertOpenAISchema('CreateEmbeddingResponse', body);
    expect(body.data.map((d) => d.index)).toEqual([0, 1]);
    expect(body.data[0]?.embedding).toEqual(fakeEmbedding('alpha', 5));
    expect(body.data[0]?.embedding).toHaveLength(5);
    expect(body.data[0]?.embedding).not.toEqual(body.data[1]?.embedding);
    const norm = Math.hypot(...(body.data[0]?.embedding ?? []));
    expect(norm).toBeCloseTo(1, 5);
  });

  it('encodes base64 as little-endian float32, which the SDK decodes', async () => {
    // The SDK asks for base64 by default and decodes it itself.
    const result = await client.embeddings.create({ model: 'fake-embedding', input: 'gamma' });
    expect(fake.requests[0]?.body?.encoding_format).toBe('base64');
    expect(result.data[0]?.embedding).toEqual(fakeEmbedding('gamma', 16));

    const res = await post('/embeddings', {
      model: 'fake-embedding',
      input: 'gamma',
      encoding_format: 'base64',
    });
    const body = (await res.json()) as { data: { embedding: string }[] };
    const bytes = Buffer.from(body.data[0]?.embedding ?? '', 'base64');
    expect(bytes.length).toBe(16 * 4);
    expect(bytes.readFloatLE(4)).toBe(fakeEmbedding('gamma', 16)[1]);
  });

  it('rejects a missing input', async () => {
    await expect(client.embeddings.create({ model: 'fake-embedding', input: [] })).rejects.toMatchObject({
      status: 400,
      param: 'input',
    });
  });
});

describe('fake OpenAI: responses', () => {
  it('answers a non-stream request with a valid Response', async () => {
    const response = await client.responses.create({ model: 'fake-model', input: 'hi responses' });
    assertOpenAISchema('Response', response);
    expect(response.status).toBe('completed');
    expect(response.output_text).toBe(fakeReply('hi responses'));
  });

  it('streams the full event sequence with consecutive sequence numbers', async () => {
    const res = await post('/responses', {
      model: 'fake-model',
      input: [{ role: 'user', content: [{ type: 'input_text', text: 'stream responses' }] }],
      stream: true,
    });
    const events = await rawEvents(res);
    const types = events.map((e) => e.event);
    const reply = fakeReply('stream responses');
    expect(types).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      ...replyPieces(reply).map(() => 'response.output_text.delta'),
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.completed',
    ]);
    const datas = events.map((e) => JSON.parse(e.data) as { type: string; sequence_number: number });
    datas.forEach((data, i) => {
      expect(data.type).toBe(events[i]?.event);
      expect(data.sequence_number).toBe(i);
      assertOpenAISchema('ResponseStreamEvent', data);
      assertOpenAISchema(RESPONSE_EVENT_SCHEMAS[data.type] ?? 'missing', data);
    });
  });

  it('works with the SDK stream and ends incomplete at max_output_tokens', async () => {
    const stream = await client.responses.create({
      model: 'fake-model',
      input: 'a b c d e f',
      stream: true,
      max_output_tokens: 3,
    });
    let text = '';
    let last: OpenAI.Responses.ResponseStreamEvent | undefined;
    for await (const event of stream) {
      if (event.type === 'response.output_text.delta') text += event.delta;
      last = event;
    }
    expect(text).toBe('You said: a');
    expect(last?.type).toBe('response.incomplete');
    if (last?.type !== 'response.incomplete') return;
    assertOpenAISchema('ResponseIncompleteEvent', last);
    expect(last.response.incomplete_details?.reason).toBe('max_output_tokens');
  });
});

describe('fake OpenAI: stored responses', () => {
  it('retrieves, lists the input of and deletes the responses it keeps, as OpenAI answers', async () => {
    const created = await client.responses.create({ model: 'fake-model', input: 'keep' });
    const got = await client.responses.retrieve(created.id);
    assertOpenAISchema('Response', got);
    expect(got.output_text).toBe(fakeReply('keep'));
    const items = await client.responses.inputItems.list(created.id);
    expect(items.data).toEqual([
      expect.objectContaining({
        type: 'message',
        role: 'user',
        content: [{ type: 'input_text', text: 'keep' }],
      }),
    ]);
    const res = await fetch(`${fake.url}/responses/${created.id}`, {
      method: 'DELETE',
      headers: { authorization: 'Bearer sk-test' },
    });
    expect(await res.json()).toEqual({ id: created.id, object: 'response', deleted: true });
    await expect(client.responses.retrieve(created.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
  });

  it('keeps nothing with store false, and answers an unknown previous_response_id with 404', async () => {
    const created = await client.responses.create({ model: 'fake-model', input: 'forget', store: false });
    expect(fake.storedResponses.has(created.id)).toBe(false);
    const res = await post('/responses', {
      model: 'fake-model',
      input: 'x',
      previous_response_id: created.id,
    });
    expect(res.status).toBe(404);
    const body = await res.json();
    assertOpenAISchema('ErrorResponse', body);
    expect(body).toEqual({
      error: {
        message: `Previous response with id '${created.id}' not found.`,
        type: 'invalid_request_error',
        param: 'previous_response_id',
        code: 'previous_response_not_found',
      },
    });
  });
});

describe('fake OpenAI: models and echo', () => {
  it('lists and retrieves models', async () => {
    const page = await client.models.list();
    expect(page.data.map((m) => m.id)).toEqual(['fake-model', 'fake-embedding']);
    const res = await fetch(`${fake.url}/models`);
    assertOpenAISchema('ListModelsResponse', await res.json());
    const model = await client.models.retrieve('fake-model');
    assertOpenAISchema('Model', model);
    await expect(client.models.retrieve('nope')).rejects.toMatchObject({
      status: 404,
      code: 'model_not_found',
    });
  });

  it('echoes other endpoints', async () => {
    const res = await post('/moderations?x=1', { input: 'echo me' });
    expect(await res.json()).toMatchObject({
      echo: true,
      method: 'POST',
      path: '/v1/moderations?x=1',
      body: { input: 'echo me' },
      headers: { authorization: 'Bearer sk-test' },
    });
  });

  it('requires its api key when configured with one', async () => {
    const locked = await startFakeOpenAI({ apiKey: 'right' });
    try {
      const wrong = new OpenAI({ baseURL: locked.url, apiKey: 'wrong', maxRetries: 0 });
      await expect(wrong.models.list()).rejects.toMatchObject({ status: 401, code: 'invalid_api_key' });
      const right = new OpenAI({ baseURL: locked.url, apiKey: 'right', maxRetries: 0 });
      expect((await right.models.list()).data.length).toBeGreaterThan(0);
    } finally {
      await locked.close();
    }
  });
});

describe('fake OpenAI: scripted failures', () => {
  it.each([
    [400, OpenAI.BadRequestError],
    [401, OpenAI.AuthenticationError],
    [404, OpenAI.NotFoundError],
    [429, OpenAI.RateLimitError],
    [500, OpenAI.InternalServerError],
    [503, OpenAI.InternalServerError],
  ])('answers status %i with an OpenAI error body', async (status, errorClass) => {
    fake.enqueue({ status, error: { message: `scripted ${status}` } });
    const err: unknown = await client.chat.completions.create(chatBody('x')).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(errorClass);
    expect(err).toMatchObject({ status, message: expect.stringContaining(`scripted ${status}`) });

    fake.enqueue({ status });
    const res = await post('/chat/completions', chatBody('x'));
    expect(res.status).toBe(status);
    assertOpenAISchema('ErrorResponse', await res.json());
    expect(res.headers.get('retry-after')).toBe(status === 429 ? '1' : null);
  });

  it('uses queued behaviours in order, then the default', async () => {
    fake.setBehavior({ reply: 'default reply' });
    fake.enqueue({ status: 503 }, { reply: 'second' });
    expect((await post('/chat/completions', chatBody('x'))).status).toBe(503);
    expect((await client.chat.completions.create(chatBody('x'))).choices[0]?.message.content).toBe('second');
    expect((await client.chat.completions.create(chatBody('x'))).choices[0]?.message.content).toBe(
      'default reply',
    );
  });

  it('delays headers', async () => {
    fake.enqueue({ delayHeadersMs: 150 });
    const start = performance.now();
    await client.chat.completions.create(chatBody('slow'));
    expect(performance.now() - start).toBeGreaterThanOrEqual(140);
  });

  it('delays between chunks', async () => {
    fake.enqueue({ delayBetweenChunksMs: 30 });
    const res = await post('/chat/completions', streamBody('a b'));
    const start = performance.now();
    const events = await rawEvents(res);
    // role, 4 words, finish, [DONE]: six more delays after the headers.
    expect(events).toHaveLength(7);
    expect(performance.now() - start).toBeGreaterThanOrEqual(150);
  });

  it('hangs up before answering', async () => {
    fake.enqueue({ hangUp: true });
    await expect(post('/chat/completions', chatBody('x'))).rejects.toThrow();
    expect(await fake.requests[0]?.settled).toBe('cut');
  });

  it('closes the socket mid-stream after N chunks', async () => {
    fake.enqueue({ closeAfterChunks: 2 });
    const res = await post('/chat/completions', streamBody('cut me off'));
    const seen: SseEvent[] = [];
    await expect(
      (async () => {
        if (!res.body) throw new Error('no body');
        for await (const e of parseSse(res.body)) seen.push(e);
      })(),
    ).rejects.toThrow();
    expect(seen).toHaveLength(2);
    expect(seen.some((e) => e.data === '[DONE]')).toBe(false);
    expect(await fake.requests[0]?.settled).toBe('cut');
    expect(fake.requests[0]?.aborted).toBe(false);
  });

  it('stalls after N chunks until the client leaves, and records the abort', async () => {
    fake.enqueue({ stallAfterChunks: 1 });
    const controller = new AbortController();
    const res = await post('/chat/completions', streamBody('stall'), controller.signal);
    const reader = res.body?.getReader();
    const first = await reader?.read();
    expect(new TextDecoder().decode(first?.value)).toMatch(/^data: \{.*"role":"assistant"/);
    const next = reader?.read().catch(() => 'aborted');
    const timeout = new Promise((resolve) => setTimeout(() => resolve('silent'), 100));
    expect(await Promise.race([next, timeout])).toBe('silent');
    controller.abort();
    expect(await fake.requests[0]?.settled).toBe('aborted');
    expect(fake.requests[0]?.aborted).toBe(true);
  });

  it('stalls and cuts non-stream bodies too', async () => {
    fake.enqueue({ closeAfterChunks: 1 });
    const res = await post('/chat/completions', chatBody('x'));
    expect(res.status).toBe(200);
    await expect(res.text()).rejects.toThrow();
  });

  it('sends malformed stream data the SDK cannot parse', async () => {
    fake.enqueue({ malformed: true });
    const stream = await client.chat.completions.create(streamBody('x'));
    await expect(
      (async () => {
        for await (const _ of stream) {
          // drain
        }
      })(),
    ).rejects.toThrow(SyntaxError);

    fake.enqueue({ malformed: true });
    const res = await post('/chat/completions', chatBody('x'));
    await expect(res.json()).rejects.toThrow(SyntaxError);
  });

  it('streams a vLLM-style error event in chat, which the SDK raises', async () => {
    fake.enqueue({ errorEvent: { afterChunks: 2, message: 'CUDA out of memory' } });
    const stream = await client.chat.completions.create(streamBody('x'));
    const seen: unknown[] = [];
    const err: unknown = await (async () => {
      for await (const chunk of stream) seen.push(chunk);
    })().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect(String((err as Error).message)).toContain('CUDA out of memory');
    expect(seen).toHaveLength(2);

    fake.enqueue({ errorEvent: { afterChunks: 1, message: 'boom', code: 503 } });
    const events = await rawEvents(await post('/chat/completions', streamBody('x')));
    expect(events).toHaveLength(2);
    expect(JSON.parse(events[1]?.data ?? '')).toEqual({
      error: { object: 'error', message: 'boom', type: 'InternalServerError', param: null, code: 503 },
    });
  });

  it('streams an OpenAI error event in responses, ending the stream', async () => {
    fake.enqueue({ errorEvent: { afterChunks: 3, message: 'overloaded' } });
    const events = await rawEvents(
      await post('/responses', { model: 'fake-model', input: 'x', stream: true }),
    );
    expect(events.map((e) => e.event)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'error',
    ]);
    const error: unknown = JSON.parse(events[3]?.data ?? '');
    assertOpenAISchema('ResponseErrorEvent', error);
    expect(error).toMatchObject({ message: 'overloaded', sequence_number: 3 });
  });
});
