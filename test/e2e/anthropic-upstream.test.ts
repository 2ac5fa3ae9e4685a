/**
 * Gantry in front of Anthropic's Messages API (the fake), driven with the official OpenAI SDK: chat JSON
 * and streams translated both ways, parameters Anthropic cannot honour refused, and the Responses API
 * bridged onto it with Gantry's own history.
 */
import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { errorOf } from '../helpers/api-error.js';
import {
  anthropicFakeReply,
  anthropicPieces,
  countWords,
  type FakeAnthropic,
  type RecordedAnthropicRequest,
  startFakeAnthropic,
} from '../helpers/fake-anthropic.js';
import { startGantry, type TestGantry } from '../helpers/gantry.js';
import { assertOpenAISchema } from '../helpers/openapi.js';

const UPSTREAM_KEY = 'sk-ant-upstream-0123456789';
const MODEL = 'anthropic/claude';

let fake: FakeAnthropic;
let gantry: TestGantry;
let client: OpenAI;

beforeAll(async () => {
  fake = await startFakeAnthropic({ apiKey: UPSTREAM_KEY });
  gantry = await startGantry(
    `
providers:
  claude:
    kind: anthropic
    base_url: ${fake.url}
    api_key_env: ANTHROPIC_KEY
    timeouts: { connect_ms: 1000, first_byte_ms: 5000, idle_ms: 5000, total_ms: 10000 }
models:
  - namespace: ${MODEL}
    name: Claude
    type: text
    routes: [{ provider: claude, model: claude-upstream }]
    defaults: { max_tokens: 64 }
`,
    { ANTHROPIC_KEY: UPSTREAM_KEY },
  );
  client = new OpenAI({ baseURL: gantry.baseURL, apiKey: gantry.key, maxRetries: 0 });
});
afterAll(async () => {
  await gantry?.close();
  await fake?.close();
});
beforeEach(() => {
  fake.reset();
});

const ASK = 'Tell me about gantries';
const messages: OpenAI.ChatCompletionMessageParam[] = [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: ASK },
];
/** The fake's prompt token count for `messages`: words of the system prompt and the user turn. */
const PROMPT_TOKENS = countWords('You are terse.') + countWords(ASK);

function only(requests: RecordedAnthropicRequest[]): RecordedAnthropicRequest {
  expect(requests).toHaveLength(1);
  const req = requests[0];
  if (!req) throw new Error('the fake upstream received no request');
  return req;
}

function expectGantryCredential(req: RecordedAnthropicRequest): void {
  expect(req.method).toBe('POST');
  expect(req.path).toBe('/v1/messages');
  expect(req.headers['x-api-key']).toBe(UPSTREAM_KEY);
  expect(req.headers['anthropic-version']).toBe('2023-06-01');
  expect(req.headers.authorization).toBeUndefined();
  expect(JSON.stringify(req.headers)).not.toContain(gantry.key);
}

