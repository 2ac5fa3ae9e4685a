import { describe, expect, it } from 'vitest';
import type { JsonObject } from '../../providers/types.js';
import {
  assistantTurn,
  type ChatMessage,
  chatCompletionToResponse,
  responseOfItem,
  responsesToChat,
  validateResponsesRequest,
} from '../../src/responses/bridge.js';
import { assertOpenAISchema } from '../helpers/openapi.js';
import { chatUsage, meta, RESPONSE_ID } from './fixtures.js';

const toChat = (body: JsonObject, previous: ChatMessage[] = []) =>
  responsesToChat(validateResponsesRequest(body), previous);

describe('responsesToChat', () => {
  it('turns string input into one user message and maps the sampling parameters', () => {
    const { chatBody, conversation } = toChat({
      model: 'gantry/llama',
      input: 'Hello',
      max_output_tokens: 64,
      temperature: 0.2,
      top_p: 0.9,
      user: 'u-1',
      store: false,
      metadata: { a: 'b' },
    });
    expect(conversation).toEqual([{ role: 'user', content: 'Hello' }]);
    expect(chatBody).toEqual({
      model: 'gantry/llama',
      messages: [{ role: 'user', content: 'Hello' }],
      max_tokens: 64,
      temperature: 0.2,
      top_p: 0.9,
      user: 'u-1',
    });
  });

  it('asks a streaming upstream for usage', () => {
    const { chatBody } = toChat({ model: 'm', input: 'x', stream: true });
    expect(chatBody.stream).toBe(true);
    expect(chatBody.stream_options).toEqual({ include_usage: true });
    expect(toChat({ model: 'm', input: 'x', stream: false }).chatBody).not.toHaveProperty('stream');
  });

  it('puts instructions first in the chat body but not into the conversation', () => {
    const previous: ChatMessage[] = [
      { role: 'user', content: 'My name is Ada.' },
      { role: 'assistant', content: 'Hello Ada.' },
    ];
    const { chatBody, conversation } = toChat(
      { model: 'm', input: 'What is my name?', instructions: 'Answer in one word.' },
      previous,
    );
    const turn: ChatMessage = { role: 'user', content: 'What is my name?' };
    expect(conversation).toEqual([...previous, turn]);
    expect(chatBody.messages).toEqual([
      { role: 'system', content: 'Answer in one word.' },
      ...previous,
      turn,
    ]);
    // The stored history is not modified in place.
    expect(previous).toHaveLength(2);
  });

  it('maps message items, joining text parts', () => {
    const { conversation } = toChat({
      model: 'm',
      input: [
        { role: 'developer', content: 'Rules.' },
        {
          type: 'message',
          role: 'user',
          content: [
            { type: 'input_text', text: 'Part one.' },
            { type: 'input_text', text: 'Part two.' },
          ],
        },
        {
          type: 'message',
          id: 'msg_1',
          status: 'completed',
          role: 'assistant',
          content: [
            { type: 'output_text', text: 'Ans', annotations: [] },
            { type: 'output_text', text: 'wer', annotations: [] },
          ],
        },
        { role: 'assistant', content: [{ type: 'refusal', refusal: 'No.' }] },
        { role: 'user', content: 'Again' },
      ],
    });
    expect(conversation).toEqual([
      { role: 'developer', content: 'Rules.' },
      { role: 'user', content: 'Part one.\nPart two.' },
      { role: 'assistant', content: 'Answer' },
      // A refusal part goes to chat's own field for it.
      { role: 'assistant', content: '', refusal: 'No.' },
      { role: 'user', content: 'Again' },
    ]);
  });

  it('passes parameters outside the Responses API through and keeps Responses-only ones out', () => {
    const { chatBody } = toChat({
      model: 'm',
      input: 'x',
      top_k: 40,
      frequency_penalty: 0.5,
      store: true,
      metadata: { a: 'b' },
      tool_choice: 'auto',
      parallel_tool_calls: true,
      text: { format: { type: 'text' } },
      previous_response_id: 'resp_1',
      instructions: '',
    });
    expect(chatBody).toEqual({
      model: 'm',
      messages: [{ role: 'user', content: 'x' }],
      top_k: 40,
      frequency_penalty: 0.5,
    });
  });
});

