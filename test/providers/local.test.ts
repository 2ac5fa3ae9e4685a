import { get_encoding } from 'tiktoken';
import { afterAll, describe, expect, it } from 'vitest';
import {
  LOCAL_EMBEDDING_DIMENSIONS,
  LOCAL_REPLY_PREFIX,
  LOCAL_REPLY_SUFFIX,
  LocalProvider,
  localReplyText,
} from '../../providers/local.js';
import { ProviderRequestError } from '../../providers/request-error.js';
import type { CallContext, InferenceProvider, JsonObject, ProviderResult } from '../../providers/types.js';
import { UpstreamError } from '../../providers/upstream-error.js';
import { toGantryError } from '../../src/error-handler.js';
import { assertOpenAISchema } from '../helpers/openapi.js';

const enc = get_encoding('o200k_base');
afterAll(() => enc.free());

const tokens = (text: string): number => enc.encode_ordinary(text).length;

const provider = new LocalProvider({ name: 'local' });

function ctx(signal: AbortSignal = new AbortController().signal): CallContext {
  return { signal, requestId: 'req-test' };
}

interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

interface Completion {
  id: string;
  object: string;
  model: string;
  created: number;
  choices: Array<{
    index: number;
    message: { role: string; content: string; refusal: null };
    logprobs: null;
    finish_reason: string;
  }>;
  usage: Usage;
}

interface Chunk {
  id: string;
  object: string;
  model: string;
  created: number;
  choices: Array<{
    index: number;
    delta: { role?: string; content?: string };
    finish_reason: string | null;
  }>;
  usage?: Usage | null;
}

interface Embeddings {
  object: string;
  model: string;
  data: Array<{ object: string; index: number; embedding: number[] | string }>;
  usage: { prompt_tokens: number; total_tokens: number };
}

function json(result: ProviderResult): JsonObject {
  if (result.kind !== 'json') throw new Error(`expected a JSON result, got ${result.kind}`);
  return result.body;
}

async function complete(body: JsonObject): Promise<Completion> {
  const out = json(await provider.chat({ model: 'local-chat', ...body }, ctx()));
  assertOpenAISchema('CreateChatCompletionResponse', out);
  return out as unknown as Completion;
}

async function streamChunks(body: JsonObject, p: LocalProvider = provider): Promise<Chunk[]> {
  const result = await p.chat({ model: 'local-chat', ...body, stream: true }, ctx());
  if (result.kind !== 'stream') throw new Error('expected a stream');
  const chunks: Chunk[] = [];
  for await (const event of result.events) {
    expect(event.event).toBeUndefined();
    expect(event.data).not.toBe('[DONE]');
    const chunk: unknown = JSON.parse(event.data);
    assertOpenAISchema('CreateChatCompletionStreamResponse', chunk);
    chunks.push(chunk as Chunk);
  }
  return chunks;
}

async function embed(body: JsonObject, p: LocalProvider = provider): Promise<Embeddings> {
  const out = json(await p.embeddings({ model: 'local-embed', ...body }, ctx())) as unknown as Embeddings;
  // The spec types `embedding` as float[] only; base64 answers are checked once decoded.
  assertOpenAISchema('CreateEmbeddingResponse', {
    ...out,
    data: out.data.map((d) => ({ ...d, embedding: vectorOf(d.embedding) })),
  });
  return out;
}

function vectorOf(embedding: number[] | string): number[] {
  if (typeof embedding !== 'string') return embedding;
  const buf = Buffer.from(embedding, 'base64');
  return Array.from({ length: buf.length / 4 }, (_, i) => buf.readFloatLE(i * 4));
}

async function vectors(input: JsonObject['input'], extra: JsonObject = {}): Promise<number[][]> {
  const out = await embed({ input, ...extra });
  return out.data.map((d) => vectorOf(d.embedding));
}

function dot(a: number[], b: number[]): number {
  return a.reduce((sum, v, i) => sum + v * (b[i] ?? 0), 0);
}

