/**
 * Block-mode streams with one upstream chunk longer than a window, end to end: a started Gantry, a fake
 * OpenAI upstream streaming the whole answer as one 2,500-character piece, raw HTTP (every chunk and
 * event schema-checked) and the official SDK's stream helpers, on chat completions and on Responses
 * bridged onto them (README, "Safety" → streams).
 */
import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type FakeOpenAI, startFakeOpenAI } from '../helpers/fake-openai.js';
import { startGantry, type TestGantry } from '../helpers/gantry.js';
import { assertOpenAISchema } from '../helpers/openapi.js';
import { parseSse } from '../helpers/sse-events.js';

/** 2,500 characters without a sentence end: only the 1,000-character limit closes a window. */
const LONG = 'lovely flowers and tea '.repeat(109).slice(0, 2500);

let openai: FakeOpenAI;
let gantry: TestGantry;

beforeAll(async () => {
  openai = await startFakeOpenAI();
  gantry = await startGantry(`
providers:
  upstream: { kind: openai, base_url: ${openai.url} }
tiers:
  default: {}
safety:
  default: off
  stream_window_chars: 400
models:
  - namespace: s/block
    name: s/block
    type: text
    apis: [chat, responses]
    routes: [{ provider: upstream, model: fake-model }]
    safety: block
`);
});

afterAll(async () => {
  await gantry?.close();
  await openai?.close();
});

beforeEach(() => {
  openai.reset();
});

type Json = Record<string, unknown>;

async function postStream(path: string, body: Json): Promise<Json[]> {
  const res = await fetch(`${gantry.baseURL}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${gantry.key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ ...body, stream: true }),
  });
  expect(res.status).toBe(200);
  return parseSse(await res.text())
    .filter((e) => e.data !== '[DONE]')
    .map((e) => JSON.parse(e.data) as Json);
}

const client = () => new OpenAI({ baseURL: gantry.baseURL, apiKey: gantry.key, maxRetries: 0 });
const messages = [{ role: 'user' as const, content: 'Say something nice' }];

describe('block: one 2,500-character upstream chunk', () => {
  it('chat: released as 1,000 + 1,000 + 500 characters, each after its check; the SDK helper finishes', async () => {
    openai.enqueue({ pieces: [LONG] });
    const chunks = await postStream('/chat/completions', { model: 's/block', messages });
    for (const c of chunks) assertOpenAISchema('CreateChatCompletionStreamResponse', c);
    const choices = chunks.flatMap((c) => c.choices as Json[]);
    const texts = choices
      .map((ch) => (ch.delta as Json).content)
      .filter((t): t is string => typeof t === 'string' && t !== '');
    expect(texts).toEqual([LONG.slice(0, 1000), LONG.slice(1000, 2000), LONG.slice(2000)]);
    const ends = choices
      .map((ch) => ch.content_filter_offsets as Json | undefined)
      .filter((o) => o !== undefined)
      .map((o) => o.end_offset);
    expect(ends).toEqual([1000, 2000, 2500]);

    openai.enqueue({ pieces: [LONG] });
    const final = await client()
      .chat.completions.stream({ model: 's/block', messages })
      .finalChatCompletion();
    expect(final.choices[0]?.message.content).toBe(LONG);
    expect(final.choices[0]?.finish_reason).toBe('stop');
  });

  it('responses (bridged): released as three output_text deltas; the SDK helper finishes', async () => {
    openai.enqueue({ pieces: [LONG] });
    const events = await postStream('/responses', { model: 's/block', input: 'Say something nice' });
    const deltas = events
      .filter((e) => e.type === 'response.output_text.delta')
      .map((e) => {
        assertOpenAISchema('ResponseTextDeltaEvent', e);
        return e.delta;
      });
    expect(deltas).toEqual([LONG.slice(0, 1000), LONG.slice(1000, 2000), LONG.slice(2000)]);
    expect(events.at(-1)?.type).toBe('response.completed');
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));

    openai.enqueue({ pieces: [LONG] });
    const final = await client()
      .responses.stream({ model: 's/block', input: 'Say something nice' })
      .finalResponse();
    expect(final.output_text).toBe(LONG);
    expect(final.status).toBe('completed');
  });
});
