/**
 * Token-aware rate limits (spec 8) end to end, with the official OpenAI SDK as the client: buckets
 * per account and per account×model from the tiers and the models' own `limits`, requests, input and
 * output tokens per rolling window, concurrency, reconciliation of the reservation with the real usage
 * (JSON, streams with the upstream's usage, streams cut short), and the success headers.
 *
 * Every test uses an account of its own (created at run time with the tier it needs), so no test spends
 * another's budget. Windows are 1-2 s where a test has to wait for one, and an hour where a test checks
 * header arithmetic exactly (no window boundary falls inside the test, so nothing decays meanwhile).
 */
import OpenAI, { RateLimitError } from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { countChatInputTokens, countCompletionTokens } from '../../providers/tokens.js';
import type { UsageRecord } from '../../src/usage/index.js';
import { type FakeOpenAI, startFakeOpenAI } from '../helpers/fake-openai.js';
import { addKey, startGantry, type TestGantry } from '../helpers/gantry.js';
import { ledgerRecords } from '../helpers/usage.js';

const LOCAL = 'gantry/local-chat';
const LOCAL_B = 'gantry/local-chat-b';
const LIMITED = 'acme/limited';
const OVERRIDDEN = 'acme/overridden';
const UPSTREAM = 'acme/up-chat';
const WITH_DEFAULTS = 'gantry/local-defaults';

let fake: FakeOpenAI;
let gantry: TestGantry;

beforeAll(async () => {
  fake = await startFakeOpenAI();
  gantry = await startGantry(`
providers:
  local: { kind: local }
  up:
    kind: openai
    base_url: ${fake.url}
    timeouts: { connect_ms: 1000, first_byte_ms: 5000, idle_ms: 5000, total_ms: 10000 }
tiers:
  default:
    window_seconds: 2
    model: { requests: 3 }
    models:
      ${OVERRIDDEN}: { requests: 1 }
  shared:
    window_seconds: 2
    account: { requests: 2 }
  retry:
    window_seconds: 1
    model: { requests: 2 }
  tokens:
    window_seconds: 2
    model: { input_tokens: 300, output_tokens: 1200 }
  concurrent:
    window_seconds: 2
    model: { concurrency: 2 }
  exact:
    window_seconds: 3600
    account: { requests: 100, input_tokens: 100000, output_tokens: 50000 }
    model: { requests: 10, input_tokens: 5000, output_tokens: 20000 }
models:
  - { namespace: ${LOCAL}, name: Local chat, type: text, routes: [{ provider: local, model: local-chat }] }
  - { namespace: ${LOCAL_B}, name: Local chat B, type: text, routes: [{ provider: local, model: local-chat }] }
  - namespace: ${LIMITED}
    name: Compute-heavy chat
    type: text
    routes: [{ provider: local, model: local-chat }]
    limits: { requests: 2 }
  - namespace: ${OVERRIDDEN}
    name: Chat with a tier override
    type: text
    routes: [{ provider: local, model: local-chat }]
    limits: { requests: 2 }
  - namespace: ${WITH_DEFAULTS}
    name: Local chat with a default max_tokens
    type: text
    routes: [{ provider: local, model: local-chat }]
    defaults: { max_tokens: 64 }
  - namespace: ${UPSTREAM}
    name: Upstream chat
    type: text
    apis: [chat, responses, other]
    routes: [{ provider: up, model: fake-model }]
`);
});
afterAll(async () => {
  await gantry?.close();
  await fake?.close();
});
beforeEach(() => fake.reset());

interface Account {
  name: string;
  id: string;
  key: string;
  client: OpenAI;
}

let accounts = 0;

/** A fresh account on `tier` with one key: its buckets start empty. */
function newAccount(tier: string): Account {
  const name = `limits-${tier}-${++accounts}`;
  const { id } = gantry.store.upsertAccount(name, tier, 'active');
  const key = addKey(gantry.store, name);
  return { name, id, key, client: new OpenAI({ baseURL: gantry.baseURL, apiKey: key, maxRetries: 0 }) };
}

const user = (content: string) => [{ role: 'user' as const, content }];

function chat(
  client: OpenAI,
  model: string,
  extra: Partial<OpenAI.ChatCompletionCreateParamsNonStreaming> = {},
) {
  return client.chat.completions.create({ model, messages: user('hi'), ...extra });
}