const norm = (a: number[]): number => Math.sqrt(dot(a, a));
const cosine = (a: number[], b: number[]): number => dot(a, b) / (norm(a) * norm(b));

async function expectInvalid(call: Promise<unknown>, param: string): Promise<void> {
  const err: unknown = await call.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ProviderRequestError);
  const mapped = toGantryError(err as ProviderRequestError);
  expect(mapped.errorId).toBe('INVALID_PARAMETER');
  expect(mapped.param).toBe(param);
  expect(mapped.status).toBe(400);
}

const user = (content: unknown) => [{ role: 'user', content }];

describe('LocalProvider', () => {
  it('is a local provider with no native Responses and nothing to forward', async () => {
    const p = new LocalProvider({ name: 'builtin' });
    expect(p.kind).toBe('local');
    expect(p.name).toBe('builtin');
    // Gantry bridges Responses onto chat and forwards nothing for local providers.
    const contract: InferenceProvider = p;
    expect(contract.responses).toBeUndefined();
    expect(contract.forward).toBeUndefined();
    await expect(p.close()).resolves.toBeUndefined();
  });
});

describe('LocalProvider.chat', () => {
  it('echoes the last user message in a chat.completion', async () => {
    const out = await complete({
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'first question' },
        { role: 'assistant', content: 'an answer' },
        { role: 'user', content: 'Hello there' },
      ],
    });
    expect(out.object).toBe('chat.completion');
    expect(out.id).toMatch(/^chatcmpl-\w+$/);
    expect(out.model).toBe('local-chat');
    expect(Number.isInteger(out.created)).toBe(true);
    expect(out.choices).toHaveLength(1);
    const [choice] = out.choices;
    const expected = `You said: Hello there\n${LOCAL_REPLY_SUFFIX}`;
    expect(choice).toEqual({
      index: 0,
      message: { role: 'assistant', content: expected, refusal: null, annotations: [] },
      logprobs: null,
      finish_reason: 'stop',
    });
    expect(out.usage.completion_tokens).toBe(tokens(expected));
    expect(out.usage.total_tokens).toBe(out.usage.prompt_tokens + out.usage.completion_tokens);
  });

  it('joins the text parts of array content and counts its images', async () => {
    const out = await complete({
      messages: user([
        { type: 'text', text: 'one' },
        { type: 'image_url', image_url: { url: 'https://example.com/a.png' } },
        { type: 'text', text: 'two' },
      ]),
    });
    expect(out.choices[0]?.message.content).toBe(
      `${LOCAL_REPLY_PREFIX}one\ntwo\nImages received: 1\n${LOCAL_REPLY_SUFFIX}`,
    );
    expect(localReplyText(user('x'))).toBe(`You said: x\n${LOCAL_REPLY_SUFFIX}`);
    expect(localReplyText([{ role: 'system', content: 'only system' }])).toBe(
      `You said: \n${LOCAL_REPLY_SUFFIX}`,
    );
  });

  it('is deterministic apart from id and created', async () => {
    const body = { messages: user('same question'), temperature: 2, seed: 1 };
    const a = await complete(body);
    const b = await complete(body);
    expect(a.choices).toEqual(b.choices);
    expect(a.usage).toEqual(b.usage);
    expect(a.id).not.toBe(b.id);
  });

  it("counts prompt tokens with OpenAI's per-message rule", async () => {
    const out = await complete({
      messages: [
        { role: 'system', content: 'You are terse.' },
        { role: 'user', content: 'Count me', name: 'alice' },
      ],
    });
    const expected =
      3 +
      (3 + tokens('system') + tokens('You are terse.')) +
      (3 + tokens('user') + tokens('Count me') + 1 + tokens('alice'));
    expect(out.usage.prompt_tokens).toBe(expected);
  });

  it('stops after max_tokens with finish_reason length and that many tokens', async () => {
    const messages = user('Please write a long and winding answer about tokenizers');
    const full = localReplyText(messages);
    for (const max of [1, 4, 9]) {
      const out = await complete({ messages, max_tokens: max });
      const content = out.choices[0]?.message.content ?? '';
      expect(out.choices[0]?.finish_reason).toBe('length');
      expect(out.usage.completion_tokens).toBe(max);
      expect(tokens(content)).toBe(max);
      expect(full.startsWith(content)).toBe(true);
      expect(content).toBe(new TextDecoder().decode(enc.decode(enc.encode_ordinary(full).slice(0, max))));
    }
  });

  it('prefers max_completion_tokens and finishes with stop when the limit is not reached', async () => {
    const messages = user('hi');
    const out = await complete({ messages, max_tokens: 100, max_completion_tokens: 3 });
    expect(out.choices[0]?.finish_reason).toBe('length');
    expect(out.usage.completion_tokens).toBe(3);

    const full = localReplyText(messages);
    const roomy = await complete({ messages, max_tokens: tokens(full) });
    expect(roomy.choices[0]?.finish_reason).toBe('stop');
    expect(roomy.choices[0]?.message.content).toBe(full);
  });

  it('never splits a multi-byte character when max_tokens cuts inside it', async () => {
    const messages = user('😀😀😀 数据');
    const full = localReplyText(messages);
    for (let max = 1; max < tokens(full); max++) {
      const content = (await complete({ messages, max_tokens: max })).choices[0]?.message.content ?? '';
      expect(content).not.toContain('\uFFFD');
      expect(full.startsWith(content)).toBe(true);
    }
  });

  it('cuts before the first stop sequence with finish_reason stop', async () => {
    const messages = user('alpha beta gamma');
    const one = await complete({ messages, stop: 'gamma' });
    expect(one.choices[0]?.message.content).toBe('You said: alpha beta ');
    expect(one.choices[0]?.finish_reason).toBe('stop');
    // Generation ran until the stop sequence was complete, as a model's would.
    expect(one.usage.completion_tokens).toBe(tokens('You said: alpha beta gamma'));

    const many = await complete({ messages, stop: ['deterministic', 'beta', 'zzz'] });
    expect(many.choices[0]?.message.content).toBe('You said: alpha ');

    const absent = await complete({ messages, stop: ['zzz'] });
    expect(absent.choices[0]?.message.content).toBe(localReplyText(messages));
    expect(absent.choices[0]?.finish_reason).toBe('stop');
  });

  it('reports length when max_tokens runs out before the stop sequence', async () => {
    const out = await complete({ messages: user('alpha beta gamma'), stop: 'built-in', max_tokens: 4 });
    expect(out.choices[0]?.finish_reason).toBe('length');
    expect(out.usage.completion_tokens).toBe(4);
  });

  it('reports length when the output cap runs out long before a stop sequence', async () => {
    const capped = new LocalProvider({ name: 'local', maxOutputTokens: 5 });
    const body = { model: 'local-chat', messages: user(`${'x'.repeat(50_000)} END`), stop: 'END' };
    const out = json(await capped.chat(body, ctx())) as unknown as Completion;
    expect(out.choices[0]?.finish_reason).toBe('length');
    expect(out.usage.completion_tokens).toBe(5);
    expect(out.choices[0]?.message.content.startsWith(`${LOCAL_REPLY_PREFIX}xxx`)).toBe(true);
  });

  it('refuses a context_length or max_output_tokens that is not a positive integer', () => {
    expect(() => new LocalProvider({ name: 'bad', contextLength: 0 })).toThrow(/context_length/);
    expect(() => new LocalProvider({ name: 'bad', maxOutputTokens: 1.5 })).toThrow(/max_output_tokens/);
  });

  it('returns n identical choices and bills every one', async () => {
    const single = await complete({ messages: user('n test') });
    const out = await complete({ messages: user('n test'), n: 3 });
    expect(out.choices.map((c) => c.index)).toEqual([0, 1, 2]);
    for (const choice of out.choices) expect(choice.message).toEqual(single.choices[0]?.message);
    expect(out.usage.prompt_tokens).toBe(single.usage.prompt_tokens);
    expect(out.usage.completion_tokens).toBe(3 * single.usage.completion_tokens);
  });

  it('rejects at once when the signal is already aborted', async () => {
    const aborted = AbortSignal.abort();
    await expect(provider.chat({ model: 'm', messages: user('x') }, ctx(aborted))).rejects.toMatchObject({
      name: 'UpstreamError',
      failure: 'aborted',
    });
  });
});

