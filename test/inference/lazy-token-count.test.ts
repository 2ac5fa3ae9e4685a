/**
 * Input tokens are counted (tiktoken) only when something reads the count: the credit estimate of a
 * billable model, a bucket with an input-token ceiling, or the usage record of a call whose upstream
 * reported no usage. Counting is the dearest step of admission and grows with the prompt, so a request
 * that needs none of these must never count, and one that needs several counts once.
 *
 * Real Gantry, real limiter, real upstream servers. The counting entry points of the routes
 * (countChatInputTokens, countResponsesInputTokens, countEmbeddingInputTokens) are observed with
 * vi.spyOn on the module namespace: the routes call them through it, and the spies call through.
 */
import OpenAI, { APIError } from 'openai';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import * as tokens from '../../providers/tokens.js';
import { MemoryLimiter, modelBucket, RedisLimiter } from '../../src/limits/index.js';
import type { Admission, BucketSpec, Lease } from '../../src/limits/types.js';
import type { UsageRecord } from '../../src/usage/index.js';
import { type FakeOpenAI, startFakeOpenAI } from '../helpers/fake-openai.js';
import { type RecordingServer, sendJson, startRecordingServer, writePaced } from '../helpers/fake-server.js';
import { addKey, startGantry, type TestGantry } from '../helpers/gantry.js';
import { describeRedis, startRedis, type TestRedis } from '../helpers/redis.js';
import { ledgerRecords } from '../helpers/usage.js';

// The real functions, taken before any spy replaces them, to compute the expected counts.
const countChat = tokens.countChatInputTokens;
const countResponses = tokens.countResponsesInputTokens;
const countEmbedding = tokens.countEmbeddingInputTokens;

const FREE = 'acme/free';
const LIMITED = 'acme/input-limited';
const LOCAL_FREE = 'gantry/local-free';
const LOCAL_LIMITED = 'gantry/local-input-limited';
const EMBED_FREE = 'acme/embed-free';
const EMBED_LIMITED = 'acme/embed-input-limited';
const BILLABLE = 'acme/billable';
const NO_USAGE = 'acme/no-usage';
const EVERY_READER = 'acme/every-reader';

const INPUT_CEILING = 200;
const BILLABLE_MAX_TOKENS = 10;
const ONE_CREDIT_PER_TOKEN = '{ amount: 1000, currency: USD, unit: million_token }';

