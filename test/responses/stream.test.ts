import { describe, expect, it } from 'vitest';
import type { JsonObject, SseEvent } from '../../providers/types.js';
import { GantryError } from '../../src/errors.js';
import { assistantTurn, chatStreamToResponseEvents } from '../../src/responses/bridge.js';
import { assertOpenAISchema } from '../helpers/openapi.js';
import { chatChunks, collect, iterate, meta, type Parsed, RESPONSE_ID } from './fixtures.js';

const SCHEMA_OF: Record<string, string> = {
  'response.created': 'ResponseCreatedEvent',
  'response.in_progress': 'ResponseInProgressEvent',
  'response.output_item.added': 'ResponseOutputItemAddedEvent',
  'response.content_part.added': 'ResponseContentPartAddedEvent',
  'response.output_text.delta': 'ResponseTextDeltaEvent',
  'response.output_text.done': 'ResponseTextDoneEvent',
  'response.content_part.done': 'ResponseContentPartDoneEvent',
  'response.output_item.done': 'ResponseOutputItemDoneEvent',
  'response.completed': 'ResponseCompletedEvent',
  'response.incomplete': 'ResponseIncompleteEvent',
  'response.function_call_arguments.delta': 'ResponseFunctionCallArgumentsDeltaEvent',
  'response.function_call_arguments.done': 'ResponseFunctionCallArgumentsDoneEvent',
  'response.reasoning_text.delta': 'ResponseReasoningTextDeltaEvent',
  'response.reasoning_text.done': 'ResponseReasoningTextDoneEvent',
  'response.refusal.delta': 'ResponseRefusalDeltaEvent',
  'response.refusal.done': 'ResponseRefusalDoneEvent',
};

/** One chat chunk with choice 0's delta, as OpenAI-compatible upstreams send it. */
function deltaChunk(delta: JsonObject, finishReason: string | null = null): SseEvent {
  return {
    data: JSON.stringify({
      id: 'chatcmpl-1',
      object: 'chat.completion.chunk',
      created: 1_750_000_000,
      model: 'llama',
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
    }),
  };
}

/** A tool call in OpenAI's stream form: the opening delta (index, id, type, name, ''), then pieces. */
function callChunks(index: number, id: string, name: string, pieces: string[]): SseEvent[] {
  return [
    deltaChunk({ tool_calls: [{ index, id, type: 'function', function: { name, arguments: '' } }] }),
    ...pieces.map((p) => deltaChunk({ tool_calls: [{ index, function: { arguments: p } }] })),
  ];
}

async function run(chunks: SseEvent[], request: JsonObject = {}) {
  const completed: JsonObject[] = [];
  const events = await collect(
    chatStreamToResponseEvents(iterate(chunks), meta(request), (r) => completed.push(r)),
  );
  return { events, completed };
}

/** Every event: SSE name = type, sequence numbers 0…n-1, valid against its own schema and the union. */
function checkEvents(events: Parsed[]): void {
  events.forEach((e, i) => {
    expect(e.event).toBe(e.data.type);
    expect(e.data.sequence_number).toBe(i);
    const schema = SCHEMA_OF[String(e.data.type)];
    expect(schema, `unexpected event ${String(e.data.type)}`).toBeDefined();
    assertOpenAISchema(schema as string, e.data);
    assertOpenAISchema('ResponseStreamEvent', e.data);
  });
}

const types = (events: Parsed[]) => events.map((e) => e.data.type);
const finalOf = (events: Parsed[]) => (events.at(-1)?.data.response ?? {}) as JsonObject;