function completion(content: string | null, finishReason: string, usage: JsonObject | null = chatUsage) {
  return {
    id: 'chatcmpl-1',
    object: 'chat.completion',
    created: 1_750_000_000,
    model: 'llama-3',
    choices: [
      {
        index: 0,
        message: { role: 'assistant', content, refusal: null },
        logprobs: null,
        finish_reason: finishReason,
      },
    ],
    ...(usage ? { usage } : {}),
  };
}

describe('chatCompletionToResponse', () => {
  it('builds a completed Response that matches the published schema', () => {
    const request = {
      instructions: 'Be kind.',
      temperature: 0.5,
      top_p: 0.8,
      max_output_tokens: 100,
      previous_response_id: 'resp_prev',
      metadata: { trace: 't1' },
      user: 'u-1',
      store: false,
    };
    const response = chatCompletionToResponse(completion('Hello there', 'stop'), meta(request));
    assertOpenAISchema('Response', response);
    expect(response).toMatchObject({
      id: RESPONSE_ID,
      object: 'response',
      created_at: 1_750_000_000,
      status: 'completed',
      error: null,
      incomplete_details: null,
      model: 'gantry/llama',
      output_text: 'Hello there',
      instructions: 'Be kind.',
      temperature: 0.5,
      top_p: 0.8,
      max_output_tokens: 100,
      previous_response_id: 'resp_prev',
      metadata: { trace: 't1' },
      user: 'u-1',
      store: false,
      tools: [],
      tool_choice: 'auto',
      parallel_tool_calls: true,
      text: { format: { type: 'text' } },
      usage: {
        input_tokens: 12,
        input_tokens_details: { cached_tokens: 4, cache_write_tokens: 0 },
        output_tokens: 5,
        output_tokens_details: { reasoning_tokens: 1 },
        total_tokens: 17,
      },
    });
    expect(response.completed_at).toEqual(expect.any(Number));
    const output = response.output as JsonObject[];
    expect(output).toHaveLength(1);
    expect(output[0]).toEqual({
      id: expect.stringMatching(/^msg_[0-9a-f]{50}$/),
      type: 'message',
      status: 'completed',
      role: 'assistant',
      content: [{ type: 'output_text', text: 'Hello there', annotations: [], logprobs: [] }],
    });
  });

  it('keeps a refusal as a refusal part, beside the text in the order of the message’s fields', () => {
    const withMessage = (message: JsonObject) =>
      chatCompletionToResponse(
        { ...completion(null, 'stop'), choices: [{ index: 0, message, finish_reason: 'stop' }] },
        meta(),
      );
    const refused = withMessage({ role: 'assistant', content: null, refusal: 'No.' });
    assertOpenAISchema('Response', refused);
    expect((refused.output as JsonObject[])[0]?.content).toEqual([{ type: 'refusal', refusal: 'No.' }]);
    expect(refused.output_text).toBe('');
    const refusalFirst = withMessage({ role: 'assistant', refusal: 'Not that.', content: 'This instead.' });
    assertOpenAISchema('Response', refusalFirst);
    expect((refusalFirst.output as JsonObject[])[0]?.content).toEqual([
      { type: 'refusal', refusal: 'Not that.' },
      { type: 'output_text', text: 'This instead.', annotations: [], logprobs: [] },
    ]);
    // The turn kept as history carries the refusal in chat's own field.
    expect(assistantTurn(refusalFirst.output as JsonObject[])).toEqual({
      role: 'assistant',
      content: 'This instead.',
      refusal: 'Not that.',
    });
  });

  it('echoes nulls and defaults for what the request left out', () => {
    const response = chatCompletionToResponse(completion('x', 'stop'), meta());
    assertOpenAISchema('Response', response);
    expect(response).toMatchObject({
      instructions: null,
      temperature: null,
      top_p: null,
      max_output_tokens: null,
      previous_response_id: null,
      metadata: {},
      store: true,
    });
    expect(response).not.toHaveProperty('user');
  });

  it('reports finish_reason length as incomplete (max_output_tokens)', () => {
    const response = chatCompletionToResponse(
      completion('Once upon', 'length'),
      meta({ max_output_tokens: 2 }),
    );
    assertOpenAISchema('Response', response);
    expect(response.status).toBe('incomplete');
    expect(response.incomplete_details).toEqual({ reason: 'max_output_tokens' });
    expect(response.completed_at).toBeNull();
    expect((response.output as JsonObject[])[0]?.status).toBe('incomplete');
    expect(response.output_text).toBe('Once upon');
  });

  it('reports a content filter stop as incomplete (content_filter)', () => {
    const response = chatCompletionToResponse(completion(null, 'content_filter'), meta());
    assertOpenAISchema('Response', response);
    expect(response.incomplete_details).toEqual({ reason: 'content_filter' });
    expect(response.output_text).toBe('');
  });

  it('leaves usage out when the upstream sent none, and derives a missing total', () => {
    const none = chatCompletionToResponse(completion('x', 'stop', null), meta());
    assertOpenAISchema('Response', none);
    expect(none).not.toHaveProperty('usage');
    const partial = chatCompletionToResponse(
      completion('x', 'stop', { prompt_tokens: 3, completion_tokens: 2 }),
      meta(),
    );
    expect(partial.usage).toEqual({
      input_tokens: 3,
      input_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 },
      output_tokens: 2,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: 5,
    });
  });

  it('gives each response its own item ids, which lead back to it', () => {
    const other = { ...meta(), id: `resp_${'f'.repeat(48)}` };
    const a = chatCompletionToResponse(completion('x', 'stop'), meta());
    const b = chatCompletionToResponse(completion('x', 'stop'), other);
    const id = (r: JsonObject) => String((r.output as JsonObject[])[0]?.id);
    expect(id(a)).not.toBe(id(b));
    expect(responseOfItem(id(a))).toBe(RESPONSE_ID);
    expect(responseOfItem(id(b))).toBe(other.id);
    expect(responseOfItem('msg_123')).toBeUndefined();
  });
});

