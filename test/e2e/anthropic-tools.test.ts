/**
 * Gantry in front of Anthropic's Messages API (the fake) with what agents and extraction clients send,
 * driven with the official OpenAI SDK: tool calls (JSON, streams, parallel, round trips, the SDK's stream
 * helper and runTools), structured output, images, thinking with signatures across turns, and prompt
 * cache usage in answers and in usage records. Every JSON body and SSE chunk Gantry sends is validated
 * against OpenAI's OpenAPI schemas.
 */
import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  anthropicFakeReply,
  anthropicFakeSignature,
  anthropicFakeThinking,
  type FakeAnthropic,
  type JsonObject,
  startFakeAnthropic,
} from '../helpers/fake-anthropic.js';
import { startGantry, type TestGantry } from '../helpers/gantry.js';
import { assertOpenAISchema } from '../helpers/openapi.js';
import { parseSse } from '../helpers/sse-events.js';
import { ledgerRecords } from '../helpers/usage.js';

const MODEL = 'anthropic/claude-tools';
/** A model with README's documented defaults, temperature and top_p both set. */
const DEFAULTS_MODEL = 'anthropic/claude-defaults';

let fake: FakeAnthropic;
let gantry: TestGantry;
let client: OpenAI;

beforeAll(async () => {
  fake = await startFakeAnthropic();
  gantry = await startGantry(`
providers:
  claude:
    kind: anthropic
    base_url: ${fake.url}
    timeouts: { connect_ms: 1000, first_byte_ms: 5000, idle_ms: 5000, total_ms: 10000 }
models:
  - namespace: ${MODEL}
    name: Claude with tools
    type: text
    capabilities: [text-to-text, image-to-text]   # image-to-text: Gantry lets image parts through
    billable: true
    pricing:
      amount: 10
      currency: USD
      unit: million_token
      criterias:
        - { field: token_type, operator: '==', value: input, billable_price: 3 }
        - { field: token_type, operator: '==', value: cached_input, billable_price: 0.3 }
        - { field: token_type, operator: '==', value: cache_write, billable_price: 3.75 }
        - { field: token_type, operator: '==', value: output, billable_price: 15 }
    routes: [{ provider: claude, model: claude-upstream }]
    defaults: { max_tokens: 64 }
  - namespace: ${DEFAULTS_MODEL}
    name: Claude with the spec's sampling defaults
    type: text
    capabilities: [text-to-text]
    billable: false
    routes: [{ provider: claude, model: claude-upstream }]
    defaults: { temperature: 0.7, top_p: 0.95, max_tokens: 64 }
`);
  client = new OpenAI({ baseURL: gantry.baseURL, apiKey: gantry.key, maxRetries: 0 });
});
afterAll(async () => {
  await gantry?.close();
  await fake?.close();
});
beforeEach(() => fake.reset());

const weatherTool: OpenAI.ChatCompletionTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather of a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};
const ASK: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Weather in Paris and Rome?' }];
const TWO_CALLS = [
  { id: 'toolu_paris', name: 'get_weather', input: { city: 'Paris' } },
  { id: 'toolu_rome', name: 'get_weather', input: { city: 'Rome' } },
];

function lastBody(): JsonObject {
  const body = fake.requests.at(-1)?.body;
  if (!body) throw new Error('the fake received no request');
  return body;
}

