import { join } from 'node:path';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { afterAll, describe, expect, it } from 'vitest';
import { TOOL_NAME_SEARCH_CHARS } from '../../providers/local/reply.js';
import { MAX_CHARS, MAX_STRING, schemaInstance } from '../../providers/local/schema-instance.js';
import { LOCAL_REPLY_SUFFIX, LocalProvider } from '../../providers/local.js';
import { ProviderRequestError } from '../../providers/request-error.js';
import { countChatInputTokens, IMAGE_PART_TOKENS } from '../../providers/tokens.js';
import type { CallContext, JsonObject } from '../../providers/types.js';
import { spawnGantry, stopAllGantry } from '../helpers/gantry-process.js';
import { assertOpenAISchema } from '../helpers/openapi.js';
import { tempDir } from '../helpers/temp-dirs.js';

const provider = new LocalProvider({ name: 'local' });
const ctx = (): CallContext => ({ signal: new AbortController().signal, requestId: 'req-test' });
const ajv = new Ajv2020({ strict: false });
// The formats the generator fills (ajv-formats is not a dependency): enough to check its fixed values.
ajv.addFormat('email', /^[^@\s]+@[^@\s]+\.[a-z]+$/);
ajv.addFormat('uuid', /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
ajv.addFormat('date', /^\d{4}-\d{2}-\d{2}$/);
ajv.addFormat('date-time', /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/);

interface ToolCall {
  id: string;
  type: string;
  function: { name: string; arguments: string };
}
interface Message {
  role: string;
  content: string | null;
  tool_calls?: ToolCall[];
}
interface Completion {
  choices: Array<{ index: number; message: Message; finish_reason: string }>;
  usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
}
interface ChunkToolCall {
  index: number;
  id?: string;
  type?: string;
  function?: { name?: string; arguments?: string };
}
interface Chunk {
  choices: Array<{
    index: number;
    delta: { role?: string; content?: string | null; tool_calls?: ChunkToolCall[] };
    finish_reason: string | null;
  }>;
  usage?: Completion['usage'] | null;
}

async function complete(body: JsonObject): Promise<Completion> {
  const result = await provider.chat({ model: 'local-chat', ...body }, ctx());
  if (result.kind !== 'json') throw new Error('expected JSON');
  assertOpenAISchema('CreateChatCompletionResponse', result.body);
  return result.body as unknown as Completion;
}

async function chunks(body: JsonObject): Promise<Chunk[]> {
  const result = await provider.chat(
    { model: 'local-chat', ...body, stream: true, stream_options: { include_usage: true } },
    ctx(),
  );
  if (result.kind !== 'stream') throw new Error('expected a stream');
  const out: Chunk[] = [];
  for await (const event of result.events) {
    const chunk: unknown = JSON.parse(event.data);
    assertOpenAISchema('CreateChatCompletionStreamResponse', chunk);
    out.push(chunk as Chunk);
  }
  return out;
}

/** Tool calls assembled from deltas the way the OpenAI SDK's stream helper does. */
function assemble(list: Chunk[]): { calls: ToolCall[]; finish: string | null; content: string | null } {
  const calls: ToolCall[] = [];
  let finish: string | null = null;
  let content: string | null = null;
  for (const chunk of list) {
    const choice = chunk.choices[0];
    if (!choice) continue;
    finish = choice.finish_reason ?? finish;
    if (typeof choice.delta.content === 'string') content = (content ?? '') + choice.delta.content;
    for (const piece of choice.delta.tool_calls ?? []) {
      const call = calls[piece.index];
      if (call === undefined) {
        expect(piece.id).toMatch(/^call_/);
        expect(piece.type).toBe('function');
        expect(piece.function?.arguments).toBe('');
        calls[piece.index] = {
          id: piece.id as string,
          type: 'function',
          function: { name: piece.function?.name as string, arguments: '' },
        };
      } else {
        expect(piece.id).toBeUndefined();
        call.function.arguments += piece.function?.arguments ?? '';
      }
    }
  }
  return { calls, finish, content };
}

const weather = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Weather of a city',
    strict: true,
    parameters: {
      type: 'object',
      properties: {
        city: { type: 'string', description: 'The city' },
        unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
        days: { type: 'integer', minimum: 1, maximum: 7 },
        coords: {
          type: 'object',
          properties: { lat: { type: 'number' }, lon: { type: 'number' } },
          required: ['lat', 'lon'],
          additionalProperties: false,
        },
        tags: { type: 'array', items: { type: 'string' } },
      },
      required: ['city', 'unit', 'days', 'coords', 'tags'],
      additionalProperties: false,
    },
  },
};
const time = {
  type: 'function',
  function: {
    name: 'get_time',
    parameters: {
      type: 'object',
      properties: { zone: { type: 'string' } },
      required: ['zone'],
      additionalProperties: false,
    },
  },
};
const user = (content: unknown) => [{ role: 'user', content }];