describe('chat completions through Anthropic', () => {
  it('translates the request into the Messages API and the answer back', async () => {
    const completion = await client.chat.completions.create({
      model: MODEL,
      messages,
      temperature: 0.5,
      top_p: 0.8,
      max_tokens: 40,
      user: 'end-user-7',
    });
    assertOpenAISchema('CreateChatCompletionResponse', completion);
    const reply = anthropicFakeReply(ASK);
    expect(completion).toMatchObject({
      object: 'chat.completion',
      model: MODEL,
      choices: [{ index: 0, message: { role: 'assistant', content: reply }, finish_reason: 'stop' }],
      usage: {
        prompt_tokens: PROMPT_TOKENS,
        completion_tokens: anthropicPieces(reply).length,
        total_tokens: PROMPT_TOKENS + anthropicPieces(reply).length,
      },
    });

    const req = only(fake.requests);
    expectGantryCredential(req);
    expect(req.body).toEqual({
      model: 'claude-upstream',
      system: 'You are terse.',
      messages: [{ role: 'user', content: ASK }],
      max_tokens: 40,
      temperature: 0.5, // top_p left out: newer Anthropic models refuse both
      metadata: { user_id: 'end-user-7' },
    });
  });

  it('fills max_tokens from the model defaults, since Anthropic requires it', async () => {
    await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] });
    expect(only(fake.requests).body).toEqual({
      model: 'claude-upstream',
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 64,
    });
  });

  it('maps stop sequences and the finish reasons', async () => {
    const stopped = await client.chat.completions.create({
      model: MODEL,
      messages,
      stop: ['gantries', 'zz'],
    });
    expect(fake.requests[0]?.body?.stop_sequences).toEqual(['gantries', 'zz']);
    expect(stopped.choices[0]?.message.content).toBe('You said: Tell me about ');
    expect(stopped.choices[0]?.finish_reason).toBe('stop');

    const single = await client.chat.completions.create({ model: MODEL, messages, stop: 'about' });
    expect(fake.requests[1]?.body?.stop_sequences).toEqual(['about']);
    expect(single.choices[0]?.message.content).toBe('You said: Tell me ');

    const cut = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 2 });
    expect(fake.requests[2]?.body?.max_tokens).toBe(2);
    expect(cut.choices[0]?.message.content).toBe('You said:');
    expect(cut.choices[0]?.finish_reason).toBe('length');
    expect(cut.usage?.completion_tokens).toBe(2);

    const newer = await client.chat.completions.create({ model: MODEL, messages, max_completion_tokens: 3 });
    expect(fake.requests[3]?.body?.max_tokens).toBe(3);
    expect(newer.choices[0]?.finish_reason).toBe('length');

    fake.enqueue({ stopReason: 'refusal' });
    const refused = await client.chat.completions.create({ model: MODEL, messages });
    expect(refused.choices[0]?.finish_reason).toBe('content_filter');
  });

  it('streams translated chunks with usage when include_usage is on', async () => {
    const stream = await client.chat.completions.create({
      model: MODEL,
      messages,
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks: OpenAI.ChatCompletionChunk[] = [];
    for await (const chunk of stream) {
      assertOpenAISchema('CreateChatCompletionStreamResponse', chunk);
      expect(chunk.model).toBe(MODEL);
      chunks.push(chunk);
    }
    const reply = anthropicFakeReply(ASK);
    const pieces = anthropicPieces(reply);
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe(reply);
    expect(chunks[0]?.choices[0]?.delta.role).toBe('assistant');
    // role chunk, one per word, finish chunk, usage chunk
    expect(chunks).toHaveLength(pieces.length + 3);
    expect(chunks.at(-2)?.choices[0]?.finish_reason).toBe('stop');
    const last = chunks.at(-1);
    expect(last?.choices).toEqual([]);
    expect(last?.usage).toMatchObject({
      prompt_tokens: PROMPT_TOKENS,
      completion_tokens: pieces.length,
      total_tokens: PROMPT_TOKENS + pieces.length,
    });
    expect(chunks.slice(0, -1).every((c) => c.usage === null)).toBe(true);
    const req = only(fake.requests);
    expectGantryCredential(req);
    expect(req.body).toMatchObject({ model: 'claude-upstream', stream: true, system: 'You are terse.' });
    expect(req.body).not.toHaveProperty('stream_options');
  });

  it('streams without a usage chunk when include_usage is off, and reports length cuts', async () => {
    const stream = await client.chat.completions.create({
      model: MODEL,
      messages,
      stream: true,
      max_tokens: 3,
    });
    const chunks: OpenAI.ChatCompletionChunk[] = [];
    for await (const chunk of stream) {
      assertOpenAISchema('CreateChatCompletionStreamResponse', chunk);
      expect(chunk.model).toBe(MODEL);
      expect(chunk.usage).toBeUndefined();
      expect(chunk.choices).toHaveLength(1);
      chunks.push(chunk);
    }
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe('You said: Tell');
    expect(chunks.at(-1)?.choices[0]?.finish_reason).toBe('length');

    // The raw bytes: the upstream name never shows, and the stream ends with [DONE].
    const res = await fetch(`${gantry.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${gantry.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages, stream: true }),
    });
    const raw = await res.text();
    expect(raw).not.toContain('claude-upstream');
    expect(raw.endsWith('data: [DONE]\n\n')).toBe(true);
  });

  it('refuses a parameter Anthropic cannot honour with a 400 naming it, before any upstream call', async () => {
    const n = await errorOf(client.chat.completions.create({ model: MODEL, messages, n: 2 }));
    expect(n).toBeInstanceOf(OpenAI.BadRequestError);
    expect(n.status).toBe(400);
    expect(n.param).toBe('n');
    expect(n.message).toMatch(/n = 1/);
    expect(n.error).toMatchObject({ error_id: 'INVALID_PARAMETER', type: 'invalid_request_error' });

    const seed = await errorOf(client.chat.completions.create({ model: MODEL, messages, seed: 1 }));
    expect(seed).toBeInstanceOf(OpenAI.BadRequestError);
    expect(seed.param).toBe('seed');

    // OpenAI allows temperature up to 2, Anthropic only up to 1.
    const hot = await errorOf(client.chat.completions.create({ model: MODEL, messages, temperature: 1.5 }));
    expect(hot).toBeInstanceOf(OpenAI.BadRequestError);
    expect(hot.param).toBe('temperature');

    const streamed = await errorOf(
      client.chat.completions.create({
        model: MODEL,
        messages,
        stream: true,
        logprobs: true,
      }),
    );
    expect(streamed).toBeInstanceOf(OpenAI.BadRequestError);
    expect(streamed.param).toBe('logprobs');

    expect(fake.requests).toHaveLength(0);
  });
});

describe('Responses bridged onto Anthropic', () => {
  it('creates a Response and continues it with previous_response_id', async () => {
    const first = await client.responses.create({
      model: MODEL,
      instructions: 'Be brief.',
      input: 'My name is Ada',
      max_output_tokens: 30,
    });
    assertOpenAISchema('Response', first);
    expect(first.model).toBe(MODEL);
    expect(first.status).toBe('completed');
    expect(first.output_text).toBe(anthropicFakeReply('My name is Ada'));
    expect(first.usage).toMatchObject({
      input_tokens: countWords('Be brief. My name is Ada'),
      output_tokens: anthropicPieces(anthropicFakeReply('My name is Ada')).length,
    });
    const firstReq = only(fake.requests);
    expectGantryCredential(firstReq);
    expect(firstReq.body).toEqual({
      model: 'claude-upstream',
      system: 'Be brief.',
      messages: [{ role: 'user', content: 'My name is Ada' }],
      max_tokens: 30,
    });

    const second = await client.responses.create({
      model: MODEL,
      input: [{ role: 'user', content: 'What is my name?' }],
      previous_response_id: first.id,
    });
    expect(second.output_text).toBe(anthropicFakeReply('What is my name?'));
    // The history went upstream; instructions are not carried over (as OpenAI does).
    expect(fake.requests[1]?.body).toEqual({
      model: 'claude-upstream',
      messages: [
        { role: 'user', content: 'My name is Ada' },
        { role: 'assistant', content: anthropicFakeReply('My name is Ada') },
        { role: 'user', content: 'What is my name?' },
      ],
      max_tokens: 64,
    });
  });

  it('streams a Response with responses.stream(), which a later request can continue', async () => {
    const stream = client.responses.stream({
      model: MODEL,
      input: 'Stream to me',
      instructions: 'Be brief.',
    });
    const types: string[] = [];
    let text = '';
    for await (const event of stream) {
      assertOpenAISchema('ResponseStreamEvent', event);
      types.push(event.type);
      if (event.type === 'response.output_text.delta') text += event.delta;
    }
    const final = await stream.finalResponse();
    const reply = anthropicFakeReply('Stream to me');
    expect(text).toBe(reply);
    expect(final.output_text).toBe(reply);
    expect(final.model).toBe(MODEL);
    expect(final.status).toBe('completed');
    expect(final.usage?.output_tokens).toBe(anthropicPieces(reply).length);
    expect(types.filter((t, i) => t !== types[i - 1])).toEqual([
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
    expect(fake.requests[0]?.body).toMatchObject({ stream: true, system: 'Be brief.' });

    const next = await client.responses.create({
      model: MODEL,
      input: 'And again',
      previous_response_id: final.id,
    });
    expect(next.output_text).toBe(anthropicFakeReply('And again'));
    expect(fake.requests[1]?.body?.messages).toEqual([
      { role: 'user', content: 'Stream to me' },
      { role: 'assistant', content: reply },
      { role: 'user', content: 'And again' },
    ]);
  });

  it('refuses what Anthropic cannot do in the Responses API too', async () => {
    const err = await errorOf(
      // A hosted tool: the bridge has no web search to offer, whatever the upstream.
      client.responses.create({ model: MODEL, input: 'search the web', tools: [{ type: 'web_search' }] }),
    );
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect(err.param).toMatch(/tools/);
    // Logprobs: the Anthropic adapter's own refusal, reached through the bridge.
    const logprobs = await errorOf(
      client.responses.create({ model: MODEL, input: 'hi', top_logprobs: 3 } as never),
    );
    expect(logprobs).toBeInstanceOf(OpenAI.BadRequestError);
    expect(fake.requests).toHaveLength(0);
  });
});
