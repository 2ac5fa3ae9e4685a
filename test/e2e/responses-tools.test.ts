/**
 * The Responses API through Gantry with the official SDK: function tools, structured output, images and
 * reasoning where it is bridged onto chat completions (every body and event checked against OpenAI's
 * schemas), and, where it is passed through, the upstream's 4xx relayed and GET/DELETE routed to the
 * upstream that made the response.
 */
import OpenAI, { type APIError } from 'openai';
import type { ResponseStreamEvent } from 'openai/resources/responses/responses';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  type FakeOpenAI,
  fakeReply,
  type JsonObject,
  type RecordedRequest,
  startFakeOpenAI,
} from '../helpers/fake-openai.js';
import { startGantry, type TestGantry } from '../helpers/gantry.js';
import { assertOpenAISchema } from '../helpers/openapi.js';
import { parseSse } from '../helpers/sse-events.js';
import { WEATHER_TOOL } from '../helpers/tools.js';

const KEY = 'sk-upstream-0123456789';
const NATIVE = 'acme/native';
const NATIVE_PAIR = 'acme/native-pair';
const BRIDGED = 'acme/bridged';
/** Bridged onto chat, but without image-to-text: it takes no images. */
const BRIDGED_TEXT = 'acme/bridged-text';

let native: FakeOpenAI;
let native2: FakeOpenAI;
let chatOnly: FakeOpenAI;
let gantry: TestGantry;
let client: OpenAI;

beforeAll(async () => {
  native = await startFakeOpenAI({ apiKey: KEY });
  native2 = await startFakeOpenAI({ apiKey: KEY });
  chatOnly = await startFakeOpenAI({ apiKey: KEY });
  gantry = await startGantry(
    `
providers:
  native:
    kind: openai
    base_url: ${native.url}
    api_key_env: UP_KEY
    supports_responses: true
  native2:
    kind: openai
    base_url: ${native2.url}
    api_key_env: UP_KEY
    supports_responses: true
  chat-only:
    kind: openai
    base_url: ${chatOnly.url}
    api_key_env: UP_KEY
models:
  - namespace: ${NATIVE}
    name: Native Responses
    type: text
    routes: [{ provider: native, model: fake-model }]
  - namespace: ${NATIVE_PAIR}
    name: Native Responses on two upstreams
    type: text
    routes: [{ provider: native2, model: fake-model }, { provider: native, model: fake-model }]
  - namespace: ${BRIDGED}
    name: Bridged onto chat
    type: text
    capabilities: [image-to-text]
    routes: [{ provider: chat-only, model: plain-model }]
  - namespace: ${BRIDGED_TEXT}
    name: Bridged onto chat, text only
    type: text
    capabilities: [text-to-text]
    routes: [{ provider: chat-only, model: plain-model }]
`,
    { UP_KEY: KEY },
  );
  client = new OpenAI({ baseURL: gantry.baseURL, apiKey: gantry.key, maxRetries: 0 });
});
afterAll(async () => {
  await gantry?.close();
  await native?.close();
  await native2?.close();
  await chatOnly?.close();
});
beforeEach(() => {
  native.reset();
  native2.reset();
  chatOnly.reset();
});

const TIME = {
  type: 'function' as const,
  name: 'get_time',
  description: null,
  parameters: { type: 'object', properties: { tz: { type: 'string' } } },
  strict: false,
};
const CALLS = [
  { name: 'get_weather', arguments: '{"city":"Paris"}' },
  { name: 'get_time', arguments: '{"tz":"Europe/Paris"}' },
];

function last(requests: RecordedRequest[]): JsonObject {
  const body = requests[requests.length - 1]?.body;
  if (!body) throw new Error('the fake upstream received no request');
  return body;
}