describe('local-chat tool calls', () => {
  it('calls the first tool with arguments valid against its parameters', async () => {
    const out = await complete({ messages: user('Paris please'), tools: [weather, time] });
    const choice = out.choices[0];
    expect(choice?.finish_reason).toBe('tool_calls');
    expect(choice?.message.content).toBeNull();
    expect(choice?.message.tool_calls).toHaveLength(1);
    const call = choice?.message.tool_calls?.[0] as ToolCall;
    expect(call.id).toMatch(/^call_[0-9a-f]{24}$/);
    expect(call.function.name).toBe('get_weather');
    const args: unknown = JSON.parse(call.function.arguments);
    expect(ajv.validate(weather.function.parameters, args)).toBe(true);
    expect(args).toEqual({
      city: 'Paris please',
      unit: 'celsius',
      days: 1,
      coords: { lat: 0, lon: 0 },
      tags: ['Paris please'],
    });
    expect(out.usage.completion_tokens).toBeGreaterThan(0);
    // Tool definitions count in the prompt as the gateway estimates them.
    expect(out.usage.prompt_tokens).toBe(
      countChatInputTokens(user('Paris please'), { tools: [weather, time] }),
    );
    expect(out.usage.prompt_tokens).toBeGreaterThan(countChatInputTokens(user('Paris please')) + 30);
  });

  it('calls every tool the user names, or only the first when parallel_tool_calls is false', async () => {
    const messages = user('use get_time and get_weather');
    const both = await complete({ messages, tools: [weather, time] });
    expect(both.choices[0]?.message.tool_calls?.map((c) => c.function.name)).toEqual([
      'get_weather',
      'get_time',
    ]);
    const ids = new Set(both.choices[0]?.message.tool_calls?.map((c) => c.id));
    expect(ids.size).toBe(2);
    const one = await complete({ messages, tools: [weather, time], parallel_tool_calls: false });
    expect(one.choices[0]?.message.tool_calls?.map((c) => c.function.name)).toEqual(['get_weather']);
    const named = await complete({ messages: user('what time is it? get_time'), tools: [weather, time] });
    expect(named.choices[0]?.message.tool_calls?.map((c) => c.function.name)).toEqual(['get_time']);
  });

  it('looks for tool names in the first TOOL_NAME_SEARCH_CHARS characters of the message only', async () => {
    const pad = 'x '.repeat(TOOL_NAME_SEARCH_CHARS / 2 - 10);
    const near = await complete({ messages: user(`${pad}get_time`), tools: [weather, time] });
    expect(near.choices[0]?.message.tool_calls?.map((c) => c.function.name)).toEqual(['get_time']);
    const far = await complete({
      messages: user(`${pad}${'y'.repeat(40)} get_time`),
      tools: [weather, time],
    });
    expect(far.choices[0]?.message.tool_calls?.map((c) => c.function.name)).toEqual(['get_weather']);
  });

  it('calls the forced tool, answers text for none, and refuses an unknown forced tool', async () => {
    const forced = await complete({
      messages: user('get_weather'),
      tools: [weather, time],
      tool_choice: { type: 'function', function: { name: 'get_time' } },
    });
    expect(forced.choices[0]?.message.tool_calls?.map((c) => c.function.name)).toEqual(['get_time']);
    const none = await complete({ messages: user('hi'), tools: [weather], tool_choice: 'none' });
    expect(none.choices[0]?.finish_reason).toBe('stop');
    expect(none.choices[0]?.message.content).toBe(`You said: hi\n${LOCAL_REPLY_SUFFIX}`);
    expect(none.choices[0]?.message.tool_calls).toBeUndefined();
    const err = await provider
      .chat(
        {
          model: 'local-chat',
          messages: user('x'),
          tools: [weather],
          tool_choice: { type: 'function', function: { name: 'nope' } },
        },
        ctx(),
      )
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ProviderRequestError);
    expect((err as ProviderRequestError).param).toBe('tool_choice');
  });

  it('chooses among the tools allowed_tools lists', async () => {
    const out = await complete({
      messages: user('get_weather'),
      tools: [weather, time],
      tool_choice: {
        type: 'allowed_tools',
        allowed_tools: { mode: 'required', tools: [{ type: 'function', function: { name: 'get_time' } }] },
      },
    });
    expect(out.choices[0]?.message.tool_calls?.map((c) => c.function.name)).toEqual(['get_time']);
  });

  it("streams tool calls in OpenAI's delta form, assembling to the non-streamed calls", async () => {
    const body = { messages: user('get_weather and get_time for Oslo'), tools: [weather, time] };
    const plain = await complete(body);
    const list = await chunks(body);
    const first = list[0]?.choices[0]?.delta;
    expect(first?.role).toBe('assistant');
    expect(first?.content).toBeNull();
    expect(first?.tool_calls?.[0]).toMatchObject({ index: 0, type: 'function', function: { arguments: '' } });
    const { calls, finish, content } = assemble(list);
    expect(finish).toBe('tool_calls');
    expect(content).toBeNull();
    expect(calls.map((c) => [c.function.name, c.function.arguments])).toEqual(
      plain.choices[0]?.message.tool_calls?.map((c) => [c.function.name, c.function.arguments]),
    );
    // Arguments come in several pieces, and the last chunk carries the usage.
    const argumentChunks = list.filter((c) => c.choices[0]?.delta.tool_calls?.[0]?.function?.arguments);
    expect(argumentChunks.length).toBeGreaterThan(2);
    expect(list.at(-1)?.choices).toEqual([]);
    expect(list.at(-1)?.usage).toEqual(plain.usage);
  });

  it('cuts the arguments at max_tokens with finish_reason length', async () => {
    const out = await complete({ messages: user('Paris'), tools: [weather], max_tokens: 5 });
    expect(out.choices[0]?.finish_reason).toBe('length');
    expect(out.usage.completion_tokens).toBe(5);
    expect(() => JSON.parse(out.choices[0]?.message.tool_calls?.[0]?.function.arguments ?? '')).toThrow();
  });

  it('answers after tool results by quoting them', async () => {
    const messages = [
      { role: 'user', content: 'weather and time in Oslo' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: 'call_a', type: 'function', function: { name: 'get_weather', arguments: '{}' } },
          { id: 'call_b', type: 'function', function: { name: 'get_time', arguments: '{}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'call_a', content: 'sunny, 21 C' },
      { role: 'tool', tool_call_id: 'call_b', content: [{ type: 'text', text: '14:00' }] },
    ];
    const out = await complete({ messages, tools: [weather, time] });
    expect(out.choices[0]?.finish_reason).toBe('stop');
    expect(out.choices[0]?.message.content).toBe(
      `Tool get_weather returned: sunny, 21 C\nTool get_time returned: 14:00\n${LOCAL_REPLY_SUFFIX}`,
    );
    const streamed = assemble(await chunks({ messages, tools: [weather, time] }));
    expect(streamed.content).toBe(out.choices[0]?.message.content);
    expect(streamed.finish).toBe('stop');
  });
});

describe('local-chat structured output', () => {
  const schema = {
    type: 'object',
    properties: {
      name: { type: 'string', minLength: 3, maxLength: 10 },
      age: { type: 'integer', minimum: 18 },
      score: { type: 'number', exclusiveMinimum: 0.5, maximum: 10 },
      email: { type: 'string', format: 'email' },
      status: { anyOf: [{ type: 'null' }, { type: 'string', enum: ['new', 'old'] }] },
      kind: { const: 'person' },
      nickname: { type: ['string', 'null'] },
      friends: { type: 'array', items: { $ref: '#/$defs/friend' }, minItems: 2 },
      verified: { type: 'boolean' },
    },
    required: ['name', 'age', 'score', 'email', 'status', 'kind', 'nickname', 'friends', 'verified'],
    additionalProperties: false,
    $defs: {
      friend: {
        type: 'object',
        properties: { id: { type: 'string', format: 'uuid' }, since: { type: 'string', format: 'date' } },
        required: ['id', 'since'],
        additionalProperties: false,
      },
    },
  };
  const format = { type: 'json_schema', json_schema: { name: 'person', strict: true, schema } };

  it('answers an instance of a strict json_schema, in JSON and streamed', async () => {
    const out = await complete({ messages: user('Alexander the Great'), response_format: format });
    expect(out.choices[0]?.finish_reason).toBe('stop');
    const value: unknown = JSON.parse(out.choices[0]?.message.content ?? '');
    expect(ajv.validate(schema, value), JSON.stringify(ajv.errors)).toBe(true);
    expect(value).toMatchObject({ name: 'Alexander ', age: 18, status: 'new', kind: 'person' });
    const streamed = assemble(
      await chunks({ messages: user('Alexander the Great'), response_format: format }),
    );
    expect(streamed.content).toBe(out.choices[0]?.message.content);
    expect(streamed.finish).toBe('stop');
  });

  it('answers json_object with the user text and refuses a json_schema without a schema', async () => {
    const out = await complete({ messages: user('hello'), response_format: { type: 'json_object' } });
    expect(JSON.parse(out.choices[0]?.message.content ?? '')).toEqual({ you_said: 'hello' });
    const err = await provider
      .chat(
        {
          model: 'm',
          messages: user('x'),
          response_format: { type: 'json_schema', json_schema: { name: 'x' } },
        },
        ctx(),
      )
      .catch((e: unknown) => e);
    expect((err as ProviderRequestError).param).toBe('response_format.json_schema.schema');
  });

  it('builds valid instances of assorted schemas', () => {
    const cases: unknown[] = [
      { type: 'string', minLength: 5 },
      { type: 'integer', exclusiveMinimum: 3, exclusiveMaximum: 5 },
      { type: 'number', maximum: -2 },
      { type: 'array', prefixItems: [{ type: 'integer' }, { type: 'boolean' }], minItems: 2, maxItems: 2 },
      {
        allOf: [
          { type: 'object', properties: { a: { type: 'integer' } }, required: ['a'] },
          { required: ['b'], properties: { b: { type: 'null' } } },
        ],
      },
      { type: 'object', properties: { tree: { $ref: '#' } } },
      { oneOf: [{ type: 'string', format: 'date-time' }, { type: 'integer' }] },
    ];
    for (const schema of cases) {
      const value = schemaInstance(schema, 'hi');
      expect(
        ajv.validate(schema as object, value),
        `${JSON.stringify(schema)} → ${JSON.stringify(value)}`,
      ).toBe(true);
    }
  });
});

describe('schemaInstance bounds', () => {
  it('stays small for a schema whose nested minItems would multiply', () => {
    let schema: object = { type: 'string', minLength: 1 };
    for (let i = 0; i < 10; i++) schema = { type: 'array', items: schema, minItems: 16 };
    const started = performance.now();
    const text = JSON.stringify(schemaInstance(schema, 'x'.repeat(5000)));
    expect(performance.now() - started).toBeLessThan(1000);
    // 16^10 strings of 200 characters without the bound.
    expect(text.length).toBeLessThanOrEqual(MAX_CHARS + MAX_STRING);
  });

  /**
   * The schema behind a proxy that counts every read of it (properties, keys, descriptors) and throws
   * past `limit`: the work a call does, counted independently of the generator's own budget, and a
   * runaway generator fails here instead of freezing the test.
   */
  function counted(schema: object, limit = 3_000_000): { schema: object; reads: () => number } {
    let reads = 0;
    const read = () => {
      if (++reads > limit) throw new Error(`more than ${limit} reads of the schema`);
    };
    const wrap = (value: unknown): unknown => {
      if (value === null || typeof value !== 'object') return value;
      return new Proxy(value, {
        get(target, key) {
          read();
          return wrap(Reflect.get(target, key));
        },
        has(target, key) {
          read();
          return Reflect.has(target, key);
        },
        ownKeys(target) {
          const keys = Reflect.ownKeys(target);
          for (let i = 0; i <= keys.length; i++) read();
          return keys;
        },
        getOwnPropertyDescriptor(target, key) {
          read();
          return Reflect.getOwnPropertyDescriptor(target, key);
        },
      });
    };
    return { schema: wrap(schema) as object, reads: () => reads };
  }

  const six = ['a', 'b', 'c', 'd', 'e', 'f'];
  /** The review's repro: every object requires six copies of the whole schema (6^12 values unbounded). */
  const wide = {
    type: 'object',
    required: six,
    properties: Object.fromEntries(six.map((k) => [k, { $ref: '#' }])),
  };
  const wideAllOf = { type: 'object', allOf: six.map(() => ({ $ref: '#' })), required: ['x'] };

  it('answers a wide recursive schema within a bounded work, in response_format and in tools', async () => {
    for (const raw of [wide, wideAllOf]) {
      const format = counted(raw);
      const out = await complete({
        messages: user('hi'),
        max_tokens: 5,
        response_format: { type: 'json_schema', json_schema: { name: 'w', schema: format.schema } },
      });
      expect(out.choices[0]?.message.content).toEqual(expect.any(String));
      expect(format.reads()).toBeGreaterThan(100);
      const tool = counted(raw);
      const called = await complete({
        messages: user('hi'),
        max_tokens: 5,
        tools: [{ type: 'function', function: { name: 'f', parameters: tool.schema } }],
      });
      expect(called.choices[0]?.message.tool_calls?.[0]?.function.name).toBe('f');
      expect(tool.reads()).toBeGreaterThan(100);
      // The whole instance, not only what max_tokens lets through: bounded in size as in work.
      const whole = counted(raw);
      expect(JSON.stringify(schemaInstance(whole.schema, 'hi')).length).toBeLessThanOrEqual(
        MAX_CHARS + MAX_STRING,
      );
    }
  });

  it('shares one bound among all the tools one reply calls', async () => {
    const call = async (count: number): Promise<number> => {
      const names = Array.from({ length: count }, (_, i) => `tool_${i}`);
      const schemas = names.map(() => counted(wide));
      const out = await complete({
        messages: user(names.join(' ')),
        max_tokens: 5,
        tools: names.map((name, i) => ({
          type: 'function',
          function: { name, parameters: schemas[i]?.schema },
        })),
      });
      expect(out.choices[0]?.message.tool_calls?.[0]?.function.name).toBe('tool_0');
      return schemas.reduce((sum, s) => sum + s.reads(), 0);
    };
    const one = await call(1);
    // Forty tools named at once cost one tool's bound, not forty.
    expect(await call(40)).toBeLessThan(1.5 * one);
  });

  it('clamps every size a schema asks for and copies big constants within the bound', () => {
    const huge = 100_000_000;
    const schema = {
      type: 'object',
      required: ['s1', 's2', 's3', 's4', 's5', 'list', 'named'],
      properties: {
        s1: { type: 'string', minLength: huge },
        s2: { type: 'string', minLength: huge, maxLength: huge },
        s3: { type: 'string', minLength: huge },
        s4: { type: 'string', minLength: huge },
        s5: { type: 'string', minLength: huge },
        list: { type: 'array', minItems: huge, maxItems: huge, items: { type: 'integer' } },
        named: { $ref: '#/$defs/long' },
      },
      $defs: {
        long: {
          type: 'object',
          required: ['k'.repeat(50_000), 'c'],
          properties: { ['k'.repeat(50_000)]: { $ref: '#/$defs/long' }, c: { const: 'x'.repeat(100_000) } },
        },
      },
    };
    const { schema: proxied, reads } = counted(schema);
    const value = schemaInstance(proxied, 'hi') as Record<string, unknown>;
    for (const key of ['s1', 's2', 's3', 's4', 's5']) {
      expect((value[key] as string).length).toBeLessThanOrEqual(MAX_STRING);
    }
    expect((value.list as unknown[]).length).toBeLessThanOrEqual(16);
    expect(JSON.stringify(value).length).toBeLessThanOrEqual(MAX_CHARS + MAX_STRING);
    expect(reads()).toBeLessThan(3_000_000);
  });

  it('keeps a property named __proto__ as an ordinary key', () => {
    const schema = JSON.parse(
      '{"type":"object","required":["__proto__"],"properties":{"__proto__":{"type":"integer"}}}',
    );
    const value = schemaInstance(schema, 'hi') as object;
    expect(Object.getPrototypeOf(value)).toBe(Object.prototype);
    expect(JSON.stringify(value)).toBe('{"__proto__":0}');
    // Names of Object.prototype's members are not formats nor definitions.
    const odd = {
      type: 'object',
      required: ['a', 'b', 'c'],
      properties: {
        a: { type: 'string', format: 'constructor' },
        b: { type: 'string', format: '__proto__' },
        c: { $ref: '#/$defs/__proto__' },
      },
      $defs: {},
    };
    expect(schemaInstance(odd, 'hi')).toEqual({ a: 'hi', b: 'hi', c: null });
  });

  it('counts long $ref strings in the bound', () => {
    const long = `#/$defs/${'r'.repeat(200_000)}`;
    const six = ['a', 'b', 'c', 'd', 'e', 'f'];
    const schema = {
      type: 'object',
      required: [...six, 'x'],
      properties: { ...Object.fromEntries(six.map((k) => [k, { $ref: '#' }])), x: { $ref: long } },
    };
    const { schema: proxied, reads } = counted(schema);
    schemaInstance(proxied, 'hi');
    const unbounded = counted({ ...schema, properties: { ...schema.properties, x: { $ref: '#/$defs/r' } } });
    schemaInstance(unbounded.schema, 'hi');
    // Each lookup of the long reference costs its length: far fewer of them fit in the bound.
    expect(reads()).toBeLessThan(unbounded.reads());
  });
});

describe('schemaInstance bounds in a running gateway', () => {
  afterAll(() => stopAllGantry());

  it('answers the wide recursive schema while /v1/models keeps answering (default config)', async () => {
    const key = 'gty_f1-bounds-0123456789abcdefghijklmnopqrstuvwxyz';
    const g = await spawnGantry({
      config: join(new URL('../..', import.meta.url).pathname, 'config/gantry.yaml'),
      dataDir: tempDir('gantry-f1-bounds-'),
      env: { GANTRY_BOOTSTRAP_KEY: key },
    });
    const headers = { 'content-type': 'application/json', authorization: `Bearer ${key}` };
    const six = ['a', 'b', 'c', 'd', 'e', 'f'];
    const schema = {
      type: 'object',
      required: six,
      properties: Object.fromEntries(six.map((k) => [k, { $ref: '#' }])),
    };
    const chats = [
      { response_format: { type: 'json_schema', json_schema: { name: 'w', schema } } },
      { tools: [{ type: 'function', function: { name: 'f', parameters: schema } }] },
    ].map((extra) =>
      fetch(`${g.baseURL}/chat/completions`, {
        method: 'POST',
        headers,
        body: JSON.stringify({ model: 'gantry/local-chat', messages: user('hi'), max_tokens: 5, ...extra }),
        signal: AbortSignal.timeout(20_000),
      }),
    );
    // Asked while the two chats are in flight: unbounded, they held the loop for good.
    const models = await fetch(`${g.baseURL}/models`, { headers, signal: AbortSignal.timeout(20_000) });
    expect(models.status).toBe(200);
    for (const response of await Promise.all(chats)) expect(response.status).toBe(200);
  }, 60_000);
});

describe('local-chat images', () => {
  const png = `data:image/png;base64,${Buffer.alloc(300_000, 7).toString('base64')}`;
  const messages = [
    {
      role: 'user',
      content: [
        { type: 'text', text: 'What is in these?' },
        { type: 'image_url', image_url: { url: png, detail: 'low' } },
        { type: 'image_url', image_url: { url: 'https://example.com/cat.jpg' } },
      ],
    },
  ];

  it('says how many images it received and counts each at the fixed image cost', async () => {
    const out = await complete({ messages });
    expect(out.choices[0]?.message.content).toBe(
      `You said: What is in these?\nImages received: 2\n${LOCAL_REPLY_SUFFIX}`,
    );
    const textOnly = countChatInputTokens(user('What is in these?'));
    // 400 KB of base64 counts as one image, not as its text.
    expect(out.usage.prompt_tokens).toBe(textOnly + 2 * IMAGE_PART_TOKENS);
  });

  it('accepts reasoning_effort and ignores it', async () => {
    const a = await complete({ messages: user('think'), reasoning_effort: 'high' });
    const b = await complete({ messages: user('think') });
    expect(a.choices).toEqual(b.choices);
    expect(a.usage).toEqual(b.usage);
  });
});
