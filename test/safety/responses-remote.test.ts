/**
 * POST /v1/responses under policies that name a remote classifier (the OpenAI moderations fake), through
 * a real Gantry and the official SDK: redaction masks with the offline spans so the remote never sees the
 * original, a masked prompt still reports `pii` detected, a classifier failing mid-stream follows the
 * failure rules (annotate: the error in content_filters, the stream ends normally; block: open releases,
 * closed fails the stream), and a client that leaves while a window waits for its check ends that check
 * and the upstream call.
 */
import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type FakeModeration, startFakeModeration } from '../helpers/fake-moderation.js';
import { type FakeOpenAI, type JsonObject, startFakeOpenAI } from '../helpers/fake-openai.js';
import { startGantry, type TestGantry } from '../helpers/gantry.js';
import { assertOpenAISchema } from '../helpers/openapi.js';
import { parseSse } from '../helpers/sse-events.js';
import { waitFor } from '../helpers/wait.js';

const KEY = 'sk-upstream-remote-0123456789';
const MOD_KEY = 'sk-moderation-remote-5f0c1d2e';
const EMAIL = 'jane.doe@example.com';
const CLEAN = 'Have a lovely day';
const LONG = `${CLEAN}. `.repeat(8).trimEnd();

let chat: FakeOpenAI;
let mod: FakeModeration;
let gantry: TestGantry;
let client: OpenAI;
const logs: string[] = [];

const POLICIES = [
  'mod-redact',
  'annotate-open',
  'annotate-closed',
  'block-open',
  'block-closed',
  'block-slow',
];

beforeAll(async () => {
  chat = await startFakeOpenAI({ apiKey: KEY });
  mod = await startFakeModeration({ openaiKey: MOD_KEY });
  const classifier = (name: string, onFailure: string, timeout: number) => `    ${name}:
      kind: openai_moderations
      url: ${mod.moderationsUrl}
      api_key_env: MOD_KEY
      timeout_ms: ${timeout}
      on_failure: ${onFailure}`;
  gantry = await startGantry(
    `
providers:
  chat:
    kind: openai
    base_url: ${chat.url}
    api_key_env: UP_KEY
safety:
  stream_window_chars: 16
  policies:
    mod-redact: { mode: annotate, classifier: open, redact: [email] }
    annotate-open: { mode: annotate, classifier: open }
    annotate-closed: { mode: annotate, classifier: closed }
    block-open: { mode: block, classifier: open }
    block-closed: { mode: block, classifier: closed }
    block-slow: { mode: block, classifier: slow }
  classifiers:
${classifier('open', 'open', 2000)}
${classifier('closed', 'closed', 2000)}
${classifier('slow', 'open', 20000)}
models:
${POLICIES.map(
  (p) => `  - namespace: acme/${p}
    name: Remote ${p}
    type: text
    safety: ${p}
    routes: [{ provider: chat, model: plain-model }]`,
).join('\n')}
`,
    { UP_KEY: KEY, MOD_KEY },
    { onLog: (line) => logs.push(line) },
  );
  client = new OpenAI({ baseURL: gantry.baseURL, apiKey: gantry.key, maxRetries: 0, logLevel: 'off' });
});
afterAll(async () => {
  await gantry?.close();
  await chat?.close();
  await mod?.close();
  const all = logs.join('\n');
  expect(all).not.toContain(MOD_KEY);
  expect(all).not.toContain(EMAIL);
});
beforeEach(() => {
  chat.reset();
  mod.reset();
});

type Entry = { blocked: boolean; content_filter_results: Record<string, unknown> };
const filtersOf = (response: unknown) => (response as { content_filters: Entry[] }).content_filters;

