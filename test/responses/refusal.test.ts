/**
 * Refusals on the Responses bridge, through a real Gantry in front of a fake chat upstream: chat's
 * `message.refusal` / `delta.refusal` become the message item's refusal part (JSON, raw stream, the
 * official SDK's stream), an assistant refusal sent back reaches chat as its `refusal` field (in `input`
 * and through `previous_response_id`; an Anthropic model gets it as the assistant's text), and the safety
 * layer checks a refusal like any other completion text (annotate reports it, block stops it). Every
 * body and event is checked against OpenAI's schemas.
 */
import OpenAI from 'openai';
import type { ResponseStreamEvent } from 'openai/resources/responses/responses';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type FakeAnthropic, startFakeAnthropic } from '../helpers/fake-anthropic.js';
import { type FakeOpenAI, type JsonObject, replyPieces, startFakeOpenAI } from '../helpers/fake-openai.js';
import { startGantry, type TestGantry } from '../helpers/gantry.js';
import { assertOpenAISchema } from '../helpers/openapi.js';
import { parseSse } from '../helpers/sse-events.js';

const KEY = 'sk-upstream-0123456789';
const BRIDGED = 'acme/bridged';
const ANNOTATED = 'acme/bridged-annotate';
const BLOCKED = 'acme/bridged-block';
/** Bridged onto chat, served by Gantry's Anthropic adapter. */
const CLAUDE = 'acme/claude';
const REFUSAL = "I'm sorry, but I can't help with that request.";
const VIOLENT = 'I am going to kill you, I know where you live and I have a gun';

const SCHEMA_OF: Record<string, string> = {
  'response.created': 'ResponseCreatedEvent',
  'response.in_progress': 'ResponseInProgressEvent',
  'response.output_item.added': 'ResponseOutputItemAddedEvent',
  'response.content_part.added': 'ResponseContentPartAddedEvent',
  'response.output_text.delta': 'ResponseTextDeltaEvent',
  'response.output_text.done': 'ResponseTextDoneEvent',
  'response.refusal.delta': 'ResponseRefusalDeltaEvent',
  'response.refusal.done': 'ResponseRefusalDoneEvent',
  'response.content_part.done': 'ResponseContentPartDoneEvent',
  'response.output_item.done': 'ResponseOutputItemDoneEvent',
  'response.completed': 'ResponseCompletedEvent',
  'response.incomplete': 'ResponseIncompleteEvent',
};

let chat: FakeOpenAI;
let claude: FakeAnthropic;
let gantry: TestGantry;
let client: OpenAI;

beforeAll(async () => {
  chat = await startFakeOpenAI({ apiKey: KEY });
  claude = await startFakeAnthropic({ apiKey: KEY });
  gantry = await startGantry(
    `
providers:
  chat-only:
    kind: openai
    base_url: ${chat.url}
    api_key_env: UP_KEY
  claude:
    kind: anthropic
    base_url: ${claude.url}
    api_key_env: UP_KEY
safety:
  stream_window_chars: 16
models:
  - namespace: ${BRIDGED}
    name: Bridged onto chat
    type: text
    routes: [{ provider: chat-only, model: plain-model }]
  - namespace: ${ANNOTATED}
    name: Bridged onto chat, annotated
    type: text
    safety: annotate
    routes: [{ provider: chat-only, model: plain-model }]
  - namespace: ${BLOCKED}
    name: Bridged onto chat, blocked
    type: text
    safety: block
    routes: [{ provider: chat-only, model: plain-model }]
  - namespace: ${CLAUDE}
    name: Claude, bridged
    type: text
    routes: [{ provider: claude, model: claude-upstream }]
    defaults: { max_tokens: 64 }
`,
    { UP_KEY: KEY },
  );
  client = new OpenAI({ baseURL: gantry.baseURL, apiKey: gantry.key, maxRetries: 0 });
});
afterAll(async () => {
  await gantry?.close();
  await chat?.close();
  await claude?.close();
});
beforeEach(() => {
  chat.reset();
  claude.reset();
});

/** The chat body the fake upstream received last. */
function lastChatBody(): JsonObject {
  const body = chat.requests.at(-1)?.body;
  if (!body) throw new Error('the fake upstream received no request');
  return body;
}

