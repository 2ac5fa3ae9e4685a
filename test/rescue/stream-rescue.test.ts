/**
 * Stream rescue end to end: a chat stream whose upstream dies (cut, error event) or stalls after content
 * went out is continued on the next `continuation: true` route, a vLLM-style upstream
 * (continue_final_message) or Anthropic (prefill), and the client gets one answer with one [DONE].
 * Real Gantry, real fake upstreams on 127.0.0.1, the official openai SDK and raw SSE.
 */
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { localReplyText } from '../../providers/local/reply.js';
import { countChatInputTokens, countCompletionTokens } from '../../providers/tokens.js';
import type { UsageRecord } from '../../src/usage/record.js';
import { type FakeAnthropic, startFakeAnthropic } from '../helpers/fake-anthropic.js';
import { type FakeBehavior, type FakeOpenAI, startFakeOpenAI } from '../helpers/fake-openai.js';
import { startGantry, type TestGantry } from '../helpers/gantry.js';
import { assertOpenAISchema } from '../helpers/openapi.js';
import { waitFor } from '../helpers/wait.js';

const FULL = 'The quick brown fox jumps over the lazy dog.';
/** How the first upstream streams FULL: frame 0 is its role chunk, frames 1-8 these pieces, 9 finish. */
const PIECES = ['The', ' quick', ' bro', 'wn fox', ' jumps', ' over', ' the lazy', ' dog.'];
/** The same text cut so that a piece ends in whitespace (Anthropic's prefill may not). */
const SPACED = ['The quick ', 'brown fox', ' jumps over ', 'the lazy dog.'];

let a: FakeOpenAI;
let v: FakeOpenAI;
let b: FakeOpenAI;
let claude: FakeAnthropic;
let gantry: TestGantry;
let client: OpenAI;
let jsonlPath: string;

beforeAll(async () => {
  [a, v, b, claude] = await Promise.all([
    startFakeOpenAI(),
    startFakeOpenAI(),
    startFakeOpenAI(),
    startFakeAnthropic(),
  ]);
  jsonlPath = join(mkdtempSync(join(tmpdir(), 'gantry-rescue-')), 'usage.jsonl');
  // Long upstream timers: what ends a stalled stream here is the model's stream_stall_ms.
  const patient = '{ connect_ms: 1000, first_byte_ms: 30000, idle_ms: 30000, total_ms: 60000 }';
  gantry = await startGantry(`
usage: { jsonl_path: ${jsonlPath}, flush_ms: 20 }
# Every test here breaks A on purpose, and a break counts against A's health: its circuit must not open
# between tests (the breakers under rescue are tested in rescue-routing.test.ts).
routing: { breaker: { consecutive_failures: 1000, min_requests: 1000 } }
providers:
  a: { kind: openai, base_url: ${a.url}, timeouts: ${patient} }
  v: { kind: openai, base_url: ${v.url}, timeouts: ${patient} }
  b: { kind: openai, base_url: ${b.url}, timeouts: ${patient} }
  claude: { kind: anthropic, base_url: ${claude.url}, timeouts: ${patient} }
  local: { kind: local }
models:
  - namespace: rescue/local
    name: A, continued on the built-in local model
    type: text
    routes: [{ provider: a, model: model-a }, { provider: local, model: local-chat, continuation: true }]
  - namespace: rescue/vllm
    name: A, continued on a vLLM
    type: text
    routes: [{ provider: a, model: model-a }, { provider: v, model: model-v, continuation: true }]
  - namespace: rescue/claude
    name: A, continued on Anthropic
    type: text
    routes: [{ provider: a, model: model-a }, { provider: claude, model: claude-up, continuation: true }]
  - namespace: rescue/chain
    name: A, then a vLLM that fails, then Anthropic
    type: text
    routes:
      - { provider: a, model: model-a }
      - { provider: v, model: model-v, continuation: true }
      - { provider: claude, model: claude-up, continuation: true }
  - namespace: rescue/claude-first
    name: A, then Anthropic, then a vLLM
    type: text
    routes:
      - { provider: a, model: model-a }
      - { provider: claude, model: claude-up, continuation: true }
      - { provider: v, model: model-v, continuation: true }
  - namespace: rescue/from-claude
    name: Anthropic, continued on a vLLM
    type: text
    routes: [{ provider: claude, model: claude-up }, { provider: v, model: model-v, continuation: true }]
  - namespace: rescue/none
    name: A, then B that cannot continue
    type: text
    routes: [{ provider: a, model: model-a }, { provider: b, model: model-b }]
  - namespace: rescue/stall
    name: A watched for stalls, continued on a vLLM
    type: text
    stream_stall_ms: 400
    routes: [{ provider: a, model: model-a }, { provider: v, model: model-v, continuation: true }]
  - namespace: rescue/redacted
    name: A, continued on a vLLM, under the redact safety policy
    type: text
    safety: redact
    routes: [{ provider: a, model: model-a }, { provider: v, model: model-v, continuation: true }]
  - namespace: stall/only
    name: A watched for stalls, nothing to continue on
    type: text
    stream_stall_ms: 400
    routes: [{ provider: a, model: model-a }, { provider: b, model: model-b }]
`);
  client = new OpenAI({ baseURL: gantry.baseURL, apiKey: gantry.key, maxRetries: 0 });
});
afterAll(async () => {
  await gantry?.close();
  await Promise.all([a?.close(), v?.close(), b?.close(), claude?.close()]);
});
beforeEach(() => {
  for (const fake of [a, v, b, claude]) fake.reset();
});