/** The records of an account once `count` of them are written (written = the reservation was reconciled). */
function recordsOf(accountId: string, count: number): Promise<UsageRecord[]> {
  return ledgerRecords(gantry, accountId, count);
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

interface RefusalDetails {
  metric: string;
  scope: string;
  limit: number;
  window_seconds: number;
  reset: number;
  retry_after_seconds: number;
}

/** The promise fails with the SDK's RateLimitError carrying Gantry's 429 body; returns it and its details. */
async function refused(promise: Promise<unknown>): Promise<{ err: RateLimitError; details: RefusalDetails }> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(RateLimitError);
  const rate = err as RateLimitError;
  expect(rate.status).toBe(429);
  const body = rate.error as { error_id?: string; code?: string; type?: string; details?: RefusalDetails };
  expect(body.error_id).toBe('RATE_LIMIT_EXCEEDED');
  expect(body.code).toBe('rate_limit_exceeded');
  expect(body.type).toBe('rate_limit_error');
  if (!body.details) throw new Error('a 429 carries details');
  return { err: rate, details: body.details };
}

/** Retry-After, when present, is a whole number of seconds. */
function retryAfter(err: RateLimitError): number | undefined {
  const value = err.headers?.get('retry-after');
  if (value === null || value === undefined) return undefined;
  expect(value).toMatch(/^[1-9]\d*$/);
  return Number(value);
}

function header(headers: Headers, name: string): number {
  const value = headers.get(name);
  expect(value, name).toMatch(/^\d+$/);
  return Number(value);
}

describe('requests per window', () => {
  it('refuses the request over the window with 429 RATE_LIMIT_EXCEEDED, Retry-After and details', async () => {
    const { client } = newAccount('default');
    for (let i = 0; i < 3; i++) await chat(client, LOCAL);
    const before = Math.floor(Date.now() / 1000);
    const { err, details } = await refused(chat(client, LOCAL));
    expect(details).toMatchObject({ metric: 'requests', scope: 'model', limit: 3, window_seconds: 2 });
    // reset: epoch seconds when the budget is whole again (within two windows of a sliding counter).
    expect(Number.isInteger(details.reset)).toBe(true);
    expect(details.reset).toBeGreaterThanOrEqual(before);
    expect(details.reset).toBeLessThanOrEqual(before + 5);
    const wait = retryAfter(err);
    expect(wait).toBeGreaterThanOrEqual(1);
    expect(wait).toBeLessThanOrEqual(4);
    expect(details.retry_after_seconds).toBe(wait);
  });

  it('Retry-After is honest: after waiting it, the same request is admitted', async () => {
    const { client } = newAccount('retry');
    await chat(client, LOCAL);
    await chat(client, LOCAL);
    const { err, details } = await refused(chat(client, LOCAL));
    expect(details).toMatchObject({ metric: 'requests', limit: 2, window_seconds: 1 });
    const wait = retryAfter(err);
    if (wait === undefined) throw new Error('a refusal that waiting cures has a Retry-After');
    await sleep(wait * 1000);
    const completion = await chat(client, LOCAL);
    expect(completion.choices[0]?.message.content).toContain('You said: hi');
  });

  it("takes ceilings from the tier, then the model's own limits, then the tier's per-model override", async () => {
    const { client } = newAccount('default');
    // The tier's model ceiling is 3 requests; acme/limited lowers it to 2 for every tier…
    await chat(client, LIMITED);
    await chat(client, LIMITED);
    expect((await refused(chat(client, LIMITED))).details).toMatchObject({ metric: 'requests', limit: 2 });
    // …and the default tier lowers acme/overridden (also 2 on its own) to 1.
    await chat(client, OVERRIDDEN);
    expect((await refused(chat(client, OVERRIDDEN))).details).toMatchObject({ metric: 'requests', limit: 1 });
    // The plain model still has its tier's 3.
    const { response } = await chat(client, LOCAL).withResponse();
    expect(response.headers.get('x-ratelimit-limit-requests')).toBe('3');
  });

  it("a burst on one model never spends another model's budget", async () => {
    const { client } = newAccount('default');
    for (let i = 0; i < 3; i++) await chat(client, LOCAL);
    await refused(chat(client, LOCAL));
    const remaining: string[] = [];
    for (let i = 0; i < 3; i++) {
      const { response } = await chat(client, LOCAL_B).withResponse();
      remaining.push(response.headers.get('x-ratelimit-remaining-requests') ?? '');
    }
    expect(remaining).toEqual(['2', '1', '0']);
    expect((await refused(chat(client, LOCAL_B))).details).toMatchObject({ scope: 'model', limit: 3 });
  });

  it('the account bucket is shared by all its keys and models; listing models is never counted', async () => {
    const account = newAccount('shared');
    const second = new OpenAI({
      baseURL: gantry.baseURL,
      apiKey: addKey(gantry.store, account.name),
      maxRetries: 0,
    });
    for (let i = 0; i < 5; i++) {
      const page = await account.client.models.list();
      expect(page.data.length).toBeGreaterThan(0);
      await second.models.retrieve(LOCAL);
    }
    const first = await chat(account.client, LOCAL).withResponse();
    expect(first.response.headers.get('x-ratelimit-remaining-requests')).toBe('1');
    const other = await chat(second, LOCAL_B).withResponse();
    expect(other.response.headers.get('x-ratelimit-remaining-requests')).toBe('0');
    const { details } = await refused(chat(second, UPSTREAM));
    expect(details).toMatchObject({ metric: 'requests', scope: 'account', limit: 2, window_seconds: 2 });
    expect(fake.requests).toHaveLength(0);
    // Out of requests, the account can still list models.
    expect((await second.models.list()).data.length).toBeGreaterThan(0);
  });

  // Forwarded endpoints (POST /v1/images/…, /v1/audio/…, /v1/moderations…) are admitted like the rest.
  it('forwarded endpoints count against the model’s request bucket', async () => {
    const { key } = newAccount('default');
    const statuses: number[] = [];
    for (let i = 0; i < 4; i++) {
      const res = await fetch(`${gantry.baseURL}/images/generations`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: UPSTREAM, prompt: 'a gantry crane' }),
      });
      await res.arrayBuffer();
      statuses.push(res.status);
    }
    expect(statuses).toEqual([200, 200, 200, 429]);
  });
});

