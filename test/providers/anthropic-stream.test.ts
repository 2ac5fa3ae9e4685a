/**
 * Anthropic stream events → chat.completion.chunk events for tool_use, structured output and thinking
 * (providers/anthropic/stream.ts). The event sequences follow Anthropic's streaming docs and recorded
 * API streams: a tool_use block starts with `input: {}` and an empty input_json_delta, a thinking block
 * with empty thinking and signature and ends with a signature_delta. Every chunk is validated against
 * OpenAI's CreateChatCompletionStreamResponse schema.
 */
import { describe, expect, it } from 'vitest';
import { AnthropicStreamTranslator } from '../../providers/anthropic/stream.js';
import type { JsonObject, SseEvent } from '../../providers/types.js';
import { assertOpenAISchema } from '../helpers/openapi.js';

const usage = {
  input_tokens: 849,
  cache_creation_input_tokens: 0,
  cache_read_input_tokens: 0,
  output_tokens: 10,
};

function ev(data: JsonObject): SseEvent {
  return { event: String(data.type), data: JSON.stringify(data) };
}

const start = ev({
  type: 'message_start',
  message: {
    id: 'msg_01',
    type: 'message',
    role: 'assistant',
    model: 'claude-x',
    content: [],
    stop_reason: null,
    stop_sequence: null,
    usage,
  },
});
const blockStart = (index: number, content_block: JsonObject) =>
  ev({ type: 'content_block_start', index, content_block });
const delta = (index: number, d: JsonObject) => ev({ type: 'content_block_delta', index, delta: d });
const blockStop = (index: number) => ev({ type: 'content_block_stop', index });
const end = (stop_reason: string, extra: JsonObject = {}) => [
  ev({
    type: 'message_delta',
    delta: { stop_reason, stop_sequence: null },
    usage: { ...usage, output_tokens: 47, ...extra },
  }),
  ev({ type: 'message_stop' }),
];
const json = (index: number, partial_json: string) =>
  delta(index, { type: 'input_json_delta', partial_json });

function run(events: SseEvent[], options: { jsonTool?: string; includeUsage?: boolean } = {}): JsonObject[] {
  const t = new AnthropicStreamTranslator({
    provider: 'claude',
    model: 'claude-test',
    created: 1700000000,
    includeUsage: options.includeUsage ?? false,
    jsonTool: options.jsonTool,
  });
  const out = events.flatMap((e) => t.push(e)).map((e) => JSON.parse(e.data) as JsonObject);
  t.end();
  for (const chunk of out) assertOpenAISchema('CreateChatCompletionStreamResponse', chunk);
  return out;
}

const deltas = (chunks: JsonObject[]) =>
  chunks.flatMap((c) => (c.choices as JsonObject[]).map((ch) => ch.delta as JsonObject));
const finish = (chunks: JsonObject[]) =>
  chunks.flatMap((c) => (c.choices as JsonObject[]).map((ch) => ch.finish_reason)).filter((f) => f !== null);

