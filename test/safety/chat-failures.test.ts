/**
 * Chat completion safety when something fails, end to end through a started Gantry: the client leaves
 * while a window is held, the upstream breaks mid-window, a remote classifier (fake moderations service)
 * fails mid-stream under policies that fail open and closed, reasoning deltas and a refusal in JSON.
 */
import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { errorOf } from '../helpers/api-error.js';
import { type FakeModeration, startFakeModeration } from '../helpers/fake-moderation.js';
import { type FakeOpenAI, startFakeOpenAI } from '../helpers/fake-openai.js';
import { startGantry, type TestGantry } from '../helpers/gantry.js';
import { assertOpenAISchema } from '../helpers/openapi.js';
import { parseSse } from '../helpers/sse-events.js';

const VIOLENT = 'I am going to kill you, I know where you live and I have a gun';
const CLEAN = 'Have a lovely day';
const LONG_CLEAN = `${CLEAN}, and thank you for the flowers you sent last week, they were lovely.`;
const MOD_KEY = 'sk-chat-failures-moderation-key';

let openai: FakeOpenAI;
let moderation: FakeModeration;
let gantry: TestGantry;

beforeAll(async () => {
  openai = await startFakeOpenAI();
  moderation = await startFakeModeration({ openaiKey: MOD_KEY });
  const model = (namespace: string, safety: string) => `
  - namespace: ${namespace}
    name: ${namespace}
    type: text
    apis: [chat]
    routes: [{ provider: upstream, model: fake-model }]
    safety: ${safety}`;
  gantry = await startGantry(
    `
providers:
  upstream: { kind: openai, base_url: ${openai.url} }
tiers:
  default: {}
safety:
  stream_window_chars: 24
  policies:
    mod-open: { mode: annotate, classifier: mod-open }
    mod-closed: { mode: annotate, classifier: mod-closed }
    mod-block: { mode: block, classifier: mod-closed }
  classifiers:
    mod-open: { kind: openai_moderations, url: ${moderation.moderationsUrl}, api_key_env: MOD_KEY, timeout_ms: 2000, on_failure: open }
    mod-closed: { kind: openai_moderations, url: ${moderation.moderationsUrl}, api_key_env: MOD_KEY, timeout_ms: 2000, on_failure: closed }
models:${model('f/block', 'block')}${model('f/annotate', 'annotate')}${model('f/mod-open', 'mod-open')}${model('f/mod-closed', 'mod-closed')}${model('f/mod-block', 'mod-block')}
`,
    { MOD_KEY },
  );
});

afterAll(async () => {
  await gantry?.close();
  await openai?.close();
  await moderation?.close();
});

beforeEach(() => {
  openai.reset();
  moderation.reset();
});

type Json = Record<string, unknown>;
type Choice = Json & { index: number; delta: Json; finish_reason: string | null };
type Chunk = Json & { choices: Choice[] };

/** A raw streamed POST: the events as sent (every chunk schema-checked), and whether [DONE] ended it. */
async function stream(body: Json): Promise<{ status: number; text: string; chunks: Chunk[]; done: boolean }> {
  const res = await fetch(`${gantry.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${gantry.key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ ...body, stream: true }),
  });
  const text = await res.text();
  if (res.status !== 200) return { status: res.status, text, chunks: [], done: false };
  const events = parseSse(text);
  const done = events.at(-1)?.data === '[DONE]';
  const chunks: Chunk[] = [];
  for (const e of done ? events.slice(0, -1) : events) {
    const parsed = JSON.parse(e.data) as Chunk;
    if (parsed.error === undefined) {
      assertOpenAISchema('CreateChatCompletionStreamResponse', parsed);
      chunks.push(parsed);
    }
  }
  return { status: res.status, text, chunks, done };
}

const user = (content: string) => [{ role: 'user' as const, content }];
const annotations = (chunks: Chunk[]) =>
  chunks.flatMap((c) => c.choices).filter((ch) => ch.content_filter_offsets !== undefined);

describe('block, a stream that fails', () => {
  it('the client leaves while a window is held: the upstream is aborted', async () => {
    // The reply stops after a few words, which stay held (shorter than a window), until the client leaves.
    openai.enqueue({
      pieces: ['Have', ' a', ' lovely', ' day', ' and', ' more', ' and', ' more'],
      stallAfterChunks: 3,
    });
    const leave = new AbortController();
    const res = await fetch(`${gantry.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${gantry.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'f/block', messages: user(CLEAN), stream: true }),
      signal: leave.signal,
    });
    expect(res.status).toBe(200);
    const [upstream] = await openai.waitForRequests(1);
    // The prompt's chunk comes; the held words do not.
    const reader = res.body?.getReader() as ReadableStreamDefaultReader<Uint8Array>;
    const first = new TextDecoder().decode((await reader.read()).value);
    expect(first).toContain('prompt_filter_results');
    expect(first).not.toContain('lovely');
    leave.abort();
    expect(await upstream?.settled).toBe('aborted');
  });

  it('the upstream breaks mid-window: the held text is not released, one error event, nothing flagged', async () => {
    openai.enqueue({ reply: `${CLEAN} ${VIOLENT}`, errorEvent: { afterChunks: 4 } });
    const res = await stream({ model: 'f/block', messages: user(CLEAN) });
    expect(res.status).toBe(200);
    const events = parseSse(res.text);
    const errors = events.filter((e) => e.data.includes('"error"'));
    expect(errors).toHaveLength(1);
    expect(res.done).toBe(false);
    // Four upstream chunks (role and three words, under a window) were held: none reached the client.
    expect(res.text).not.toContain('lovely');
    expect(annotations(res.chunks)).toHaveLength(0);
  });
});