describe('token limits', () => {
  it('estimates input tokens with tiktoken before forwarding: a prompt over the window never reaches the upstream', async () => {
    const { client } = newAccount('tokens');
    const big = user('word '.repeat(400));
    expect(countChatInputTokens(big)).toBeGreaterThan(300);
    const { err, details } = await refused(chat(client, UPSTREAM, { messages: big, max_tokens: 10 }));
    expect(details).toMatchObject({ metric: 'input_tokens', scope: 'model', limit: 300, window_seconds: 2 });
    expect(err.message).toContain('alone exceeds');
    expect(fake.requests).toHaveLength(0);

    // The refusal reserved nothing: a small prompt is admitted with the whole window but its own estimate.
    const small = user('a short question');
    const { response } = await chat(client, UPSTREAM, { messages: small, max_tokens: 10 }).withResponse();
    expect(header(response.headers, 'x-gantry-ratelimit-limit-tokens-in')).toBe(300);
    expect(header(response.headers, 'x-gantry-ratelimit-remaining-tokens-in')).toBe(
      300 - countChatInputTokens(small),
    );
    expect(fake.requests).toHaveLength(1);
  });

  it('input tokens add up over the window until the next prompt does not fit', async () => {
    const { client } = newAccount('tokens');
    // Two fit in 300, three are far over (so a window boundary in between cannot decay them under).
    const prompt = user('word '.repeat(135));
    const estimate = countChatInputTokens(prompt);
    expect(estimate).toBeGreaterThan(135);
    expect(estimate).toBeLessThanOrEqual(150);
    await chat(client, LOCAL, { messages: prompt, max_tokens: 5 });
    await chat(client, LOCAL, { messages: prompt, max_tokens: 5 });
    const { details } = await refused(chat(client, LOCAL, { messages: prompt, max_tokens: 5 }));
    expect(details).toMatchObject({ metric: 'input_tokens', limit: 300 });
  });

  it('reserves output tokens from max_tokens: a max_tokens alone over the window is refused', async () => {
    const { client } = newAccount('tokens');
    const { err, details } = await refused(chat(client, UPSTREAM, { max_tokens: 1500 }));
    expect(details).toMatchObject({ metric: 'output_tokens', scope: 'model', limit: 1200 });
    expect(err.message).toContain('alone exceeds');
    expect(fake.requests).toHaveLength(0);
    // max_completion_tokens is read the same way.
    const second = await refused(chat(client, UPSTREAM, { max_completion_tokens: 1201 }));
    expect(second.details.metric).toBe('output_tokens');
    // A reservation that fits is admitted and shown in the headers.
    const { response } = await chat(client, UPSTREAM, { max_tokens: 1000 }).withResponse();
    expect(header(response.headers, 'x-gantry-ratelimit-limit-tokens-out')).toBe(1200);
    expect(header(response.headers, 'x-gantry-ratelimit-remaining-tokens-out')).toBe(200);
  });

  it("reserves the model's default max_tokens when the request has none, else limits.default_max_output_tokens", async () => {
    const { client } = newAccount('exact');
    const withDefault = await chat(client, WITH_DEFAULTS).withResponse();
    expect(header(withDefault.response.headers, 'x-gantry-ratelimit-remaining-tokens-out')).toBe(20000 - 64);
    // No default on the model: Gantry's own (4096 unless configured).
    const without = await chat(client, LOCAL_B).withResponse();
    expect(header(without.response.headers, 'x-gantry-ratelimit-remaining-tokens-out')).toBe(20000 - 4096);
  });

  /**
   * Reserve 1000 of the 1200 output tokens, use about 20: once the response is over the reservation is
   * replaced by the real usage, so the next 1000-token reservation fits (without reconciliation it could not).
   */
  async function expectGivenBack(
    account: Account,
    first: () => Promise<void>,
    model = LOCAL,
  ): Promise<UsageRecord> {
    await first();
    const [record] = await recordsOf(account.id, 1);
    if (!record) throw new Error('the first request was not metered');
    expect(record.output_tokens).toBeGreaterThan(0);
    expect(record.output_tokens).toBeLessThan(100);
    const { data, response } = await chat(account.client, model, { max_tokens: 1000 }).withResponse();
    expect(data.choices[0]?.message.content).toBeTruthy();
    // Nothing decays within a second of a 2 s sliding window by more than a few tokens.
    const remaining = header(response.headers, 'x-gantry-ratelimit-remaining-tokens-out');
    expect(remaining).toBeGreaterThanOrEqual(1200 - record.output_tokens - 1000);
    expect(remaining).toBeLessThanOrEqual(200);
    return record;
  }

  it('gives back the unused output reservation after a JSON response', async () => {
    const account = newAccount('tokens');
    let used = 0;
    const record = await expectGivenBack(account, async () => {
      const { data, response } = await chat(account.client, LOCAL, { max_tokens: 1000 }).withResponse();
      expect(header(response.headers, 'x-gantry-ratelimit-remaining-tokens-out')).toBe(200);
      used = data.usage?.completion_tokens ?? -1;
    });
    expect(record.output_tokens).toBe(used);
  });

  it('gives back the unused output reservation after a JSON response from an OpenAI-compatible upstream', async () => {
    const account = newAccount('tokens');
    let used = 0;
    const record = await expectGivenBack(
      account,
      async () => {
        const completion = await chat(account.client, UPSTREAM, { max_tokens: 1000 });
        used = completion.usage?.completion_tokens ?? -1;
      },
      UPSTREAM,
    );
    expect(record.output_tokens).toBe(used);
  });

  for (const [label, model] of [
    ['the local provider', LOCAL],
    ['an OpenAI-compatible upstream', UPSTREAM],
  ] as const) {
    it(`reconciles after a stream from ${label}, from the upstream's usage the client did not ask for`, async () => {
      const account = newAccount('tokens');
      let text = '';
      const record = await expectGivenBack(
        account,
        async () => {
          const { data: stream, response } = await account.client.chat.completions
            .create({ model, messages: user('stream a few words'), max_tokens: 1000, stream: true })
            .withResponse();
          expect(header(response.headers, 'x-gantry-ratelimit-remaining-tokens-out')).toBe(200);
          for await (const chunk of stream) {
            expect(chunk.usage ?? undefined).toBeUndefined();
            text += chunk.choices[0]?.delta.content ?? '';
          }
        },
        model,
      );
      expect(text.length).toBeGreaterThan(0);
      expect(record.outcome).toBe('ok');
      expect(record.stream).toBe(true);
      if (model === UPSTREAM) {
        // Gantry asked the upstream for usage and metered its count (the fake counts words, not tiktoken).
        expect(fake.requests[0]?.body?.stream_options).toEqual({ include_usage: true });
        expect(record.output_tokens).toBe(text.trim().split(/\s+/).length);
      }
    });
  }

  it('a stream cut short is metered for what was delivered, and the rest of the reservation comes back', async () => {
    const account = newAccount('tokens');
    // role chunk, two words, then the upstream hangs up: no usage chunk ever comes.
    fake.enqueue({ closeAfterChunks: 3 });
    let delivered = '';
    const record = await expectGivenBack(
      account,
      async () => {
        const stream = await account.client.chat.completions.create({
          model: UPSTREAM,
          messages: user('this answer will be cut short'),
          max_tokens: 1000,
          stream: true,
        });
        await expect(
          (async () => {
            for await (const chunk of stream) delivered += chunk.choices[0]?.delta.content ?? '';
          })(),
        ).rejects.toThrow();
      },
      UPSTREAM,
    );
    expect(delivered).toBe('You said:');
    expect(record.outcome).toBe('error');
    expect(record.output_tokens).toBe(countCompletionTokens(delivered));
    expect(record.input_tokens).toBe(countChatInputTokens(user('this answer will be cut short')));
  });
});