/** An OpenAI-compatible upstream that never reports usage, in JSON or in streams. */
async function startUsagelessUpstream(): Promise<RecordingServer<Record<string, never>>> {
  return startRecordingServer<Record<string, never>>(
    async (ex) => {
      const base = { id: `chatcmpl-nousage${ex.id}`, created: 1_700_000_000, model: ex.body?.model };
      if (ex.body?.stream !== true) {
        sendJson(ex.res, 200, {
          ...base,
          object: 'chat.completion',
          choices: [
            {
              index: 0,
              message: { role: 'assistant', content: 'No usage here.' },
              finish_reason: 'stop',
            },
          ],
        });
        return;
      }
      const chunk = (delta: Record<string, unknown>, finish: string | null = null) =>
        `data: ${JSON.stringify({ ...base, object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
      ex.res.writeHead(200, { 'content-type': 'text/event-stream' });
      await writePaced(
        ex,
        [
          chunk({ role: 'assistant', content: '' }),
          chunk({ content: 'No usage' }),
          chunk({}, 'stop'),
          'data: [DONE]\n\n',
        ],
        {},
      );
    },
    { name: 'usageless upstream', behavior: {}, errorBody: (message) => ({ error: { message } }) },
  );
}

let fake: FakeOpenAI;
let usageless: RecordingServer<Record<string, never>>;
let gantry: TestGantry;

beforeAll(async () => {
  fake = await startFakeOpenAI();
  usageless = await startUsagelessUpstream();
  const timeouts = '{ connect_ms: 1000, first_byte_ms: 5000, idle_ms: 5000, total_ms: 10000 }';
  gantry = await startGantry(`
providers:
  local: { kind: local }
  up: { kind: openai, base_url: ${fake.url}, supports_responses: true, timeouts: ${timeouts} }
  usageless: { kind: openai, base_url: ${usageless.origin}/v1, timeouts: ${timeouts} }
credits: { default_balance: 0 }
tiers:
  # Ceilings on everything but input tokens: none of them needs the count.
  default:
    window_seconds: 3600
    account: { requests: 1000, concurrency: 10 }
    model: { requests: 100, output_tokens: 100000 }
models:
  - { namespace: ${FREE}, name: Free, type: text, apis: [chat, responses], routes: [{ provider: up, model: fake-model }] }
  - namespace: ${LIMITED}
    name: Input-limited
    type: text
    apis: [chat, responses]
    routes: [{ provider: up, model: fake-model }]
    limits: { input_tokens: ${INPUT_CEILING} }
  - { namespace: ${LOCAL_FREE}, name: Local free, type: text, apis: [chat, responses], routes: [{ provider: local, model: local-chat }] }
  - namespace: ${LOCAL_LIMITED}
    name: Local input-limited
    type: text
    apis: [chat, responses]
    routes: [{ provider: local, model: local-chat }]
    limits: { input_tokens: ${INPUT_CEILING} }
  - { namespace: ${EMBED_FREE}, name: Embed free, type: text, apis: [embeddings], routes: [{ provider: up, model: fake-embedding }] }
  - namespace: ${EMBED_LIMITED}
    name: Embed input-limited
    type: text
    apis: [embeddings]
    routes: [{ provider: up, model: fake-embedding }]
    limits: { input_tokens: ${INPUT_CEILING} }
  - namespace: ${BILLABLE}
    name: Billable
    type: text
    billable: true
    pricing: ${ONE_CREDIT_PER_TOKEN}
    routes: [{ provider: up, model: fake-model }]
    defaults: { max_tokens: ${BILLABLE_MAX_TOKENS} }
  - { namespace: ${NO_USAGE}, name: No usage, type: text, routes: [{ provider: usageless, model: m }] }
  - namespace: ${EVERY_READER}
    name: Billable, input-limited, no usage
    type: text
    billable: true
    pricing: ${ONE_CREDIT_PER_TOKEN}
    routes: [{ provider: usageless, model: m }]
    defaults: { max_tokens: ${BILLABLE_MAX_TOKENS} }
    limits: { input_tokens: ${INPUT_CEILING} }
`);
});
afterAll(async () => {
  await gantry?.close();
  await fake?.close();
  await usageless?.close();
});

/** How many times the routes counted input tokens since the test began. */
let counted: () => number;

beforeEach(() => {
  fake.reset();
  usageless.reset();
  const spies = [
    vi.spyOn(tokens, 'countChatInputTokens'),
    vi.spyOn(tokens, 'countResponsesInputTokens'),
    vi.spyOn(tokens, 'countEmbeddingInputTokens'),
  ];
  counted = () => spies.reduce((n, spy) => n + spy.mock.calls.length, 0);
});
afterEach(() => {
  vi.restoreAllMocks();
});

let accounts = 0;

/** A fresh account (empty buckets) with one key and `credits`. */
async function newAccount(credits = 0): Promise<{ id: string; client: OpenAI }> {
  const name = `lazy-count-${++accounts}`;
  const { id } = gantry.store.upsertAccount(name, 'default', 'active');
  const key = addKey(gantry.store, name);
  if (credits !== 0) await gantry.gantry.services.credits.grant(id, credits, 'test');
  return { id, client: new OpenAI({ baseURL: gantry.baseURL, apiKey: key, maxRetries: 0 }) };
}

function recordsOf(accountId: string, count: number): Promise<UsageRecord[]> {
  return ledgerRecords(gantry, accountId, count);
}

async function rejection(promise: Promise<unknown>): Promise<APIError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(APIError);
  return err as APIError;
}

const user = (content: string) => [{ role: 'user' as const, content }];
const words = (n: number) => Array.from({ length: n }, (_, i) => `word${i}`).join(' ');

/** One request per API, to a model without and to a model with an input-token ceiling. */
interface ApiCase {
  name: string;
  free: string;
  limited: string;
  send(client: OpenAI, model: string, text: string): Promise<{ headers: Headers; inputTokens: number }>;
  /** What Gantry estimates for `text`. */
  estimate(text: string): number;
}

const API_CASES: ApiCase[] = [
  {
    name: 'chat',
    free: FREE,
    limited: LIMITED,
    async send(client, model, text) {
      const { data, response } = await client.chat.completions
        .create({ model, messages: user(text) })
        .withResponse();
      return { headers: response.headers, inputTokens: data.usage?.prompt_tokens ?? -1 };
    },
    estimate: (text) => countChat(user(text)),
  },
  {
    name: 'chat stream',
    free: FREE,
    limited: LIMITED,
    async send(client, model, text) {
      const { data, response } = await client.chat.completions
        .create({ model, messages: user(text), stream: true, stream_options: { include_usage: true } })
        .withResponse();
      let inputTokens = -1;
      for await (const chunk of data) if (chunk.usage) inputTokens = chunk.usage.prompt_tokens;
      return { headers: response.headers, inputTokens };
    },
    estimate: (text) => countChat(user(text)),
  },
  {
    name: 'responses (passed through)',
    free: FREE,
    limited: LIMITED,
    async send(client, model, text) {
      const { data, response } = await client.responses
        .create({ model, input: text, instructions: 'Be brief.' })
        .withResponse();
      return { headers: response.headers, inputTokens: data.usage?.input_tokens ?? -1 };
    },
    estimate: (text) => countResponses(text, 'Be brief.'),
  },
  {
    name: 'responses (bridged onto chat)',
    free: LOCAL_FREE,
    limited: LOCAL_LIMITED,
    async send(client, model, text) {
      const { data, response } = await client.responses.create({ model, input: text }).withResponse();
      return { headers: response.headers, inputTokens: data.usage?.input_tokens ?? -1 };
    },
    estimate: (text) => countResponses(text),
  },
  {
    name: 'embeddings',
    free: EMBED_FREE,
    limited: EMBED_LIMITED,
    async send(client, model, text) {
      const { data, response } = await client.embeddings.create({ model, input: text }).withResponse();
      return { headers: response.headers, inputTokens: data.usage.prompt_tokens };
    },
    estimate: (text) => countEmbedding(text),
  },
];

describe('a request that nothing needs the count for', () => {
  for (const api of API_CASES) {
    it(`${api.name}: never counts, and is admitted, limited and metered as before`, async () => {
      const account = await newAccount();
      const sent = await api.send(account.client, api.free, 'count me if you must');
      expect(counted()).toBe(0);
      // The other ceilings still apply and still show.
      expect(sent.headers.get('x-ratelimit-remaining-requests')).toBe('99');
      expect(sent.headers.get('x-gantry-ratelimit-limit-tokens-out')).toBe('100000');
      expect(sent.headers.get('x-gantry-ratelimit-limit-tokens-in')).toBeNull();
      // The record takes the upstream's count.
      const [record] = await recordsOf(account.id, 1);
      expect(record).toMatchObject({ outcome: 'ok', input_tokens: sent.inputTokens, credits: 0 });
      expect(sent.inputTokens).toBeGreaterThan(0);
      expect(counted()).toBe(0);
    });
  }

  it('an upstream failure before any answer costs no count either', async () => {
    const account = await newAccount();
    fake.enqueue({ status: 500 });
    const err = await rejection(account.client.chat.completions.create({ model: FREE, messages: user('x') }));
    expect(err.status).toBe(502);
    const [record] = await recordsOf(account.id, 1);
    expect(record).toMatchObject({ outcome: 'error', input_tokens: 0 });
    expect(counted()).toBe(0);
  });
});

describe('an input-token ceiling', () => {
  for (const api of API_CASES) {
    it(`${api.name}: counts once, reserves the estimate and refuses a prompt that never fits`, async () => {
      const account = await newAccount();
      const text = 'a short prompt under the ceiling';
      const sent = await api.send(account.client, api.limited, text);
      expect(counted()).toBe(1);
      expect(sent.headers.get('x-gantry-ratelimit-limit-tokens-in')).toBe(String(INPUT_CEILING));
      expect(sent.headers.get('x-gantry-ratelimit-remaining-tokens-in')).toBe(
        String(INPUT_CEILING - api.estimate(text)),
      );
      await recordsOf(account.id, 1);
      expect(counted()).toBe(1);

      const upstreamCalls = fake.requests.length;
      const long = words(INPUT_CEILING + 50);
      expect(api.estimate(long)).toBeGreaterThan(INPUT_CEILING);
      const err = await rejection(api.send(account.client, api.limited, long));
      expect(err.status).toBe(429);
      expect(err.error).toMatchObject({
        error_id: 'RATE_LIMIT_EXCEEDED',
        details: { metric: 'input_tokens', scope: 'model', limit: INPUT_CEILING },
      });
      expect(fake.requests).toHaveLength(upstreamCalls);
      expect(counted()).toBe(2);
    });
  }
});

describe('a billable model', () => {
  it('counts once for the credit estimate: a balance short of prompt + max_tokens is refused with 402', async () => {
    const text = 'how much will this cost me';
    const needed = countChat(user(text)) + BILLABLE_MAX_TOKENS;
    const account = await newAccount(needed - 1);
    const err = await rejection(
      account.client.chat.completions.create({ model: BILLABLE, messages: user(text) }),
    );
    expect(err.status).toBe(402);
    expect(err.error).toMatchObject({ error_id: 'INSUFFICIENT_CREDITS' });
    expect(JSON.stringify(err.error)).toContain(`may cost up to ${needed} credits`);
    expect(fake.requests).toHaveLength(0);
    expect(counted()).toBe(1);

    await gantry.gantry.services.credits.grant(account.id, 1, 'enough now');
    const completion = await account.client.chat.completions.create({
      model: BILLABLE,
      messages: user(text),
    });
    expect(counted()).toBe(2);
    const [record] = await recordsOf(account.id, 1);
    // Debited by the upstream's usage, not the estimate.
    const used = (completion.usage?.prompt_tokens ?? 0) + (completion.usage?.completion_tokens ?? 0);
    expect(record?.credits).toBeCloseTo(used, 6);
    expect(counted()).toBe(2);
  });
});

describe('an upstream that reports no usage', () => {
  it('records the estimate as the input tokens, counted once the call is over', async () => {
    const account = await newAccount();
    const text = 'estimate me afterwards';
    await account.client.chat.completions.create({ model: NO_USAGE, messages: user(text) });
    const [record] = await recordsOf(account.id, 1);
    expect(record).toMatchObject({ outcome: 'ok', input_tokens: countChat(user(text)), output_tokens: 0 });
    expect(counted()).toBe(1);
  });

  it('records the estimate for a stream without a usage chunk, and for one cut short', async () => {
    const account = await newAccount();
    const stream = await account.client.chat.completions.create({
      model: NO_USAGE,
      messages: user('stream without usage'),
      stream: true,
    });
    for await (const _ of stream) {
      // drain
    }
    fake.enqueue({ closeAfterChunks: 2 });
    const cut = await account.client.chat.completions.create({
      model: FREE,
      messages: user('cut me short please'),
      stream: true,
    });
    await expect(
      (async () => {
        for await (const _ of cut) {
          // drain
        }
      })(),
    ).rejects.toThrow();
    const records = await recordsOf(account.id, 2);
    expect(records.find((r) => r.model === NO_USAGE)?.input_tokens).toBe(
      countChat(user('stream without usage')),
    );
    expect(records.find((r) => r.model === FREE)).toMatchObject({
      outcome: 'error',
      input_tokens: countChat(user('cut me short please')),
    });
    expect(counted()).toBe(2);
  });

  it('counts once when the credit check, the input ceiling and the usage record all need the count', async () => {
    const text = 'read by everyone';
    const estimate = countChat(user(text));
    const account = await newAccount(1000);
    const { response } = await account.client.chat.completions
      .create({ model: EVERY_READER, messages: user(text) })
      .withResponse();
    expect(response.headers.get('x-gantry-ratelimit-remaining-tokens-in')).toBe(
      String(INPUT_CEILING - estimate),
    );
    const [record] = await recordsOf(account.id, 1);
    expect(record).toMatchObject({ input_tokens: estimate, output_tokens: 0 });
    expect(record?.credits).toBeCloseTo(estimate, 6);
    expect(counted()).toBe(1);
  });
});

/**
 * openTicket passes 0 input tokens when no bucket has an input ceiling. That is only safe because the
 * limiters never read the amount for such a bucket: checked here on both, with the same requests
 * reserving 0 and a large count side by side.
 */
describe('limiters ignore input tokens in buckets without an input ceiling', () => {
  const spec: BucketSpec = modelBucket('m', {
    requests: 2,
    concurrency: 5,
    outputTokens: 100,
    windowSeconds: 3600,
  });

  async function run(
    admit: (accountId: string, inputTokens: number) => Promise<Admission>,
    release: (lease: Lease) => Promise<unknown>,
    accountId: string,
    inputTokens: number,
  ): Promise<unknown[]> {
    const seen: unknown[] = [];
    for (let i = 0; i < 3; i++) {
      const admission = await admit(accountId, inputTokens);
      if (!admission.ok) {
        seen.push({ metric: admission.refusal.metric, limit: admission.refusal.limit });
        continue;
      }
      seen.push(
        admission.quota.map((q) => ({
          ...q,
          requests: q.requests?.remaining,
          outputTokens: q.outputTokens?.remaining,
          concurrency: q.concurrency?.remaining,
        })),
      );
      await release(admission.lease);
    }
    return seen;
  }

  it('memory', async () => {
    const limiter = new MemoryLimiter();
    const admit = (accountId: string, inputTokens: number) =>
      limiter.admit({ accountId, buckets: [spec], inputTokens, outputTokens: 10 });
    const release = (lease: Lease) => limiter.release(lease, { inputTokens: 37, outputTokens: 3 });
    const counted = await run(admit, release, 'counted', 5_000);
    expect(await run(admit, release, 'skipped', 0)).toEqual(counted);
    expect(counted.at(-1)).toEqual({ metric: 'requests', limit: 2 });
  });

  describeRedis('redis', () => {
    let redis: TestRedis;
    let limiter: RedisLimiter;
    beforeAll(async () => {
      redis = await startRedis();
      limiter = new RedisLimiter({ url: redis.url });
      await limiter.ready();
    });
    afterAll(async () => {
      await limiter?.close();
      await redis?.close();
    });

    it('redis', async () => {
      const admit = (accountId: string, inputTokens: number) =>
        limiter.admit({ accountId, buckets: [spec], inputTokens, outputTokens: 10 });
      const release = (lease: Lease) => limiter.release(lease, { inputTokens: 37, outputTokens: 3 });
      const counted = await run(admit, release, 'counted', 5_000);
      expect(await run(admit, release, 'skipped', 0)).toEqual(counted);
      expect(counted.at(-1)).toEqual({ metric: 'requests', limit: 2 });
      // Neither wrote an input-token counter.
      for (const accountId of ['counted', 'skipped']) {
        const keys = await limiter.client.keys(`${limiter.keyPrefixOf(accountId)}w:*`);
        expect(keys.length).toBeGreaterThan(0);
        for (const key of keys) expect(await limiter.client.hget(key, 'i')).toBeNull();
      }
    });
  });
});
