/**
 * The fake Anthropic API's own wire format, byte for byte, for tool_use and thinking streams (shaped as
 * Anthropic's streaming docs show them), and the checks it makes like Anthropic does: the translations
 * are only as good as the fake they are tested against.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  anthropicFakeSignature,
  anthropicSchemaInstance,
  type FakeAnthropic,
  startFakeAnthropic,
} from '../helpers/fake-anthropic.js';

let fake: FakeAnthropic;
beforeAll(async () => {
  fake = await startFakeAnthropic();
});
afterAll(async () => {
  await fake?.close();
});
beforeEach(() => fake.reset());

async function post(body: unknown): Promise<Response> {
  return fetch(`${fake.url}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
    body: JSON.stringify(body),
  });
}

const tool = {
  name: 'get_weather',
  input_schema: { type: 'object', properties: { city: { type: 'string' } } },
};

describe('fake Anthropic streams', () => {
  it('streams a forced tool call as the docs do: input {} then input_json_delta pieces, stop_reason tool_use', async () => {
    fake.setBehavior({ toolInput: { city: 'Paris' } });
    const res = await post({
      model: 'claude-x',
      max_tokens: 50,
      stream: true,
      messages: [{ role: 'user', content: 'Weather in Paris?' }],
      tools: [tool],
      tool_choice: { type: 'tool', name: 'get_weather' },
    });
    expect(res.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
    const usage = '"input_tokens":3,"cache_creation_input_tokens":0,"cache_read_input_tokens":0';
    expect(await res.text()).toBe(
      'event: message_start\n' +
        `data: {"type":"message_start","message":{"id":"msg_fake1","type":"message","role":"assistant","model":"claude-x","content":[],"stop_reason":null,"stop_sequence":null,"usage":{${usage},"output_tokens":1}}}\n\n` +
        'event: content_block_start\n' +
        'data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_fake1_0","name":"get_weather","input":{}}}\n\n' +
        'event: ping\ndata: {"type":"ping"}\n\n' +
        'event: content_block_delta\n' +
        'data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":""}}\n\n' +
        'event: content_block_delta\n' +
        'data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\\"city\\":"}}\n\n' +
        'event: content_block_delta\n' +
        'data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"\\"Paris\\"}"}}\n\n' +
        'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n' +
        'event: message_delta\n' +
        `data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{${usage},"output_tokens":2}}\n\n` +
        'event: message_stop\ndata: {"type":"message_stop"}\n\n',
    );
  });

  it('streams a call without arguments as the API does: input {} and a lone empty input_json_delta', async () => {
    fake.setBehavior({ toolCalls: [{ id: 'toolu_clock', name: 'get_time', input: {} }] });
    const res = await post({
      model: 'claude-x',
      max_tokens: 50,
      stream: true,
      messages: [{ role: 'user', content: 'Time?' }],
      tools: [{ name: 'get_time', input_schema: { type: 'object', properties: {} } }],
    });
    const text = await res.text();
    expect(text).toContain(
      'data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_clock","name":"get_time","input":{}}}\n\n',
    );
    const pieces = [...text.matchAll(/"partial_json":("[^"]*")/g)].map((m) => JSON.parse(m[1] ?? '""'));
    expect(pieces).toEqual(['']);
    expect(text).toContain('"stop_reason":"tool_use"');
  });

  it('streams thinking with empty thinking and signature at the start and a signature_delta before its stop', async () => {
    const res = await post({
      model: 'claude-x',
      max_tokens: 2000,
      stream: true,
      thinking: { type: 'enabled', budget_tokens: 1024 },
      messages: [{ role: 'user', content: 'Hi' }],
    });
    const sig = anthropicFakeSignature('Thinking about: Hi');
    const usage = '"input_tokens":1,"cache_creation_input_tokens":0,"cache_read_input_tokens":0';
    expect(await res.text()).toBe(
      'event: message_start\n' +
        `data: {"type":"message_start","message":{"id":"msg_fake1","type":"message","role":"assistant","model":"claude-x","content":[],"stop_reason":null,"stop_sequence":null,"usage":{${usage},"output_tokens":1}}}\n\n` +
        'event: content_block_start\n' +
        'data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}\n\n' +
        'event: ping\ndata: {"type":"ping"}\n\n' +
        'event: content_block_delta\n' +
        'data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Thinking"}}\n\n' +
        'event: content_block_delta\n' +
        'data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":" about:"}}\n\n' +
        'event: content_block_delta\n' +
        'data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":" Hi"}}\n\n' +
        'event: content_block_delta\n' +
        `data: {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"${sig}"}}\n\n` +
        'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n' +
        'event: content_block_start\n' +
        'data: {"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}\n\n' +
        'event: content_block_delta\n' +
        'data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"You"}}\n\n' +
        'event: content_block_delta\n' +
        'data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":" said:"}}\n\n' +
        'event: content_block_delta\n' +
        'data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":" Hi"}}\n\n' +
        'event: content_block_stop\ndata: {"type":"content_block_stop","index":1}\n\n' +
        'event: message_delta\n' +
        `data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{${usage},"output_tokens":6}}\n\n` +
        'event: message_stop\ndata: {"type":"message_stop"}\n\n',
    );
  });

  it('reports cache reads and writes beside input_tokens', async () => {
    fake.setBehavior({ cacheReadTokens: 2000, cacheCreationTokens: 100 });
    const body = await (
      await post({ model: 'm', max_tokens: 5, messages: [{ role: 'user', content: 'Hi' }] })
    ).json();
    expect(body.usage).toEqual({
      input_tokens: 1,
      cache_creation_input_tokens: 100,
      cache_read_input_tokens: 2000,
      output_tokens: 3,
    });
  });

  it('builds a forced tool input from its schema', () => {
    expect(
      anthropicSchemaInstance({
        type: 'object',
        properties: {
          name: { type: 'string' },
          age: { type: 'integer' },
          tags: { type: 'array', items: { type: 'string' } },
          kind: { enum: ['a', 'b'] },
        },
      }),
    ).toEqual({ name: 'text', age: 1, tags: ['text'], kind: 'a' });
  });
});

describe('fake Anthropic checks', () => {
  const call = {
    role: 'assistant',
    content: [{ type: 'tool_use', id: 't1', name: 'get_weather', input: {} }],
  };
  const result = { type: 'tool_result', tool_use_id: 't1', content: 'Sunny' };
  it.each<[string, unknown, RegExp]>([
    [
      'a tool_use without its tool_result',
      { messages: [{ role: 'user', content: 'x' }, call, { role: 'user', content: 'y' }] },
      /without `tool_result` blocks/,
    ],
    [
      'a tool_result after text',
      {
        messages: [
          { role: 'user', content: 'x' },
          call,
          { role: 'user', content: [{ type: 'text', text: 'y' }, result] },
        ],
      },
      /must come first/,
    ],
    [
      'a thinking block with a signature the fake did not make',
      {
        messages: [
          { role: 'user', content: 'x' },
          {
            role: 'assistant',
            content: [
              { type: 'thinking', thinking: 't', signature: 'forged' },
              { type: 'text', text: 'a' },
            ],
          },
          { role: 'user', content: 'y' },
        ],
      },
      /Invalid `signature`/,
    ],
    [
      'a tool loop with thinking on whose assistant turn lost its thinking',
      {
        max_tokens: 2000,
        thinking: { type: 'enabled', budget_tokens: 1024 },
        tools: [tool],
        messages: [{ role: 'user', content: 'x' }, call, { role: 'user', content: [result] }],
      },
      /Expected `thinking` or `redacted_thinking`/,
    ],
    [
      'a thinking budget not below max_tokens',
      { max_tokens: 1024, thinking: { type: 'enabled', budget_tokens: 1024 } },
      /budget_tokens/,
    ],
    [
      'a forced tool with thinking',
      {
        max_tokens: 2000,
        thinking: { type: 'enabled', budget_tokens: 1024 },
        tools: [tool],
        tool_choice: { type: 'any' },
      },
      /forces tool use/,
    ],
    [
      'an image of a type Anthropic does not take',
      {
        messages: [
          {
            role: 'user',
            content: [{ type: 'image', source: { type: 'base64', media_type: 'image/bmp', data: 'Qk0=' } }],
          },
        ],
      },
      /media_type/,
    ],
    [
      'temperature together with top_p, as the newer models do',
      { temperature: 0.7, top_p: 0.95 },
      /`temperature` and `top_p` cannot both be specified for this model/,
    ],
  ])('refuses %s', async (_name, extra, message) => {
    const res = await post({
      model: 'm',
      max_tokens: 50,
      messages: [{ role: 'user', content: 'Hi' }],
      ...(extra as object),
    });
    expect(res.status).toBe(400);
    const body = await res.json();
    expect(body.error.type).toBe('invalid_request_error');
    expect(body.error.message).toMatch(message);
  });
});