describe('AnthropicStreamTranslator: tools, structured output, thinking', () => {
  it.each<[string, SseEvent[], { jsonTool?: string }, JsonObject[], string]>([
    [
      'one tool call: id and name first, then the arguments in pieces',
      [
        start,
        blockStart(0, { type: 'tool_use', id: 'toolu_01', name: 'get_weather', input: {} }),
        json(0, ''),
        ev({ type: 'ping' }),
        json(0, '{"location": "San Fra'),
        json(0, 'ncisco"}'),
        blockStop(0),
        ...end('tool_use'),
      ],
      {},
      [
        { role: 'assistant', content: '' },
        {
          tool_calls: [
            { index: 0, id: 'toolu_01', type: 'function', function: { name: 'get_weather', arguments: '' } },
          ],
        },
        { tool_calls: [{ index: 0, function: { arguments: '{"location": "San Fra' } }] },
        { tool_calls: [{ index: 0, function: { arguments: 'ncisco"}' } }] },
        {},
      ],
      'tool_calls',
    ],
    [
      'text then two parallel calls: OpenAI indexes count tool calls only',
      [
        start,
        blockStart(0, { type: 'text', text: '' }),
        delta(0, { type: 'text_delta', text: 'Checking.' }),
        blockStop(0),
        blockStart(1, { type: 'tool_use', id: 'toolu_a', name: 'get_weather', input: {} }),
        json(1, '{"city":"Paris"}'),
        blockStop(1),
        blockStart(2, { type: 'tool_use', id: 'toolu_b', name: 'get_time', input: {} }),
        json(2, '{}'),
        blockStop(2),
        ...end('tool_use'),
      ],
      {},
      [
        { role: 'assistant', content: '' },
        { content: 'Checking.' },
        {
          tool_calls: [
            { index: 0, id: 'toolu_a', type: 'function', function: { name: 'get_weather', arguments: '' } },
          ],
        },
        { tool_calls: [{ index: 0, function: { arguments: '{"city":"Paris"}' } }] },
        {
          tool_calls: [
            { index: 1, id: 'toolu_b', type: 'function', function: { name: 'get_time', arguments: '' } },
          ],
        },
        { tool_calls: [{ index: 1, function: { arguments: '{}' } }] },
        {},
      ],
      'tool_calls',
    ],
    [
      'a call without arguments (a lone empty piece, as the API streams it) gets "{}" at its block stop',
      [
        start,
        blockStart(0, { type: 'tool_use', id: 'toolu_01', name: 'get_time', input: {} }),
        json(0, ''),
        blockStop(0),
        ...end('tool_use'),
      ],
      {},
      [
        { role: 'assistant', content: '' },
        {
          tool_calls: [
            { index: 0, id: 'toolu_01', type: 'function', function: { name: 'get_time', arguments: '' } },
          ],
        },
        { tool_calls: [{ index: 0, function: { arguments: '{}' } }] },
        {},
      ],
      'tool_calls',
    ],
    [
      'a call with no input_json_delta at all gets "{}" too, and a later call keeps its own index',
      [
        start,
        blockStart(0, { type: 'tool_use', id: 'toolu_a', name: 'get_time', input: {} }),
        blockStop(0),
        blockStart(1, { type: 'tool_use', id: 'toolu_b', name: 'get_weather', input: {} }),
        json(1, ''),
        json(1, '{"city":"Paris"}'),
        blockStop(1),
        ...end('tool_use'),
      ],
      {},
      [
        { role: 'assistant', content: '' },
        {
          tool_calls: [
            { index: 0, id: 'toolu_a', type: 'function', function: { name: 'get_time', arguments: '' } },
          ],
        },
        { tool_calls: [{ index: 0, function: { arguments: '{}' } }] },
        {
          tool_calls: [
            { index: 1, id: 'toolu_b', type: 'function', function: { name: 'get_weather', arguments: '' } },
          ],
        },
        { tool_calls: [{ index: 1, function: { arguments: '{"city":"Paris"}' } }] },
        {},
      ],
      'tool_calls',
    ],
    [
      'an empty structured answer streams as the content "{}", not as nothing',
      [
        start,
        blockStart(0, { type: 'tool_use', id: 'toolu_01', name: 'json', input: {} }),
        json(0, ''),
        blockStop(0),
        ...end('tool_use'),
      ],
      { jsonTool: 'json' },
      [{ role: 'assistant', content: '' }, { content: '{}' }, {}],
      'stop',
    ],
    [
      'the structured-output tool streams as content, finishing with stop',
      [
        start,
        blockStart(0, { type: 'tool_use', id: 'toolu_01', name: 'json', input: {} }),
        json(0, ''),
        json(0, '{"elements": [{"location": "San Francisco"}]'),
        json(0, '}'),
        blockStop(0),
        ...end('tool_use'),
      ],
      { jsonTool: 'json' },
      [
        { role: 'assistant', content: '' },
        { content: '{"elements": [{"location": "San Francisco"}]' },
        { content: '}' },
        {},
      ],
      'stop',
    ],
    [
      'a second call of the structured-output tool is dropped: the content stays one JSON document',
      [
        start,
        blockStart(0, { type: 'tool_use', id: 'toolu_01', name: 'json', input: {} }),
        json(0, ''),
        json(0, '{"name": "Ada"}'),
        blockStop(0),
        blockStart(1, { type: 'tool_use', id: 'toolu_02', name: 'json', input: {} }),
        json(1, ''),
        json(1, '{"name": "Grace"}'),
        blockStop(1),
        ...end('tool_use'),
      ],
      { jsonTool: 'json' },
      [{ role: 'assistant', content: '' }, { content: '{"name": "Ada"}' }, {}],
      'stop',
    ],
    [
      'text in place of a structured answer streams as a refusal',
      [
        start,
        blockStart(0, { type: 'text', text: '' }),
        delta(0, { type: 'text_delta', text: 'I cannot help with that.' }),
        blockStop(0),
        ...end('refusal'),
      ],
      { jsonTool: 'json' },
      [{ role: 'assistant', content: '' }, { refusal: 'I cannot help with that.' }, {}],
      'content_filter',
    ],
    [
      'thinking: reasoning_content deltas, then the whole block with its signature before the text',
      [
        start,
        blockStart(0, { type: 'thinking', thinking: '', signature: '' }),
        delta(0, { type: 'thinking_delta', thinking: 'Let me solve this step by step:' }),
        delta(0, { type: 'thinking_delta', thinking: '\n\n1. First break down 27 * 453' }),
        delta(0, { type: 'thinking_delta', thinking: '' }),
        delta(0, {
          type: 'signature_delta',
          signature: 'EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds...',
        }),
        blockStop(0),
        blockStart(1, { type: 'text', text: '' }),
        delta(1, { type: 'text_delta', text: '27 * 453 = 12,231' }),
        blockStop(1),
        ...end('end_turn'),
      ],
      {},
      [
        { role: 'assistant', content: '' },
        { reasoning_content: 'Let me solve this step by step:' },
        { reasoning_content: '\n\n1. First break down 27 * 453' },
        {
          thinking_blocks: [
            {
              type: 'thinking',
              thinking: 'Let me solve this step by step:\n\n1. First break down 27 * 453',
              signature: 'EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds...',
            },
          ],
        },
        { content: '27 * 453 = 12,231' },
        {},
      ],
      'stop',
    ],
    [
      'thinking and redacted thinking: one delta with both, before the tool call',
      [
        start,
        blockStart(0, { type: 'thinking', thinking: '', signature: '' }),
        delta(0, { type: 'thinking_delta', thinking: 'Call it.' }),
        delta(0, { type: 'signature_delta', signature: 'sig1' }),
        blockStop(0),
        blockStart(1, { type: 'redacted_thinking', data: 'EmwKAhgBEgy3va3pzix...' }),
        blockStop(1),
        blockStart(2, { type: 'tool_use', id: 'toolu_1', name: 'f', input: {} }),
        json(2, '{}'),
        blockStop(2),
        ...end('tool_use'),
      ],
      {},
      [
        { role: 'assistant', content: '' },
        { reasoning_content: 'Call it.' },
        {
          thinking_blocks: [
            { type: 'thinking', thinking: 'Call it.', signature: 'sig1' },
            { type: 'redacted_thinking', data: 'EmwKAhgBEgy3va3pzix...' },
          ],
        },
        {
          tool_calls: [{ index: 0, id: 'toolu_1', type: 'function', function: { name: 'f', arguments: '' } }],
        },
        { tool_calls: [{ index: 0, function: { arguments: '{}' } }] },
        {},
      ],
      'tool_calls',
    ],
    [
      'interleaved thinking: each run of blocks goes out once, before what it led to',
      [
        start,
        blockStart(0, { type: 'thinking', thinking: '', signature: '' }),
        delta(0, { type: 'thinking_delta', thinking: 'First I think.' }),
        delta(0, { type: 'signature_delta', signature: 'sig1' }),
        blockStop(0),
        blockStart(1, { type: 'tool_use', id: 'toolu_1', name: 'f', input: {} }),
        json(1, '{}'),
        blockStop(1),
        blockStart(2, { type: 'thinking', thinking: '', signature: '' }),
        delta(2, { type: 'thinking_delta', thinking: 'Then more.' }),
        delta(2, { type: 'signature_delta', signature: 'sig2' }),
        blockStop(2),
        blockStart(3, { type: 'tool_use', id: 'toolu_2', name: 'g', input: {} }),
        json(3, '{}'),
        blockStop(3),
        ...end('tool_use'),
      ],
      {},
      [
        { role: 'assistant', content: '' },
        { reasoning_content: 'First I think.' },
        { thinking_blocks: [{ type: 'thinking', thinking: 'First I think.', signature: 'sig1' }] },
        {
          tool_calls: [{ index: 0, id: 'toolu_1', type: 'function', function: { name: 'f', arguments: '' } }],
        },
        { tool_calls: [{ index: 0, function: { arguments: '{}' } }] },
        { reasoning_content: 'Then more.' },
        // Only the new block: a client concatenating the deltas' lists must not get the first one twice.
        { thinking_blocks: [{ type: 'thinking', thinking: 'Then more.', signature: 'sig2' }] },
        {
          tool_calls: [{ index: 1, id: 'toolu_2', type: 'function', function: { name: 'g', arguments: '' } }],
        },
        { tool_calls: [{ index: 1, function: { arguments: '{}' } }] },
        {},
      ],
      'tool_calls',
    ],
    [
      'thinking with nothing after it: the blocks before the finish chunk',
      [
        start,
        blockStart(0, { type: 'thinking', thinking: '', signature: '' }),
        delta(0, { type: 'thinking_delta', thinking: 'Hmm.' }),
        delta(0, { type: 'signature_delta', signature: 'sig' }),
        blockStop(0),
        ...end('max_tokens'),
      ],
      {},
      [
        { role: 'assistant', content: '' },
        { reasoning_content: 'Hmm.' },
        { thinking_blocks: [{ type: 'thinking', thinking: 'Hmm.', signature: 'sig' }] },
        {},
      ],
      'length',
    ],
  ])('%s', (_name, events, options, expected, finishReason) => {
    const chunks = run(events, options);
    expect(deltas(chunks)).toEqual(expected);
    expect(finish(chunks)).toEqual([finishReason]);
  });

  it('reports cache reads as cached_tokens and cache writes as cache_write_tokens, both in prompt_tokens', () => {
    const chunks = run(
      [
        ev({
          type: 'message_start',
          message: {
            id: 'msg_01',
            type: 'message',
            role: 'assistant',
            model: 'claude-x',
            content: [],
            stop_reason: null,
            stop_sequence: null,
            usage: {
              input_tokens: 21,
              cache_creation_input_tokens: 100,
              cache_read_input_tokens: 2000,
              output_tokens: 1,
            },
          },
        }),
        blockStart(0, { type: 'text', text: '' }),
        delta(0, { type: 'text_delta', text: 'Hi' }),
        blockStop(0),
        ev({
          type: 'message_delta',
          delta: { stop_reason: 'end_turn', stop_sequence: null },
          usage: { output_tokens: 3 },
        }),
        ev({ type: 'message_stop' }),
      ],
      { includeUsage: true },
    );
    expect(chunks.at(-1)?.usage).toEqual({
      prompt_tokens: 2121,
      completion_tokens: 3,
      total_tokens: 2124,
      prompt_tokens_details: { cached_tokens: 2000, cache_write_tokens: 100 },
    });
  });
});
