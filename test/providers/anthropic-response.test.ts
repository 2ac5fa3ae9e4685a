/**
 * Anthropic message → chat.completion for tool_use, structured output, thinking and cache usage
 * (providers/anthropic/response.ts). Messages follow the examples of Anthropic's Messages API docs.
 */
import { describe, expect, it } from 'vitest';
import { fromAnthropicMessage, usageOf } from '../../providers/anthropic/response.js';
import type { JsonObject } from '../../providers/types.js';
import { assertOpenAISchema } from '../helpers/openapi.js';

const options = { provider: 'claude', model: 'claude-test', created: 1700000000 };

function message(content: unknown[], stop_reason: string, usage: JsonObject = {}): JsonObject {
  return {
    id: 'msg_01',
    type: 'message',
    role: 'assistant',
    model: 'claude-x',
    content,
    stop_reason,
    stop_sequence: null,
    usage: { input_tokens: 10, output_tokens: 5, ...usage },
  };
}

function only(completion: JsonObject): JsonObject {
  assertOpenAISchema('CreateChatCompletionResponse', completion);
  return (completion.choices as JsonObject[])[0] as JsonObject;
}

describe('fromAnthropicMessage', () => {
  it.each<[string, unknown[], string, JsonObject, string]>([
    [
      'one tool call, no text: content null',
      [{ type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { location: 'San Francisco, CA' } }],
      'tool_use',
      {
        role: 'assistant',
        content: null,
        refusal: null,
        annotations: [],
        tool_calls: [
          {
            id: 'toolu_1',
            type: 'function',
            function: { name: 'get_weather', arguments: '{"location":"San Francisco, CA"}' },
          },
        ],
      },
      'tool_calls',
    ],
    [
      'text alongside parallel tool calls',
      [
        { type: 'text', text: 'Checking both.' },
        { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } },
        { type: 'tool_use', id: 'toolu_2', name: 'get_time', input: {} },
      ],
      'tool_use',
      {
        role: 'assistant',
        content: 'Checking both.',
        refusal: null,
        annotations: [],
        tool_calls: [
          {
            id: 'toolu_1',
            type: 'function',
            function: { name: 'get_weather', arguments: '{"city":"Paris"}' },
          },
          { id: 'toolu_2', type: 'function', function: { name: 'get_time', arguments: '{}' } },
        ],
      },
      'tool_calls',
    ],
    [
      'thinking and redacted thinking before the text',
      [
        {
          type: 'thinking',
          thinking: 'Let me analyze this step by step...',
          signature: 'WaUjzkypQ2mUEVM36O2TxuC06KN8xyfbJwyem2dw3URve/op91XWHOEBLLqIOMfFG/UvLEczmEsUjavL....',
        },
        {
          type: 'redacted_thinking',
          data: 'EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP...',
        },
        { type: 'text', text: 'Based on my analysis...' },
      ],
      'end_turn',
      {
        role: 'assistant',
        content: 'Based on my analysis...',
        refusal: null,
        annotations: [],
        reasoning_content: 'Let me analyze this step by step...',
        thinking_blocks: [
          {
            type: 'thinking',
            thinking: 'Let me analyze this step by step...',
            signature: 'WaUjzkypQ2mUEVM36O2TxuC06KN8xyfbJwyem2dw3URve/op91XWHOEBLLqIOMfFG/UvLEczmEsUjavL....',
          },
          {
            type: 'redacted_thinking',
            data: 'EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP...',
          },
        ],
      },
      'stop',
    ],
  ])('%s', (_name, content, stopReason, expected, finish) => {
    const choice = only(fromAnthropicMessage(message(content, stopReason), options));
    expect(choice.message).toEqual(expected);
    expect(choice.finish_reason).toBe(finish);
  });

  it('delivers the structured-output tool input as JSON content, finish_reason stop, no tool_calls', () => {
    const out = fromAnthropicMessage(
      message(
        [{ type: 'tool_use', id: 'toolu_1', name: 'person', input: { name: 'Ada', age: 36 } }],
        'tool_use',
      ),
      { ...options, jsonTool: 'person' },
    );
    const choice = only(out);
    expect(choice.message).toEqual({
      role: 'assistant',
      content: '{"name":"Ada","age":36}',
      refusal: null,
      annotations: [],
    });
    expect(choice.finish_reason).toBe('stop');
  });

  it('keeps only the first call of the answer tool, so the content stays one JSON document', () => {
    const out = fromAnthropicMessage(
      message(
        [
          { type: 'tool_use', id: 'toolu_1', name: 'person', input: { name: 'Ada' } },
          { type: 'tool_use', id: 'toolu_2', name: 'person', input: { name: 'Grace' } },
        ],
        'tool_use',
      ),
      { ...options, jsonTool: 'person' },
    );
    const choice = only(out);
    expect(choice.message).toEqual({
      role: 'assistant',
      content: '{"name":"Ada"}',
      refusal: null,
      annotations: [],
    });
    expect(JSON.parse(String((choice.message as JsonObject).content))).toEqual({ name: 'Ada' });
    expect(choice.finish_reason).toBe('stop');
  });

  it('shows client tool calls beside a structured answer, finishing with tool_calls', () => {
    const out = fromAnthropicMessage(
      message(
        [
          { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Oslo' } },
          { type: 'tool_use', id: 'toolu_2', name: 'person', input: { name: 'Ada' } },
        ],
        'tool_use',
      ),
      { ...options, jsonTool: 'person' },
    );
    const choice = only(out);
    expect(choice.message).toMatchObject({
      content: '{"name":"Ada"}',
      tool_calls: [{ id: 'toolu_1', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }],
    });
    expect(choice.finish_reason).toBe('tool_calls');
  });

  it('makes text in place of a structured answer a refusal', () => {
    const out = fromAnthropicMessage(
      message([{ type: 'text', text: 'I cannot help with that.' }], 'refusal'),
      {
        ...options,
        jsonTool: 'person',
      },
    );
    const choice = only(out);
    expect(choice.message).toEqual({
      role: 'assistant',
      content: null,
      refusal: 'I cannot help with that.',
      annotations: [],
    });
    expect(choice.finish_reason).toBe('content_filter');
  });

  it('keeps a structured answer cut by max_tokens as length', () => {
    const out = fromAnthropicMessage(
      message([{ type: 'tool_use', id: 'toolu_1', name: 'person', input: {} }], 'max_tokens'),
      { ...options, jsonTool: 'person' },
    );
    expect(only(out).finish_reason).toBe('length');
  });
});