async function rawEvents(body: JsonObject): Promise<Array<{ event: string; data: JsonObject }>> {
  const res = await fetch(`${gantry.baseURL}/responses`, {
    method: 'POST',
    headers: { authorization: `Bearer ${gantry.key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ ...body, stream: true }),
  });
  expect(res.status).toBe(200);
  const events = parseSse(await res.text()).map((e) => ({ event: e.event, data: JSON.parse(e.data) }));
  for (const e of events) {
    expect(e.data.type).toBe(e.event);
    assertOpenAISchema('ResponseStreamEvent', e.data);
  }
  events.forEach((e, i) => {
    expect(e.data.sequence_number).toBe(i);
  });
  return events;
}

describe('function tools on the bridge', () => {
  it('runs a whole tool loop without streaming: parallel calls, then their outputs by previous_response_id', async () => {
    chatOnly.enqueue({ toolCalls: CALLS });
    const first = await client.responses.create({
      model: BRIDGED,
      input: 'Weather and time in Paris?',
      tools: [WEATHER_TOOL, TIME],
      tool_choice: 'auto',
      parallel_tool_calls: true,
    });
    assertOpenAISchema('Response', first);
    const chatBody = last(chatOnly.requests);
    expect(chatBody.tools).toEqual([
      {
        type: 'function',
        function: {
          name: 'get_weather',
          description: WEATHER_TOOL.description,
          parameters: WEATHER_TOOL.parameters,
          strict: true,
        },
      },
      { type: 'function', function: { name: 'get_time', parameters: TIME.parameters, strict: false } },
    ]);
    expect(chatBody.tool_choice).toBe('auto');
    expect(chatBody.parallel_tool_calls).toBe(true);

    expect(first.status).toBe('completed');
    expect(first.output).toHaveLength(2);
    const [a, b] = first.output;
    expect(a).toMatchObject({ type: 'function_call', status: 'completed', name: 'get_weather' });
    expect(b).toMatchObject({ type: 'function_call', status: 'completed', name: 'get_time' });
    if (a?.type !== 'function_call' || b?.type !== 'function_call') throw new Error('no function calls');
    expect(a.id).toMatch(/^fc_[0-9a-f]{50}$/);
    expect(a.arguments).toBe(CALLS[0]?.arguments);
    expect(b.arguments).toBe(CALLS[1]?.arguments);
    expect(a.call_id).not.toBe(b.call_id);
    expect(first.tools).toEqual([WEATHER_TOOL, { ...TIME, description: null }]);

    const second = await client.responses.create({
      model: BRIDGED,
      previous_response_id: first.id,
      tools: [WEATHER_TOOL, TIME],
      input: [
        { type: 'function_call_output', call_id: a.call_id, output: '{"temp_c":21}' },
        { type: 'function_call_output', call_id: b.call_id, output: '14:05' },
      ],
    });
    assertOpenAISchema('Response', second);
    expect(second.output_text).toBe(fakeReply('Weather and time in Paris?'));
    expect(last(chatOnly.requests).messages).toEqual([
      { role: 'user', content: 'Weather and time in Paris?' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: a.call_id, type: 'function', function: { name: 'get_weather', arguments: a.arguments } },
          { id: b.call_id, type: 'function', function: { name: 'get_time', arguments: b.arguments } },
        ],
      },
      { role: 'tool', tool_call_id: a.call_id, content: '{"temp_c":21}' },
      { role: 'tool', tool_call_id: b.call_id, content: '14:05' },
    ]);
  });

  it('streams each call as added, argument deltas, done, item done, and completes with the same items', async () => {
    chatOnly.enqueue({ toolCalls: CALLS });
    const events = await rawEvents({
      model: BRIDGED,
      input: 'Weather and time?',
      tools: [WEATHER_TOOL, TIME],
      tool_choice: 'required',
    });
    expect(last(chatOnly.requests).tool_choice).toBe('required');
    const types = events.map((e) => e.event);
    const perCall = (i: number) =>
      [
        'response.output_item.added',
        'response.function_call_arguments.delta',
        'response.function_call_arguments.delta',
        'response.function_call_arguments.delta',
        'response.function_call_arguments.done',
        'response.output_item.done',
      ].map((t) => `${t}@${i}`);
    expect(events.slice(2, -1).map((e) => `${e.event}@${e.data.output_index}`)).toEqual([
      ...perCall(0),
      ...perCall(1),
    ]);
    expect(types.slice(0, 2)).toEqual(['response.created', 'response.in_progress']);
    expect(types.at(-1)).toBe('response.completed');

    const added = events.filter((e) => e.event === 'response.output_item.added');
    expect(added.map((e) => (e.data.item as JsonObject).arguments)).toEqual(['', '']);
    const done = events.filter((e) => e.event === 'response.output_item.done').map((e) => e.data.item);
    for (const [i, call] of CALLS.entries()) {
      const deltas = events
        .filter((e) => e.event === 'response.function_call_arguments.delta' && e.data.output_index === i)
        .map((e) => e.data.delta)
        .join('');
      expect(deltas).toBe(call.arguments);
      const argsDone = events.find(
        (e) => e.event === 'response.function_call_arguments.done' && e.data.output_index === i,
      );
      expect(argsDone?.data).toMatchObject({ name: call.name, arguments: call.arguments });
      expect(argsDone?.data.item_id).toBe((done[i] as JsonObject).id);
    }
    const completed = events.at(-1)?.data.response as JsonObject;
    expect(completed.output).toEqual(done);
  });

  it('gives the same final response streamed (responses.stream helper) as not, and continues after the call', async () => {
    chatOnly.enqueue({ toolCalls: CALLS.slice(0, 1) }, { toolCalls: CALLS.slice(0, 1) });
    const body = { model: BRIDGED, input: 'Weather?', tools: [WEATHER_TOOL] };
    const plain = await client.responses.create(body);
    const streamed = await client.responses.stream(body).finalResponse();
    const shape = (r: OpenAI.Responses.Response) =>
      r.output.map((item) =>
        item.type === 'function_call'
          ? { name: item.name, arguments: item.arguments, status: item.status }
          : item,
      );
    expect(shape(streamed)).toEqual(shape(plain));
    const call = streamed.output[0];
    if (call?.type !== 'function_call') throw new Error('no function call');

    // The continuation, streamed too: the stored history holds the call the stream produced.
    const events: ResponseStreamEvent[] = [];
    const stream = await client.responses.create({
      model: BRIDGED,
      previous_response_id: streamed.id,
      input: [{ type: 'function_call_output', call_id: call.call_id, output: 'sunny' }],
      stream: true,
    });
    for await (const event of stream) events.push(event);
    const final = events.at(-1);
    if (final?.type !== 'response.completed') throw new Error(`ended with ${final?.type}`);
    expect(final.response.output_text).toBe(fakeReply('Weather?'));
    expect(last(chatOnly.requests).messages).toEqual([
      { role: 'user', content: 'Weather?' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          {
            id: call.call_id,
            type: 'function',
            function: { name: 'get_weather', arguments: call.arguments },
          },
        ],
      },
      { role: 'tool', tool_call_id: call.call_id, content: 'sunny' },
    ]);
  });

  it('resolves item_reference items to earlier output, as the AI SDK sends them with store on', async () => {
    chatOnly.enqueue({ reply: 'Let me check.', toolCalls: CALLS.slice(0, 1) });
    const first = await client.responses.create({ model: BRIDGED, input: 'Weather?', tools: [WEATHER_TOOL] });
    const call = first.output.find((o) => o.type === 'function_call');
    if (call?.type !== 'function_call' || !call.id) throw new Error('no function call');
    await client.responses.create({
      model: BRIDGED,
      tools: [WEATHER_TOOL],
      input: [
        { role: 'user', content: 'Weather?' },
        { type: 'item_reference', id: call.id },
        { type: 'function_call_output', call_id: call.call_id, output: 'rain' },
      ],
    });
    expect(last(chatOnly.requests).messages).toEqual([
      { role: 'user', content: 'Weather?' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          {
            id: call.call_id,
            type: 'function',
            function: { name: 'get_weather', arguments: call.arguments },
          },
        ],
      },
      { role: 'tool', tool_call_id: call.call_id, content: 'rain' },
    ]);

    // Another account's items, or ids Gantry never made, are not there.
    const other = new OpenAI({ baseURL: gantry.baseURL, apiKey: gantry.otherKey, maxRetries: 0 });
    for (const [c, id] of [
      [other, call.id],
      [client, 'fc_unknown'],
    ] as const) {
      const err = await c.responses
        .create({
          model: BRIDGED,
          input: [
            { role: 'user', content: 'x' },
            { type: 'item_reference', id },
          ],
        })
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(OpenAI.BadRequestError);
      expect((err as APIError).param).toBe('input[1].id');
    }
  });

  it('takes function_call items in input and a named tool_choice', async () => {
    await client.responses.create({
      model: BRIDGED,
      tools: [WEATHER_TOOL],
      tool_choice: { type: 'function', name: 'get_weather' },
      parallel_tool_calls: false,
      input: [
        { role: 'user', content: 'Weather?' },
        { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Oslo"}' },
        { type: 'function_call_output', call_id: 'call_1', output: [{ type: 'input_text', text: 'snow' }] },
      ],
    });
    const chatBody = last(chatOnly.requests);
    expect(chatBody.tool_choice).toEqual({ type: 'function', function: { name: 'get_weather' } });
    expect(chatBody.parallel_tool_calls).toBe(false);
    expect(chatBody.messages).toEqual([
      { role: 'user', content: 'Weather?' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'call_1', content: 'snow' },
    ]);
  });

  it('refuses a tool type chat completions cannot run, naming it', async () => {
    const err = await client.responses
      .create({ model: BRIDGED, input: 'x', tools: [{ type: 'web_search' }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as APIError).param).toBe('tools[0].type');
    expect((err as APIError).message).toMatch(/web_search/);
    expect(chatOnly.requests).toHaveLength(0);
  });
});

describe('structured output, images and reasoning on the bridge', () => {
  it('asks chat for json_schema output and answers its JSON as output_text, echoing text.format', async () => {
    const json = '{"name":"Ada","age":36}';
    chatOnly.enqueue({ reply: json }, { reply: json });
    const format = {
      type: 'json_schema' as const,
      name: 'person',
      schema: {
        type: 'object',
        properties: { name: { type: 'string' }, age: { type: 'integer' } },
        required: ['name', 'age'],
        additionalProperties: false,
      },
      strict: true,
    };
    const response = await client.responses.create({ model: BRIDGED, input: 'Who?', text: { format } });
    assertOpenAISchema('Response', response);
    expect(last(chatOnly.requests).response_format).toEqual({
      type: 'json_schema',
      json_schema: { name: 'person', schema: format.schema, strict: true },
    });
    expect(response.output_text).toBe(json);
    expect(response.text?.format).toEqual(format);

    const object = await client.responses.create({
      model: BRIDGED,
      input: 'Who, as JSON?',
      text: { format: { type: 'json_object' } },
    });
    expect(last(chatOnly.requests).response_format).toEqual({ type: 'json_object' });
    expect(JSON.parse(object.output_text)).toEqual({ name: 'Ada', age: 36 });
  });

  it('gives the SDK’s responses.parse() the parsed JSON and parsed arguments of strict tools', async () => {
    chatOnly.enqueue({ reply: '{"name":"Ada","age":36}' }, { toolCalls: CALLS.slice(0, 1) });
    const format = {
      type: 'json_schema' as const,
      name: 'person',
      schema: { type: 'object', properties: { name: { type: 'string' }, age: { type: 'integer' } } },
      strict: true,
    };
    const parsed = await client.responses.parse({ model: BRIDGED, input: 'Who?', text: { format } });
    expect(parsed.output_parsed).toEqual({ name: 'Ada', age: 36 });

    const called = await client.responses.parse({ model: BRIDGED, input: 'Weather?', tools: [WEATHER_TOOL] });
    const call = called.output[0];
    expect(call?.type === 'function_call' ? call.parsed_arguments : undefined).toEqual({ city: 'Paris' });
  });

  it('sends input_image parts as chat image_url parts, and refuses images by file_id', async () => {
    const dataUrl = 'data:image/png;base64,iVBORw0KGgo=';
    await client.responses.create({
      model: BRIDGED,
      input: [
        {
          role: 'user',
          content: [
            { type: 'input_text', text: 'What is in these?' },
            { type: 'input_image', image_url: dataUrl, detail: 'low' },
            { type: 'input_image', image_url: 'https://example.com/cat.jpg', detail: 'auto' },
          ],
        },
      ],
    });
    expect(last(chatOnly.requests).messages).toEqual([
      {
        role: 'user',
        content: [
          { type: 'text', text: 'What is in these?' },
          { type: 'image_url', image_url: { url: dataUrl, detail: 'low' } },
          { type: 'image_url', image_url: { url: 'https://example.com/cat.jpg', detail: 'auto' } },
        ],
      },
    ]);
    const err = await client.responses
      .create({
        model: BRIDGED,
        input: [{ role: 'user', content: [{ type: 'input_image', file_id: 'file-abc', detail: 'auto' }] }],
      })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as APIError).param).toBe('input[0].content[0].file_id');
  });

  it.each<[string, string]>([
    ['bridged', BRIDGED_TEXT],
    ['passed through', NATIVE],
  ])(
    'refuses input_image to a model without image-to-text with a 400 naming input (%s), streamed or not',
    async (_path, model) => {
      const input: OpenAI.Responses.ResponseInput = [
        { role: 'user', content: [{ type: 'input_text', text: 'Hello' }] },
        {
          role: 'user',
          content: [
            { type: 'input_text', text: 'What is this?' },
            { type: 'input_image', image_url: 'https://example.com/cat.jpg', detail: 'auto' },
          ],
        },
      ];
      for (const stream of [false, true]) {
        const err = await client.responses.create({ model, input, stream }).catch((e: unknown) => e);
        expect(err).toBeInstanceOf(OpenAI.BadRequestError);
        const apiError = err as APIError;
        expect(apiError).toMatchObject({ status: 400, param: 'input', code: 'invalid_parameter' });
        expect(apiError.message).toContain('does not take images');
        assertOpenAISchema('ErrorResponse', { error: apiError.error });
      }
      // Refused before any upstream saw it.
      expect(chatOnly.requests).toHaveLength(0);
      expect(native.requests).toHaveLength(0);
      // The same model still takes text.
      const ok = await client.responses.create({ model, input: 'Hello' });
      expect(ok.status).toBe('completed');
    },
  );

  it('turns reasoning_content into a reasoning item before the message, in JSON and in the stream', async () => {
    const thought = 'The user greets me, so I greet back.';
    chatOnly.enqueue({ reasoning: thought }, { reasoning: thought });
    const response = await client.responses.create({
      model: BRIDGED,
      input: 'hello',
      reasoning: { effort: 'low', summary: 'auto' },
    });
    assertOpenAISchema('Response', response);
    expect(last(chatOnly.requests).reasoning_effort).toBe('low');
    expect(response.output.map((o) => o.type)).toEqual(['reasoning', 'message']);
    expect(response.output[0]).toMatchObject({
      type: 'reasoning',
      summary: [],
      content: [{ type: 'reasoning_text', text: thought }],
    });
    expect(response.output[0]?.id).toMatch(/^rs_/);
    expect(response.output_text).toBe(fakeReply('hello'));
    expect(response.reasoning).toEqual({ effort: 'low', summary: 'auto' });
    expect(response.usage?.output_tokens_details.reasoning_tokens).toBe(8);

    const events = await rawEvents({ model: BRIDGED, input: 'hello', reasoning: { effort: 'low' } });
    const deltas = events.filter((e) => e.event === 'response.reasoning_text.delta');
    expect(deltas.map((e) => e.data.delta).join('')).toBe(thought);
    expect(deltas.every((e) => e.data.output_index === 0)).toBe(true);
    const final = events.at(-1)?.data.response as JsonObject;
    expect((final.output as JsonObject[]).map((o) => o.type)).toEqual(['reasoning', 'message']);
    expect(final.output_text).toBe(fakeReply('hello'));
  });
});

describe('stored responses: retrieve and delete', () => {
  it('retrieves and deletes a bridged response with the SDK', async () => {
    const created = await client.responses.create({ model: BRIDGED, input: 'keep me' });
    const got = await client.responses.retrieve(created.id);
    expect(got.id).toBe(created.id);
    expect(got.output_text).toBe(created.output_text);
    await client.responses.delete(created.id);
    await expect(client.responses.retrieve(created.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await expect(client.responses.delete(created.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
  });

  it('lists the input items of a bridged tool loop as OpenAI does: newest first, paged', async () => {
    chatOnly.enqueue({ toolCalls: CALLS.slice(0, 1) });
    const first = await client.responses.create({ model: BRIDGED, input: 'Weather?', tools: [WEATHER_TOOL] });
    const call = first.output[0];
    if (call?.type !== 'function_call') throw new Error('no function call');
    const second = await client.responses.create({
      model: BRIDGED,
      previous_response_id: first.id,
      input: [{ type: 'function_call_output', call_id: call.call_id, output: 'sunny' }],
    });
    const res = await fetch(`${gantry.baseURL}/responses/${second.id}/input_items?order=asc`, {
      headers: { authorization: `Bearer ${gantry.key}` },
    });
    const page = await res.json();
    assertOpenAISchema('ResponseItemList', page);
    expect(page.data.map((i: JsonObject) => i.type)).toEqual([
      'message',
      'function_call',
      'function_call_output',
    ]);
    expect(page.data[1]).toMatchObject({
      call_id: call.call_id,
      name: 'get_weather',
      arguments: call.arguments,
    });
    expect(page.data[2]).toMatchObject({ call_id: call.call_id, output: 'sunny' });

    // The SDK pages newest first, two at a time, and sees every item once.
    const seen: string[] = [];
    for await (const item of client.responses.inputItems.list(second.id, { limit: 2 })) seen.push(item.type);
    expect(seen).toEqual(['function_call_output', 'function_call', 'message']);
  });

  it('routes retrieve, input_items and delete of a passed-through response to the upstream that made it', async () => {
    const created = await client.responses.create({ model: NATIVE, input: 'native keep' });
    expect(native.storedResponses.has(created.id)).toBe(true);
    const got = await client.responses.retrieve(created.id);
    expect(got.id).toBe(created.id);
    expect(got.model).toBe(NATIVE);
    expect(got.output_text).toBe(fakeReply('native keep'));
    assertOpenAISchema('Response', got);
    const request = native.requests.at(-1);
    expect(request?.method).toBe('GET');
    expect(request?.path).toBe(`/v1/responses/${created.id}`);
    expect(request?.headers.authorization).toBe(`Bearer ${KEY}`);

    const items = await client.responses.inputItems.list(created.id);
    expect(items.data.map((i) => (i.type === 'message' ? i.content : undefined))).toEqual([
      [{ type: 'input_text', text: 'native keep' }],
    ]);

    // Another account cannot reach it, even though Gantry reaches the upstream with one key for all.
    const other = new OpenAI({ baseURL: gantry.baseURL, apiKey: gantry.otherKey, maxRetries: 0 });
    await expect(other.responses.retrieve(created.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await expect(other.responses.delete(created.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    expect(native.storedResponses.has(created.id)).toBe(true);

    await client.responses.delete(created.id);
    expect(native.requests.at(-1)?.method).toBe('DELETE');
    expect(native.storedResponses.has(created.id)).toBe(false);
    await expect(client.responses.retrieve(created.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
  });

  it('sends a continuation to the upstream that made the previous response, not the first route', async () => {
    // The first route fails over (503), so the second one makes the response.
    native2.enqueue({ status: 503 });
    const first = await client.responses.create({ model: NATIVE_PAIR, input: 'pair one' });
    expect(native.storedResponses.has(first.id)).toBe(true);
    expect(native2.requests).toHaveLength(1);
    const second = await client.responses.create({
      model: NATIVE_PAIR,
      input: 'pair two',
      previous_response_id: first.id,
    });
    expect(second.previous_response_id).toBe(first.id);
    expect(native2.requests).toHaveLength(1);
    expect(native.requests.at(-1)?.body?.previous_response_id).toBe(first.id);
  });

  it('answers 404 for a passed-through response its upstream has forgotten, and forgets it too', async () => {
    const created = await client.responses.create({ model: NATIVE, input: 'short-lived' });
    const owner = gantry.store.getAccountByName('test');
    expect(owner && gantry.store.getResponse(created.id, owner.id)).toBeTruthy();
    native.storedResponses.delete(created.id);
    await expect(client.responses.retrieve(created.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await expect(client.responses.delete(created.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    const account = gantry.store.getAccountByName('test');
    if (!account) throw new Error('no test account');
    expect(gantry.store.getResponse(created.id, account.id)).toBeUndefined();
  });

  it('remembers the provider of a streamed passed-through response too', async () => {
    const final = await client.responses.stream({ model: NATIVE, input: 'native stream' }).finalResponse();
    const got = await client.responses.retrieve(final.id);
    expect(got.output_text).toBe(fakeReply('native stream'));
  });
});

describe('upstream errors of a passed-through Responses call', () => {
  it("relays a 404 previous_response_not_found with the upstream's message, param and code, not retried", async () => {
    const retrying = new OpenAI({ baseURL: gantry.baseURL, apiKey: gantry.key, maxRetries: 2 });
    const err = await retrying.responses
      .create({ model: NATIVE, input: 'again', previous_response_id: 'resp_gone' })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    const apiError = err as APIError;
    expect(apiError.status).toBe(404);
    expect(apiError.code).toBe('previous_response_not_found');
    expect(apiError.param).toBe('previous_response_id');
    expect(apiError.message).toContain("Previous response with id 'resp_gone' not found.");
    assertOpenAISchema('ErrorResponse', { error: apiError.error });
    expect(native.requests).toHaveLength(1);
  });

  it('relays a 400 with its param, streamed or not', async () => {
    const upstreamError = {
      message: "Invalid value: 'x'. Supported values are: 'auto'.",
      param: 'truncation',
      code: 'invalid_value',
    };
    native.enqueue({ status: 400, error: upstreamError }, { status: 400, error: upstreamError });
    for (const stream of [false, true]) {
      const err = await client.responses
        .create({ model: NATIVE, input: 'bad', stream })
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(OpenAI.BadRequestError);
      expect(err).toMatchObject({ status: 400, param: 'truncation', code: 'invalid_value' });
      expect((err as Error).message).toContain(upstreamError.message);
    }
  });

  it('keeps a 401 from the upstream a gateway failure: it is about Gantry’s credentials', async () => {
    native.enqueue({ status: 401 });
    const err = await client.responses.create({ model: NATIVE, input: 'x' }).catch((e: unknown) => e);
    expect((err as APIError).status).toBe(502);
  });
});
