import { describe, expect, it } from 'vitest';
import type { JsonObject } from '../../providers/types.js';
import { GantryError } from '../../src/errors.js';
import { validateResponsesRequest } from '../../src/responses/bridge.js';

const base = { model: 'gantry/llama', input: 'Hello' };

/** The param a rejected request names; fails the test if the request is accepted or rejected otherwise. */
function rejectedParam(body: unknown): string | null {
  try {
    validateResponsesRequest(body);
  } catch (err) {
    expect(err).toBeInstanceOf(GantryError);
    const e = err as GantryError;
    expect(e.errorId).toBe('INVALID_PARAMETER');
    expect(e.status).toBe(400);
    return e.param;
  }
  throw new Error(`accepted: ${JSON.stringify(body)}`);
}

const withBase = (extra: JsonObject) => ({ ...base, ...extra });

describe('validateResponsesRequest', () => {
  it('accepts a minimal request and returns the body', () => {
    const body = withBase({});
    expect(validateResponsesRequest(body)).toBe(body);
  });

  it('accepts the supported parameters at their full range', () => {
    const body = withBase({
      input: [
        { role: 'developer', content: 'Be brief.' },
        { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Hi' }] },
        {
          type: 'message',
          id: 'msg_1',
          status: 'completed',
          role: 'assistant',
          content: [{ type: 'output_text', text: 'Hello', annotations: [], logprobs: [] }],
        },
        { role: 'system', content: 'ok' },
      ],
      instructions: 'You are terse.',
      previous_response_id: 'resp_1',
      stream: true,
      stream_options: { include_obfuscation: false },
      store: false,
      max_output_tokens: 1,
      temperature: 2,
      top_p: 0,
      user: 'u1',
      metadata: { a: 'b' },
      tools: [],
      tool_choice: 'none',
      parallel_tool_calls: false,
      text: { format: { type: 'text' }, verbosity: 'medium' },
      reasoning: { effort: null },
      background: false,
      include: [],
      truncation: 'disabled',
      service_tier: 'auto',
      top_logprobs: 0,
      top_k: 40,
    });
    expect(() => validateResponsesRequest(body)).not.toThrow();
    expect(() =>
      validateResponsesRequest(withBase({ previous_response_id: null, instructions: null })),
    ).not.toThrow();
  });

  it('rejects a body that is not an object as a malformed request', () => {
    for (const body of [null, 'text', [base]]) {
      expect(() => validateResponsesRequest(body)).toThrow(
        expect.objectContaining({ errorId: 'INVALID_REQUEST', status: 400 }),
      );
    }
  });

  it.each([
    ['missing model', { input: 'x' }, 'model'],
    ['empty model', { model: '', input: 'x' }, 'model'],
    ['numeric model', { model: 3, input: 'x' }, 'model'],
    ['missing input', { model: 'm' }, 'input'],
    ['object input', { model: 'm', input: { role: 'user', content: 'x' } }, 'input'],
    ['empty input array', { model: 'm', input: [] }, 'input'],
  ])('rejects %s', (_name, body, param) => {
    expect(rejectedParam(body)).toBe(param);
  });

  it.each([
    ['a non-object item', ['hi'], 'input[0]'],
    ['an unknown role', [{ role: 'tool', content: 'x' }], 'input[0].role'],
    ['a missing role', [{ content: 'x' }], 'input[0].role'],
    [
      'a function call item without call_id',
      [{ type: 'function_call', name: 'f', arguments: '{}' }],
      'input[0].call_id',
    ],
    [
      'a function call output without output',
      [{ type: 'function_call_output', call_id: 'c' }],
      'input[0].output',
    ],
    [
      'an item reference without id',
      [{ role: 'user', content: 'x' }, { type: 'item_reference' }],
      'input[1].id',
    ],
    ['an unknown item type', [{ type: 'computer_call_output', call_id: 'c' }], 'input[0].type'],
    ['numeric content', [{ role: 'user', content: 5 }], 'input[0].content'],
    ['empty content parts', [{ role: 'user', content: [] }], 'input[0].content'],
    ['a non-object part', [{ role: 'user', content: ['x'] }], 'input[0].content[0]'],
    [
      'an image by file_id (there is no Files API)',
      [
        {
          role: 'user',
          content: [
            { type: 'input_text', text: 'see' },
            { type: 'input_image', file_id: 'file-1', detail: 'auto' },
          ],
        },
      ],
      'input[0].content[1].file_id',
    ],
    [
      'an image that is not a URL',
      [{ role: 'user', content: [{ type: 'input_image', image_url: 'ftp://x', detail: 'auto' }] }],
      'input[0].content[0].image_url',
    ],
    [
      'output_text from the user',
      [{ role: 'user', content: [{ type: 'output_text', text: 'x' }] }],
      'input[0].content[0].type',
    ],
    [
      'input_text from the assistant',
      [{ role: 'assistant', content: [{ type: 'input_text', text: 'x' }] }],
      'input[0].content[0].type',
    ],
    [
      'a part without text',
      [{ role: 'user', content: [{ type: 'input_text' }] }],
      'input[0].content[0].text',
    ],
    [
      'a refusal without refusal text',
      [{ role: 'assistant', content: [{ type: 'refusal', text: 'x' }] }],
      'input[0].content[0].refusal',
    ],
  ])('rejects input with %s', (_name, input, param) => {
    expect(rejectedParam(withBase({ input }))).toBe(param);
  });

  it.each([
    ['max_output_tokens', 0],
    ['max_output_tokens', -5],
    ['max_output_tokens', 1.5],
    ['max_output_tokens', '100'],
    ['temperature', 2.1],
    ['temperature', -0.1],
    ['temperature', 'hot'],
    ['top_p', 1.01],
    ['top_p', -1],
    ['instructions', 42],
    ['instructions', ['be brief']],
    ['previous_response_id', 7],
    ['previous_response_id', ''],
    ['stream', 'yes'],
    ['store', 1],
    ['user', 5],
    ['metadata', 'tag'],
    ['parallel_tool_calls', 'no'],
    ['max_tool_calls', -1],
    ['stream_options', true],
    ['text', 'json'],
  ])('rejects %s = %j', (param, value) => {
    expect(rejectedParam(withBase({ [param]: value }))).toBe(param);
  });

  it('checks metadata entries', () => {
    expect(rejectedParam(withBase({ metadata: { a: 1 } }))).toBe('metadata.a');
    expect(rejectedParam(withBase({ metadata: { a: 'x'.repeat(513) } }))).toBe('metadata.a');
    expect(rejectedParam(withBase({ metadata: { ['k'.repeat(65)]: 'v' } }))).toBe('metadata');
    const many = Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, 'v']));
    expect(rejectedParam(withBase({ metadata: many }))).toBe('metadata');
  });

  it.each([
    ['tool_choice', 'required'],
    ['background', true],
    ['include', ['message.output_text.logprobs']],
    ['top_logprobs', 3],
    ['truncation', 'auto'],
    ['service_tier', 'flex'],
    ['conversation', 'conv_1'],
    ['prompt', { id: 'pmpt_1' }],
    ['context_management', [{ type: 'compaction' }]],
    ['prompt_cache_options', { ttl: '1h' }],
    ['n', 2],
    ['messages', [{ role: 'user', content: 'x' }]],
    ['max_tokens', 10],
    ['response_format', { type: 'json_object' }],
    ['logprobs', true],
  ])('refuses %s = %j, which the bridge cannot honour', (param, value) => {
    expect(rejectedParam(withBase({ [param]: value }))).toBe(param);
  });

  it('takes function tools, JSON formats and reasoning effort, and names what it cannot bridge', () => {
    const tool = { type: 'function', name: 'f', parameters: { type: 'object' }, strict: true };
    const schema = { type: 'json_schema', name: 'x', schema: { type: 'object' }, strict: true };
    const ok = withBase({
      tools: [tool],
      tool_choice: { type: 'function', name: 'f' },
      parallel_tool_calls: false,
      text: { format: schema },
      reasoning: { effort: 'high', summary: 'auto' },
    });
    expect(validateResponsesRequest(ok)).toBe(ok);
    const encrypted = withBase({ include: ['reasoning.encrypted_content'], store: false });
    expect(validateResponsesRequest(encrypted)).toBe(encrypted);
    expect(validateResponsesRequest(withBase({ text: { format: { type: 'json_object' } } }))).toBeTruthy();
    expect(rejectedParam(withBase({ tools: [tool, { type: 'web_search' }] }))).toBe('tools[1].type');
    expect(rejectedParam(withBase({ tools: [{ type: 'function', parameters: {} }] }))).toBe('tools[0].name');
    expect(rejectedParam(withBase({ tools: [tool], tool_choice: { type: 'function', name: 'g' } }))).toBe(
      'tool_choice.name',
    );
    expect(rejectedParam(withBase({ tools: [tool], tool_choice: { type: 'mcp', server_label: 's' } }))).toBe(
      'tool_choice',
    );
    expect(rejectedParam(withBase({ tools: [tool], max_tool_calls: 2 }))).toBe('max_tool_calls');
    expect(rejectedParam(withBase({ reasoning: { effort: 'huge' } }))).toBe('reasoning.effort');
    expect(rejectedParam(withBase({ text: { format: { type: 'json_schema', name: 'x' } } }))).toBe(
      'text.format.schema',
    );
    expect(rejectedParam(withBase({ text: { format: { type: 'grammar' } } }))).toBe('text.format.type');
    expect(rejectedParam(withBase({ text: { format: 'text' } }))).toBe('text.format');
    expect(rejectedParam(withBase({ text: { verbosity: 'low' } }))).toBe('text.verbosity');
  });

  it('leaves what a native Responses upstream can honour to it when not bridging', () => {
    const native = { bridged: false };
    const body = withBase({
      input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'https://x/y.png' }] }],
      tools: [{ type: 'function', name: 'f', parameters: {} }],
      tool_choice: 'required',
      text: { format: { type: 'json_object' } },
      reasoning: { effort: 'high' },
      include: ['reasoning.encrypted_content'],
    });
    expect(validateResponsesRequest(body, native)).toBe(body);
    // The spec's own parameters are still checked.
    expect(() => validateResponsesRequest(withBase({ temperature: 3 }), native)).toThrow(
      expect.objectContaining({ param: 'temperature' }),
    );
    expect(() => validateResponsesRequest(withBase({ input: [] }), native)).toThrow(
      expect.objectContaining({ param: 'input' }),
    );
    expect(() => validateResponsesRequest({ input: 'x' }, native)).toThrow(
      expect.objectContaining({ param: 'model' }),
    );
  });

  it('says why in the message', () => {
    expect(() => validateResponsesRequest(withBase({ max_tokens: 5 }))).toThrow(/max_output_tokens/);
    expect(() => validateResponsesRequest(withBase({ tools: [{ type: 'web_search' }] }))).toThrow(
      /web_search.*only function tools/,
    );
  });
});
