/**
 * The built-in chat model's tools, structured output and images through a real Gantry with the official
 * OpenAI SDK (its stream helpers and tool runner); the image capability check on the fast path and on
 * fastify; the output limit filled for an Anthropic route that needs one and not for an OpenAI one.
 */
import { Ajv2020 } from 'ajv/dist/2020.js';
import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { LOCAL_REPLY_SUFFIX } from '../../providers/local.js';
import { type FakeAnthropic, startFakeAnthropic } from '../helpers/fake-anthropic.js';
import { type FakeOpenAI, startFakeOpenAI } from '../helpers/fake-openai.js';
import { startGantry, type TestGantry } from '../helpers/gantry.js';
import { assertOpenAISchema } from '../helpers/openapi.js';
import { restCall } from '../helpers/rest.js';

const ANTHROPIC_KEY = 'sk-ant-upstream-0123456789';
const DEFAULT_LIMIT = 77;

let anthropic: FakeAnthropic;
let upstream: FakeOpenAI;
let gantry: TestGantry;
let client: OpenAI;

beforeAll(async () => {
  anthropic = await startFakeAnthropic({ apiKey: ANTHROPIC_KEY });
  upstream = await startFakeOpenAI();
  gantry = await startGantry(
    `
providers:
  local: { kind: local }
  claude:
    kind: anthropic
    base_url: ${anthropic.url}
    api_key_env: ANTHROPIC_KEY
  up:
    kind: openai
    base_url: ${upstream.url}
tiers:
  default: {}
limits:
  default_max_output_tokens: ${DEFAULT_LIMIT}
models:
  - namespace: gantry/local-chat
    name: Local chat
    type: text
    capabilities: [text-to-text, image-to-text]
    apis: [chat, responses]
    routes: [{ provider: local, model: local-chat }]
  - namespace: gantry/text-only
    name: Text only
    type: text
    capabilities: [text-to-text]
    apis: [chat, responses]
    routes: [{ provider: local, model: local-chat }]
  - namespace: gantry/tight
    name: Local chat with an input-token ceiling
    type: text
    capabilities: [image-to-text]
    apis: [chat]
    routes: [{ provider: local, model: local-chat }]
    limits: { input_tokens: 300 }
  - namespace: anthropic/claude
    name: Claude without a max_tokens default
    type: text
    apis: [chat, responses]
    routes: [{ provider: claude, model: claude-upstream }]
  - namespace: anthropic/claude-64
    name: Claude with a max_tokens default
    type: text
    apis: [chat]
    routes: [{ provider: claude, model: claude-upstream }]
    defaults: { max_tokens: 64 }
  - namespace: openai/chat
    name: OpenAI-compatible
    type: text
    apis: [chat]
    routes: [{ provider: up, model: gpt-up }]
`,
    { ANTHROPIC_KEY },
  );
  client = new OpenAI({ baseURL: gantry.baseURL, apiKey: gantry.key, maxRetries: 0 });
});
afterAll(async () => {
  await gantry?.close();
  await anthropic?.close();
  await upstream?.close();
});
beforeEach(() => {
  anthropic.reset();
  upstream.reset();
});

const MODEL = 'gantry/local-chat';
const ajv = new Ajv2020({ strict: false });

const weatherParameters = {
  type: 'object',
  properties: {
    city: { type: 'string' },
    unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
  },
  required: ['city', 'unit'],
  additionalProperties: false,
};
const tools: OpenAI.ChatCompletionTool[] = [
  {
    type: 'function',
    function: { name: 'get_weather', description: 'Weather', parameters: weatherParameters, strict: true },
  },
];

const post = (path: string, body: unknown) =>
  restCall<Record<string, unknown>>(gantry.origin, 'POST', path, { key: gantry.key, body });