/** A streamed chat call by hand: every chunk validated, `[DONE]` last. */
async function streamChunks(body: JsonObject): Promise<JsonObject[]> {
  const res = await fetch(`${gantry.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${gantry.key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, stream: true, ...body }),
  });
  expect(res.status).toBe(200);
  const events = parseSse(await res.text());
  expect(events.at(-1)?.data).toBe('[DONE]');
  const chunks = events.slice(0, -1).map((e) => JSON.parse(e.data) as JsonObject);
  for (const chunk of chunks) assertOpenAISchema('CreateChatCompletionStreamResponse', chunk);
  return chunks;
}

function deltasOf(chunks: JsonObject[]): JsonObject[] {
  return chunks.flatMap((c) => (c.choices as JsonObject[]).map((ch) => ch.delta as JsonObject));
}

describe('tool calls through Anthropic', () => {
  it('answers parallel tool calls with text alongside, and sends the tools as Anthropic tools', async () => {
    fake.setBehavior({ reply: 'Checking both.', toolCalls: TWO_CALLS });
    const completion = await client.chat.completions.create({
      model: MODEL,
      messages: ASK,
      tools: [weatherTool],
      tool_choice: 'auto',
    });
    assertOpenAISchema('CreateChatCompletionResponse', completion);
    expect(completion.choices[0]).toMatchObject({
      finish_reason: 'tool_calls',
      message: {
        role: 'assistant',
        content: 'Checking both.',
        tool_calls: [
          {
            id: 'toolu_paris',
            type: 'function',
            function: { name: 'get_weather', arguments: '{"city":"Paris"}' },
          },
          {
            id: 'toolu_rome',
            type: 'function',
            function: { name: 'get_weather', arguments: '{"city":"Rome"}' },
          },
        ],
      },
    });
    expect(lastBody()).toMatchObject({
      tools: [
        {
          name: 'get_weather',
          description: 'The weather of a city',
          input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
        },
      ],
      tool_choice: { type: 'auto' },
    });
  });

  it('streams tool calls in OpenAI form: id and name first, arguments in pieces, indexes per call', async () => {
    fake.setBehavior({ toolCalls: TWO_CALLS });
    const chunks = await streamChunks({ messages: ASK, tools: [weatherTool] });
    const calls = deltasOf(chunks).flatMap((d) => (d.tool_calls as JsonObject[] | undefined) ?? []);
    expect(calls[0]).toEqual({
      index: 0,
      id: 'toolu_paris',
      type: 'function',
      function: { name: 'get_weather', arguments: '' },
    });
    const args = (i: number) =>
      calls
        .filter((c) => c.index === i)
        .map((c) => (c.function as JsonObject).arguments)
        .join('');
    expect(calls.filter((c) => c.id !== undefined).map((c) => [c.index, c.id])).toEqual([
      [0, 'toolu_paris'],
      [1, 'toolu_rome'],
    ]);
    // More than one piece per call: the arguments really arrive in pieces.
    expect(calls.filter((c) => c.index === 0).length).toBeGreaterThan(2);
    expect(args(0)).toBe('{"city":"Paris"}');
    expect(args(1)).toBe('{"city":"Rome"}');
    const finish = chunks.flatMap((c) => (c.choices as JsonObject[]).map((ch) => ch.finish_reason));
    expect(finish.filter((f) => f !== null)).toEqual(['tool_calls']);
  });

  it.each<[string, string | undefined]>([
    ['with text', 'Checking both.'],
    ['without text', undefined],
  ])(
    "gives the SDK's stream helper the same final message as the non-streamed call (%s)",
    async (_name, reply) => {
      fake.setBehavior({ ...(reply === undefined ? {} : { reply }), toolCalls: TWO_CALLS });
      const params = { model: MODEL, messages: ASK, tools: [weatherTool] };
      const plain = await client.chat.completions.create(params);
      const streamed = await client.chat.completions.stream(params).finalChatCompletion();
      expect(streamed.choices[0]?.finish_reason).toBe(plain.choices[0]?.finish_reason);
      expect(streamed.choices[0]?.message.content).toBe(plain.choices[0]?.message.content);
      expect(streamed.choices[0]?.message.tool_calls).toEqual(plain.choices[0]?.message.tool_calls);
    },
  );

  it('gives a tool without parameters "{}" as arguments, streamed as in JSON (the SDK stream helper)', async () => {
    const clockTool: OpenAI.ChatCompletionTool = {
      type: 'function',
      function: {
        name: 'get_time',
        description: 'The time now',
        parameters: { type: 'object', properties: {} },
      },
    };
    fake.setBehavior({ toolCalls: [{ id: 'toolu_clock', name: 'get_time', input: {} }] });
    const params = {
      model: MODEL,
      messages: [{ role: 'user' as const, content: 'Time?' }],
      tools: [clockTool],
    };
    const plain = await client.chat.completions.create(params);
    expect(plain.choices[0]?.message.tool_calls).toEqual([
      { id: 'toolu_clock', type: 'function', function: { name: 'get_time', arguments: '{}' } },
    ]);
    const streamed = await client.chat.completions.stream(params).finalChatCompletion();
    expect(streamed.choices[0]?.finish_reason).toBe('tool_calls');
    expect(streamed.choices[0]?.message.tool_calls).toEqual(plain.choices[0]?.message.tool_calls);
  });

  it('maps required, a named function and parallel_tool_calls: false', async () => {
    fake.setBehavior({ toolCalls: TWO_CALLS });
    const one = await client.chat.completions.create({
      model: MODEL,
      messages: ASK,
      tools: [weatherTool],
      tool_choice: { type: 'function', function: { name: 'get_weather' } },
      parallel_tool_calls: false,
    });
    expect(lastBody().tool_choice).toEqual({
      type: 'tool',
      name: 'get_weather',
      disable_parallel_tool_use: true,
    });
    // Anthropic makes one call only when parallel use is disabled.
    expect(one.choices[0]?.message.tool_calls).toHaveLength(1);

    await client.chat.completions.create({
      model: MODEL,
      messages: ASK,
      tools: [weatherTool],
      tool_choice: 'required',
    });
    expect(lastBody().tool_choice).toEqual({ type: 'any' });
  });

  it('continues after the tool results: tool_use and grouped tool_result blocks reach Anthropic', async () => {
    fake.enqueue({ toolCalls: TWO_CALLS });
    const first = await client.chat.completions.create({ model: MODEL, messages: ASK, tools: [weatherTool] });
    const assistant = first.choices[0]?.message;
    if (!assistant?.tool_calls) throw new Error('expected tool calls');
    const second = await client.chat.completions.create({
      model: MODEL,
      tools: [weatherTool],
      messages: [
        ...ASK,
        assistant,
        { role: 'tool', tool_call_id: 'toolu_paris', content: 'Sunny' },
        { role: 'tool', tool_call_id: 'toolu_rome', content: [{ type: 'text', text: 'Rain' }] },
      ],
    });
    assertOpenAISchema('CreateChatCompletionResponse', second);
    expect(second.choices[0]?.message.content).toBe(anthropicFakeReply('Sunny\nRain'));
    expect(second.choices[0]?.finish_reason).toBe('stop');
    expect(lastBody().messages).toEqual([
      { role: 'user', content: 'Weather in Paris and Rome?' },
      {
        role: 'assistant',
        content: [
          { type: 'tool_use', id: 'toolu_paris', name: 'get_weather', input: { city: 'Paris' } },
          { type: 'tool_use', id: 'toolu_rome', name: 'get_weather', input: { city: 'Rome' } },
        ],
      },
      {
        role: 'user',
        content: [
          { type: 'tool_result', tool_use_id: 'toolu_paris', content: 'Sunny' },
          { type: 'tool_result', tool_use_id: 'toolu_rome', content: 'Rain' },
        ],
      },
    ]);
  });

  it("runs the SDK's runTools loop to its final answer", async () => {
    fake.enqueue({ toolCalls: [{ name: 'get_weather', input: { city: 'Paris' } }] });
    const runner = client.chat.completions.runTools({
      model: MODEL,
      messages: [{ role: 'user', content: 'Weather in Paris?' }],
      tools: [
        {
          type: 'function',
          function: {
            name: 'get_weather',
            description: 'The weather of a city',
            parameters: { type: 'object', properties: { city: { type: 'string' } } },
            function: (args: { city: string }) => `Sunny in ${args.city}`,
            parse: JSON.parse,
          },
        },
      ],
    });
    expect(await runner.finalContent()).toBe(anthropicFakeReply('Sunny in Paris'));
    expect(fake.requests).toHaveLength(2);
  });
});

describe('structured output through Anthropic', () => {
  const schema = {
    type: 'object',
    properties: { name: { type: 'string' }, age: { type: 'integer' } },
    required: ['name', 'age'],
    additionalProperties: false,
  };
  const format = { type: 'json_schema', json_schema: { name: 'person', schema, strict: true } } as const;

  it('answers json_schema with the JSON as content, in JSON and in a stream', async () => {
    fake.setBehavior({ toolInput: { name: 'Ada', age: 36 } });
    const completion = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: 'user', content: 'Who wrote the first program?' }],
      response_format: format,
    });
    assertOpenAISchema('CreateChatCompletionResponse', completion);
    expect(completion.choices[0]?.finish_reason).toBe('stop');
    expect(completion.choices[0]?.message.tool_calls).toBeUndefined();
    expect(JSON.parse(completion.choices[0]?.message.content ?? '')).toEqual({ name: 'Ada', age: 36 });
    expect(lastBody()).toMatchObject({
      tools: [{ name: 'person', input_schema: schema }],
      tool_choice: { type: 'tool', name: 'person', disable_parallel_tool_use: true },
    });

    const chunks = await streamChunks({
      messages: [{ role: 'user', content: 'Who wrote the first program?' }],
      response_format: format,
    });
    const deltas = deltasOf(chunks);
    expect(deltas.some((d) => d.tool_calls !== undefined)).toBe(false);
    expect(deltas.map((d) => d.content ?? '').join('')).toBe(completion.choices[0]?.message.content);
  });

  it('keeps one JSON document when the model calls the answer tool twice anyway', async () => {
    fake.setBehavior({
      ignoreParallelLimit: true,
      toolCalls: [
        { id: 'toolu_1', name: 'person', input: { name: 'Ada', age: 36 } },
        { id: 'toolu_2', name: 'person', input: { name: 'Grace', age: 85 } },
      ],
    });
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Who?' }];
    const completion = await client.chat.completions.create({
      model: MODEL,
      messages,
      response_format: format,
    });
    assertOpenAISchema('CreateChatCompletionResponse', completion);
    expect(JSON.parse(completion.choices[0]?.message.content ?? '')).toEqual({ name: 'Ada', age: 36 });
    expect(completion.choices[0]?.finish_reason).toBe('stop');

    const deltas = deltasOf(await streamChunks({ messages, response_format: format }));
    expect(JSON.parse(deltas.map((d) => d.content ?? '').join(''))).toEqual({ name: 'Ada', age: 36 });
    // And the SDK's parse helper, which parses the content as the schema's JSON.
    const parsed = await client.chat.completions.parse({ model: MODEL, messages, response_format: format });
    expect(parsed.choices[0]?.message.parsed).toEqual({ name: 'Ada', age: 36 });
  });

  it('answers json_object with an object', async () => {
    fake.setBehavior({ toolInput: { ok: true } });
    const completion = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: 'user', content: 'Answer in JSON' }],
      response_format: { type: 'json_object' },
    });
    expect(JSON.parse(completion.choices[0]?.message.content ?? '')).toEqual({ ok: true });
  });

  it('answers an empty json_object as "{}", streamed as in JSON', async () => {
    fake.setBehavior({ toolInput: {} });
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Nothing, in JSON' }];
    const params = { model: MODEL, messages, response_format: { type: 'json_object' as const } };
    const plain = await client.chat.completions.create(params);
    expect(plain.choices[0]?.message.content).toBe('{}');
    const streamed = await client.chat.completions.stream(params).finalChatCompletion();
    expect(streamed.choices[0]?.message.content).toBe('{}');
    expect(streamed.choices[0]?.finish_reason).toBe('stop');
  });

  it('with tools too, calls the tools first and answers in the schema after their results', async () => {
    fake.enqueue(
      { toolCalls: [{ id: 'toolu_w', name: 'get_weather', input: { city: 'Paris' } }] },
      { toolCalls: [{ id: 'toolu_a', name: 'person', input: { name: 'Ada', age: 36 } }] },
    );
    const ask: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Who, and the weather?' }];
    const first = await client.chat.completions.create({
      model: MODEL,
      messages: ask,
      tools: [weatherTool],
      response_format: format,
    });
    assertOpenAISchema('CreateChatCompletionResponse', first);
    expect(first.choices[0]?.finish_reason).toBe('tool_calls');
    expect(first.choices[0]?.message.tool_calls?.[0]).toMatchObject({ function: { name: 'get_weather' } });
    expect(lastBody()).toMatchObject({
      tools: [{ name: 'get_weather' }, { name: 'person', input_schema: schema }],
      tool_choice: { type: 'any' },
    });

    const assistant = first.choices[0]?.message;
    if (!assistant) throw new Error('no message');
    const second = await client.chat.completions.create({
      model: MODEL,
      tools: [weatherTool],
      response_format: format,
      messages: [...ask, assistant, { role: 'tool', tool_call_id: 'toolu_w', content: 'Sunny' }],
    });
    assertOpenAISchema('CreateChatCompletionResponse', second);
    expect(second.choices[0]?.finish_reason).toBe('stop');
    expect(second.choices[0]?.message.tool_calls).toBeUndefined();
    expect(JSON.parse(second.choices[0]?.message.content ?? '')).toEqual({ name: 'Ada', age: 36 });
  });
});

describe('images through Anthropic', () => {
  it('sends data: URIs as base64 sources and https URLs as url sources', async () => {
    const completion = await client.chat.completions.create({
      model: MODEL,
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Compare these' },
            { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=', detail: 'low' } },
            { type: 'image_url', image_url: { url: 'https://example.com/cat.jpg' } },
          ],
        },
      ],
    });
    assertOpenAISchema('CreateChatCompletionResponse', completion);
    expect(completion.choices[0]?.message.content).toBe(anthropicFakeReply('Compare these'));
    expect(lastBody().messages).toEqual([
      {
        role: 'user',
        content: [
          { type: 'text', text: 'Compare these' },
          { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } },
          { type: 'image', source: { type: 'url', url: 'https://example.com/cat.jpg' } },
        ],
      },
    ]);
  });

  it('refuses an image type Anthropic does not take', async () => {
    const err = await client.chat.completions
      .create({
        model: MODEL,
        messages: [
          {
            role: 'user',
            content: [{ type: 'image_url', image_url: { url: 'data:image/tiff;base64,SUkq' } }],
          },
        ],
      })
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as InstanceType<typeof OpenAI.BadRequestError>).message).toMatch(/image\/tiff/);
  });
});

describe('thinking through Anthropic', () => {
  type ThinkingMessage = OpenAI.ChatCompletionMessage & {
    reasoning_content?: string;
    thinking_blocks?: JsonObject[];
  };

  it('exposes thinking with its signature, and a tool loop continues with the blocks sent back', async () => {
    fake.enqueue({ toolCalls: [{ id: 'toolu_1', name: 'get_weather', input: { city: 'Oslo' } }] });
    const ask: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Weather in Oslo?' }];
    const first = await client.chat.completions.create({
      model: MODEL,
      messages: ask,
      tools: [weatherTool],
      reasoning_effort: 'low',
      max_completion_tokens: 4000,
    });
    assertOpenAISchema('CreateChatCompletionResponse', first);
    expect(lastBody().thinking).toEqual({ type: 'enabled', budget_tokens: 2048 });
    const message = first.choices[0]?.message as ThinkingMessage;
    const thinking = anthropicFakeThinking('Weather in Oslo?');
    expect(message.reasoning_content).toBe(thinking);
    expect(message.thinking_blocks).toEqual([
      { type: 'thinking', thinking, signature: anthropicFakeSignature(thinking) },
    ]);

    // The next turn sends the assistant message back as it came: the fake checks the signature and that
    // the thinking comes first in the turn that made the tool call, as Anthropic does.
    const second = await client.chat.completions.create({
      model: MODEL,
      tools: [weatherTool],
      reasoning_effort: 'low',
      max_completion_tokens: 4000,
      messages: [
        ...ask,
        message as OpenAI.ChatCompletionAssistantMessageParam,
        { role: 'tool', tool_call_id: 'toolu_1', content: 'Snow' },
      ],
    });
    expect(second.choices[0]?.message.content).toBe(anthropicFakeReply('Snow'));
    const sent = (lastBody().messages as JsonObject[])[1];
    expect((sent?.content as JsonObject[] | undefined)?.[0]).toEqual({
      type: 'thinking',
      thinking,
      signature: anthropicFakeSignature(thinking),
    });
  });

  it('streams reasoning_content and the signed block, which the next turn can send back', async () => {
    const chunks = await streamChunks({
      messages: [{ role: 'user', content: 'Think first' }],
      reasoning_effort: 'minimal',
      max_tokens: 2000,
    });
    const deltas = deltasOf(chunks);
    const thinking = anthropicFakeThinking('Think first');
    expect(deltas.map((d) => d.reasoning_content ?? '').join('')).toBe(thinking);
    const blocks = deltas.flatMap((d) => (d.thinking_blocks as JsonObject[] | undefined) ?? []);
    expect(blocks).toEqual([{ type: 'thinking', thinking, signature: anthropicFakeSignature(thinking) }]);
    const content = deltas.map((d) => d.content ?? '').join('');
    expect(content).toBe(anthropicFakeReply('Think first'));

    const next = await client.chat.completions.create({
      model: MODEL,
      max_tokens: 2000,
      reasoning_effort: 'minimal',
      messages: [
        { role: 'user', content: 'Think first' },
        { role: 'assistant', content, thinking_blocks: blocks } as OpenAI.ChatCompletionAssistantMessageParam,
        { role: 'user', content: 'Again' },
      ],
    });
    expect(next.choices[0]?.message.content).toBe(anthropicFakeReply('Again'));
  });

  it('streams reasoning_content in pieces that a concatenating client joins into the whole text', async () => {
    const ask = 'Think about a long question first';
    const params = { model: MODEL, messages: [{ role: 'user' as const, content: ask }] };
    const plain = (
      await client.chat.completions.create({ ...params, reasoning_effort: 'minimal', max_tokens: 2000 })
    ).choices[0]?.message as ThinkingMessage;
    const thinking = anthropicFakeThinking(ask);
    expect(plain.reasoning_content).toBe(thinking);

    const deltas = deltasOf(
      await streamChunks({ messages: params.messages, reasoning_effort: 'minimal', max_tokens: 2000 }),
    );
    // Each delta holds only its new piece (the convention of DeepSeek and vLLM), never the text so far:
    // joined, the pieces are the non-streamed reasoning_content exactly, with nothing repeated.
    const pieces = deltas.flatMap((d) =>
      typeof d.reasoning_content === 'string' ? [d.reasoning_content] : [],
    );
    expect(pieces.length).toBeGreaterThan(1);
    expect(pieces.join('')).toBe(plain.reasoning_content);
  });

  it("gives the SDK's stream helper the same thinking_blocks as the non-streamed call", async () => {
    fake.setBehavior({ redactedThinking: 'EmwKAhgBEgy3va3pzix', toolCalls: TWO_CALLS });
    const params = {
      model: MODEL,
      messages: ASK,
      tools: [weatherTool],
      reasoning_effort: 'low' as const,
      max_completion_tokens: 4000,
    };
    const plain = (await client.chat.completions.create(params)).choices[0]?.message as ThinkingMessage;
    const streamed = (await client.chat.completions.stream(params).finalChatCompletion()).choices[0]
      ?.message as ThinkingMessage;
    expect(plain.thinking_blocks).toHaveLength(2);
    expect(streamed.thinking_blocks).toEqual(plain.thinking_blocks);
    expect(streamed.tool_calls).toEqual(plain.tool_calls);
  });

  it('round-trips redacted thinking in a tool loop', async () => {
    fake.enqueue({
      redactedThinking: 'EmwKAhgBEgy3va3pzix',
      toolCalls: [{ id: 'toolu_r', name: 'get_weather', input: { city: 'Bergen' } }],
    });
    const ask: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Weather in Bergen?' }];
    const params = {
      model: MODEL,
      tools: [weatherTool],
      reasoning_effort: 'minimal' as const,
      max_tokens: 2000,
    };
    const chunks = await streamChunks({ ...params, messages: ask });
    const deltas = deltasOf(chunks);
    const blocks = deltas.flatMap((d) => (d.thinking_blocks as JsonObject[] | undefined) ?? []);
    const thinking = anthropicFakeThinking('Weather in Bergen?');
    expect(blocks).toEqual([
      { type: 'thinking', thinking, signature: anthropicFakeSignature(thinking) },
      { type: 'redacted_thinking', data: 'EmwKAhgBEgy3va3pzix' },
    ]);
    const toolCalls = deltas.flatMap((d) => (d.tool_calls as JsonObject[] | undefined) ?? []);
    expect(toolCalls[0]).toMatchObject({ id: 'toolu_r', function: { name: 'get_weather' } });

    const next = await client.chat.completions.create({
      ...params,
      messages: [
        ...ask,
        {
          role: 'assistant',
          content: null,
          thinking_blocks: blocks,
          tool_calls: [
            {
              id: 'toolu_r',
              type: 'function',
              function: { name: 'get_weather', arguments: '{"city":"Bergen"}' },
            },
          ],
        } as OpenAI.ChatCompletionAssistantMessageParam,
        { role: 'tool', tool_call_id: 'toolu_r', content: 'Drizzle' },
      ],
    });
    expect(next.choices[0]?.message.content).toBe(anthropicFakeReply('Drizzle'));
    const sent = (lastBody().messages as JsonObject[])[1];
    expect((sent?.content as JsonObject[] | undefined)?.map((b) => b.type)).toEqual([
      'thinking',
      'redacted_thinking',
      'tool_use',
    ]);
  });

  it('refuses reasoning_effort with a temperature Anthropic cannot think at', async () => {
    const err = await client.chat.completions
      .create({ model: MODEL, messages: ASK, reasoning_effort: 'low', max_tokens: 4000, temperature: 0.3 })
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('temperature');
  });
});

describe('sampling parameters through Anthropic', () => {
  it('answers with both temperature and top_p set (the defaults), sending Anthropic temperature alone', async () => {
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Hello there' }];
    const completion = await client.chat.completions.create({ model: DEFAULTS_MODEL, messages });
    expect(completion.choices[0]?.message.content).toBe(anthropicFakeReply('Hello there'));
    expect(lastBody().temperature).toBe(0.7);
    expect(lastBody()).not.toHaveProperty('top_p');

    // The client's own pair: temperature wins too, streamed the same.
    const deltas = deltasOf(
      await streamChunks({ model: DEFAULTS_MODEL, messages, temperature: 0.2, top_p: 0.5 }),
    );
    expect(deltas.map((d) => d.content ?? '').join('')).toBe(anthropicFakeReply('Hello there'));
    expect(lastBody().temperature).toBe(0.2);
    expect(lastBody()).not.toHaveProperty('top_p');
  });

  it('sends top_p when temperature is not set', async () => {
    await client.chat.completions.create({ model: MODEL, messages: ASK, top_p: 0.5 });
    expect(lastBody().top_p).toBe(0.5);
    expect(lastBody()).not.toHaveProperty('temperature');
  });
});

describe('prompt cache usage through Anthropic', () => {
  it('reports cache reads and writes, prices writes at cache_write, and meters a stream like a non-stream', async () => {
    fake.setBehavior({ cacheReadTokens: 2000, cacheCreationTokens: 100 });
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Cached question' }];
    const plain = await client.chat.completions.create({ model: MODEL, messages });
    assertOpenAISchema('CreateChatCompletionResponse', plain);
    // Input 2 words + 2000 read + 100 written.
    expect(plain.usage).toMatchObject({
      prompt_tokens: 2102,
      prompt_tokens_details: { cached_tokens: 2000, cache_write_tokens: 100 },
    });

    const chunks = await streamChunks({ messages, stream_options: { include_usage: true } });
    expect(chunks.at(-1)?.usage).toEqual(plain.usage);

    const account = gantry.store.getAccountByName('test');
    if (!account) throw new Error('no test account');
    const records = (await ledgerRecords(gantry, account.id, 2)).filter((r) => r.model === MODEL).slice(-2);
    expect(records).toHaveLength(2);
    const [a, b] = records;
    expect(a?.stream).not.toBe(b?.stream);
    for (const r of records) {
      expect(r).toMatchObject({
        input_tokens: 2102,
        cached_input_tokens: 2000,
        cache_write_input_tokens: 100,
        output_tokens: plain.usage?.completion_tokens,
      });
    }
    // Cache writes at their own rate: 2 × 3 + 2000 × 0.3 + 100 × 3.75 + output × 15, per million.
    const output = plain.usage?.completion_tokens ?? 0;
    expect(output).toBeGreaterThan(0);
    expect(a?.cost).toBeCloseTo((2 * 3 + 2000 * 0.3 + 100 * 3.75 + output * 15) / 1e6, 10);
    expect(b?.cost).toBe(a?.cost);
    // Both calls' cache writes are counted for operators too.
    const exposition = await gantry.gantry.services.metrics.registry.metrics();
    const line = exposition
      .split('\n')
      .find(
        (l) =>
          l.startsWith('gantry_tokens_total{') &&
          l.includes(`model="${MODEL}"`) &&
          l.includes('direction="cache_write"'),
      );
    expect(Number(line?.split(' ').at(-1))).toBe(200);
  });
});