describe('tools, formats, images and reasoning on the bridge', () => {
  const tool = {
    type: 'function',
    name: 'f',
    description: 'F',
    parameters: { type: 'object' },
    strict: true,
  };

  it('writes chat tools, tool_choice, response_format and reasoning_effort', () => {
    const { chatBody } = toChat({
      model: 'm',
      input: 'x',
      tools: [tool, { type: 'function', name: 'g', parameters: null }],
      tool_choice: { type: 'function', name: 'g' },
      parallel_tool_calls: false,
      text: { format: { type: 'json_schema', name: 'out', schema: { type: 'object' }, strict: true } },
      reasoning: { effort: 'minimal' },
    });
    expect(chatBody).toEqual({
      model: 'm',
      messages: [{ role: 'user', content: 'x' }],
      tools: [
        {
          type: 'function',
          function: { name: 'f', description: 'F', parameters: { type: 'object' }, strict: true },
        },
        { type: 'function', function: { name: 'g' } },
      ],
      tool_choice: { type: 'function', function: { name: 'g' } },
      parallel_tool_calls: false,
      response_format: {
        type: 'json_schema',
        json_schema: { name: 'out', schema: { type: 'object' }, strict: true },
      },
      reasoning_effort: 'minimal',
    });
  });

  it('joins an assistant message and the function calls after it into one chat turn, and drops reasoning items', () => {
    const { chatBody, conversation } = toChat({
      model: 'm',
      input: [
        { role: 'user', content: 'q' },
        { type: 'reasoning', id: 'rs_1', summary: [] },
        { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Let me look.' }] },
        { type: 'function_call', call_id: 'c1', name: 'f', arguments: '{}' },
        { type: 'function_call', call_id: 'c2', name: 'f', arguments: '{"a":1}' },
        { type: 'function_call_output', call_id: 'c1', output: 'one' },
        { type: 'function_call_output', call_id: 'c2', output: 'two' },
      ],
    });
    const expected = [
      { role: 'user', content: 'q' },
      {
        role: 'assistant',
        content: 'Let me look.',
        tool_calls: [
          { id: 'c1', type: 'function', function: { name: 'f', arguments: '{}' } },
          { id: 'c2', type: 'function', function: { name: 'f', arguments: '{"a":1}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'c1', content: 'one' },
      { role: 'tool', tool_call_id: 'c2', content: 'two' },
    ];
    expect(chatBody.messages).toEqual(expected);
    expect(conversation).toEqual(expected);
  });

  it('does not repeat function calls the history already holds', () => {
    const previous: ChatMessage[] = [
      { role: 'user', content: 'q' },
      {
        role: 'assistant',
        content: 'Looking.',
        tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{}' } }],
      },
    ];
    const { conversation } = toChat(
      {
        model: 'm',
        input: [
          { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Looking.' }] },
          { type: 'function_call', call_id: 'c1', name: 'f', arguments: '{}' },
          { type: 'function_call_output', call_id: 'c1', output: 'done' },
        ],
      },
      previous,
    );
    expect(conversation).toEqual([...previous, { role: 'tool', tool_call_id: 'c1', content: 'done' }]);
  });

  it('keeps text parts as text parts beside images', () => {
    const { chatBody } = toChat({
      model: 'm',
      input: [
        {
          role: 'user',
          content: [
            { type: 'input_text', text: 'see' },
            { type: 'input_image', image_url: 'https://x/y.png', detail: 'high' },
          ],
        },
      ],
    });
    expect(chatBody.messages).toEqual([
      {
        role: 'user',
        content: [
          { type: 'text', text: 'see' },
          { type: 'image_url', image_url: { url: 'https://x/y.png', detail: 'high' } },
        ],
      },
    ]);
  });

  it('answers reasoning, text and tool calls as items in that order, and remembers the turn for history', () => {
    const body = completion('Calling.', 'tool_calls');
    const message = body.choices[0]?.message as JsonObject;
    message.reasoning_content = 'I should call f.';
    message.tool_calls = [{ id: 'call_1', type: 'function', function: { name: 'f', arguments: '{"a":1}' } }];
    const response = chatCompletionToResponse(
      body,
      meta({ tools: [tool], text: { format: { type: 'json_object' } } }),
    );
    assertOpenAISchema('Response', response);
    const output = response.output as JsonObject[];
    expect(output.map((o) => o.type)).toEqual(['reasoning', 'message', 'function_call']);
    expect(output[2]).toEqual({
      id: expect.stringMatching(/^fc_[0-9a-f]{50}$/),
      type: 'function_call',
      status: 'completed',
      call_id: 'call_1',
      name: 'f',
      arguments: '{"a":1}',
    });
    expect(response.status).toBe('completed');
    expect(response.tools).toEqual([tool]);
    expect(response.text).toEqual({ format: { type: 'json_object' }, verbosity: 'medium' });
    expect(assistantTurn(output)).toEqual({
      role: 'assistant',
      content: 'Calling.',
      tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'f', arguments: '{"a":1}' } }],
    });
  });

  it('leaves the message item out when the model only called tools', () => {
    const body = completion(null, 'tool_calls');
    (body.choices[0]?.message as JsonObject).tool_calls = [
      { id: 'call_1', type: 'function', function: { name: 'f', arguments: '{}' } },
    ];
    const output = chatCompletionToResponse(body, meta({ tools: [tool] })).output as JsonObject[];
    expect(output.map((o) => o.type)).toEqual(['function_call']);
    expect(assistantTurn(output)).toMatchObject({ content: null });
  });

  it('round-trips signed thinking blocks: the reasoning item carries them, sent back they precede the calls', () => {
    const blocks = [
      { type: 'thinking', thinking: 'Need f.', signature: 'sig-1' },
      { type: 'redacted_thinking', data: 'opaque' },
    ];
    const body = completion(null, 'tool_calls');
    const message = body.choices[0]?.message as JsonObject;
    message.reasoning_content = 'Need f.';
    message.thinking_blocks = blocks;
    message.tool_calls = [{ id: 'call_1', type: 'function', function: { name: 'f', arguments: '{}' } }];
    const response = chatCompletionToResponse(body, meta({ tools: [tool] }));
    assertOpenAISchema('Response', response);
    const output = response.output as JsonObject[];
    expect(output[0]).toMatchObject({ type: 'reasoning', encrypted_content: expect.any(String) });
    expect(assistantTurn(output).thinking_blocks).toEqual(blocks);

    // Stateless: the client sends the output back as input, with the tool's result.
    const { chatBody } = toChat({
      model: 'm',
      tools: [tool],
      input: [
        { role: 'user', content: 'q' },
        ...output,
        { type: 'function_call_output', call_id: 'call_1', output: 'r' },
      ],
    });
    expect(chatBody.messages).toEqual([
      { role: 'user', content: 'q' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'f', arguments: '{}' } }],
        thinking_blocks: blocks,
      },
      { role: 'tool', tool_call_id: 'call_1', content: 'r' },
    ]);
  });
});