describe('local-chat tools through the SDK', () => {
  it('calls a tool; the stream helper assembles the same message as the JSON answer', async () => {
    const request = { model: MODEL, messages: [{ role: 'user' as const, content: 'Oslo' }], tools };
    const plain = await client.chat.completions.create(request);
    assertOpenAISchema('CreateChatCompletionResponse', plain);
    const choice = plain.choices[0];
    expect(choice?.finish_reason).toBe('tool_calls');
    const call = choice?.message.tool_calls?.[0];
    if (call?.type !== 'function') throw new Error('expected a function call');
    expect(call.function.name).toBe('get_weather');
    expect(JSON.parse(call.function.arguments)).toEqual({ city: 'Oslo', unit: 'celsius' });

    const stream = client.chat.completions.stream({ ...request, stream_options: { include_usage: true } });
    stream.on('chunk', (chunk) => assertOpenAISchema('CreateChatCompletionStreamResponse', chunk));
    const final = await stream.finalChatCompletion();
    const streamed = final.choices[0];
    expect(streamed?.finish_reason).toBe('tool_calls');
    const streamedCall = streamed?.message.tool_calls?.[0];
    if (streamedCall?.type !== 'function') throw new Error('expected a function call');
    expect(streamedCall.id).toMatch(/^call_/);
    // The helper adds parsed_arguments for a strict tool.
    expect(streamedCall.function).toMatchObject({ name: 'get_weather', arguments: call.function.arguments });
    expect(final.usage).toEqual(plain.usage);
  });

  it("runs a whole tool loop with the SDK's runTools: the answer quotes the tool's result", async () => {
    const seen: unknown[] = [];
    const runner = client.chat.completions.runTools({
      model: MODEL,
      messages: [{ role: 'user', content: 'weather in Lima' }],
      tools: [
        {
          type: 'function',
          function: {
            name: 'get_weather',
            description: 'Weather',
            parameters: weatherParameters,
            parse: JSON.parse,
            function: (args: unknown) => {
              seen.push(args);
              return 'sunny, 24 C';
            },
          },
        },
      ],
    });
    expect(await runner.finalContent()).toBe(`Tool get_weather returned: sunny, 24 C\n${LOCAL_REPLY_SUFFIX}`);
    expect(seen).toEqual([{ city: 'weather in Lima', unit: 'celsius' }]);
  });

  it('answers a strict json_schema with a valid instance, streamed and not', async () => {
    const schema = {
      type: 'object',
      properties: {
        title: { type: 'string', maxLength: 8 },
        year: { type: 'integer', minimum: 1900 },
        genres: { type: 'array', items: { type: 'string', enum: ['drama', 'comedy'] } },
      },
      required: ['title', 'year', 'genres'],
      additionalProperties: false,
    };
    const request = {
      model: MODEL,
      messages: [{ role: 'user' as const, content: 'Casablanca, 1942' }],
      response_format: { type: 'json_schema' as const, json_schema: { name: 'film', strict: true, schema } },
    };
    const plain = await client.chat.completions.create(request);
    const value: unknown = JSON.parse(plain.choices[0]?.message.content ?? '');
    expect(ajv.validate(schema, value)).toBe(true);
    expect(value).toEqual({ title: 'Casablan', year: 1900, genres: ['drama'] });
    const final = await client.chat.completions.stream(request).finalChatCompletion();
    expect(final.choices[0]?.message.content).toBe(plain.choices[0]?.message.content);
  });
});

describe('images', () => {
  const png = `data:image/png;base64,${Buffer.alloc(600_000, 1).toString('base64')}`;
  const withImage = (url: unknown, extra: Record<string, unknown> = {}) => [
    { role: 'system', content: 'Describe.' },
    {
      role: 'user',
      content: [
        { type: 'text', text: 'What is this?' },
        { type: 'image_url', image_url: { url, ...extra } },
      ],
    },
  ];

  it('a model with image-to-text counts them; usage counts each at the fixed image cost', async () => {
    const out = await post('/v1/chat/completions', { model: MODEL, messages: withImage(png) });
    expect(out.status).toBe(200);
    const choices = out.body.choices as Array<{ message: { content: string } }>;
    expect(choices[0]?.message.content).toBe(
      `You said: What is this?\nImages received: 1\n${LOCAL_REPLY_SUFFIX}`,
    );
    const textOnly = await post('/v1/chat/completions', {
      model: MODEL,
      messages: [withImage(png)[0], { role: 'user', content: [{ type: 'text', text: 'What is this?' }] }],
    });
    const tokens = (b: Record<string, unknown>) => (b.usage as { prompt_tokens: number }).prompt_tokens;
    expect(tokens(out.body) - tokens(textOnly.body)).toBe(85);
  });

  for (const path of ['/v1/chat/completions', '/v1/chat/completions?via=fastify']) {
    it(`a model without it answers 400 naming the image's path (${path})`, async () => {
      const out = await post(path, {
        model: 'gantry/text-only',
        messages: withImage('https://example.com/a.png'),
      });
      expect(out.status).toBe(400);
      const error = out.body.error as Record<string, unknown>;
      expect(error.param).toBe('messages[1].content[1]');
      expect(String(error.message)).toContain('does not take images');
      expect(error.type).toBe('invalid_request_error');
    });

    it(`malformed image parts are refused whatever the model (${path})`, async () => {
      const cases: Array<[unknown, string]> = [
        [withImage(undefined), 'messages[1].content[1].image_url.url'],
        [withImage('ftp://example.com/a.png'), 'messages[1].content[1].image_url.url'],
        [withImage('data:text/plain;base64,aGk='), 'messages[1].content[1].image_url.url'],
        [withImage(png, { detail: 'ultra' }), 'messages[1].content[1].image_url.detail'],
        [
          [{ role: 'user', content: [{ type: 'image_url', image_url: 'https://example.com/a.png' }] }],
          'messages[0].content[0].image_url',
        ],
      ];
      for (const [messages, param] of cases) {
        const out = await post(path, { model: MODEL, messages });
        expect(out.status, param).toBe(400);
        expect((out.body.error as Record<string, unknown>).param).toBe(param);
      }
    });
  }
});