describe('concurrency', () => {
  const LONG = user(
    'please answer with many words so that the stream lasts long enough for the test to see it open',
  );

  async function openStream(client: OpenAI) {
    const controller = new AbortController();
    const stream = await client.chat.completions.create(
      { model: UPSTREAM, messages: LONG, stream: true },
      { signal: controller.signal },
    );
    const it = stream[Symbol.asyncIterator]();
    const first = await it.next();
    expect(first.done).toBe(false);
    return { controller, it };
  }

  it('refuses the (ceiling+1)th concurrent stream; a client abort frees its slot at once and is metered', async () => {
    fake.setBehavior({ delayBetweenChunksMs: 100 });
    const account = newAccount('concurrent');
    const a = await openStream(account.client);
    const b = await openStream(account.client);
    const { err, details } = await refused(
      account.client.chat.completions.create({ model: UPSTREAM, messages: LONG, stream: true }),
    );
    expect(details).toMatchObject({ metric: 'concurrency', scope: 'model', limit: 2 });
    expect(retryAfter(err)).toBeGreaterThanOrEqual(1);
    expect(fake.requests).toHaveLength(2);

    // The client leaves stream a mid-way: once Gantry has let go of the upstream call, its slot is free.
    a.controller.abort();
    expect(await fake.requests[0]?.settled).toBe('aborted');
    const c = await openStream(account.client);
    expect(fake.requests).toHaveLength(3);

    b.controller.abort();
    c.controller.abort();
    expect(await fake.requests[1]?.settled).toBe('aborted');
    expect(await fake.requests[2]?.settled).toBe('aborted');
    const records = await recordsOf(account.id, 3);
    expect(records).toHaveLength(3);
    const estimate = countChatInputTokens(LONG);
    for (const record of records) {
      expect(record).toMatchObject({ outcome: 'client_aborted', status: 200, stream: true, model: UPSTREAM });
      // No usage from the upstream: the prompt as estimated, the output as delivered.
      expect(record.input_tokens).toBe(estimate);
      expect(record.output_tokens).toBeGreaterThanOrEqual(1);
      expect(record.output_tokens).toBeLessThan(30);
    }
  });

  it('slots come back after streams that end, fail or break, so the ceiling holds again afterwards', async () => {
    const account = newAccount('concurrent');
    for (let i = 0; i < 3; i++) {
      const stream = await account.client.chat.completions.create({
        model: UPSTREAM,
        messages: user('done'),
        stream: true,
      });
      for await (const _ of stream) {
        // drain
      }
    }
    fake.enqueue({ status: 500 }, { closeAfterChunks: 3 }, { status: 503 });
    await expect(chat(account.client, UPSTREAM)).rejects.toBeInstanceOf(OpenAI.InternalServerError);
    const broken = await account.client.chat.completions.create({
      model: UPSTREAM,
      messages: user('cut me off'),
      stream: true,
    });
    await expect(
      (async () => {
        for await (const _ of broken) {
          // drain until the error event
        }
      })(),
    ).rejects.toThrow();
    await expect(chat(account.client, UPSTREAM)).rejects.toBeInstanceOf(OpenAI.InternalServerError);
    await recordsOf(account.id, 6);

    fake.setBehavior({ delayBetweenChunksMs: 100 });
    const a = await openStream(account.client);
    const b = await openStream(account.client);
    await refused(account.client.chat.completions.create({ model: UPSTREAM, messages: LONG, stream: true }));
    a.controller.abort();
    b.controller.abort();
    await Promise.all(fake.requests.map((r) => r.settled));
  });
});

