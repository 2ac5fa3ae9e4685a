/**
 * The Anthropic translation's basics in all three directions (providers/anthropic/): plain chat fields,
 * system and role merging, refusals, finish reasons, error types, text streams and their failures. Tools,
 * structured output, images, thinking and cache usage: anthropic-request/-response/-stream.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { toAnthropicRequest } from '../../providers/anthropic/request.js';
import {
  finishReasonOf,
  fromAnthropicMessage,
  statusOfErrorType,
} from '../../providers/anthropic/response.js';
import { AnthropicStreamTranslator } from '../../providers/anthropic/stream.js';
import { ProviderRequestError } from '../../providers/request-error.js';
import type { JsonObject, SseEvent } from '../../providers/types.js';
import { UpstreamError } from '../../providers/upstream-error.js';
import { toGantryError } from '../../src/error-handler.js';
import type { GantryError } from '../../src/errors.js';
import { assertOpenAISchema } from '../helpers/openapi.js';

const base = { model: 'claude-test', max_tokens: 100 };
const user = (content: unknown) => ({ role: 'user', content });

function thrown(fn: () => unknown): unknown {
  try {
    fn();
  } catch (err) {
    return err;
  }
  throw new Error('expected a throw');
}

function gantryError(fn: () => unknown): GantryError {
  // Adapters throw their own error; the gateway maps it onto the catalogue.
  const err = thrown(fn);
  expect(err).toBeInstanceOf(ProviderRequestError);
  return toGantryError(err as ProviderRequestError);
}

function upstreamError(fn: () => unknown): UpstreamError {
  const err = thrown(fn);
  expect(err).toBeInstanceOf(UpstreamError);
  return err as UpstreamError;
}

describe('toAnthropicRequest', () => {
  it('maps the basic fields', () => {
    const out = toAnthropicRequest({
      model: 'claude-test',
      messages: [user('Hi')],
      max_tokens: 50,
      temperature: 0.5,
      top_p: 0.9,
      stop: 'END',
      stream: true,
      stream_options: { include_usage: true },
      user: 'user-42',
      metadata: { trace: 'x' },
      store: false,
      n: 1,
      logprobs: false,
      presence_penalty: 0,
      frequency_penalty: 0,
      response_format: { type: 'text' },
      tools: [],
      tool_choice: 'none',
      seed: null,
    });
    expect(out).toEqual({
      model: 'claude-test',
      messages: [{ role: 'user', content: 'Hi' }],
      max_tokens: 50,
      // top_p is left out beside temperature (see the test below).
      temperature: 0.5,
      stop_sequences: ['END'],
      stream: true,
      metadata: { user_id: 'user-42' },
    });
  });

  it('omits what was not given, and does not send stream: false', () => {
    const out = toAnthropicRequest({ ...base, messages: [user('Hi')], stream: false });
    expect(out).toEqual({
      model: 'claude-test',
      max_tokens: 100,
      messages: [{ role: 'user', content: 'Hi' }],
    });
  });

  it('moves system and developer messages to the top-level system, joined', () => {
    const out = toAnthropicRequest({
      ...base,
      messages: [
        { role: 'system', content: 'Be terse.' },
        { role: 'developer', content: [{ type: 'text', text: 'Answer in English.' }] },
        user('Hi'),
        { role: 'system', content: 'Late rule.' },
      ],
    });
    expect(out.system).toBe('Be terse.\n\nAnswer in English.\n\nLate rule.');
    expect(out.messages).toEqual([{ role: 'user', content: 'Hi' }]);
  });

  it('merges consecutive messages of one role so roles alternate', () => {
    const out = toAnthropicRequest({
      ...base,
      messages: [
        user('one'),
        user([
          { type: 'text', text: 'two' },
          { type: 'text', text: 'three' },
        ]),
        { role: 'system', content: 'between' },
        user('four'),
        { role: 'assistant', content: 'reply' },
        { role: 'assistant', content: 'more' },
        user('last'),
      ],
    });
    expect(out.messages).toEqual([
      {
        role: 'user',
        content: [
          { type: 'text', text: 'one' },
          { type: 'text', text: 'two' },
          { type: 'text', text: 'three' },
          { type: 'text', text: 'four' },
        ],
      },
      {
        role: 'assistant',
        content: [
          { type: 'text', text: 'reply' },
          { type: 'text', text: 'more' },
        ],
      },
      { role: 'user', content: 'last' },
    ]);
  });

  it('drops empty text parts but leaves an empty message for Anthropic to judge', () => {
    const out = toAnthropicRequest({
      ...base,
      messages: [
        user([
          { type: 'text', text: '' },
          { type: 'text', text: 'x' },
        ]),
        { role: 'assistant', content: '' },
      ],
    });
    expect(out.messages).toEqual([
      { role: 'user', content: 'x' },
      { role: 'assistant', content: '' },
    ]);
  });

  it('prefers max_completion_tokens over max_tokens', () => {
    const out = toAnthropicRequest({
      model: 'm',
      messages: [user('Hi')],
      max_tokens: 10,
      max_completion_tokens: 20,
    });
    expect(out.max_tokens).toBe(20);
    expect(
      toAnthropicRequest({ model: 'm', messages: [user('Hi')], max_completion_tokens: 7 }).max_tokens,
    ).toBe(7);
  });

  it('requires max_tokens, which Anthropic cannot do without', () => {
    const err = gantryError(() => toAnthropicRequest({ model: 'm', messages: [user('Hi')] }));
    expect(err.status).toBe(400);
    expect(err.param).toBe('max_tokens');
  });

  it('passes stop arrays as stop_sequences and drops an empty one', () => {
    expect(toAnthropicRequest({ ...base, messages: [user('Hi')], stop: ['a', 'b'] }).stop_sequences).toEqual([
      'a',
      'b',
    ]);
    expect(toAnthropicRequest({ ...base, messages: [user('Hi')], stop: [] })).not.toHaveProperty(
      'stop_sequences',
    );
    expect(toAnthropicRequest({ ...base, messages: [user('Hi')], stop: null })).not.toHaveProperty(
      'stop_sequences',
    );
  });

  it('uses safety_identifier as the user id when there is no user', () => {
    const out = toAnthropicRequest({ ...base, messages: [user('Hi')], safety_identifier: 'sid' });
    expect(out.metadata).toEqual({ user_id: 'sid' });
  });

  it('sends temperature alone when both it and top_p are set, which newer models refuse together', () => {
    const both = toAnthropicRequest({ ...base, messages: [user('Hi')], temperature: 0.7, top_p: 0.95 });
    expect(both.temperature).toBe(0.7);
    expect(both).not.toHaveProperty('top_p');
    const zero = toAnthropicRequest({ ...base, messages: [user('Hi')], temperature: 0, top_p: 0.5 });
    expect(zero.temperature).toBe(0);
    expect(zero).not.toHaveProperty('top_p');
    const alone = toAnthropicRequest({ ...base, messages: [user('Hi')], top_p: 0.9 });
    expect(alone.top_p).toBe(0.9);
    expect(alone).not.toHaveProperty('temperature');
  });

  it('accepts temperature up to 1 and rejects what Anthropic cannot honour', () => {
    expect(toAnthropicRequest({ ...base, messages: [user('Hi')], temperature: 1 }).temperature).toBe(1);
    expect(toAnthropicRequest({ ...base, messages: [user('Hi')], temperature: 0 }).temperature).toBe(0);
    const err = gantryError(() => toAnthropicRequest({ ...base, messages: [user('Hi')], temperature: 1.5 }));
    expect(err.errorId).toBe('INVALID_PARAMETER');
    expect(err.status).toBe(400);
    expect(err.param).toBe('temperature');
  });

  it.each<[string, unknown]>([
    ['n', 2],
    ['logprobs', true],
    ['top_logprobs', 3],
    ['tool_choice', 'required'],
    ['tool_choice', { type: 'function', function: { name: 'f' } }],
    ['functions', [{ name: 'f' }]],
    ['function_call', 'auto'],
    ['response_format', { type: 'grammar' }],
    ['audio', { voice: 'alloy', format: 'mp3' }],
    ['modalities', ['text', 'audio']],
    ['presence_penalty', 0.5],
    ['frequency_penalty', -1],
    ['logit_bias', { '50256': -100 }],
    ['seed', 42],
    ['prediction', { type: 'content', content: 'x' }],
    ['web_search_options', {}],
    ['reasoning_effort', 'extreme'],
    ['store', true],
  ])('rejects %s = %j with a 400 naming it', (param, value) => {
    const err = gantryError(() => toAnthropicRequest({ ...base, messages: [user('Hi')], [param]: value }));
    expect(err.errorId).toBe('INVALID_PARAMETER');
    expect(err.status).toBe(400);
    expect(err.param).toBe(param);
    expect(err.message).toContain(param);
  });

  it.each<[string, JsonObject, string]>([
    ['a tool message without tool_call_id', { role: 'tool', content: 'x' }, 'messages[1].tool_call_id'],
    ['a function message', { role: 'function', name: 'f', content: 'x' }, 'messages[1].role'],
    [
      'assistant tool calls without a function',
      { role: 'assistant', content: null, tool_calls: [{ id: 'c', type: 'function' }] },
      'messages[1].tool_calls[0]',
    ],
    [
      'an image part of an unsupported type',
      { role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:image/bmp;base64,AAAA' } }] },
      'messages[1].content[0].image_url.url',
    ],
    ['an audio part', { role: 'user', content: [{ type: 'input_audio' }] }, 'messages[1].content[0]'],
  ])('rejects %s', (_name, message, param) => {
    const err = gantryError(() => toAnthropicRequest({ ...base, messages: [user('Hi'), message] }));
    expect(err.errorId).toBe('INVALID_PARAMETER');
    expect(err.param).toBe(param);
  });
});

describe('finishReasonOf and statusOfErrorType', () => {
  it.each([
    ['end_turn', 'stop'],
    ['stop_sequence', 'stop'],
    ['pause_turn', 'stop'],
    ['max_tokens', 'length'],
    ['model_context_window_exceeded', 'length'],
    ['tool_use', 'tool_calls'],
    ['refusal', 'content_filter'],
    ['something_new', 'stop'],
  ])('%s → %s', (reason, expected) => {
    expect(finishReasonOf(reason)).toBe(expected);
  });

  it.each([
    ['invalid_request_error', 400],
    ['authentication_error', 401],
    ['permission_error', 403],
    ['not_found_error', 404],
    ['request_too_large', 413],
    ['rate_limit_error', 429],
    ['api_error', 500],
    ['overloaded_error', 503],
    ['mystery', 502],
  ])('%s → HTTP %d', (type, status) => {
    expect(statusOfErrorType(type)).toBe(status);
  });
});

const message = {
  id: 'msg_01ABC',
  type: 'message',
  role: 'assistant',
  model: 'claude-sonnet-4-5-20250929',
  content: [
    { type: 'text', text: 'Hello' },
    { type: 'text', text: ', world' },
  ],
  stop_reason: 'end_turn',
  stop_sequence: null,
  usage: { input_tokens: 10, cache_creation_input_tokens: 3, cache_read_input_tokens: 5, output_tokens: 4 },
};

describe('fromAnthropicMessage', () => {
  const options = { provider: 'claude', model: 'claude-sonnet-4-5', created: 1_700_000_000 };

  it('maps a message onto a valid chat.completion', () => {
    const out = fromAnthropicMessage(message, options);
    assertOpenAISchema('CreateChatCompletionResponse', out);
    expect(out).toEqual({
      id: 'chatcmpl-msg_01ABC',
      object: 'chat.completion',
      created: 1_700_000_000,
      model: 'claude-sonnet-4-5',
      choices: [
        {
          index: 0,
          message: { role: 'assistant', content: 'Hello, world', refusal: null, annotations: [] },
          logprobs: null,
          finish_reason: 'stop',
        },
      ],
      usage: {
        prompt_tokens: 18,
        completion_tokens: 4,
        total_tokens: 22,
        prompt_tokens_details: { cached_tokens: 5, cache_write_tokens: 3 },
      },
    });
  });

  it('counts missing cache fields as zero and maps the stop reason', () => {
    const out = fromAnthropicMessage(
      { ...message, stop_reason: 'max_tokens', usage: { input_tokens: 2, output_tokens: 1 } },
      options,
    );
    assertOpenAISchema('CreateChatCompletionResponse', out);
    expect(out.usage).toEqual({
      prompt_tokens: 2,
      completion_tokens: 1,
      total_tokens: 3,
      prompt_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 },
    });
    expect((out.choices as JsonObject[])[0]?.finish_reason).toBe('length');
  });

  it('skips content blocks that are not text', () => {
    const out = fromAnthropicMessage(
      {
        ...message,
        content: [
          { type: 'thinking', thinking: 'hmm' },
          { type: 'text', text: 'ok' },
        ],
      },
      options,
    );
    expect((out.choices as { message: JsonObject }[])[0]?.message.content).toBe('ok');
  });

  it.each([
    ['not an object', 'nope'],
    ['an error body', { type: 'error', error: { type: 'api_error', message: 'x' } }],
    ['a message without content', { ...message, content: undefined }],
  ])('rejects %s as a protocol failure', (_name, body) => {
    const err = upstreamError(() => fromAnthropicMessage(body, options));
    expect(err.failure).toBe('protocol');
    expect(err.provider).toBe('claude');
  });
});

function ev(type: string, fields: JsonObject = {}): SseEvent {
  return { event: type, data: JSON.stringify({ type, ...fields }) };
}

const streamEvents: SseEvent[] = [
  ev('message_start', {
    message: {
      id: 'msg_01XYZ',
      type: 'message',
      role: 'assistant',
      model: 'claude-sonnet-4-5-20250929',
      content: [],
      stop_reason: null,
      stop_sequence: null,
      usage: {
        input_tokens: 25,
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: 7,
        output_tokens: 1,
      },
    },
  }),
  ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }),
  ev('ping'),
  ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'Hello' } }),
  ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: '!' } }),
  ev('content_block_stop', { index: 0 }),
  ev('message_delta', {
    delta: { stop_reason: 'end_turn', stop_sequence: null },
    usage: { output_tokens: 15 },
  }),
  ev('message_stop'),
];

function runStream(
  events: SseEvent[],
  includeUsage: boolean,
): { chunks: JsonObject[]; t: AnthropicStreamTranslator } {
  const t = new AnthropicStreamTranslator({
    provider: 'claude',
    model: 'claude-x',
    includeUsage,
    created: 1_700_000_001,
  });
  const chunks = events
    .flatMap((e) => t.push(e))
    .map((e) => {
      expect(e.event).toBeUndefined();
      const parsed = JSON.parse(e.data) as JsonObject;
      assertOpenAISchema('CreateChatCompletionStreamResponse', parsed);
      return parsed;
    });
  return { chunks, t };
}

describe('AnthropicStreamTranslator', () => {
  it('turns a stream into a role chunk, content chunks and a finish chunk', () => {
    const { chunks, t } = runStream(streamEvents, false);
    expect(t.done).toBe(true);
    expect(() => t.end()).not.toThrow();
    expect(chunks.map((c) => (c.choices as JsonObject[])[0])).toEqual([
      { index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null },
      { index: 0, delta: { content: 'Hello' }, logprobs: null, finish_reason: null },
      { index: 0, delta: { content: '!' }, logprobs: null, finish_reason: null },
      { index: 0, delta: {}, logprobs: null, finish_reason: 'stop' },
    ]);
    for (const c of chunks) {
      expect(c).toMatchObject({
        id: 'chatcmpl-msg_01XYZ',
        object: 'chat.completion.chunk',
        created: 1_700_000_001,
        model: 'claude-x',
      });
      expect(c).not.toHaveProperty('usage');
    }
  });

  it('adds a usage chunk with no choices when include_usage is on', () => {
    const { chunks } = runStream(streamEvents, true);
    expect(chunks).toHaveLength(5);
    for (const c of chunks.slice(0, -1)) expect(c.usage).toBeNull();
    const last = chunks.at(-1) as JsonObject;
    expect(last.choices).toEqual([]);
    expect(last.usage).toEqual({
      prompt_tokens: 32,
      completion_tokens: 15,
      total_tokens: 47,
      prompt_tokens_details: { cached_tokens: 7, cache_write_tokens: 0 },
    });
  });

  it('takes the input counts from message_delta when a newer API repeats them there', () => {
    const events = [
      ...streamEvents.slice(0, 6),
      ev('message_delta', {
        delta: { stop_reason: 'max_tokens', stop_sequence: null },
        usage: {
          input_tokens: 30,
          cache_read_input_tokens: 0,
          cache_creation_input_tokens: 2,
          output_tokens: 9,
        },
      }),
      ev('message_stop'),
    ];
    const { chunks } = runStream(events, true);
    expect(((chunks.at(-2)?.choices ?? []) as JsonObject[])[0]?.finish_reason).toBe('length');
    expect(chunks.at(-1)?.usage).toEqual({
      prompt_tokens: 32,
      completion_tokens: 9,
      total_tokens: 41,
      prompt_tokens_details: { cached_tokens: 0, cache_write_tokens: 2 },
    });
  });

  it('emits nothing for ping, content_block_stop, unknown events and non-text deltas', () => {
    const t = new AnthropicStreamTranslator({ provider: 'claude', model: 'm', includeUsage: false });
    t.push(streamEvents[0] as SseEvent);
    expect(t.push(ev('ping'))).toEqual([]);
    expect(t.push(ev('content_block_stop', { index: 0 }))).toEqual([]);
    expect(t.push(ev('brand_new_event', { x: 1 }))).toEqual([]);
    expect(
      t.push(ev('content_block_delta', { index: 1, delta: { type: 'input_json_delta', partial_json: '{' } })),
    ).toEqual([]);
    expect(t.push(ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: '' } }))).toEqual(
      [],
    );
  });

  it('ends the stream at message_stop and ignores what follows', () => {
    const { t } = runStream(streamEvents, false);
    expect(
      t.push(ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'late' } })),
    ).toEqual([]);
  });

  it('throws the error event as an UpstreamError with an HTTP status', () => {
    const t = new AnthropicStreamTranslator({ provider: 'claude', model: 'm', includeUsage: false });
    t.push(streamEvents[0] as SseEvent);
    const err = upstreamError(() =>
      t.push(ev('error', { error: { type: 'overloaded_error', message: 'Overloaded' } })),
    );
    expect(err.failure).toBe('status');
    expect(err.status).toBe(503);
    expect(err.upstreamMessage).toBe('Overloaded');
    expect(err.retryable).toBe(true);
  });

  it('maps an invalid_request_error event to a non-retryable 400', () => {
    const t = new AnthropicStreamTranslator({ provider: 'claude', model: 'm', includeUsage: false });
    const err = upstreamError(() =>
      t.push(ev('error', { error: { type: 'invalid_request_error', message: 'bad' } })),
    );
    expect(err.status).toBe(400);
    expect(err.retryable).toBe(false);
  });

  it('treats a stream without message_stop as incomplete', () => {
    const { t } = runStream(streamEvents.slice(0, -1), false);
    expect(t.done).toBe(false);
    expect(upstreamError(() => t.end()).failure).toBe('protocol');
    const empty = new AnthropicStreamTranslator({ provider: 'claude', model: 'm', includeUsage: false });
    expect(upstreamError(() => empty.end()).failure).toBe('protocol');
  });

  it.each<[string, SseEvent[]]>([
    [
      'content before message_start',
      [ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'x' } })],
    ],
    ['a second message_start', [streamEvents[0] as SseEvent, streamEvents[0] as SseEvent]],
    ['data that is not JSON', [{ event: 'message_start', data: '{"type": "message_st' }]],
    ['data that is not an object', [{ data: '[1,2]' }]],
    ['message_start without an id', [ev('message_start', { message: { type: 'message' } })]],
  ])('rejects %s as a protocol failure', (_name, events) => {
    const t = new AnthropicStreamTranslator({ provider: 'claude', model: 'm', includeUsage: false });
    const err = upstreamError(() => {
      for (const e of events) t.push(e);
    });
    expect(err.failure).toBe('protocol');
  });

  it('reads the event type from the data when the event name is absent', () => {
    const bare = streamEvents.map(({ data }) => ({ data }));
    const { chunks, t } = runStream(bare, false);
    expect(t.done).toBe(true);
    expect(chunks).toHaveLength(4);
  });
});
