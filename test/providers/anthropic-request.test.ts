/**
 * OpenAI chat request → Anthropic Messages request: tools, tool_choice, tool round trips, structured
 * output, images and thinking (providers/anthropic/request.ts). The basic fields are covered in
 * anthropic-basics.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { THINKING_BUDGETS, translateRequest } from '../../providers/anthropic/request.js';
import { ProviderRequestError } from '../../providers/request-error.js';
import type { JsonObject } from '../../providers/types.js';

const base = { model: 'claude-test', max_tokens: 100 };
const user = (content: unknown) => ({ role: 'user', content });
const weather = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Weather of a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};
const time = { type: 'function', function: { name: 'get_time' } };
const weatherTool = {
  name: 'get_weather',
  description: 'Weather of a city',
  input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};
const timeTool = { name: 'get_time', input_schema: { type: 'object', properties: {} } };

function refusal(body: JsonObject): ProviderRequestError {
  try {
    translateRequest(body);
  } catch (err) {
    expect(err).toBeInstanceOf(ProviderRequestError);
    return err as ProviderRequestError;
  }
  throw new Error('expected a ProviderRequestError');
}

describe('tools and tool_choice', () => {
  it.each<[string, JsonObject, JsonObject]>([
    ['tools alone', { tools: [weather, time] }, { tools: [weatherTool, timeTool] }],
    [
      'auto',
      { tools: [weather], tool_choice: 'auto' },
      { tools: [weatherTool], tool_choice: { type: 'auto' } },
    ],
    [
      'none',
      { tools: [weather], tool_choice: 'none' },
      { tools: [weatherTool], tool_choice: { type: 'none' } },
    ],
    [
      'required → any',
      { tools: [weather], tool_choice: 'required' },
      { tools: [weatherTool], tool_choice: { type: 'any' } },
    ],
    [
      'a named function → tool',
      { tools: [weather, time], tool_choice: { type: 'function', function: { name: 'get_time' } } },
      { tools: [weatherTool, timeTool], tool_choice: { type: 'tool', name: 'get_time' } },
    ],
    [
      'parallel_tool_calls false without tool_choice',
      { tools: [weather], parallel_tool_calls: false },
      { tools: [weatherTool], tool_choice: { type: 'auto', disable_parallel_tool_use: true } },
    ],
    [
      'parallel_tool_calls false with required',
      { tools: [weather], tool_choice: 'required', parallel_tool_calls: false },
      { tools: [weatherTool], tool_choice: { type: 'any', disable_parallel_tool_use: true } },
    ],
    [
      'parallel_tool_calls false with none (nothing to disable)',
      { tools: [weather], tool_choice: 'none', parallel_tool_calls: false },
      { tools: [weatherTool], tool_choice: { type: 'none' } },
    ],
    ['parallel_tool_calls true', { tools: [weather], parallel_tool_calls: true }, { tools: [weatherTool] }],
    [
      'allowed_tools auto: only the allowed tools are sent',
      {
        tools: [weather, time],
        tool_choice: {
          type: 'allowed_tools',
          allowed_tools: { mode: 'auto', tools: [{ type: 'function', function: { name: 'get_time' } }] },
        },
      },
      { tools: [timeTool], tool_choice: { type: 'auto' } },
    ],
    [
      'allowed_tools required → any',
      {
        tools: [weather, time],
        tool_choice: {
          type: 'allowed_tools',
          allowed_tools: {
            mode: 'required',
            tools: [{ type: 'function', function: { name: 'get_weather' } }],
          },
        },
      },
      { tools: [weatherTool], tool_choice: { type: 'any' } },
    ],
    ['an empty tools list', { tools: [], tool_choice: 'none' }, {}],
    [
      'a schema without type gets type object',
      { tools: [{ type: 'function', function: { name: 'f', parameters: { properties: {} } } }] },
      { tools: [{ name: 'f', input_schema: { type: 'object', properties: {} } }] },
    ],
  ])('%s', (_name, extra, expected) => {
    const { request, jsonTool } = translateRequest({ ...base, messages: [user('Hi')], ...extra });
    expect(jsonTool).toBeUndefined();
    expect({ tools: request.tools, tool_choice: request.tool_choice }).toEqual({
      tools: undefined,
      tool_choice: undefined,
      ...expected,
    });
  });

  it.each<[string, JsonObject, string]>([
    ['a non-function tool', { tools: [{ type: 'custom', custom: { name: 'x' } }] }, 'tools[0]'],
    ['a function without a name', { tools: [{ type: 'function', function: {} }] }, 'tools[0].function.name'],
    [
      'a non-object schema',
      { tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'string' } } }] },
      'tools[0].function.parameters',
    ],
    [
      'tool_choice naming an unknown function',
      { tools: [weather], tool_choice: { type: 'function', function: { name: 'nope' } } },
      'tool_choice',
    ],
    ['tool_choice required without tools', { tool_choice: 'required' }, 'tool_choice'],
    [
      'allowed_tools without a mode',
      { tools: [weather], tool_choice: { type: 'allowed_tools', allowed_tools: {} } },
      'tool_choice.allowed_tools.mode',
    ],
    [
      'allowed_tools naming an unknown tool',
      {
        tools: [weather],
        tool_choice: {
          type: 'allowed_tools',
          allowed_tools: { mode: 'auto', tools: [{ type: 'function', function: { name: 'nope' } }] },
        },
      },
      'tool_choice.allowed_tools.tools[0]',
    ],
    ['legacy functions', { functions: [{ name: 'f' }] }, 'functions'],
    ['legacy function_call', { function_call: { name: 'f' } }, 'function_call'],
  ])('refuses %s', (_name, extra, param) => {
    const err = refusal({ ...base, messages: [user('Hi')], ...extra });
    expect(err.reason).toBe('invalid_parameter');
    expect(err.param).toBe(param);
  });
});

describe('tool round trips', () => {
  it('turns tool_calls into tool_use blocks and consecutive tool messages into one user turn of tool_result blocks', () => {
    const { request } = translateRequest({
      ...base,
      tools: [weather],
      messages: [
        user('Weather in Paris and Rome?'),
        {
          role: 'assistant',
          content: 'Let me look.',
          tool_calls: [
            {
              id: 'call_1',
              type: 'function',
              function: { name: 'get_weather', arguments: '{"city":"Paris"}' },
            },
            {
              id: 'call_2',
              type: 'function',
              function: { name: 'get_weather', arguments: '{"city":"Rome"}' },
            },
          ],
        },
        { role: 'tool', tool_call_id: 'call_1', content: 'Sunny' },
        {
          role: 'tool',
          tool_call_id: 'call_2',
          content: [
            { type: 'text', text: 'Rain' },
            { type: 'text', text: '12C' },
          ],
        },
        user('And tomorrow?'),
      ],
    });
    expect(request.messages).toEqual([
      { role: 'user', content: 'Weather in Paris and Rome?' },
      {
        role: 'assistant',
        content: [
          { type: 'text', text: 'Let me look.' },
          { type: 'tool_use', id: 'call_1', name: 'get_weather', input: { city: 'Paris' } },
          { type: 'tool_use', id: 'call_2', name: 'get_weather', input: { city: 'Rome' } },
        ],
      },
      {
        role: 'user',
        content: [
          { type: 'tool_result', tool_use_id: 'call_1', content: 'Sunny' },
          {
            type: 'tool_result',
            tool_use_id: 'call_2',
            content: [
              { type: 'text', text: 'Rain' },
              { type: 'text', text: '12C' },
            ],
          },
          { type: 'text', text: 'And tomorrow?' },
        ],
      },
    ]);
  });

  it('sends an assistant turn of tool calls only (content null), empty arguments as {}', () => {
    const { request } = translateRequest({
      ...base,
      messages: [
        user('Time?'),
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: 'c', type: 'function', function: { name: 'get_time', arguments: '' } }],
        },
        { role: 'tool', tool_call_id: 'c', content: '' },
      ],
    });
    expect(request.messages.slice(1)).toEqual([
      { role: 'assistant', content: [{ type: 'tool_use', id: 'c', name: 'get_time', input: {} }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'c' }] },
    ]);
  });

  it.each<[string, unknown, string]>([
    ['arguments that are not JSON', '{"city":', 'messages[1].tool_calls[0].function.arguments'],
    ['arguments that are not an object', '[1,2]', 'messages[1].tool_calls[0].function.arguments'],
  ])('refuses %s', (_name, args, param) => {
    const err = refusal({
      ...base,
      messages: [
        user('x'),
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: args } }],
        },
      ],
    });
    expect(err.param).toBe(param);
  });
});

describe('structured output', () => {
  const schema = {
    type: 'object',
    properties: { name: { type: 'string' } },
    required: ['name'],
    additionalProperties: false,
  };

  it('json_schema becomes a forced tool whose input_schema is the schema', () => {
    const { request, jsonTool } = translateRequest({
      ...base,
      messages: [user('Who?')],
      response_format: { type: 'json_schema', json_schema: { name: 'person', schema, strict: true } },
    });
    expect(jsonTool).toBe('person');
    expect(request.tools).toEqual([
      {
        name: 'person',
        description: 'Answer with this tool: its input is the answer.',
        input_schema: schema,
      },
    ]);
    // One call only: two calls of the answer tool would be two JSON documents for one answer.
    expect(request.tool_choice).toEqual({ type: 'tool', name: 'person', disable_parallel_tool_use: true });
  });

  it('json_object becomes a forced tool taking any object', () => {
    const { request, jsonTool } = translateRequest({
      ...base,
      messages: [user('Who?')],
      response_format: { type: 'json_object' },
    });
    expect(jsonTool).toBe('json_object');
    expect(request.tools?.[0]?.input_schema).toEqual({ type: 'object' });
    expect(request.tool_choice).toEqual({
      type: 'tool',
      name: 'json_object',
      disable_parallel_tool_use: true,
    });
  });

  it('keeps text as plain text', () => {
    const { request, jsonTool } = translateRequest({
      ...base,
      messages: [user('Hi')],
      response_format: { type: 'text' },
    });
    expect(jsonTool).toBeUndefined();
    expect(request.tools).toBeUndefined();
  });

  it('drops the client tools when tool_choice is none', () => {
    const { request, jsonTool } = translateRequest({
      ...base,
      messages: [user('Hi')],
      tools: [weather],
      tool_choice: 'none',
      response_format: { type: 'json_object' },
    });
    expect(jsonTool).toBe('json_object');
    expect(request.tools?.map((t) => t.name)).toEqual(['json_object']);
    expect(request.tool_choice).toEqual({
      type: 'tool',
      name: 'json_object',
      disable_parallel_tool_use: true,
    });
  });

  it.each<[string, JsonObject, JsonObject]>([
    ['auto', { tool_choice: 'auto' }, { type: 'any' }],
    ['no tool_choice', {}, { type: 'any' }],
    ['required', { tool_choice: 'required' }, { type: 'any' }],
    [
      'parallel_tool_calls false',
      { parallel_tool_calls: false },
      { type: 'any', disable_parallel_tool_use: true },
    ],
    [
      'a named function',
      { tool_choice: { type: 'function', function: { name: 'get_weather' } } },
      { type: 'tool', name: 'get_weather' },
    ],
  ])('beside client tools (%s), the answer tool is one the model may call', (_name, extra, choice) => {
    const { request, jsonTool } = translateRequest({
      ...base,
      messages: [user('Hi')],
      tools: [weather],
      response_format: { type: 'json_schema', json_schema: { name: 'person', schema } },
      ...extra,
    });
    expect(jsonTool).toBe('person');
    expect(request.tools?.map((t) => t.name)).toEqual(['get_weather', 'person']);
    expect(request.tool_choice).toEqual(choice);
  });

  it.each<[string, JsonObject, string]>([
    [
      'an answer tool named like a client tool',
      {
        tools: [weather],
        response_format: { type: 'json_schema', json_schema: { name: 'get_weather', schema } },
      },
      'response_format.json_schema.name',
    ],
    [
      'tools and json_schema with reasoning_effort (a forced tool)',
      {
        max_tokens: 4000,
        reasoning_effort: 'low',
        tools: [weather],
        response_format: { type: 'json_object' },
      },
      'response_format',
    ],
    [
      'a json_schema without a name',
      { response_format: { type: 'json_schema', json_schema: { schema } } },
      'response_format.json_schema.name',
    ],
    [
      'a non-object root schema',
      { response_format: { type: 'json_schema', json_schema: { name: 'p', schema: { type: 'array' } } } },
      'response_format.json_schema.schema',
    ],
    [
      'json_schema with reasoning_effort',
      { max_tokens: 4000, reasoning_effort: 'low', response_format: { type: 'json_object' } },
      'response_format',
    ],
  ])('refuses %s', (_name, extra, param) => {
    const err = refusal({ ...base, messages: [user('Hi')], ...extra });
    expect(err.param).toBe(param);
    expect(err.reason).toBe('invalid_parameter');
  });
});

describe('images', () => {
  it.each<[string, string, JsonObject]>([
    [
      'a png data URI',
      'data:image/png;base64,iVBORw0KGgo=',
      { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' },
    ],
    [
      'a jpeg data URI',
      'data:image/jpeg;base64,/9j/4AAQ',
      { type: 'base64', media_type: 'image/jpeg', data: '/9j/4AAQ' },
    ],
    [
      'a gif data URI with parameters',
      'data:image/gif;name=a.gif;base64,R0lGOD',
      { type: 'base64', media_type: 'image/gif', data: 'R0lGOD' },
    ],
    [
      'a webp data URI',
      'data:image/webp;base64,UklGR',
      { type: 'base64', media_type: 'image/webp', data: 'UklGR' },
    ],
    ['an https URL', 'https://example.com/cat.png', { type: 'url', url: 'https://example.com/cat.png' }],
  ])('maps %s', (_name, url, source) => {
    const { request } = translateRequest({
      ...base,
      messages: [
        user([
          { type: 'text', text: 'What is this?' },
          { type: 'image_url', image_url: { url, detail: 'high' } },
        ]),
      ],
    });
    expect(request.messages[0]?.content).toEqual([
      { type: 'text', text: 'What is this?' },
      { type: 'image', source },
    ]);
  });

  it.each<[string, string]>([
    ['a bmp', 'data:image/bmp;base64,Qk0='],
    ['an svg', 'data:image/svg+xml;base64,PHN2Zz4='],
    ['a data URI that is not base64', 'data:image/png,rawbytes'],
    ['a file URL', 'file:///etc/passwd'],
  ])('refuses %s', (_name, url) => {
    const err = refusal({ ...base, messages: [user([{ type: 'image_url', image_url: { url } }])] });
    expect(err.param).toBe('messages[0].content[0].image_url.url');
  });

  it('refuses images outside user messages', () => {
    const err = refusal({
      ...base,
      messages: [
        { role: 'system', content: [{ type: 'image_url', image_url: { url: 'https://x/y.png' } }] },
        user('Hi'),
      ],
    });
    expect(err.param).toBe('messages[0].content[0]');
  });
});

describe('reasoning', () => {
  it.each<[string, number, number]>([
    ['minimal', 20000, 1024],
    ['low', 20000, 2048],
    ['medium', 20000, 8192],
    ['high', 20000, 16384],
    ['high', 4000, 3999],
    ['medium', 1025, 1024],
  ])('reasoning_effort %s with max_tokens %d → budget_tokens %d', (effort, maxTokens, budget) => {
    expect(THINKING_BUDGETS[effort]).toBeDefined();
    const { request } = translateRequest({
      ...base,
      max_tokens: maxTokens,
      messages: [user('Hi')],
      reasoning_effort: effort,
    });
    expect(request.thinking).toEqual({ type: 'enabled', budget_tokens: budget });
  });

  it('none turns thinking off', () => {
    const { request } = translateRequest({ ...base, messages: [user('Hi')], reasoning_effort: 'none' });
    expect(request.thinking).toBeUndefined();
  });

  it.each<[string, JsonObject, string]>([
    [
      'max_tokens too small for the minimum budget',
      { max_tokens: 1024, reasoning_effort: 'low' },
      'reasoning_effort',
    ],
    ['an unknown effort', { max_tokens: 4000, reasoning_effort: 'extreme' }, 'reasoning_effort'],
    [
      'a temperature other than 1',
      { max_tokens: 4000, reasoning_effort: 'low', temperature: 0.5 },
      'temperature',
    ],
    ['a low top_p', { max_tokens: 4000, reasoning_effort: 'low', top_p: 0.5 }, 'top_p'],
    [
      'a forced tool',
      { max_tokens: 4000, reasoning_effort: 'low', tools: [weather], tool_choice: 'required' },
      'tool_choice',
    ],
  ])('refuses %s', (_name, extra, param) => {
    const err = refusal({ ...base, messages: [user('Hi')], ...extra });
    expect(err.param).toBe(param);
  });

  it('accepts temperature 1 and auto tools with thinking', () => {
    const { request } = translateRequest({
      ...base,
      max_tokens: 4000,
      messages: [user('Hi')],
      reasoning_effort: 'low',
      temperature: 1,
      tools: [weather],
      tool_choice: 'auto',
    });
    expect(request.thinking).toEqual({ type: 'enabled', budget_tokens: 2048 });
    expect(request.temperature).toBe(1);
  });

  it('sends thinking_blocks back first in their assistant turn, unchanged, redacted ones too', () => {
    const { request } = translateRequest({
      ...base,
      messages: [
        user('Weather?'),
        {
          role: 'assistant',
          content: null,
          reasoning_content: 'ignored: the blocks are what Anthropic checks',
          thinking_blocks: [
            { type: 'thinking', thinking: 'I should call the tool.', signature: 'sig==' },
            { type: 'redacted_thinking', data: 'opaque' },
          ],
          tool_calls: [
            { id: 'c', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } },
          ],
        },
        { role: 'tool', tool_call_id: 'c', content: 'Snow' },
      ],
    });
    expect(request.messages[1]).toEqual({
      role: 'assistant',
      content: [
        { type: 'thinking', thinking: 'I should call the tool.', signature: 'sig==' },
        { type: 'redacted_thinking', data: 'opaque' },
        { type: 'tool_use', id: 'c', name: 'get_weather', input: { city: 'Oslo' } },
      ],
    });
  });

  it('refuses a thinking block without its signature', () => {
    const err = refusal({
      ...base,
      messages: [
        user('Hi'),
        { role: 'assistant', content: 'x', thinking_blocks: [{ type: 'thinking', thinking: 't' }] },
      ],
    });
    expect(err.param).toBe('messages[1].thinking_blocks[0]');
  });
});