describe('chatStreamToResponseEvents', () => {
  it('emits OpenAI’s event sequence, one delta per content chunk', async () => {
    const { events, completed } = await run(chatChunks(['Hel', 'lo', ' world']), { temperature: 0.3 });
    checkEvents(events);
    expect(types(events)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.delta',
      'response.output_text.delta',
      'response.output_text.delta',
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.completed',
    ]);
    expect(
      events.filter((e) => e.data.type === 'response.output_text.delta').map((e) => e.data.delta),
    ).toEqual(['Hel', 'lo', ' world']);

    const [created, inProgress, added, partAdded] = events.map((e) => e.data);
    for (const snapshot of [created?.response, inProgress?.response] as JsonObject[]) {
      expect(snapshot).toMatchObject({
        id: RESPONSE_ID,
        status: 'in_progress',
        output: [],
        temperature: 0.3,
      });
      expect(snapshot).not.toHaveProperty('usage');
    }
    const item = added?.item as JsonObject;
    expect(item).toEqual({
      id: expect.stringMatching(/^msg_[0-9a-f]{50}$/),
      type: 'message',
      status: 'in_progress',
      content: [],
      role: 'assistant',
    });
    expect(partAdded).toMatchObject({ item_id: item.id, output_index: 0, content_index: 0 });
    expect(partAdded?.part).toEqual({ type: 'output_text', annotations: [], logprobs: [], text: '' });
    // Every event about the item names it by the same id and indexes.
    for (const e of events.slice(3, 9)) {
      expect(e.data).toMatchObject({ item_id: item.id, output_index: 0, content_index: 0 });
    }
    for (const e of events.slice(4, 8)) expect(e.data.logprobs).toEqual([]);

    const byType = (t: string) => events.find((e) => e.data.type === t)?.data as JsonObject;
    expect(byType('response.output_text.done').text).toBe('Hello world');
    expect(byType('response.content_part.done').part).toEqual({
      type: 'output_text',
      annotations: [],
      logprobs: [],
      text: 'Hello world',
    });
    const doneItem = byType('response.output_item.done').item as JsonObject;
    expect(doneItem).toMatchObject({ id: item.id, status: 'completed' });

    const final = byType('response.completed').response as JsonObject;
    assertOpenAISchema('Response', final);
    expect(final).toMatchObject({ id: RESPONSE_ID, status: 'completed', output_text: 'Hello world' });
    expect(final.output).toEqual([doneItem]);
    expect(completed).toEqual([final]);
  });

  it('takes usage from the final usage chunk', async () => {
    const { events } = await run(chatChunks(['a']));
    const final = finalOf(events);
    expect(final.usage).toEqual({
      input_tokens: 12,
      input_tokens_details: { cached_tokens: 4, cache_write_tokens: 0 },
      output_tokens: 5,
      output_tokens_details: { reasoning_tokens: 1 },
      total_tokens: 17,
    });
  });

  it('ignores the null usage some upstreams put on every chunk', async () => {
    const chunks = chatChunks(['a'], 'stop', null).map((c) => ({
      data: JSON.stringify({ ...JSON.parse(c.data), usage: null }),
    }));
    chunks.push({ data: JSON.stringify({ choices: [], usage: { prompt_tokens: 1, completion_tokens: 1 } }) });
    const { events } = await run(chunks);
    const final = finalOf(events);
    expect(final.usage).toMatchObject({ input_tokens: 1, output_tokens: 1, total_tokens: 2 });
  });

  it('ends with response.incomplete when the upstream stopped at max tokens', async () => {
    const { events, completed } = await run(chatChunks(['Once', ' upon'], 'length'), {
      max_output_tokens: 2,
    });
    checkEvents(events);
    const last = events.at(-1)?.data as JsonObject;
    expect(last.type).toBe('response.incomplete');
    const final = last.response as JsonObject;
    expect(final).toMatchObject({
      status: 'incomplete',
      incomplete_details: { reason: 'max_output_tokens' },
      completed_at: null,
      max_output_tokens: 2,
      output_text: 'Once upon',
    });
    expect(events.find((e) => e.data.type === 'response.output_item.done')?.data.item).toMatchObject({
      status: 'incomplete',
    });
    expect(completed).toEqual([final]);
  });

  it('still produces a whole message when the upstream sent no text', async () => {
    const { events } = await run(chatChunks([]));
    checkEvents(events);
    expect(types(events)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.completed',
    ]);
    expect(finalOf(events).output_text).toBe('');
  });

  it('calls onComplete before the terminal event is yielded', async () => {
    const order: string[] = [];
    const gen = chatStreamToResponseEvents(iterate(chatChunks(['x'])), meta(), () => order.push('complete'));
    for await (const e of gen) order.push(String(e.event));
    expect(order.slice(-2)).toEqual(['complete', 'response.completed']);
  });

  it('rethrows an upstream failure without completing', async () => {
    const failure = new Error('upstream went away');
    const completed: JsonObject[] = [];
    const seen: Parsed[] = [];
    const gen = chatStreamToResponseEvents(
      iterate(chatChunks(['partial'], 'stop', null).slice(0, 2), failure),
      meta(),
      (r) => completed.push(r),
    );
    await expect(collect(gen, seen)).rejects.toBe(failure);
    expect(types(seen)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.delta',
    ]);
    expect(completed).toEqual([]);
  });

  it('turns a malformed or error chunk into an upstream error', async () => {
    const bad = chatStreamToResponseEvents(iterate([{ data: '{not json' }]), meta(), () => {});
    await expect(collect(bad)).rejects.toThrow(GantryError);
    const errorChunk = chatStreamToResponseEvents(
      iterate([{ data: JSON.stringify({ error: { message: 'CUDA out of memory' } }) }]),
      meta(),
      () => {},
    );
    await expect(collect(errorChunk)).rejects.toMatchObject({
      errorId: 'UPSTREAM_ERROR',
      message: 'CUDA out of memory',
    });
  });

  it('tolerates a [DONE] sentinel and other choices', async () => {
    const chunks = chatChunks(['a', 'b']);
    chunks.splice(2, 0, { data: JSON.stringify({ choices: [{ index: 1, delta: { content: 'other' } }] }) });
    chunks.push({ data: '[DONE]' });
    const { events } = await run(chunks);
    checkEvents(events);
    expect(finalOf(events).output_text).toBe('ab');
  });

  it('streams text, then each parallel tool call as its own output item, completing with the same items', async () => {
    const { events, completed } = await run(
      [
        deltaChunk({ role: 'assistant', content: '' }),
        deltaChunk({ content: 'Checking.' }),
        ...callChunks(0, 'call_a', 'get_weather', ['{"city"', ':"Paris"}']),
        ...callChunks(1, 'call_b', 'get_time', ['{}']),
        deltaChunk({}, 'tool_calls'),
      ],
      {
        tools: [
          { type: 'function', name: 'get_weather' },
          { type: 'function', name: 'get_time' },
        ],
      },
    );
    checkEvents(events);
    expect(events.slice(2, -1).map((e) => `${String(e.data.type)}@${String(e.data.output_index)}`)).toEqual([
      'response.output_item.added@0',
      'response.content_part.added@0',
      'response.output_text.delta@0',
      'response.output_text.done@0',
      'response.content_part.done@0',
      'response.output_item.done@0',
      'response.output_item.added@1',
      'response.function_call_arguments.delta@1',
      'response.function_call_arguments.delta@1',
      'response.function_call_arguments.done@1',
      'response.output_item.done@1',
      'response.output_item.added@2',
      'response.function_call_arguments.delta@2',
      'response.function_call_arguments.done@2',
      'response.output_item.done@2',
    ]);
    const added = events.find(
      (e) => e.data.type === 'response.output_item.added' && e.data.output_index === 1,
    );
    expect(added?.data.item).toMatchObject({
      type: 'function_call',
      status: 'in_progress',
      call_id: 'call_a',
      name: 'get_weather',
      arguments: '',
    });
    const done = events.filter((e) => e.data.type === 'response.output_item.done').map((e) => e.data.item);
    expect(done[1]).toMatchObject({ call_id: 'call_a', arguments: '{"city":"Paris"}', status: 'completed' });
    expect(done[2]).toMatchObject({ call_id: 'call_b', name: 'get_time', arguments: '{}' });
    const final = finalOf(events);
    expect(final.status).toBe('completed');
    expect(final.output).toEqual(done);
    expect(final.output_text).toBe('Checking.');
    expect(completed).toEqual([final]);
  });

  it('puts reasoning_content first, as a reasoning item with one reasoning_text part', async () => {
    const { events } = await run([
      deltaChunk({ role: 'assistant', content: '' }),
      deltaChunk({ reasoning_content: 'Think' }),
      deltaChunk({ reasoning_content: ' hard.' }),
      deltaChunk({ content: 'Answer.' }),
      deltaChunk({}, 'stop'),
    ]);
    checkEvents(events);
    expect(types(events).slice(2, 9)).toEqual([
      'response.output_item.added',
      'response.content_part.added',
      'response.reasoning_text.delta',
      'response.reasoning_text.delta',
      'response.reasoning_text.done',
      'response.content_part.done',
      'response.output_item.done',
    ]);
    const final = finalOf(events);
    const output = final.output as JsonObject[];
    expect(output[0]).toMatchObject({
      type: 'reasoning',
      summary: [],
      content: [{ type: 'reasoning_text', text: 'Think hard.' }],
    });
    expect(output[1]).toMatchObject({ type: 'message', content: [{ text: 'Answer.' }] });
    expect(final.output_text).toBe('Answer.');
  });

  it('marks the last item incomplete when the upstream stopped at max tokens mid-call', async () => {
    const { events } = await run([...callChunks(0, 'call_a', 'f', ['{"a":']), deltaChunk({}, 'length')]);
    checkEvents(events);
    const final = finalOf(events);
    expect(final.status).toBe('incomplete');
    expect((final.output as JsonObject[])[0]).toMatchObject({ type: 'function_call', status: 'incomplete' });
  });

  it('refuses more of a tool call after the next one began', async () => {
    const chunks = [
      ...callChunks(0, 'call_a', 'f', ['{}']),
      ...callChunks(1, 'call_b', 'g', ['{}']),
      deltaChunk({ tool_calls: [{ index: 0, function: { arguments: 'x' } }] }),
    ];
    const out = collect(chatStreamToResponseEvents(iterate(chunks), meta(), () => {}));
    await expect(out).rejects.toBeInstanceOf(GantryError);
  });

  it('tells apart parallel calls an upstream sends all at index 0 by their ids (Ollama)', async () => {
    const { events } = await run([
      ...callChunks(0, 'call_a', 'f', ['{"x":1}']),
      ...callChunks(0, 'call_b', 'g', ['{"y":2}']),
      deltaChunk({}, 'tool_calls'),
    ]);
    checkEvents(events);
    const output = finalOf(events).output as JsonObject[];
    expect(output.map((o) => [o.call_id, o.name, o.arguments])).toEqual([
      ['call_a', 'f', '{"x":1}'],
      ['call_b', 'g', '{"y":2}'],
    ]);
  });

  it('reads reasoning from vLLM’s `reasoning` field too, once when a server sends both names', async () => {
    const { events } = await run([
      deltaChunk({ role: 'assistant', content: '' }),
      deltaChunk({ reasoning: 'Hmm.' }),
      deltaChunk({ reasoning: ' Yes.', reasoning_content: ' Yes.' }),
      deltaChunk({ content: 'OK' }),
      deltaChunk({}, 'stop'),
    ]);
    checkEvents(events);
    const output = finalOf(events).output as JsonObject[];
    expect(output[0]).toMatchObject({ type: 'reasoning', content: [{ text: 'Hmm. Yes.' }] });
  });

  it('carries signed thinking blocks in the reasoning item, and into the history turn', async () => {
    const blocks = [{ type: 'thinking', thinking: 'Weather needs a tool.', signature: 'sig-abc' }];
    const { events } = await run([
      deltaChunk({ role: 'assistant', content: '' }),
      deltaChunk({ reasoning_content: 'Weather needs a tool.' }),
      deltaChunk({ thinking_blocks: blocks }),
      ...callChunks(0, 'call_a', 'get_weather', ['{"city":"Oslo"}']),
      deltaChunk({}, 'tool_calls'),
    ]);
    checkEvents(events);
    const output = finalOf(events).output as JsonObject[];
    expect(output.map((o) => o.type)).toEqual(['reasoning', 'function_call']);
    expect(typeof output[0]?.encrypted_content).toBe('string');
    expect(assistantTurn(output)).toEqual({
      role: 'assistant',
      content: null,
      tool_calls: [
        { id: 'call_a', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } },
      ],
      thinking_blocks: blocks,
    });
  });

  it('streams a refusal before text as two parts of one message, then closes it for a tool call', async () => {
    const { events } = await run([
      deltaChunk({ role: 'assistant', content: null, refusal: null }),
      deltaChunk({ refusal: 'Not ' }),
      deltaChunk({ refusal: 'that.' }),
      deltaChunk({ content: 'This instead.' }),
      ...callChunks(0, 'call_a', 'get_weather', ['{"city":"Oslo"}']),
      deltaChunk({}, 'tool_calls'),
    ]);
    checkEvents(events);
    expect(types(events)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      'response.refusal.delta',
      'response.refusal.delta',
      'response.refusal.done',
      'response.content_part.done',
      'response.content_part.added',
      'response.output_text.delta',
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.output_item.added',
      'response.function_call_arguments.delta',
      'response.function_call_arguments.done',
      'response.output_item.done',
      'response.completed',
    ]);
    expect(events.slice(3, 8).map((e) => e.data.content_index)).toEqual([0, 0, 0, 0, 0]);
    expect(events.slice(8, 12).map((e) => e.data.content_index)).toEqual([1, 1, 1, 1]);
    expect(events[3]?.data.part).toEqual({ type: 'refusal', refusal: '' });
    expect(events[8]?.data.part).toEqual({ type: 'output_text', annotations: [], logprobs: [], text: '' });
    const output = finalOf(events).output as JsonObject[];
    expect(output.map((o) => o.type)).toEqual(['message', 'function_call']);
    expect(output[0]?.content).toEqual([
      { type: 'refusal', refusal: 'Not that.' },
      { type: 'output_text', annotations: [], logprobs: [], text: 'This instead.' },
    ]);
    expect(assistantTurn(output)).toMatchObject({ content: 'This instead.', refusal: 'Not that.' });
  });
});