async function rawStream(model: string, signal?: AbortSignal): Promise<Response> {
  return fetch(`${gantry.baseURL}/responses`, {
    method: 'POST',
    headers: { authorization: `Bearer ${gantry.key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model, input: CLEAN, stream: true }),
    signal,
  });
}

function eventsOf(text: string): JsonObject[] {
  return parseSse(text).map((e) => JSON.parse(e.data) as JsonObject);
}

describe('redaction with a remote classifier', () => {
  it('the remote never sees the original; the prompt reports pii detected', async () => {
    chat.setBehavior({ reply: CLEAN });
    const response = await client.responses.create({
      model: 'acme/mod-redact',
      instructions: `Answer ${EMAIL} politely`,
      input: [
        { role: 'system', content: `Escalate to ${EMAIL}` },
        { role: 'user', content: [{ type: 'input_text', text: `Write to ${EMAIL} today` }] },
      ],
    });
    assertOpenAISchema('Response', response);
    expect(mod.requests.length).toBeGreaterThan(0);
    for (const r of mod.requests) expect(r.rawBody.toString()).not.toContain(EMAIL);
    expect(mod.requests.map((r) => r.rawBody.toString()).join('\n')).toContain('[EMAIL]');
    const sent = JSON.stringify(chat.requests.at(-1)?.body);
    expect(sent).not.toContain(EMAIL);
    expect(sent).toContain('Write to [EMAIL] today');
    const [prompt] = filtersOf(response);
    expect(prompt?.content_filter_results.pii).toMatchObject({ detected: true });
  });
});

describe('a remote classifier failing mid-stream', () => {
  it.each(['annotate-open', 'annotate-closed'])(
    '%s: the stream ends with response.completed, the error in content_filters',
    async (policy) => {
      chat.setBehavior({ reply: LONG });
      // The prompt's check and the first window's answer; every later check fails.
      mod.enqueue({}, {});
      mod.setBehavior({ status: 500 });
      const stream = client.responses.stream({ model: `acme/${policy}`, input: CLEAN });
      const types: string[] = [];
      for await (const event of stream) types.push(event.type);
      const final = await stream.finalResponse();
      expect(types.at(-1)).toBe('response.completed');
      expect(final.output_text).toBe(LONG);
      const [prompt, completion] = filtersOf(final);
      expect(prompt?.content_filter_results.error).toBeUndefined();
      expect(completion?.content_filter_results.error).toMatchObject({ code: 'content_filter_error' });
    },
  );

  it('block-open: the text is released, the results carry the error', async () => {
    chat.setBehavior({ reply: LONG });
    mod.enqueue({}, {});
    mod.setBehavior({ status: 500 });
    const res = await rawStream('acme/block-open');
    const events = eventsOf(await res.text());
    const last = events.at(-1) as JsonObject;
    expect(last.type).toBe('response.completed');
    const [, completion] = filtersOf(last.response);
    expect(completion?.content_filter_results.error).toMatchObject({ code: 'content_filter_error' });
  });

  it('block-closed: the stream ends with an error event, nothing unchecked released', async () => {
    chat.setBehavior({ reply: LONG });
    mod.enqueue({}, {});
    mod.setBehavior({ status: 500 });
    const res = await rawStream('acme/block-closed');
    const events = eventsOf(await res.text());
    const last = events.at(-1) as JsonObject;
    expect(last.type).toBe('error');
    expect(last.code).toBe('content_filter_unavailable');
    const released = events
      .filter((e) => e.type === 'response.output_text.delta')
      .map((e) => e.delta)
      .join('');
    expect(released.length).toBeLessThan(LONG.length);
    expect(events.some((e) => e.type === 'response.completed')).toBe(false);
  });
});

it('a client that leaves while a window waits for its check ends the check and the upstream call', async () => {
  chat.setBehavior({ reply: LONG, delayBetweenChunksMs: 5 });
  // The prompt's check answers; the first window's check would take far longer than the test.
  mod.enqueue({});
  mod.setBehavior({ delayMs: 15_000 });
  const leave = new AbortController();
  const res = await rawStream('acme/block-slow', leave.signal);
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  await reader.read();
  const window = (await mod.waitForRequests(2, 5000))[1];
  leave.abort();
  await reader.cancel().catch(() => undefined);
  expect(await window?.settled).toBe('aborted');
  const upstream = await waitFor('the upstream call', () => chat.requests.at(-1));
  expect(await upstream.settled).toBe('aborted');
});
