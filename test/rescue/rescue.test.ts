/**
 * The pure parts of stream rescue (src/inference/rescue.ts), table by table: which requests can be
 * rescued, the continuation body per upstream kind, how a continuation's chunks are spliced into the
 * client's stream, what counts as delivered, and the config keys.
 */
import { describe, expect, it } from 'vitest';
import type { JsonObject, SseEvent } from '../../providers/types.js';
import { parseConfig } from '../../src/config/load.js';
import { ContinuationChunks, continuationBody, Delivered, notRescuable } from '../../src/inference/rescue.js';

const USER = { role: 'user', content: 'Say the pangram.' };
const BASE: JsonObject = { model: 'm', stream: true, messages: [USER] };

describe('notRescuable', () => {
  const cases: Array<[string, JsonObject, string | undefined]> = [
    ['a plain stream', BASE, undefined],
    ['n: 1', { ...BASE, n: 1 }, undefined],
    ['tools offered (no call made yet)', { ...BASE, tools: [{ type: 'function' }] }, undefined],
    ['response_format text', { ...BASE, response_format: { type: 'text' } }, undefined],
    ['not a stream', { ...BASE, stream: false }, 'not a stream'],
    ['n: 2', { ...BASE, n: 2 }, 'n > 1'],
    ['logprobs', { ...BASE, logprobs: true }, 'logprobs'],
    ['top_logprobs', { ...BASE, top_logprobs: 2 }, 'logprobs'],
    ['json_schema', { ...BASE, response_format: { type: 'json_schema' } }, 'response_format'],
    ['json_object', { ...BASE, response_format: { type: 'json_object' } }, 'response_format'],
  ];
  for (const [name, body, expected] of cases) {
    it(name, () => expect(notRescuable(body)).toBe(expected));
  }
});

describe('continuationBody', () => {
  const cases: Array<{
    name: string;
    kind: string;
    body?: JsonObject;
    delivered: string;
    tokens?: number;
    expected: { body: JsonObject; trimmed: string } | undefined;
  }> = [
    {
      name: 'openai (vLLM): the final assistant message, continue_final_message, no generation prompt',
      kind: 'openai',
      delivered: 'The quick bro',
      expected: {
        body: {
          model: 'up',
          stream: true,
          messages: [USER, { role: 'assistant', content: 'The quick bro' }],
          continue_final_message: true,
          add_generation_prompt: false,
        },
        trimmed: '',
      },
    },
    {
      name: 'openai keeps trailing whitespace (vLLM takes it)',
      kind: 'openai',
      delivered: 'The quick ',
      expected: {
        body: {
          model: 'up',
          stream: true,
          messages: [USER, { role: 'assistant', content: 'The quick ' }],
          continue_final_message: true,
          add_generation_prompt: false,
        },
        trimmed: '',
      },
    },
    {
      name: 'anthropic: a prefill',
      kind: 'anthropic',
      delivered: 'The quick bro',
      expected: {
        body: {
          model: 'up',
          stream: true,
          messages: [USER, { role: 'assistant', content: 'The quick bro' }],
        },
        trimmed: '',
      },
    },
    {
      name: 'anthropic: no trailing whitespace in the prefill; it is dropped from the continuation',
      kind: 'anthropic',
      delivered: 'The quick \n ',
      expected: {
        body: { model: 'up', stream: true, messages: [USER, { role: 'assistant', content: 'The quick' }] },
        trimmed: ' \n ',
      },
    },
    {
      name: 'anthropic: only whitespace delivered: no prefill at all',
      kind: 'anthropic',
      delivered: '\n\n',
      expected: { body: { model: 'up', stream: true, messages: [USER] }, trimmed: '\n\n' },
    },
    {
      name: 'anthropic with extended thinking cannot take a prefill',
      kind: 'anthropic',
      body: { ...BASE, reasoning_effort: 'low' },
      delivered: 'The',
      expected: undefined,
    },
    {
      name: 'anthropic with reasoning_effort none can',
      kind: 'anthropic',
      body: { ...BASE, reasoning_effort: 'none' },
      delivered: 'The',
      expected: {
        body: {
          model: 'up',
          stream: true,
          reasoning_effort: 'none',
          messages: [USER, { role: 'assistant', content: 'The' }],
        },
        trimmed: '',
      },
    },
    {
      name: 'the output limits shrink by the delivered tokens, never below 1',
      kind: 'openai',
      body: { ...BASE, max_tokens: 10, max_completion_tokens: 3 },
      delivered: 'The quick bro',
      tokens: 4,
      expected: {
        body: {
          model: 'up',
          stream: true,
          max_tokens: 6,
          max_completion_tokens: 1,
          messages: [USER, { role: 'assistant', content: 'The quick bro' }],
          continue_final_message: true,
          add_generation_prompt: false,
        },
        trimmed: '',
      },
    },
    {
      name: 'local: as vLLM',
      kind: 'local',
      delivered: 'The',
      expected: {
        body: {
          model: 'up',
          stream: true,
          messages: [USER, { role: 'assistant', content: 'The' }],
          continue_final_message: true,
          add_generation_prompt: false,
        },
        trimmed: '',
      },
    },
    { name: 'cog cannot continue', kind: 'cog', delivered: 'The', expected: undefined },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const body = c.body ?? BASE;
      const before = structuredClone(body);
      expect(continuationBody(c.kind, body, 'up', c.delivered, c.tokens ?? 0)).toEqual(c.expected);
      // The request's own body is left as it was.
      expect(body).toEqual(before);
    });
  }
});