/** A streamed POST /v1/responses with fetch: every event checked against its own schema and the union. */
async function streamed(body: JsonObject): Promise<JsonObject[]> {
  const res = await fetch(`${gantry.baseURL}/responses`, {
    method: 'POST',
    headers: { authorization: `Bearer ${gantry.key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ ...body, stream: true }),
  });
  expect(res.status).toBe(200);
  const events = parseSse(await res.text()).map((e) => {
    const data = JSON.parse(e.data) as JsonObject;
    expect(e.event).toBe(data.type);
    const schema = SCHEMA_OF[String(data.type)];
    expect(schema, `unexpected event ${String(data.type)}`).toBeDefined();
    assertOpenAISchema(schema as string, data);
    assertOpenAISchema('ResponseStreamEvent', data);
    return data;
  });
  expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
  return events;
}

const types = (events: JsonObject[]) => events.map((e) => e.type);
const finalOf = (events: JsonObject[]) => events.at(-1)?.response as JsonObject;

describe('a chat refusal on the bridge', () => {
  it('JSON: message.refusal becomes the message item’s refusal part', async () => {
    chat.enqueue({ refusal: REFUSAL });
    const response = await client.responses.create({ model: BRIDGED, input: 'Do something bad' });
    assertOpenAISchema('Response', response);
    expect(response.status).toBe('completed');
    expect(response.output).toEqual([
      {
        id: expect.stringMatching(/^msg_/),
        type: 'message',
        status: 'completed',
        role: 'assistant',
        content: [{ type: 'refusal', refusal: REFUSAL }],
      },
    ]);
    // The SDKs' output_text holds output_text parts only.
    expect(response.output_text).toBe('');
    // The stored Response is the one the client got.
    const stored = await fetch(`${gantry.baseURL}/responses/${response.id}`, {
      headers: { authorization: `Bearer ${gantry.key}` },
    });
    expect(((await stored.json()) as JsonObject).output).toEqual(response.output);
  });

  it('JSON: content and refusal both become parts, in the upstream’s order', async () => {
    chat.enqueue({ reply: 'Here is the safe half.', refusal: REFUSAL });
    const response = await client.responses.create({ model: BRIDGED, input: 'Do two things' });
    assertOpenAISchema('Response', response);
    expect(response.output).toHaveLength(1);
    expect((response.output[0] as unknown as JsonObject).content).toEqual([
      { type: 'output_text', annotations: [], logprobs: [], text: 'Here is the safe half.' },
      { type: 'refusal', refusal: REFUSAL },
    ]);
    expect(response.output_text).toBe('Here is the safe half.');
  });

  it('stream: delta.refusal becomes the refusal part’s events, closed, and the final Response holds it', async () => {
    chat.enqueue({ refusal: REFUSAL });
    const events = await streamed({ model: BRIDGED, input: 'Do something bad' });
    const pieces = replyPieces(REFUSAL);
    expect(types(events)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      ...pieces.map(() => 'response.refusal.delta'),
      'response.refusal.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.completed',
    ]);
    const item = events[2]?.item as JsonObject;
    expect(item).toMatchObject({ type: 'message', status: 'in_progress', content: [] });
    // Every event about the part names the same item, output_index and content_index.
    for (const e of events.slice(3, -2)) {
      expect(e).toMatchObject({ item_id: item.id, output_index: 0, content_index: 0 });
    }
    expect(events[3]?.part).toEqual({ type: 'refusal', refusal: '' });
    expect(events.filter((e) => e.type === 'response.refusal.delta').map((e) => e.delta)).toEqual(pieces);
    const byType = (t: string) => events.find((e) => e.type === t) as JsonObject;
    expect(byType('response.refusal.done').refusal).toBe(REFUSAL);
    expect(byType('response.content_part.done').part).toEqual({ type: 'refusal', refusal: REFUSAL });
    const done = byType('response.output_item.done').item as JsonObject;
    expect(done).toEqual({
      id: item.id,
      type: 'message',
      status: 'completed',
      role: 'assistant',
      content: [{ type: 'refusal', refusal: REFUSAL }],
    });
    const final = finalOf(events);
    assertOpenAISchema('Response', final);
    expect(final.output).toEqual([done]);
    expect(final.output_text).toBe('');
  });

  it('stream: text then refusal are two parts of one message, each with its own content_index', async () => {
    chat.enqueue({ reply: 'Partly yes.', refusal: REFUSAL });
    const events = await streamed({ model: BRIDGED, input: 'Do two things' });
    const text = replyPieces('Partly yes.');
    const refusal = replyPieces(REFUSAL);
    expect(types(events)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      ...text.map(() => 'response.output_text.delta'),
      'response.output_text.done',
      'response.content_part.done',
      'response.content_part.added',
      ...refusal.map(() => 'response.refusal.delta'),
      'response.refusal.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.completed',
    ]);
    const itemId = (events[2]?.item as JsonObject | undefined)?.id;
    const partEvents = events.slice(3, -2);
    for (const e of partEvents) expect(e).toMatchObject({ item_id: itemId, output_index: 0 });
    const textEvents = partEvents.slice(0, text.length + 3);
    const refusalEvents = partEvents.slice(text.length + 3);
    for (const e of textEvents) expect(e.content_index).toBe(0);
    for (const e of refusalEvents) expect(e.content_index).toBe(1);
    const parts = [
      { type: 'output_text', annotations: [], logprobs: [], text: 'Partly yes.' },
      { type: 'refusal', refusal: REFUSAL },
    ];
    expect(finalOf(events).output).toEqual([
      { id: itemId, type: 'message', status: 'completed', role: 'assistant', content: parts },
    ]);
    expect(finalOf(events).output_text).toBe('Partly yes.');
  });

  it('the official SDK’s responses.stream() finishes with the refusal part', async () => {
    chat.enqueue({ refusal: REFUSAL });
    const stream = client.responses.stream({ model: BRIDGED, input: 'Do something bad' });
    const deltas: string[] = [];
    const seen: ResponseStreamEvent[] = [];
    stream.on('response.refusal.delta', (e) => deltas.push(e.delta));
    stream.on('event', (e) => seen.push(e));
    const final = await stream.finalResponse();
    assertOpenAISchema('Response', final);
    expect(deltas).toEqual(replyPieces(REFUSAL));
    expect(seen.filter((e) => e.type === 'response.refusal.done')).toHaveLength(1);
    expect(final.status).toBe('completed');
    const message = final.output[0];
    expect(message?.type).toBe('message');
    // The SDK's parsed Response adds `parsed: null` to each part.
    expect(message?.type === 'message' ? message.content : undefined).toEqual([
      expect.objectContaining({ type: 'refusal', refusal: REFUSAL }),
    ]);
  });
});

describe('a refusal sent back to a chat upstream', () => {
  it('an assistant message’s refusal part in input reaches chat as the message’s refusal field', async () => {
    await client.responses.create({
      model: BRIDGED,
      input: [
        { role: 'user', content: 'Do something bad' },
        // As the SDKs send earlier output items back.
        {
          type: 'message',
          id: 'msg_1',
          status: 'completed',
          role: 'assistant',
          content: [{ type: 'refusal', refusal: REFUSAL }],
        },
        {
          type: 'message',
          id: 'msg_2',
          status: 'completed',
          role: 'assistant',
          content: [
            { type: 'output_text', text: 'Partly yes.', annotations: [] },
            { type: 'refusal', refusal: 'Not the rest.' },
          ],
        },
        { role: 'user', content: 'Something else then' },
      ],
    });
    expect(lastChatBody().messages).toEqual([
      { role: 'user', content: 'Do something bad' },
      { role: 'assistant', content: '', refusal: REFUSAL },
      { role: 'assistant', content: 'Partly yes.', refusal: 'Not the rest.' },
      { role: 'user', content: 'Something else then' },
    ]);
  });

  it('an Anthropic model sees the refusal as what the assistant said', async () => {
    await client.responses.create({
      model: CLAUDE,
      input: [
        { role: 'user', content: 'Do something bad' },
        {
          type: 'message',
          id: 'msg_1',
          status: 'completed',
          role: 'assistant',
          content: [{ type: 'refusal', refusal: REFUSAL }],
        },
        { role: 'user', content: 'Something else then' },
      ],
    });
    expect(claude.requests.at(-1)?.body?.messages).toEqual([
      { role: 'user', content: 'Do something bad' },
      { role: 'assistant', content: REFUSAL },
      { role: 'user', content: 'Something else then' },
    ]);
  });

  it('a refused answer continued with previous_response_id: chat sees the refusal, input_items list it', async () => {
    chat.enqueue({ refusal: REFUSAL });
    const events = await streamed({ model: BRIDGED, input: 'Do something bad' });
    const first = finalOf(events);
    const second = await client.responses.create({
      model: BRIDGED,
      input: 'Something else then',
      previous_response_id: String(first.id),
    });
    expect(lastChatBody().messages).toEqual([
      { role: 'user', content: 'Do something bad' },
      { role: 'assistant', content: '', refusal: REFUSAL },
      { role: 'user', content: 'Something else then' },
    ]);
    const res = await fetch(`${gantry.baseURL}/responses/${second.id}/input_items?order=asc`, {
      headers: { authorization: `Bearer ${gantry.key}` },
    });
    const page = (await res.json()) as JsonObject;
    assertOpenAISchema('ResponseItemList', page);
    expect((page.data as JsonObject[]).map((item) => [item.role, item.content])).toEqual([
      ['user', [{ type: 'input_text', text: 'Do something bad' }]],
      ['assistant', [{ type: 'refusal', refusal: REFUSAL }]],
      ['user', [{ type: 'input_text', text: 'Something else then' }]],
    ]);
  });
});

type Entry = {
  blocked: boolean;
  source_type: string;
  content_filter_results: Record<string, { filtered: boolean; severity?: string }>;
  content_filter_offsets: { start_offset: number; end_offset: number; check_offset: number };
};
const completionEntry = (response: unknown) =>
  (response as { content_filters?: Entry[] }).content_filters?.find((e) => e.source_type === 'completion');

describe('the safety layer on a bridged refusal (annotate)', () => {
  it('checks a streamed refusal like any other completion text', async () => {
    chat.enqueue({ refusal: VIOLENT });
    const stream = client.responses.stream({ model: ANNOTATED, input: 'Say something' });
    const deltas: string[] = [];
    stream.on('response.refusal.delta', (e) => deltas.push(e.delta));
    const final = await stream.finalResponse();
    // Under annotate the refusal goes out whole, and the terminal Response reports what it held.
    expect(deltas.join('')).toBe(VIOLENT);
    expect(final.status).toBe('completed');
    const completion = completionEntry(final);
    expect(completion?.blocked).toBe(false);
    expect(completion?.content_filter_results.violence).toMatchObject({
      filtered: false,
      severity: expect.stringMatching(/^(medium|high)$/),
    });
    expect(completion?.content_filter_offsets.check_offset).toBe(VIOLENT.length);
  });

  it('checks a JSON refusal like any other completion text', async () => {
    chat.enqueue({ refusal: VIOLENT });
    const response = await client.responses.create({ model: ANNOTATED, input: 'Say something' });
    assertOpenAISchema('Response', response);
    const completion = completionEntry(response);
    expect(completion?.content_filter_results.violence?.severity).toMatch(/^(medium|high)$/);
    expect(completion?.content_filter_offsets.end_offset).toBe(VIOLENT.length);
  });
});

describe('the safety layer on a bridged refusal (block)', () => {
  it('never sends a flagged streamed refusal, and closes its part', async () => {
    chat.enqueue({ refusal: `${REFUSAL} ${VIOLENT}.` });
    const events = await streamed({ model: BLOCKED, input: 'Say something' });
    expect(JSON.stringify(events)).not.toContain('kill');
    const final = finalOf(events);
    expect(events.at(-1)?.type).toBe('response.incomplete');
    expect(final.incomplete_details).toEqual({ reason: 'content_filter' });
    // The message and its refusal part are closed, holding only what was released.
    const released = events
      .filter((e) => e.type === 'response.refusal.delta')
      .map((e) => e.delta)
      .join('');
    expect(types(events)).toContain('response.refusal.done');
    expect(events.find((e) => e.type === 'response.refusal.done')?.refusal).toBe(released);
    const message = (final.output as JsonObject[])[0];
    expect(message).toMatchObject({
      type: 'message',
      status: 'incomplete',
      content: [{ type: 'refusal', refusal: released }],
    });
    // The clean first sentence was checked and went out; the threat after it never did.
    expect(released).toBe(REFUSAL);
    expect(completionEntry(final)?.blocked).toBe(true);
  });
});