describe("the limiter's input-token estimate", () => {
  it('counts tool definitions: a short prompt with large tools is over the ceiling', async () => {
    const ask = [{ role: 'user', content: 'hi' }];
    const bigTool = {
      type: 'function',
      function: {
        name: 'lookup',
        description: Array.from({ length: 400 }, (_, i) => `word${i}`).join(' '),
        parameters: { type: 'object', properties: {} },
      },
    };
    const small = await post('/v1/chat/completions', {
      model: 'gantry/tight',
      messages: ask,
      tools: [bigTool],
    });
    expect(small.status).toBe(429);
    expect(small.body.error).toMatchObject({ details: { metric: 'input_tokens', limit: 300 } });
    const ok = await post('/v1/chat/completions', { model: 'gantry/tight', messages: ask });
    expect(ok.status).toBe(200);
  });

  it('counts an image at its fixed cost, not its megabyte of base64', async () => {
    const url = `data:image/png;base64,${Buffer.alloc(750_000, 3).toString('base64')}`;
    const messages = [{ role: 'user', content: [{ type: 'image_url', image_url: { url } }] }];
    const out = await post('/v1/chat/completions', { model: 'gantry/tight', messages });
    expect(out.status).toBe(200);
  });
});

describe('the output limit of providers that need one', () => {
  const ask = [{ role: 'user' as const, content: 'Tell me about gantries' }];

  it('an Anthropic route without a max_tokens default gets limits.default_max_output_tokens', async () => {
    const out = await client.chat.completions.create({ model: 'anthropic/claude', messages: ask });
    expect(out.choices[0]?.message.content).toBeTruthy();
    expect(anthropic.requests[0]?.body?.max_tokens).toBe(DEFAULT_LIMIT);

    const stream = await client.chat.completions.create({
      model: 'anthropic/claude',
      messages: ask,
      stream: true,
    });
    for await (const _ of stream) {
      // drained
    }
    expect(anthropic.requests[1]?.body?.max_tokens).toBe(DEFAULT_LIMIT);
  });

  it("the request's own limit and the catalogue's default win over it", async () => {
    await client.chat.completions.create({
      model: 'anthropic/claude',
      messages: ask,
      max_completion_tokens: 9,
    });
    expect(anthropic.requests[0]?.body?.max_tokens).toBe(9);
    await client.chat.completions.create({ model: 'anthropic/claude-64', messages: ask });
    expect(anthropic.requests[1]?.body?.max_tokens).toBe(64);
  });

  it('a bridged Responses call to Anthropic without max_output_tokens gets it too', async () => {
    const response = await client.responses.create({
      model: 'anthropic/claude',
      input: 'Tell me about gantries',
    });
    expect(response.status).toBe('completed');
    expect(anthropic.requests[0]?.body?.max_tokens).toBe(DEFAULT_LIMIT);
  });

  it('an OpenAI-compatible upstream gets no limit the client did not set', async () => {
    await client.chat.completions.create({ model: 'openai/chat', messages: ask });
    const body = upstream.requests[0]?.body ?? {};
    expect(body.max_tokens).toBeUndefined();
    expect(body.max_completion_tokens).toBeUndefined();
  });
});