type Chunk = OpenAI.ChatCompletionChunk;
const QUESTION = 'Say the pangram.';
const MESSAGES = [{ role: 'user' as const, content: QUESTION }];

interface RawStream {
  body: string;
  /** The data of each event, in order. */
  data: string[];
}

async function rawStream(model: string, extra: Record<string, unknown> = {}): Promise<RawStream> {
  const res = await fetch(`${gantry.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${gantry.key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model, messages: MESSAGES, stream: true, ...extra }),
  });
  expect(res.status).toBe(200);
  const body = await res.text();
  const data = body
    .split('\n\n')
    .filter((frame) => frame.trim() !== '')
    .map((frame) => frame.replace(/^data: /, ''));
  return { body, data };
}

/** One uninterrupted answer: schema-valid chunks of one id/created/model, one [DONE], no error event. */
function expectOneAnswer(raw: RawStream, model: string): Chunk[] {
  expect(raw.data.filter((d) => d === '[DONE]')).toHaveLength(1);
  expect(raw.data.at(-1)).toBe('[DONE]');
  expect(raw.body).not.toContain('"error"');
  const chunks = raw.data.slice(0, -1).map((d) => JSON.parse(d) as Chunk);
  for (const chunk of chunks) assertOpenAISchema('CreateChatCompletionStreamResponse', chunk);
  const first = chunks[0] as Chunk;
  for (const chunk of chunks) {
    expect(chunk.id).toBe(first.id);
    expect(chunk.created).toBe(first.created);
    expect(chunk.model).toBe(model);
    for (const choice of chunk.choices) expect(choice.index).toBe(0);
  }
  // One role chunk (the first stream's), one finish_reason (the continuation's), at the end.
  expect(chunks.filter((c) => c.choices[0]?.delta.role !== undefined)).toHaveLength(1);
  const finishes = chunks.filter((c) => c.choices[0]?.finish_reason);
  expect(finishes).toHaveLength(1);
  expect(finishes[0]?.choices[0]?.finish_reason).toBe('stop');
  return chunks;
}

function textOf(chunks: Chunk[]): string {
  return chunks.map((c) => c.choices[0]?.delta.content ?? '').join('');
}

/** The SDK reads the whole stream without throwing, and the answer's text. */
async function sdkText(model: string): Promise<string> {
  const stream = await client.chat.completions.create({ model, messages: MESSAGES, stream: true });
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
  return text;
}

/** What the continuing fake was asked: the conversation, then the delivered text as the assistant's. */
function vllmContinuation(delivered: string, extra: Record<string, unknown> = {}) {
  return {
    model: 'model-v',
    stream: true,
    stream_options: { include_usage: true },
    messages: [...MESSAGES, { role: 'assistant', content: delivered }],
    continue_final_message: true,
    add_generation_prompt: false,
    ...extra,
  };
}

describe('a vLLM route continues a broken stream (continue_final_message)', () => {
  const cases: Array<{ name: string; first: FakeBehavior; delivered: string }> = [
    { name: 'cut after the first delta', first: { pieces: PIECES, closeAfterChunks: 2 }, delivered: 'The' },
    {
      name: 'cut in the middle of a word',
      first: { pieces: PIECES, closeAfterChunks: 4 },
      delivered: 'The quick bro',
    },
    {
      name: 'cut just before the finish chunk',
      first: { pieces: PIECES, closeAfterChunks: 9 },
      delivered: FULL,
    },
    {
      name: 'an error event after three deltas',
      first: { pieces: PIECES, errorEvent: { afterChunks: 4, message: 'CUDA out of memory' } },
      delivered: 'The quick bro',
    },
  ];

  for (const c of cases) {
    it(`${c.name}: one answer, first part + continuation exactly`, async () => {
      v.setBehavior({ reply: FULL });
      a.enqueue(c.first, c.first);
      const raw = await rawStream('rescue/vllm');
      const chunks = expectOneAnswer(raw, 'rescue/vllm');
      expect(textOf(chunks)).toBe(FULL);
      // The client did not ask for usage: the continuation's usage chunk is not passed on.
      expect(raw.body).not.toContain('"usage"');
      expect(v.requests).toHaveLength(1);
      expect(v.requests[0]?.body).toEqual(vllmContinuation(c.delivered));

      expect(await sdkText('rescue/vllm')).toBe(FULL);
      expect(v.requests[1]?.body).toEqual(vllmContinuation(c.delivered));
      expect(a.requests).toHaveLength(2);
    });
  }

  it("the SDK's stream helper assembles one completion", async () => {
    v.setBehavior({ reply: FULL });
    a.enqueue({ pieces: PIECES, closeAfterChunks: 4 });
    const runner = client.chat.completions.stream({
      model: 'rescue/vllm',
      messages: MESSAGES,
      stream_options: { include_usage: true },
    });
    const ids = new Set<string>();
    runner.on('chunk', (chunk) => ids.add(chunk.id));
    const completion = await runner.finalChatCompletion();
    expect(completion.choices).toHaveLength(1);
    expect(completion.choices[0]?.message.content).toBe(FULL);
    expect(completion.choices[0]?.finish_reason).toBe('stop');
    expect(completion.model).toBe('rescue/vllm');
    expect([...ids]).toEqual([completion.id]);
    expect(completion.usage?.completion_tokens).toBe(7);
  });

  it("the client's max_tokens is shared: the continuation gets what the delivered text left", async () => {
    v.setBehavior({ reply: FULL });
    a.enqueue({ pieces: PIECES, closeAfterChunks: 4 });
    const raw = await rawStream('rescue/vllm', { max_tokens: 50 });
    expect(textOf(expectOneAnswer(raw, 'rescue/vllm'))).toBe(FULL);
    const left = 50 - countCompletionTokens('The quick bro');
    expect(v.requests[0]?.body).toEqual(vllmContinuation('The quick bro', { max_tokens: left }));
  });

  it('usage: the record holds both calls (the delivered part counted, the continuation as reported)', async () => {
    v.setBehavior({ reply: FULL });
    a.enqueue({ pieces: PIECES, closeAfterChunks: 6 });
    const delivered = 'The quick brown fox jumps';
    const raw = await rawStream('rescue/vllm', { stream_options: { include_usage: true } });
    const chunks = expectOneAnswer(raw, 'rescue/vllm');
    expect(textOf(chunks)).toBe(FULL);
    const usage = chunks.at(-1)?.usage;
    if (!usage) throw new Error('the client asked for usage: the last chunk carries it');
    expect(chunks.at(-1)?.choices).toEqual([]);
    // The continuation's own usage, as the fake counts (words): question and prefill, then the rest.
    expect(usage.prompt_tokens).toBe(3 + 5);
    expect(usage.completion_tokens).toBe(4);

    const input = countChatInputTokens(MESSAGES) + usage.prompt_tokens;
    const output = countCompletionTokens(delivered) + usage.completion_tokens;
    const record = await waitFor('the rescued call in the JSONL sink', async () => {
      await gantry.gantry.services.usage.flush();
      let text = '';
      try {
        text = readFileSync(jsonlPath, 'utf8');
      } catch {
        return undefined;
      }
      return text
        .split('\n')
        .filter((l) => l !== '')
        .map((l) => JSON.parse(l) as UsageRecord)
        .find((r) => r.model === 'rescue/vllm' && r.input_tokens === input && r.output_tokens === output);
    });
    expect(record).toMatchObject({ provider: 'v', outcome: 'ok', status: 200, error_id: null, stream: true });
    // Neither the delivered text nor the question is in the record.
    expect(JSON.stringify(record)).not.toContain('quick');

    // The rescue is a fallback of the provider that broke, in the metrics.
    const metrics = await (await fetch(`${gantry.origin}/metrics`)).text();
    const fallbacks = /^gantry_fallbacks_total\{provider="a",model="rescue\/vllm"\} (\d+)$/m.exec(metrics);
    expect(Number(fallbacks?.[1])).toBeGreaterThan(0);
  });
});

describe('usage of a continuation that breaks for good', () => {
  it('the error event of the continuation; the record counts both calls as broken streams', async () => {
    // A delivers "The quick bro", v then "wn fox" and is cut; nothing is left to continue on.
    v.setBehavior({ reply: FULL, closeAfterChunks: 3 });
    a.enqueue({ pieces: PIECES, closeAfterChunks: 4 });
    const raw = await rawStream('rescue/vllm');
    expect(raw.body).not.toContain('[DONE]');
    expect(raw.data.filter((d) => d.includes('"error"'))).toHaveLength(1);
    expect(raw.data.at(-1)).toContain('UPSTREAM_ERROR');
    const text = textOf(raw.data.slice(0, -1).map((d) => JSON.parse(d) as Chunk));
    expect(text).toBe('The quick brown fox');

    const prompt = countChatInputTokens(MESSAGES);
    const prefill = countCompletionTokens('The quick bro');
    const record = await waitFor('the broken continuation in the JSONL sink', async () => {
      await gantry.gantry.services.usage.flush();
      let lines = '';
      try {
        lines = readFileSync(jsonlPath, 'utf8');
      } catch {
        return undefined;
      }
      return lines
        .split('\n')
        .filter((l) => l !== '')
        .map((l) => JSON.parse(l) as UsageRecord)
        .find((r) => r.model === 'rescue/vllm' && r.outcome === 'error' && r.provider === 'v');
    });
    expect(record).toMatchObject({
      status: 200,
      error_id: 'UPSTREAM_ERROR',
      // Each call's prompt (the second's with its prefill), each call's delivered text.
      input_tokens: prompt + prompt + prefill,
      output_tokens: prefill + countCompletionTokens('wn fox'),
    });
  });
});

describe('an Anthropic route continues a broken stream (assistant prefill)', () => {
  it('a cut mid-word: the prefill is the delivered text, the answer goes on from it', async () => {
    claude.setBehavior({ reply: FULL });
    a.enqueue({ pieces: PIECES, closeAfterChunks: 4 });
    const raw = await rawStream('rescue/claude');
    expect(textOf(expectOneAnswer(raw, 'rescue/claude'))).toBe(FULL);
    expect(claude.requests).toHaveLength(1);
    // Exactly the Messages request: the conversation and the prefill, nothing of vLLM's parameters.
    expect(claude.requests[0]?.body).toEqual({
      model: 'claude-up',
      max_tokens: 4096,
      stream: true,
      messages: [
        { role: 'user', content: QUESTION },
        { role: 'assistant', content: 'The quick bro' },
      ],
    });
  });

  it('delivered text ending in whitespace: the prefill drops it, and the repeated space is not sent twice', async () => {
    claude.setBehavior({ reply: FULL });
    a.enqueue({ pieces: SPACED, closeAfterChunks: 2 }, { pieces: SPACED, closeAfterChunks: 2 });
    const raw = await rawStream('rescue/claude');
    expect(textOf(expectOneAnswer(raw, 'rescue/claude'))).toBe(FULL);
    // Anthropic refuses a prefill with trailing whitespace (the fake does too).
    const messages = claude.requests[0]?.body?.messages as unknown[];
    expect(messages.at(-1)).toEqual({ role: 'assistant', content: 'The quick' });

    expect(await sdkText('rescue/claude')).toBe(FULL);
  });
});

describe('the built-in local model continues a broken stream', () => {
  it('the local reply, begun by A and finished by the local model', async () => {
    const whole = localReplyText(MESSAGES);
    const cut = whole.indexOf('determin') + 'deter'.length;
    a.enqueue({ pieces: [whole.slice(0, 4), whole.slice(4, cut), whole.slice(cut)], closeAfterChunks: 3 });
    const raw = await rawStream('rescue/local');
    expect(textOf(expectOneAnswer(raw, 'rescue/local'))).toBe(whole);

    a.enqueue({ pieces: [whole.slice(0, 4), whole.slice(4, cut), whole.slice(cut)], closeAfterChunks: 3 });
    expect(await sdkText('rescue/local')).toBe(whole);
  });
});

describe('a broken Anthropic stream', () => {
  it('an overloaded_error event mid-stream: continued on a vLLM, under the first stream’s id', async () => {
    v.setBehavior({ reply: FULL });
    // message_start, content_block_start, ping, then "The" and " quick": then the error event.
    claude.enqueue({ reply: FULL, errorEvent: { afterEvents: 5 } });
    const raw = await rawStream('rescue/from-claude');
    const chunks = expectOneAnswer(raw, 'rescue/from-claude');
    expect(textOf(chunks)).toBe(FULL);
    expect(chunks[0]?.id).toMatch(/^chatcmpl-/);
    // The client set no output limit: the continuation gets none either (only Anthropic's was filled in).
    expect(v.requests[0]?.body).toEqual(vllmContinuation('The quick'));
  });
});

describe('when the stream cannot be continued', () => {
  it('no continuation route: one error event, as without rescue', async () => {
    a.enqueue({ pieces: PIECES, closeAfterChunks: 4 });
    const raw = await rawStream('rescue/none');
    expect(raw.body).not.toContain('[DONE]');
    const last = JSON.parse(raw.data.at(-1) ?? '{}') as { error?: { error_id?: string } };
    expect(last.error?.error_id).toBe('UPSTREAM_ERROR');
    expect(raw.data.filter((d) => d.includes('"error"'))).toHaveLength(1);
    const text = textOf(raw.data.slice(0, -1).map((d) => JSON.parse(d) as Chunk));
    expect(text).toBe('The quick bro');
    expect(b.requests).toHaveLength(0);
  });

  it('a tool call in flight is not continued', async () => {
    a.enqueue({ toolCall: { name: 'lookup', arguments: '{"q":"fox"}' }, closeAfterChunks: 2 });
    const raw = await rawStream('rescue/vllm', {
      tools: [{ type: 'function', function: { name: 'lookup', parameters: { type: 'object' } } }],
    });
    expect(raw.body).not.toContain('[DONE]');
    expect(raw.data.at(-1)).toContain('UPSTREAM_ERROR');
    expect(v.requests).toHaveLength(0);
  });

  it('n > 1 is not continued', async () => {
    a.enqueue({ pieces: PIECES, closeAfterChunks: 4 });
    const raw = await rawStream('rescue/vllm', { n: 2 });
    expect(raw.data.at(-1)).toContain('UPSTREAM_ERROR');
    expect(v.requests).toHaveLength(0);
  });

  it('every continuation fails before its first event: the original error, once', async () => {
    v.setBehavior({ status: 500 });
    claude.setBehavior({ error: { status: 529 } });
    a.enqueue({ pieces: PIECES, closeAfterChunks: 4 });
    const raw = await rawStream('rescue/chain');
    expect(raw.body).not.toContain('[DONE]');
    expect(raw.data.filter((d) => d.includes('"error"'))).toHaveLength(1);
    expect(raw.data.at(-1)).toContain('UPSTREAM_ERROR');
    expect(v.requests).toHaveLength(1);
    expect(claude.requests).toHaveLength(1);
  });
});

describe('chained and stalled', () => {
  it('a continuation that fails before content moves on to the next continuation route', async () => {
    v.setBehavior({ status: 503 });
    claude.setBehavior({ reply: FULL });
    a.enqueue({ pieces: PIECES, closeAfterChunks: 5 });
    const raw = await rawStream('rescue/chain');
    expect(textOf(expectOneAnswer(raw, 'rescue/chain'))).toBe(FULL);
    expect(v.requests).toHaveLength(1);
    const messages = claude.requests[0]?.body?.messages as unknown[];
    expect(messages.at(-1)).toEqual({ role: 'assistant', content: 'The quick brown fox' });
  });

  it('a continuation route whose adapter refuses the request (seed on Anthropic) is passed over', async () => {
    v.setBehavior({ reply: FULL });
    a.enqueue({ pieces: PIECES, closeAfterChunks: 4 });
    const raw = await rawStream('rescue/claude-first', { seed: 7 });
    expect(textOf(expectOneAnswer(raw, 'rescue/claude-first'))).toBe(FULL);
    expect(claude.requests).toHaveLength(0);
    expect(v.requests[0]?.body).toEqual(vllmContinuation('The quick bro', { seed: 7 }));
  });

  it('a continuation that itself breaks after content is continued again', async () => {
    // v delivers " jumps over" of the rest, then is cut; Anthropic finishes from there.
    v.setBehavior({ reply: FULL, closeAfterChunks: 3 });
    claude.setBehavior({ reply: FULL });
    a.enqueue({ pieces: PIECES, closeAfterChunks: 5 });
    const raw = await rawStream('rescue/chain');
    expect(textOf(expectOneAnswer(raw, 'rescue/chain'))).toBe(FULL);
    const messages = claude.requests[0]?.body?.messages as unknown[];
    expect(messages.at(-1)).toEqual({ role: 'assistant', content: 'The quick brown fox jumps over' });
  });

  it('an upstream that goes silent for stream_stall_ms is stopped and continued', async () => {
    v.setBehavior({ reply: FULL });
    a.enqueue({ pieces: PIECES, stallAfterChunks: 4 });
    const started = Date.now();
    const raw = await rawStream('rescue/stall');
    expect(textOf(expectOneAnswer(raw, 'rescue/stall'))).toBe(FULL);
    // Well before the provider's own 30 s idle timeout.
    expect(Date.now() - started).toBeLessThan(5000);
    expect(v.requests[0]?.body).toEqual(vllmContinuation('The quick bro'));
    // The stalled call was stopped, not left open.
    await a.requests[0]?.settled;
    expect(a.requests[0]?.aborted).toBe(true);
  });

  it('stream_stall_ms without a continuation route: the stalled call is stopped, one timeout event', async () => {
    a.enqueue({ pieces: PIECES, stallAfterChunks: 4 });
    const started = Date.now();
    const raw = await rawStream('stall/only');
    expect(Date.now() - started).toBeLessThan(5000);
    expect(raw.body).not.toContain('[DONE]');
    expect(raw.data.filter((d) => d.includes('"error"'))).toHaveLength(1);
    const last = JSON.parse(raw.data.at(-1) ?? '{}') as { error?: { error_id?: string } };
    expect(last.error?.error_id).toBe('UPSTREAM_TIMEOUT');
    expect(textOf(raw.data.slice(0, -1).map((d) => JSON.parse(d) as Chunk))).toBe('The quick bro');
    expect(b.requests).toHaveLength(0);
    await a.requests[0]?.settled;
    expect(a.requests[0]?.aborted).toBe(true);
  });

  it('a client that leaves during the continuation stops the continuing upstream too', async () => {
    v.setBehavior({ reply: FULL, delayBetweenChunksMs: 150 });
    a.enqueue({ pieces: PIECES, closeAfterChunks: 2 });
    const stream = await client.chat.completions.create({
      model: 'rescue/vllm',
      messages: MESSAGES,
      stream: true,
    });
    let text = '';
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? '';
      // The first piece of the continuation has arrived: leave.
      if (text.length > 'The'.length) break;
    }
    expect(text).toBe('The quick');
    const [continuing] = await v.waitForRequests(1);
    await continuing?.settled;
    expect(continuing?.aborted).toBe(true);
  });
});

describe('rescue under a safety policy', () => {
  it('the continuation is asked with the masked prompt, and the client gets one annotated answer', async () => {
    v.setBehavior({ reply: FULL });
    a.enqueue({ pieces: PIECES, closeAfterChunks: 4 });
    const question = 'Say the pangram to jane.doe@example.com.';
    const res = await fetch(`${gantry.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${gantry.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'rescue/redacted',
        messages: [{ role: 'user', content: question }],
        stream: true,
      }),
    });
    expect(res.status).toBe(200);
    const body = await res.text();
    const data = body
      .split('\n\n')
      .filter((frame) => frame.trim() !== '')
      .map((frame) => frame.replace(/^data: /, ''));
    const chunks = expectOneAnswer({ body, data }, 'rescue/redacted');
    expect(textOf(chunks)).toBe(FULL);
    // Azure's fields: the prompt's results first, completion results after the text they cover.
    expect(chunks[0]?.choices).toEqual([]);
    expect(JSON.stringify(chunks[0])).toContain('prompt_filter_results');
    expect(chunks.some((c) => JSON.stringify(c).includes('content_filter_offsets'))).toBe(true);
    // Neither upstream saw the address: the first call and the continuation carry the placeholder.
    const masked = [{ role: 'user', content: 'Say the pangram to [EMAIL].' }];
    expect(a.requests[0]?.body?.messages).toEqual(masked);
    expect(v.requests[0]?.body).toEqual({
      ...vllmContinuation('The quick bro'),
      messages: [...masked, { role: 'assistant', content: 'The quick bro' }],
    });
    expect(JSON.stringify([a.requests, v.requests])).not.toContain('jane.doe');
  });
});
