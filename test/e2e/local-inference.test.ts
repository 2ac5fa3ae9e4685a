import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LOCAL_CONFIG, startGantry, type TestGantry } from '../helpers/gantry.js';
import { assertOpenAISchema } from '../helpers/openapi.js';
import { restCall } from '../helpers/rest.js';

let gantry: TestGantry;
let client: OpenAI;

beforeAll(async () => {
  gantry = await startGantry(LOCAL_CONFIG);
  client = new OpenAI({ baseURL: gantry.baseURL, apiKey: gantry.key, maxRetries: 0 });
});
afterAll(() => gantry.close());

const messages = [
  { role: 'system' as const, content: 'You are terse.' },
  { role: 'user' as const, content: 'Tell me about gantries' },
];

const rawPost = (path: string, body: unknown) =>
  restCall<Record<string, unknown>>(gantry.origin, 'POST', path, { key: gantry.key, body });

describe('chat completions on the local model', () => {
  it('answers in the OpenAI format under the requested model name', async () => {
    const completion = await client.chat.completions.create({ model: 'gantry/local-chat', messages });
    assertOpenAISchema('CreateChatCompletionResponse', completion);
    expect(completion.model).toBe('gantry/local-chat');
    expect(completion.choices[0]?.message.content).toContain('gantries');
    expect(completion.usage?.total_tokens).toBe(
      (completion.usage?.prompt_tokens ?? 0) + (completion.usage?.completion_tokens ?? 0),
    );
  });

  it('streams chunks that add up to the same answer, with usage when asked', async () => {
    const plain = await client.chat.completions.create({ model: 'gantry/local-chat', messages });
    const stream = await client.chat.completions.create({
      model: 'gantry/local-chat',
      messages,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let usage: OpenAI.CompletionUsage | null | undefined;
    let finish: string | null | undefined;
    let chunks = 0;
    for await (const chunk of stream) {
      assertOpenAISchema('CreateChatCompletionStreamResponse', chunk);
      expect(chunk.model).toBe('gantry/local-chat');
      chunks++;
      text += chunk.choices[0]?.delta.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
      if (chunk.usage) usage = chunk.usage;
    }
    expect(chunks).toBeGreaterThan(3);
    expect(text).toBe(plain.choices[0]?.message.content);
    expect(finish).toBe('stop');
    expect(usage?.completion_tokens).toBe(plain.usage?.completion_tokens);
  });

  it('works with the SDK stream helper', async () => {
    const runner = client.chat.completions.stream({ model: 'gantry/local-chat', messages });
    const deltas: string[] = [];
    runner.on('content', (delta) => deltas.push(delta));
    const final = await runner.finalChatCompletion();
    expect(deltas.join('')).toBe(final.choices[0]?.message.content);
    expect(final.choices[0]?.finish_reason).toBe('stop');
  });

  it('honours max_tokens with finish_reason length', async () => {
    const completion = await client.chat.completions.create({
      model: 'gantry/local-chat',
      messages,
      max_tokens: 3,
    });
    expect(completion.choices[0]?.finish_reason).toBe('length');
    expect(completion.usage?.completion_tokens).toBe(3);
  });

  it('rejects invalid parameters with 400 INVALID_PARAMETER naming the param', async () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ messages }, 'model'],
      [{ model: 'gantry/local-chat', messages: 'hello' }, 'messages'],
      [{ model: 'gantry/local-chat', messages: [] }, 'messages'],
      [{ model: 'gantry/local-chat', messages: [{ role: 'wizard', content: 'x' }] }, 'messages[0].role'],
      [{ model: 'gantry/local-chat', messages: [{ role: 'user' }] }, 'messages[0].content'],
      [{ model: 'gantry/local-chat', messages, temperature: 2.5 }, 'temperature'],
      [{ model: 'gantry/local-chat', messages, temperature: 'hot' }, 'temperature'],
      [{ model: 'gantry/local-chat', messages, top_p: 1.5 }, 'top_p'],
      [{ model: 'gantry/local-chat', messages, presence_penalty: -3 }, 'presence_penalty'],
      [{ model: 'gantry/local-chat', messages, max_tokens: 0 }, 'max_tokens'],
      [{ model: 'gantry/local-chat', messages, stop: ['a', 'b', 'c', 'd', 'e'] }, 'stop'],
      [{ model: 'gantry/local-chat', messages, stop: 7 }, 'stop'],
      [{ model: 'gantry/local-chat', messages, stream: 'yes' }, 'stream'],
      [{ model: 'gantry/local-chat', messages, stream_options: { include_usage: true } }, 'stream_options'],
    ];
    for (const [body, param] of cases) {
      const res = await rawPost('/v1/chat/completions', body);
      expect(res.status, param).toBe(400);
      expect(res.body, param).toMatchObject({
        error: { error_id: 'INVALID_PARAMETER', param, type: 'invalid_request_error' },
      });
    }
    await expect(
      client.chat.completions.create({ model: 'gantry/local-chat', messages, temperature: 9 }),
    ).rejects.toBeInstanceOf(OpenAI.BadRequestError);
  });

  it('answers 404 for an unknown model and 422 MODEL_NOT_SUPPORTED for the wrong API', async () => {
    const unknown = await client.chat.completions
      .create({ model: 'nobody/nothing', messages })
      .catch((e: unknown) => e);
    expect(unknown).toBeInstanceOf(OpenAI.NotFoundError);
    expect((unknown as InstanceType<typeof OpenAI.NotFoundError>).code).toBe('model_not_found');

    const predictionsOnly = await client.chat.completions
      .create({ model: 'acme/image-gen', messages })
      .catch((e: unknown) => e);
    expect(predictionsOnly).toBeInstanceOf(OpenAI.UnprocessableEntityError);
    expect((predictionsOnly as InstanceType<typeof OpenAI.APIError>).error).toMatchObject({
      error_id: 'MODEL_NOT_SUPPORTED',
    });

    const wrongApi = await client.chat.completions
      .create({ model: 'gantry/local-embed', messages })
      .catch((e: unknown) => e);
    expect(wrongApi).toBeInstanceOf(OpenAI.UnprocessableEntityError);

    const hidden = await new OpenAI({
      baseURL: gantry.baseURL,
      apiKey: gantry.otherKey,
      maxRetries: 0,
    }).chat.completions
      .create({ model: 'acme/secret-chat', messages })
      .catch((e: unknown) => e);
    expect(hidden).toBeInstanceOf(OpenAI.NotFoundError);
  });
});