const ID = { id: 'chatcmpl-first', created: 1700000000, model: 'model-a' };

function chunk(delta: JsonObject, finish: string | null = null, extra: JsonObject = {}): SseEvent {
  return {
    data: JSON.stringify({
      id: 'chatcmpl-second',
      object: 'chat.completion.chunk',
      created: 1800000000,
      model: 'model-v',
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
      ...extra,
    }),
  };
}

function out(delta: JsonObject, finish: string | null = null, extra: JsonObject = {}): JsonObject {
  return {
    id: ID.id,
    object: 'chat.completion.chunk',
    created: ID.created,
    model: ID.model,
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
    ...extra,
  };
}

describe('ContinuationChunks', () => {
  const usage = { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 };
  const cases: Array<{ name: string; trimmed?: string; events: SseEvent[]; expected: JsonObject[] }> = [
    {
      name: 'the role chunk is dropped; id, created and model are the first stream’s',
      events: [chunk({ role: 'assistant', content: '' }), chunk({ content: 'wn fox' }), chunk({}, 'stop')],
      expected: [out({ content: 'wn fox' }), out({}, 'stop')],
    },
    {
      name: 'reasoning before new content is dropped, after it passes',
      events: [
        chunk({ role: 'assistant', content: '' }),
        chunk({ reasoning_content: 'hmm' }),
        chunk({ content: ' dog', reasoning_content: 'x' }),
        chunk({ reasoning_content: 'later' }),
      ],
      expected: [out({ content: ' dog', reasoning_content: 'x' }), out({ reasoning_content: 'later' })],
    },
    {
      name: 'a role together with content: the role goes, the content stays',
      events: [chunk({ role: 'assistant', content: 'The' })],
      expected: [out({ content: 'The' })],
    },
    {
      name: 'nothing new at all: only the finish and the usage chunk',
      events: [
        chunk({ role: 'assistant', content: '' }),
        chunk({}, 'stop'),
        chunk({}, null, { choices: [], usage }),
      ],
      expected: [out({}, 'stop'), { ...out({}), choices: [], usage }],
    },
    {
      name: 'the whitespace the prefill lost is dropped once, across deltas',
      trimmed: ' \n',
      events: [chunk({ content: ' ' }), chunk({ content: '\nbrown' }), chunk({ content: ' \nfox' })],
      expected: [out({ content: 'brown' }), out({ content: ' \nfox' })],
    },
    {
      name: 'other text ends the check: nothing is dropped from it',
      trimmed: ' ',
      events: [chunk({ content: 'brown' }), chunk({ content: ' fox' })],
      expected: [out({ content: 'brown' }), out({ content: ' fox' })],
    },
    {
      name: 'a tool call delta is new content',
      events: [chunk({ role: 'assistant', content: null, tool_calls: [{ index: 0, id: 'c' }] })],
      expected: [out({ content: null, tool_calls: [{ index: 0, id: 'c' }] })],
    },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const rewriter = new ContinuationChunks(ID, c.trimmed ?? '');
      const got = c.events
        .map((e) => rewriter.rewrite(e))
        .filter((e): e is SseEvent => e !== undefined)
        .map((e) => JSON.parse(e.data) as JsonObject);
      expect(got).toEqual(c.expected);
    });
  }
});