describe('usageOf', () => {
  it.each<[string, JsonObject, JsonObject]>([
    [
      'cache reads and writes both count as prompt tokens: reads are cached_tokens, writes cache_write_tokens',
      {
        input_tokens: 21,
        cache_creation_input_tokens: 188086,
        cache_read_input_tokens: 0,
        output_tokens: 393,
      },
      {
        prompt_tokens: 188107,
        completion_tokens: 393,
        total_tokens: 188500,
        prompt_tokens_details: { cached_tokens: 0, cache_write_tokens: 188086 },
      },
    ],
    [
      'a cache hit',
      {
        input_tokens: 21,
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: 188086,
        output_tokens: 393,
      },
      {
        prompt_tokens: 188107,
        completion_tokens: 393,
        total_tokens: 188500,
        prompt_tokens_details: { cached_tokens: 188086, cache_write_tokens: 0 },
      },
    ],
    [
      'thinking tokens as reasoning_tokens',
      {
        input_tokens: 28,
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: 0,
        output_tokens: 106,
        output_tokens_details: { thinking_tokens: 67 },
      },
      {
        prompt_tokens: 28,
        completion_tokens: 106,
        total_tokens: 134,
        prompt_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 },
        completion_tokens_details: { reasoning_tokens: 67 },
      },
    ],
    [
      'null cache fields',
      { input_tokens: 5, cache_creation_input_tokens: null, cache_read_input_tokens: null, output_tokens: 1 },
      {
        prompt_tokens: 5,
        completion_tokens: 1,
        total_tokens: 6,
        prompt_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 },
      },
    ],
  ])('%s', (_name, usage, expected) => {
    expect(usageOf(usage)).toEqual(expected);
  });
});