describe('a remote classifier failing mid-stream', () => {
  // One call for the prompt, one for the first window, then the service fails.
  const failAfterTwo = () => {
    moderation.enqueue({}, {});
    moderation.setBehavior({ status: 500 });
  };

  for (const model of ['f/mod-open', 'f/mod-closed']) {
    it(`annotate (${model}): the error is in the annotation and the stream finishes with [DONE]`, async () => {
      failAfterTwo();
      // Three sentences: three windows (they end at sentences), the last two checked after the failure.
      const reply = `${LONG_CLEAN} ${LONG_CLEAN} ${LONG_CLEAN}`;
      openai.enqueue({ reply });
      const res = await stream({ model, messages: user(CLEAN) });
      expect(res.status).toBe(200);
      expect(res.done).toBe(true);
      expect(res.text).not.toContain('"error":{"message"');
      const text = res.chunks
        .flatMap((c) => c.choices)
        .map((ch) => (typeof ch.delta?.content === 'string' ? ch.delta.content : ''))
        .join('');
      expect(text).toBe(reply);
      const results = annotations(res.chunks).map((a) => a.content_filter_results as Json);
      expect(results[0]).toHaveProperty('violence');
      expect(results.slice(1).length).toBeGreaterThan(0);
      for (const r of results.slice(1)) {
        expect(r).toEqual({ error: { code: 'content_filter_error', message: expect.any(String) } });
      }
    });
  }

  it('annotate failing closed: a classifier down for the prompt is a 503 before the upstream is called', async () => {
    moderation.setBehavior({ status: 500 });
    const client = new OpenAI({ baseURL: gantry.baseURL, apiKey: gantry.key, maxRetries: 0 });
    const err = await errorOf(
      client.chat.completions.create({ model: 'f/mod-closed', messages: user(CLEAN) }),
    );
    expect(err.status).toBe(503);
    expect(err.code).toBe('content_filter_unavailable');
    expect(openai.requests).toHaveLength(0);
  });

  it('annotate failing closed, JSON: a completion check that fails is reported, the answer kept', async () => {
    moderation.enqueue({});
    moderation.setBehavior({ status: 500 });
    openai.enqueue({ reply: CLEAN });
    const client = new OpenAI({ baseURL: gantry.baseURL, apiKey: gantry.key, maxRetries: 0 });
    const answer = await client.chat.completions.create({ model: 'f/mod-closed', messages: user(CLEAN) });
    expect(answer.choices[0]?.message.content).toBe(CLEAN);
    expect((answer.choices[0] as unknown as Json).content_filter_results).toEqual({
      error: { code: 'content_filter_error', message: expect.any(String) },
    });
  });

  it('block failing closed: the held text is not released, one error event', async () => {
    failAfterTwo();
    openai.enqueue({ reply: `${LONG_CLEAN} ${LONG_CLEAN} ${LONG_CLEAN}` });
    const res = await stream({ model: 'f/mod-block', messages: user(CLEAN) });
    expect(res.done).toBe(false);
    const events = parseSse(res.text);
    const last = JSON.parse(events.at(-1)?.data ?? '{}') as { error?: { code?: string } };
    expect(last.error?.code).toBe('content_filter_unavailable');
    // Only the first window (checked before the service failed) went out.
    const text = res.chunks
      .flatMap((c) => c.choices)
      .map((ch) => (typeof ch.delta?.content === 'string' ? ch.delta.content : ''))
      .join('');
    expect(text).toBe(LONG_CLEAN);
  });
});

describe('reasoning and refusal', () => {
  it('block, stream: violent reasoning is never sent, the choice ends with content_filter', async () => {
    openai.enqueue({ reasoning: VIOLENT, reply: CLEAN });
    const res = await stream({ model: 'f/block', messages: user(CLEAN) });
    expect(res.done).toBe(true);
    expect(res.text).not.toContain('kill');
    const ends = res.chunks.flatMap((c) => c.choices).filter((ch) => ch.finish_reason !== null);
    expect(ends.map((e) => e.finish_reason)).toEqual(['content_filter']);
  });

  it('block, JSON: violent reasoning filters the choice and is removed', async () => {
    openai.enqueue({ reasoning: VIOLENT, reply: CLEAN });
    const client = new OpenAI({ baseURL: gantry.baseURL, apiKey: gantry.key, maxRetries: 0 });
    const answer = await client.chat.completions.create({ model: 'f/block', messages: user(CLEAN) });
    expect(answer.choices[0]?.finish_reason).toBe('content_filter');
    expect(JSON.stringify(answer)).not.toContain('kill');
  });

  it('annotate, stream: reasoning is annotated', async () => {
    openai.enqueue({ reasoning: VIOLENT, reply: CLEAN });
    const res = await stream({ model: 'f/annotate', messages: user(CLEAN) });
    const flagged = annotations(res.chunks).some((a) =>
      ['medium', 'high'].includes(
        (a.content_filter_results as { violence?: { severity: string } }).violence?.severity ?? '',
      ),
    );
    expect(flagged).toBe(true);
  });
});