describe('embeddings on the local model', () => {
  it('returns vectors aligned by index, as floats or base64, honouring dimensions', async () => {
    const input = ['the quick brown fox', 'a slow green turtle', 'the quick brown fox'];
    const floats = await rawPost('/v1/embeddings', {
      model: 'gantry/local-embed',
      input,
      encoding_format: 'float',
    });
    expect(floats.status).toBe(200);
    assertOpenAISchema('CreateEmbeddingResponse', floats.body);
    const data = floats.body.data as Array<{ index: number; embedding: number[] }>;
    expect(data.map((d) => d.index)).toEqual([0, 1, 2]);
    expect(data[0]?.embedding).toEqual(data[2]?.embedding);
    expect(data[0]?.embedding).not.toEqual(data[1]?.embedding);
    expect(floats.body.model).toBe('gantry/local-embed');

    const b64 = await rawPost('/v1/embeddings', {
      model: 'gantry/local-embed',
      input,
      encoding_format: 'base64',
    });
    const encoded = (b64.body.data as Array<{ embedding: string }>)[1]?.embedding ?? '';
    const decoded = Array.from(new Float32Array(new Uint8Array(Buffer.from(encoded, 'base64')).buffer));
    const expected = data[1]?.embedding ?? [];
    expect(decoded.length).toBe(expected.length);
    decoded.forEach((v, i) => {
      expect(v).toBeCloseTo(expected[i] ?? Number.NaN, 6);
    });

    // The SDK asks for base64 by default and decodes it itself.
    const viaSdk = await client.embeddings.create({
      model: 'gantry/local-embed',
      input: 'the quick brown fox',
      dimensions: 64,
    });
    expect(viaSdk.data[0]?.embedding.length).toBe(64);
  });

  it('rejects bad input with the param named', async () => {
    for (const [body, param] of [
      [{ model: 'gantry/local-embed', input: '' }, 'input'],
      [{ model: 'gantry/local-embed', input: [1.5, 2] }, 'input'],
      [{ model: 'gantry/local-embed', input: 'x', encoding_format: 'hex' }, 'encoding_format'],
      [{ model: 'gantry/local-embed', input: 'x', dimensions: -4 }, 'dimensions'],
    ] as const) {
      const res = await rawPost('/v1/embeddings', body);
      expect(res.status, param).toBe(400);
      expect(res.body, param).toMatchObject({ error: { param } });
    }
  });
});

describe('responses bridged onto chat', () => {
  it('returns a Response with output_text, and continues from previous_response_id', async () => {
    const first = await client.responses.create({
      model: 'gantry/local-chat',
      instructions: 'Be brief.',
      input: 'My name is Ada',
    });
    assertOpenAISchema('Response', first);
    expect(first.status).toBe('completed');
    expect(first.output_text).toContain('Ada');
    expect(first.usage?.input_tokens).toBeGreaterThan(0);

    const second = await client.responses.create({
      model: 'gantry/local-chat',
      input: [{ role: 'user', content: 'What did I say?' }],
      previous_response_id: first.id,
    });
    expect(second.output_text).toContain('What did I say?');
    // The history was sent: the prompt is larger than the second message alone.
    expect(second.usage?.input_tokens).toBeGreaterThan(first.usage?.input_tokens ?? 0);

    const retrieved = await client.responses.retrieve(first.id);
    expect(retrieved.id).toBe(first.id);
  });

  it('answers 404 in the inference envelope for an unknown previous_response_id', async () => {
    const err = await client.responses
      .create({ model: 'gantry/local-chat', input: 'hi', previous_response_id: 'resp_nope' })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    expect((err as InstanceType<typeof OpenAI.APIError>).param).toBe('previous_response_id');
  });

  it('streams the OpenAI event sequence', async () => {
    const stream = client.responses.stream({
      model: 'gantry/local-chat',
      input: 'Stream to me',
      max_output_tokens: 50,
    });
    const types: string[] = [];
    const sequence: number[] = [];
    for await (const event of stream) {
      assertOpenAISchema('ResponseStreamEvent', event);
      types.push(event.type);
      sequence.push(event.sequence_number);
    }
    const final = await stream.finalResponse();
    expect(final.output_text).toContain('Stream to me');
    const distinct = types.filter((t, i) => t !== types[i - 1]);
    expect(distinct).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.delta',
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.completed',
    ]);
    expect(sequence).toEqual(sequence.map((_, i) => i));
  });
});