describe('LocalProvider.chat streaming', () => {
  it('streams a role chunk, content deltas, then a finish chunk, with no usage field', async () => {
    const messages = user('stream me please');
    const expected = (await complete({ messages })).choices[0]?.message.content;
    const chunks = await streamChunks({ messages });

    expect(chunks.length).toBeGreaterThanOrEqual(5);
    const [first] = chunks;
    const last = chunks.at(-1);
    expect(first?.choices).toEqual([
      {
        index: 0,
        delta: { role: 'assistant', content: '', refusal: null },
        logprobs: null,
        finish_reason: null,
      },
    ]);
    expect(last?.choices).toEqual([{ index: 0, delta: {}, logprobs: null, finish_reason: 'stop' }]);
    const middle = chunks.slice(1, -1);
    expect(middle.length).toBeGreaterThan(1);
    for (const chunk of middle) {
      expect(chunk.choices).toHaveLength(1);
      expect(chunk.choices[0]?.finish_reason).toBeNull();
      expect(Object.keys(chunk.choices[0]?.delta ?? {})).toEqual(['content']);
      expect(chunk.choices[0]?.delta.content).not.toBe('');
    }
    expect(middle.map((c) => c.choices[0]?.delta.content).join('')).toBe(expected);

    for (const chunk of chunks) {
      expect(chunk.object).toBe('chat.completion.chunk');
      expect(chunk.id).toBe(first?.id);
      expect(chunk.created).toBe(first?.created);
      expect(chunk.model).toBe('local-chat');
      expect('usage' in chunk).toBe(false);
    }
  });

  it('ends with a usage chunk and null usage elsewhere when include_usage is set', async () => {
    const messages = user('usage please');
    const reference = await complete({ messages });
    const chunks = await streamChunks({ messages, stream_options: { include_usage: true } });
    const last = chunks.at(-1);
    expect(last?.choices).toEqual([]);
    expect(last?.usage).toEqual(reference.usage);
    for (const chunk of chunks.slice(0, -1)) expect(chunk.usage).toBeNull();
    expect(chunks.at(-2)?.choices[0]?.finish_reason).toBe('stop');

    const off = await streamChunks({ messages, stream_options: { include_usage: false } });
    expect(off.every((c) => !('usage' in c))).toBe(true);
    expect(off.at(-1)?.choices[0]?.finish_reason).toBe('stop');
  });

  it('streams max_tokens truncation and every choice of n', async () => {
    const chunks = await streamChunks({
      messages: user('two choices'),
      n: 2,
      max_tokens: 5,
      stream_options: { include_usage: true },
    });
    for (const index of [0, 1]) {
      const mine = chunks.filter((c) => c.choices[0]?.index === index);
      expect(mine[0]?.choices[0]?.delta.role).toBe('assistant');
      expect(mine.at(-1)?.choices[0]?.finish_reason).toBe('length');
      const text = mine.map((c) => c.choices[0]?.delta.content ?? '').join('');
      expect(tokens(text)).toBe(5);
    }
    expect(chunks.at(-1)?.usage?.completion_tokens).toBe(10);
  });

  it('yields to the event loop before every chunk', async () => {
    const result = await provider.chat({ model: 'm', messages: user('tick tock'), stream: true }, ctx());
    if (result.kind !== 'stream') throw new Error('expected a stream');
    const it = result.events[Symbol.asyncIterator]();
    let chunks = 0;
    for (;;) {
      // Resolving through microtasks alone would beat this macrotask: a real async stream does not.
      let ranFirst = false;
      setImmediate(() => {
        ranFirst = true;
      });
      const next = await it.next();
      if (next.done) break;
      expect(ranFirst).toBe(true);
      chunks++;
    }
    expect(chunks).toBeGreaterThan(3);
  });

  it('stops the stream at once when the signal is aborted', async () => {
    const slow = new LocalProvider({ name: 'slow', chunkDelayMs: 60_000 });
    const controller = new AbortController();
    const result = await slow.chat(
      { model: 'm', messages: user('abort me'), stream: true },
      ctx(controller.signal),
    );
    if (result.kind !== 'stream') throw new Error('expected a stream');
    const it = result.events[Symbol.asyncIterator]();
    const started = Date.now();
    const next = it.next();
    setTimeout(() => controller.abort(), 20);
    const err: unknown = await next.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(err).toBeInstanceOf(UpstreamError);
    expect((err as UpstreamError).failure).toBe('aborted');
    expect((err as UpstreamError).retryable).toBe(false);
    await expect(it.next()).resolves.toEqual({ done: true, value: undefined });
  });

  it('stops mid-stream after an abort and reports a timeout reason as a timeout', async () => {
    const paced = new LocalProvider({ name: 'paced', chunkDelayMs: 1 });
    const controller = new AbortController();
    const result = await paced.chat(
      { model: 'm', messages: user('abort later'), stream: true },
      ctx(controller.signal),
    );
    if (result.kind !== 'stream') throw new Error('expected a stream');
    let received = 0;
    const err: unknown = await (async () => {
      for await (const _ of result.events) {
        received++;
        if (received === 2) controller.abort(new DOMException('total timeout', 'TimeoutError'));
      }
    })().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(received).toBe(2);
    expect((err as UpstreamError).failure).toBe('timeout');
  });
});