describe('rate-limit headers on success', () => {
  const durations = /^(\d+ms|\d+s|\d+m\d+s)$/;

  function expectHeaders(
    headers: Headers,
    expected: { requests: number; tokensIn: number; tokensOut: number },
  ): void {
    const nowSeconds = Date.now() / 1000;
    // The spec's X-RateLimit-* family (requests of the tightest bucket; reset in epoch seconds).
    expect(header(headers, 'x-ratelimit-limit')).toBe(10);
    expect(header(headers, 'x-ratelimit-remaining')).toBe(expected.requests);
    const reset = header(headers, 'x-ratelimit-reset');
    expect(reset).toBeGreaterThanOrEqual(Math.floor(nowSeconds));
    expect(reset).toBeLessThanOrEqual(Math.ceil(nowSeconds) + 7200);
    // The spec's second family: window and tokens in/out.
    expect(header(headers, 'x-gantry-ratelimit-window')).toBe(3600);
    expect(header(headers, 'x-gantry-ratelimit-limit-tokens-in')).toBe(5000);
    expect(header(headers, 'x-gantry-ratelimit-remaining-tokens-in')).toBe(expected.tokensIn);
    expect(header(headers, 'x-gantry-ratelimit-limit-tokens-out')).toBe(20000);
    expect(header(headers, 'x-gantry-ratelimit-remaining-tokens-out')).toBe(expected.tokensOut);
    // OpenAI's x-ratelimit-{limit,remaining,reset}-{requests,tokens}.
    expect(header(headers, 'x-ratelimit-limit-requests')).toBe(10);
    expect(header(headers, 'x-ratelimit-remaining-requests')).toBe(expected.requests);
    expect(headers.get('x-ratelimit-reset-requests')).toMatch(durations);
    expect(header(headers, 'x-ratelimit-limit-tokens')).toBe(5000);
    expect(header(headers, 'x-ratelimit-remaining-tokens')).toBe(expected.tokensIn);
    expect(headers.get('x-ratelimit-reset-tokens')).toMatch(durations);
  }

  it('shows the tightest bucket of every family, decreasing by what each request reserved and used', async () => {
    const account = newAccount('exact');
    const m1 = user('first question about gantries');
    const first = await chat(account.client, LOCAL, { messages: m1, max_tokens: 50 }).withResponse();
    const e1 = countChatInputTokens(m1);
    expectHeaders(first.response.headers, { requests: 9, tokensIn: 5000 - e1, tokensOut: 20000 - 50 });
    const used1 = first.data.usage;
    if (!used1) throw new Error('the local model reports usage');
    await recordsOf(account.id, 1);

    // A stream carries them too; the first request now counts for its real usage, not its reservation.
    const m2 = user('a second, streamed question about rate limits');
    const second = await account.client.chat.completions
      .create({
        model: LOCAL,
        messages: m2,
        max_tokens: 40,
        stream: true,
        stream_options: { include_usage: true },
      })
      .withResponse();
    const e2 = countChatInputTokens(m2);
    expectHeaders(second.response.headers, {
      requests: 8,
      tokensIn: 5000 - used1.prompt_tokens - e2,
      tokensOut: 20000 - used1.completion_tokens - 40,
    });
    let used2: OpenAI.CompletionUsage | undefined;
    for await (const chunk of second.data) used2 = chunk.usage ?? used2;
    if (!used2) throw new Error('the stream reports usage when asked');
    await recordsOf(account.id, 2);

    const third = await fetch(`${gantry.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${account.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: LOCAL, messages: m1, max_tokens: 30, stream: true }),
    });
    expect(third.headers.get('content-type')).toContain('text/event-stream');
    expectHeaders(third.headers, {
      requests: 7,
      tokensIn: 5000 - used1.prompt_tokens - used2.prompt_tokens - e1,
      tokensOut: 20000 - used1.completion_tokens - used2.completion_tokens - 30,
    });
    await third.text();
  });

  it('each model shows its own bucket; failed admissions do not change the numbers', async () => {
    const account = newAccount('default');
    const a = await chat(account.client, LOCAL).withResponse();
    const b = await chat(account.client, LOCAL_B).withResponse();
    expect(a.response.headers.get('x-ratelimit-remaining-requests')).toBe('2');
    expect(b.response.headers.get('x-ratelimit-remaining-requests')).toBe('2');
    // No token ceilings in this tier: no token headers, but the window is still told.
    expect(a.response.headers.get('x-gantry-ratelimit-limit-tokens-in')).toBeNull();
    expect(a.response.headers.get('x-gantry-ratelimit-window')).toBe('2');
    // A request refused before admission (unknown model) spends nothing.
    await expect(chat(account.client, 'acme/nope')).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    const again = await chat(account.client, LOCAL).withResponse();
    expect(again.response.headers.get('x-ratelimit-remaining-requests')).toBe('1');
  });
});