describe('Delivered', () => {
  const role =
    '{"id":"x","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}';
  const text = (t: string) => `{"id":"x","choices":[{"index":0,"delta":{"content":${JSON.stringify(t)}}}]}`;
  const spaced = (t: string) =>
    `{"id": "x", "choices": [{"index": 0, "delta": {"content": ${JSON.stringify(t)}}}]}`;
  const tool = '{"id":"x","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c"}]}}]}';
  const finish = '{"id":"x","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}';
  const cases: Array<[string, string[], boolean, string]> = [
    ['nothing but the role chunk', [role], false, ''],
    ['content', [role, text('The'), text(' quick')], true, 'The quick'],
    ['content in spaced JSON (Python servers)', [role, spaced('The'), spaced(' "fox"')], true, 'The "fox"'],
    ['a tool call delta', [role, text('Let me look.'), tool], false, 'Let me look.'],
    ['finished', [role, text('The end.'), finish], false, 'The end.'],
  ];
  for (const [name, events, continuable, delivered] of cases) {
    it(name, () => {
      const d = new Delivered();
      for (const data of events) d.see(data);
      expect(d.continuable).toBe(continuable);
      expect(d.text()).toBe(delivered);
      expect(d.ids()).toEqual({ id: 'x', created: 1, model: 'm' });
    });
  }

  it('a long answer is kept as its text', () => {
    const d = new Delivered();
    const piece = 'x'.repeat(1000);
    for (let i = 0; i < 400; i++) d.see(text(piece));
    expect(d.text()).toBe(piece.repeat(400));
  });
});

describe('config', () => {
  const yaml = (route: string, model = '') => `
providers:
  a: { kind: openai, base_url: http://127.0.0.1:1/v1 }
  c: { kind: anthropic }
  l: { kind: local }
  cog: { kind: cog, base_url: http://127.0.0.1:2 }
models:
  - namespace: m
    name: M
    type: text
    routes: [${route}]
${model}`;

  it('reads continuation and stream_stall_ms', () => {
    const config = parseConfig(
      yaml('{ provider: a }, { provider: c, continuation: true }', '    stream_stall_ms: 2000'),
      'g.yaml',
      {},
    );
    const entry = config.models[0];
    expect(entry?.routes).toEqual([
      { provider: 'a', model: 'm' },
      { provider: 'c', model: 'm', continuation: true },
    ]);
    expect(entry?.stream_stall_ms).toBe(2000);
  });

  const refused: Array<[string, string, string]> = [
    [
      'continuation on a kind that cannot continue',
      yaml('{ provider: a }, { provider: cog, continuation: true }'),
      '/models/0/routes/1/continuation',
    ],
    ['stream_stall_ms too small', yaml('{ provider: a }', '    stream_stall_ms: 5'), 'stream_stall_ms'],
    ['continuation not a boolean', yaml('{ provider: a, continuation: yes-please }'), 'continuation'],
  ];
  for (const [name, text, where] of refused) {
    it(`refuses ${name}`, () => expect(() => parseConfig(text, 'g.yaml', {})).toThrow(where));
  }
});