describe('LocalProvider.embeddings', () => {
  it('returns unit vectors of the native dimension, aligned with the inputs', async () => {
    const inputs = ['first text', 'second text', 'third, unrelated'];
    const out = await embed({ input: inputs });
    expect(out.object).toBe('list');
    expect(out.model).toBe('local-embed');
    expect(out.data.map((d) => [d.object, d.index])).toEqual([
      ['embedding', 0],
      ['embedding', 1],
      ['embedding', 2],
    ]);
    for (const [i, d] of out.data.entries()) {
      const v = vectorOf(d.embedding);
      expect(v).toHaveLength(LOCAL_EMBEDDING_DIMENSIONS);
      expect(norm(v)).toBeCloseTo(1, 5);
      expect(v).toEqual((await vectors(inputs[i]))[0]);
    }
    const expectedTokens = inputs.reduce((n, s) => n + tokens(s), 0);
    expect(out.usage).toEqual({ prompt_tokens: expectedTokens, total_tokens: expectedTokens });
  });

  it('gives identical inputs identical vectors and similar texts closer vectors', async () => {
    const [a, same, near, far] = await vectors([
      'The quick brown fox jumps over the lazy dog',
      'The quick brown fox jumps over the lazy dog',
      'A quick brown fox jumped over a lazy dog',
      'Quarterly revenue grew in the semiconductor sector',
    ]);
    if (!a || !same || !near || !far) throw new Error('missing vectors');
    expect(same).toEqual(a);
    expect(cosine(a, near)).toBeGreaterThan(0.5);
    expect(cosine(a, near)).toBeGreaterThan(cosine(a, far) + 0.3);

    const [stem, inflected, other] = await vectors(['embedding', 'embeddings', 'tomato']);
    if (!stem || !inflected || !other) throw new Error('missing vectors');
    expect(cosine(stem, inflected)).toBeGreaterThan(cosine(stem, other) + 0.2);
  });

  it('embeds token arrays like the text they encode', async () => {
    const text = 'tokens in, vectors out';
    const ids = Array.from(enc.encode_ordinary(text));
    const [fromText] = await vectors(text);
    const single = await embed({ input: ids });
    expect(vectorOf(single.data[0]?.embedding ?? '')).toEqual(fromText);
    expect(single.usage.prompt_tokens).toBe(ids.length);

    const many = await embed({ input: [ids, ids.slice(0, 2)] });
    expect(many.data).toHaveLength(2);
    expect(vectorOf(many.data[0]?.embedding ?? '')).toEqual(fromText);
    expect(many.usage.prompt_tokens).toBe(ids.length + 2);
  });

  it('truncates to dimensions and re-normalises', async () => {
    const [full] = await vectors('matryoshka dolls nest');
    const [short] = await vectors('matryoshka dolls nest', { dimensions: 32 });
    if (!full || !short) throw new Error('missing vectors');
    expect(short).toHaveLength(32);
    expect(norm(short)).toBeCloseTo(1, 5);
    const prefix = full.slice(0, 32);
    const scale = norm(prefix);
    short.forEach((v, i) => {
      expect(v).toBeCloseTo((prefix[i] ?? 0) / scale, 6);
    });
    const [tiny] = await vectors('x', { dimensions: 1 });
    expect(Math.abs(tiny?.[0] ?? 0)).toBeCloseTo(1, 6);
    expect(await vectors('native', { dimensions: LOCAL_EMBEDDING_DIMENSIONS })).toEqual(
      await vectors('native'),
    );
  });

  it('honours a configured native dimension', async () => {
    const small = new LocalProvider({ name: 'small', embeddingDimensions: 64 });
    const out = await embed({ input: 'configured' }, small);
    expect(vectorOf(out.data[0]?.embedding ?? '')).toHaveLength(64);
    await expectInvalid(small.embeddings({ model: 'e', input: 'x', dimensions: 65 }, ctx()), 'dimensions');
  });

  it('encodes base64 as little-endian float32 equal to the float answer', async () => {
    const input = ['base64 one', 'base64 two'];
    const floats = await embed({ input, encoding_format: 'float' });
    const packed = await embed({ input, encoding_format: 'base64', dimensions: 100 });
    const packedFull = await embed({ input, encoding_format: 'base64' });
    for (const [i, d] of packedFull.data.entries()) {
      expect(typeof d.embedding).toBe('string');
      const expected = floats.data[i]?.embedding as number[];
      const decoded = vectorOf(d.embedding);
      expect(decoded).toHaveLength(expected.length);
      decoded.forEach((v, j) => {
        expect(v).toBeCloseTo(expected[j] ?? Number.NaN, 7);
      });
      expect(decoded).toEqual(expected);
    }
    expect(vectorOf(packed.data[1]?.embedding ?? '')).toHaveLength(100);
  });

  it('rejects empty inputs, bad token ids and oversized dimensions', async () => {
    const call = (body: JsonObject) => provider.embeddings({ model: 'local-embed', ...body }, ctx());
    for (const input of [
      '',
      [],
      [''],
      ['ok', ''],
      [[]],
      [1, 'a'],
      [[1], 'a'],
      [-1],
      [1.5],
      [300_000],
      [[199_998]],
      {},
      null,
    ]) {
      await expectInvalid(call({ input }), 'input');
    }
    await expectInvalid(call({ input: 'x', dimensions: LOCAL_EMBEDDING_DIMENSIONS + 1 }), 'dimensions');
    await expectInvalid(call({ input: 'x', dimensions: 0 }), 'dimensions');
    await expectInvalid(call({ input: 'x', encoding_format: 'int8' }), 'encoding_format');
    // Special tokens are valid ids; the WASM decoder must still work after the rejections above.
    const out = json(await call({ input: [199_999] }));
    expect(out.data).toHaveLength(1);
  });
});
