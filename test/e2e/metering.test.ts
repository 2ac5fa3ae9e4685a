/**
 * Usage metering, pricing and credits end to end, with the official OpenAI SDK as the client:
 * one usage record per inference request with the right fields, tokens from the upstream's usage (asked
 * for on streams and stripped again when the client did not ask), cost and credits from the model's
 * pricing (cached input priced apart), the 402s of the credit check, and the `gantry credits` CLI.
 *
 * Billable models here cost 1000 USD per million tokens and 1 USD is 1000 credits (the default rate), so a
 * token costs exactly one credit and balances are easy to follow.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import OpenAI, { APIError } from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { countChatInputTokens, countCompletionTokens } from '../../providers/tokens.js';
import { buildApp } from '../../src/app.js';
import { hashKey } from '../../src/auth/keys.js';
import { syncAccounts } from '../../src/bootstrap.js';
import { runCli } from '../../src/cli.js';
import { parseConfig } from '../../src/config/load.js';
import { SqliteStore } from '../../src/store/sqlite.js';
import { SqliteCreditStore, type UsageRecord } from '../../src/usage/index.js';
import { type FakeOpenAI, fakeReply, replyPieces, startFakeOpenAI } from '../helpers/fake-openai.js';
import { type RecordingServer, sendJson, startRecordingServer, writePaced } from '../helpers/fake-server.js';
import { addKey, startGantry, type TestGantry } from '../helpers/gantry.js';
import { ledgerRecords } from '../helpers/usage.js';

const CHAT = 'gantry/local-chat';
const EMBED = 'gantry/local-embed';
const FREE = 'gantry/local-free';
const UPSTREAM = 'acme/up-chat';
const CACHED = 'acme/cached-chat';
const SCRIPTED = 'acme/scripted-chat';

const ONE_CREDIT_PER_TOKEN = '{ amount: 1000, currency: USD, unit: million_token }';

/** What the scripted upstream reports as usage (a real upstream's prompt caching, a miscount…). */
interface ScriptedUsage {
  prompt: number;
  completion: number;
  cached?: number;
}

/**
 * An OpenAI-compatible upstream whose usage is scripted per request: the shared fake always reports 0
 * cached tokens, and this one can report any count, cached tokens included, in JSON and in streams.
 */
async function startScriptedUpstream(): Promise<RecordingServer<ScriptedUsage>> {
  return startRecordingServer<ScriptedUsage>(
    async (ex) => {
      const body = ex.body ?? {};
      const u = ex.behavior;
      const usage = {
        prompt_tokens: u.prompt,
        completion_tokens: u.completion,
        total_tokens: u.prompt + u.completion,
        prompt_tokens_details: { cached_tokens: u.cached ?? 0, audio_tokens: 0 },
      };
      const base = {
        id: `chatcmpl-scripted${ex.id}`,
        created: Math.floor(Date.now() / 1000),
        model: body.model,
      };
      if (body.stream !== true) {
        sendJson(ex.res, 200, {
          ...base,
          object: 'chat.completion',
          choices: [
            {
              index: 0,
              message: { role: 'assistant', content: 'A cached answer.', refusal: null },
              logprobs: null,
              finish_reason: 'stop',
            },
          ],
          usage,
        });
        return;
      }
      const options = body.stream_options as { include_usage?: boolean } | undefined;
      const withUsage = options?.include_usage === true;
      const chunk = (choices: unknown[], extra: Record<string, unknown> = {}) =>
        `data: ${JSON.stringify({ ...base, object: 'chat.completion.chunk', choices, ...(withUsage ? { usage: null } : {}), ...extra })}\n\n`;
      const delta = (d: Record<string, unknown>, finish: string | null = null) => ({
        index: 0,
        delta: d,
        logprobs: null,
        finish_reason: finish,
      });
      const frames = [
        chunk([delta({ role: 'assistant', content: '' })]),
        chunk([delta({ content: 'A cached' })]),
        chunk([delta({ content: ' answer.' })]),
        chunk([delta({}, 'stop')]),
        ...(withUsage ? [chunk([], { usage })] : []),
        'data: [DONE]\n\n',
      ];
      ex.res.writeHead(200, { 'content-type': 'text/event-stream' });
      await writePaced(ex, frames, {});
    },
    {
      name: 'scripted upstream',
      behavior: { prompt: 10, completion: 5 },
      errorBody: (message) => ({ error: { message, type: 'server_error' } }),
    },
  );
}

let fake: FakeOpenAI;
let scripted: RecordingServer<ScriptedUsage>;
let gantry: TestGantry;
let jsonlPath: string;

function modelsYaml(extra = ''): string {
  return `
models:
  - namespace: ${CHAT}
    name: Local chat
    type: text
    apis: [chat, responses]
    billable: true
    pricing: ${ONE_CREDIT_PER_TOKEN}
    routes: [{ provider: local, model: local-chat }]
    defaults: { max_tokens: 50 }
${extra}`;
}

beforeAll(async () => {
  fake = await startFakeOpenAI();
  scripted = await startScriptedUpstream();
  jsonlPath = join(mkdtempSync(join(tmpdir(), 'gantry-metering-')), 'usage.jsonl');
  gantry = await startGantry(`
providers:
  local: { kind: local }
  up:
    kind: openai
    base_url: ${fake.url}
    timeouts: { connect_ms: 1000, first_byte_ms: 5000, idle_ms: 5000, total_ms: 10000 }
  scripted: { kind: openai, base_url: ${scripted.origin}/v1 }
credits: { default_balance: 0 }
usage: { jsonl_path: ${jsonlPath}, flush_ms: 20 }
${modelsYaml(`
  - namespace: ${EMBED}
    name: Local embeddings
    type: text
    apis: [embeddings]
    billable: true
    pricing: ${ONE_CREDIT_PER_TOKEN}
    routes: [{ provider: local, model: local-embed }]
  - namespace: ${FREE}
    name: Free local chat
    type: text
    billable: false
    pricing: ${ONE_CREDIT_PER_TOKEN}
    routes: [{ provider: local, model: local-chat }]
  - namespace: ${UPSTREAM}
    name: Upstream chat
    type: text
    billable: true
    pricing: ${ONE_CREDIT_PER_TOKEN}
    routes: [{ provider: up, model: fake-model }]
    defaults: { max_tokens: 50 }
  - namespace: ${CACHED}
    name: Chat with prompt caching
    type: text
    billable: true
    pricing:
      amount: 10
      currency: USD
      unit: million_token
      criterias:
        - { field: token_type, operator: '==', value: input, billable_price: 10 }
        - { field: token_type, operator: '==', value: cached_input, billable_price: 1 }
        - { field: token_type, operator: '==', value: output, billable_price: 30 }
    routes: [{ provider: scripted, model: cached-model }]
    defaults: { max_tokens: 20 }
  - namespace: ${SCRIPTED}
    name: Chat whose upstream reports more than estimated
    type: text
    billable: true
    pricing: ${ONE_CREDIT_PER_TOKEN}
    routes: [{ provider: scripted, model: scripted-model }]
    defaults: { max_tokens: 10 }
`)}`);
});
afterAll(async () => {
  await gantry?.close();
  await fake?.close();
  await scripted?.close();
});
beforeEach(() => {
  fake.reset();
  scripted.reset();
});

interface Account {
  name: string;
  id: string;
  key: string;
  keyId: string;
  client: OpenAI;
}

let accounts = 0;

/** A fresh account with one key and, unless told otherwise, plenty of credits. */
async function newAccount(credits = 1_000_000): Promise<Account> {
  const name = `metering-${++accounts}`;
  const { id } = gantry.store.upsertAccount(name, 'default', 'active');
  const key = addKey(gantry.store, name);
  const keyId = gantry.store.findKeyByHash(hashKey(key))?.key.id;
  if (!keyId) throw new Error('the key was not stored');
  if (credits !== 0) await gantry.gantry.services.credits.grant(id, credits, 'test');
  return {
    name,
    id,
    key,
    keyId,
    client: new OpenAI({ baseURL: gantry.baseURL, apiKey: key, maxRetries: 0 }),
  };
}

/** The account's records once at least `count` are written (and debited). */
function recordsOf(accountId: string, count: number): Promise<UsageRecord[]> {
  return ledgerRecords(gantry, accountId, count);
}

async function onlyRecord(accountId: string): Promise<UsageRecord> {
  const records = await recordsOf(accountId, 1);
  expect(records).toHaveLength(1);
  return records[0] as UsageRecord;
}

async function balance(accountId: string): Promise<number> {
  return gantry.gantry.services.credits.balance(accountId);
}

const user = (content: string) => [{ role: 'user' as const, content }];

async function rejection(promise: Promise<unknown>): Promise<APIError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(APIError);
  return err as APIError;
}

const UUID_V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

describe('usage records', () => {
  it('writes one record per inference request, with its account, key, model, API, tokens, cost and timings', async () => {
    const account = await newAccount();
    const started = new Date().toISOString();
    const json = await account.client.chat.completions.create({ model: CHAT, messages: user('hello there') });
    let streamed: OpenAI.CompletionUsage | undefined;
    const stream = await account.client.chat.completions.create({
      model: CHAT,
      messages: user('stream please'),
      stream: true,
      stream_options: { include_usage: true },
    });
    for await (const chunk of stream) streamed = chunk.usage ?? streamed;
    const embedded = await account.client.embeddings.create({ model: EMBED, input: ['one', 'two words'] });
    const response = await account.client.responses.create({
      model: CHAT,
      input: 'a response',
      max_output_tokens: 20,
    });
    // Refused before admission: no record.
    await expect(
      account.client.chat.completions.create({ model: CHAT, messages: user('x'), temperature: 9 }),
    ).rejects.toBeInstanceOf(OpenAI.BadRequestError);
    await expect(
      account.client.chat.completions.create({ model: 'acme/unknown', messages: user('x') }),
    ).rejects.toBeInstanceOf(OpenAI.NotFoundError);

    const records = await recordsOf(account.id, 4);
    // …and no more than one per request.
    await new Promise((resolve) => setTimeout(resolve, 50));
    await gantry.gantry.services.usage.flush();
    expect(gantry.gantry.services.ledger?.list({ accountId: account.id })).toHaveLength(4);
    const ended = new Date().toISOString();

    const find = (api: string, stream: boolean) => {
      const found = records.filter((r) => r.api === api && r.stream === stream);
      expect(found, `${api} stream=${stream}`).toHaveLength(1);
      return found[0] as UsageRecord;
    };
    const expectations: Array<[UsageRecord, { model: string; input: number; output: number }]> = [
      [
        find('chat', false),
        { model: CHAT, input: json.usage?.prompt_tokens ?? -1, output: json.usage?.completion_tokens ?? -1 },
      ],
      [
        find('chat', true),
        { model: CHAT, input: streamed?.prompt_tokens ?? -1, output: streamed?.completion_tokens ?? -1 },
      ],
      [find('embeddings', false), { model: EMBED, input: embedded.usage.prompt_tokens, output: 0 }],
      [
        find('responses', false),
        {
          model: CHAT,
          input: response.usage?.input_tokens ?? -1,
          output: response.usage?.output_tokens ?? -1,
        },
      ],
    ];
    for (const [record, expected] of expectations) {
      expect(record).toMatchObject({
        account_id: account.id,
        key_id: account.keyId,
        model: expected.model,
        provider: 'local',
        outcome: 'ok',
        status: 200,
        error_id: null,
        input_tokens: expected.input,
        cached_input_tokens: 0,
        output_tokens: expected.output,
        media_units: null,
        currency: 'USD',
      });
      expect(expected.input).toBeGreaterThan(0);
      const tokens = expected.input + expected.output;
      expect(record.cost).toBeCloseTo(tokens / 1000, 10);
      expect(record.credits).toBeCloseTo(tokens, 6);
      expect(record.id).toMatch(UUID_V7);
      expect(record.time >= started && record.time <= ended).toBe(true);
      expect(record.latency_ms).toBeGreaterThan(0);
      expect(record.latency_ms).toBeLessThan(5000);
      if (record.stream) {
        expect(record.ttft_ms).toBeGreaterThan(0);
        expect(record.ttft_ms).toBeLessThanOrEqual(record.latency_ms);
      } else {
        expect(record.ttft_ms).toBeNull();
      }
    }
    expect(new Set(records.map((r) => r.id)).size).toBe(4);

    // Every credit of every record was debited, once.
    const spent = records.reduce((sum, r) => sum + r.credits, 0);
    expect(await balance(account.id)).toBeCloseTo(1_000_000 - spent, 6);

    // The same records in the JSONL sink; no sink ever holds the key (or its hash).
    const lines = readFileSync(jsonlPath, 'utf8')
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l) as UsageRecord)
      .filter((r) => r.account_id === account.id);
    expect(lines.map((r) => r.id).sort()).toEqual(records.map((r) => r.id).sort());
    const stored = JSON.stringify(records) + readFileSync(jsonlPath, 'utf8');
    expect(stored).not.toContain(account.key);
    expect(stored).not.toContain(account.key.slice(4, 20));
    expect(stored).not.toContain(hashKey(account.key));
  });

  it('asks the upstream for stream usage and strips it from a client that did not ask, metering the upstream count', async () => {
    const account = await newAccount();
    const prompt = 'count these five words please';
    const res = await fetch(`${gantry.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${account.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: UPSTREAM, messages: user(prompt), stream: true }),
    });
    expect(res.status).toBe(200);
    const raw = await res.text();
    expect(fake.requests[0]?.body?.stream_options).toEqual({ include_usage: true });
    // Not a usage chunk, not a `"usage":null` on any chunk: the bytes are what a plain stream looks like.
    expect(raw).not.toContain('"usage"');
    const events = raw.split('\n\n').filter((e) => e !== '');
    expect(events.at(-1)).toBe('data: [DONE]');
    let text = '';
    for (const event of events.slice(0, -1)) {
      expect(event).toMatch(/^data: \{/);
      const chunk = JSON.parse(event.slice(6)) as OpenAI.ChatCompletionChunk;
      expect(chunk.choices).toHaveLength(1);
      text += chunk.choices[0]?.delta.content ?? '';
    }
    expect(text).toBe(fakeReply(prompt));

    const record = await onlyRecord(account.id);
    // The fake counts words; tiktoken would count otherwise, so these numbers can only be the upstream's.
    expect(record).toMatchObject({
      provider: 'up',
      stream: true,
      outcome: 'ok',
      input_tokens: 5,
      output_tokens: replyPieces(fakeReply(prompt)).length,
    });
    expect(record.input_tokens).not.toBe(countChatInputTokens(user(prompt)));
    expect(record.credits).toBeCloseTo(record.input_tokens + record.output_tokens, 6);
  });

  it('keeps include_usage false from the client out of the upstream call, and passes usage to a client that asks', async () => {
    const account = await newAccount();
    const quiet = await account.client.chat.completions.create({
      model: UPSTREAM,
      messages: user('no usage for me'),
      stream: true,
      stream_options: { include_usage: false },
    });
    for await (const chunk of quiet) expect(chunk.usage ?? undefined).toBeUndefined();
    expect(fake.requests[0]?.body?.stream_options).toEqual({ include_usage: true });

    const loud = await account.client.chat.completions.create({
      model: UPSTREAM,
      messages: user('usage for me'),
      stream: true,
      stream_options: { include_usage: true },
    });
    const usages: OpenAI.CompletionUsage[] = [];
    for await (const chunk of loud) if (chunk.usage) usages.push(chunk.usage);
    expect(usages).toHaveLength(1);
    const records = await recordsOf(account.id, 2);
    const last = records.find((r) => r.input_tokens === usages[0]?.prompt_tokens);
    expect(last?.output_tokens).toBe(usages[0]?.completion_tokens);
    expect(records.every((r) => r.outcome === 'ok' && r.input_tokens > 0 && r.output_tokens > 0)).toBe(true);
  });

  it('records upstream failures as errors that cost nothing, and a stream broken mid-way for what it delivered', async () => {
    const account = await newAccount();
    fake.enqueue({ status: 500 });
    const failed = await rejection(
      account.client.chat.completions.create({ model: UPSTREAM, messages: user('x') }),
    );
    expect(failed.status).toBe(502);
    const [error] = await recordsOf(account.id, 1);
    expect(error).toMatchObject({
      outcome: 'error',
      status: 502,
      error_id: 'UPSTREAM_ERROR',
      model: UPSTREAM,
      input_tokens: 0,
      output_tokens: 0,
      cost: 0,
      credits: 0,
      stream: false,
    });

    fake.enqueue({ errorEvent: { afterChunks: 3, message: 'the model crashed' } });
    const stream = await account.client.chat.completions.create({
      model: UPSTREAM,
      messages: user('break after a few words'),
      stream: true,
    });
    let delivered = '';
    await expect(
      (async () => {
        for await (const chunk of stream) delivered += chunk.choices[0]?.delta.content ?? '';
      })(),
    ).rejects.toThrow();
    const records = await recordsOf(account.id, 2);
    const broken = records.find((r) => r.stream);
    expect(delivered).toBe('You said:');
    expect(broken).toMatchObject({
      outcome: 'error',
      status: 200,
      error_id: 'UPSTREAM_ERROR',
      provider: 'up',
      input_tokens: countChatInputTokens(user('break after a few words')),
      output_tokens: countCompletionTokens(delivered),
    });
    expect(broken?.credits).toBeCloseTo((broken?.input_tokens ?? 0) + (broken?.output_tokens ?? 0), 6);
  });

  it('records a client that leaves mid-stream as client_aborted, metered for what it received', async () => {
    const account = await newAccount();
    fake.enqueue({ delayBetweenChunksMs: 100 });
    const controller = new AbortController();
    const stream = await account.client.chat.completions.create(
      { model: UPSTREAM, messages: user('one two three four five six seven eight nine ten'), stream: true },
      { signal: controller.signal },
    );
    let received = '';
    for await (const chunk of stream) {
      received += chunk.choices[0]?.delta.content ?? '';
      if (received !== '') controller.abort();
    }
    expect(await fake.requests[0]?.settled).toBe('aborted');
    const record = await onlyRecord(account.id);
    expect(record).toMatchObject({ outcome: 'client_aborted', stream: true, provider: 'up', status: 200 });
    expect(record.output_tokens).toBeGreaterThanOrEqual(countCompletionTokens(received));
    expect(record.output_tokens).toBeLessThan(
      countCompletionTokens(fakeReply('one two three four five six seven eight nine ten')),
    );
    expect(record.ttft_ms).toBeGreaterThan(0);
  });

  it('records a client that leaves before the answer as client_aborted', async () => {
    const account = await newAccount();
    fake.enqueue({ delayHeadersMs: 2000 });
    const controller = new AbortController();
    const pending = account.client.chat.completions.create(
      { model: UPSTREAM, messages: user('never mind') },
      { signal: controller.signal },
    );
    await fake.waitForRequests(1);
    controller.abort();
    await expect(pending).rejects.toBeInstanceOf(OpenAI.APIUserAbortError);
    expect(await fake.requests[0]?.settled).toBe('aborted');
    const record = await onlyRecord(account.id);
    // Nothing was sent: recorded as 499 (client closed request), not as the reply's default 200.
    expect(record).toMatchObject({ outcome: 'client_aborted', stream: false, model: UPSTREAM, status: 499 });
  });
});

describe('pricing', () => {
  it('prices cached input tokens apart, from the upstream usage, in JSON and in streams', async () => {
    const account = await newAccount();
    scripted.setBehavior({ prompt: 1000, cached: 600, completion: 100 });
    const completion = await account.client.chat.completions.create({
      model: CACHED,
      messages: user('cached?'),
    });
    expect(completion.usage?.prompt_tokens_details?.cached_tokens).toBe(600);
    const stream = await account.client.chat.completions.create({
      model: CACHED,
      messages: user('cached, streamed?'),
      stream: true,
    });
    for await (const chunk of stream) expect(chunk.usage ?? undefined).toBeUndefined();

    const records = await recordsOf(account.id, 2);
    expect(records).toHaveLength(2);
    // 400 fresh input × $10/M + 600 cached × $1/M + 100 output × $30/M = $0.0076 = 7.6 credits
    // (all 1000 input at the input rate would be $0.013).
    for (const record of records) {
      expect(record).toMatchObject({
        model: CACHED,
        provider: 'scripted',
        input_tokens: 1000,
        cached_input_tokens: 600,
        output_tokens: 100,
        currency: 'USD',
      });
      expect(record.cost).toBeCloseTo(0.0076, 10);
      expect(record.credits).toBeCloseTo(7.6, 6);
    }
    expect(await balance(account.id)).toBeCloseTo(1_000_000 - 15.2, 6);
  });
});

describe('credits', () => {
  it('refuses a billable model with 402 INSUFFICIENT_CREDITS at 0 credits; after a grant, each record is debited', async () => {
    const account = await newAccount(0);
    expect(await balance(account.id)).toBe(0);
    const err = await rejection(
      account.client.chat.completions.create({ model: UPSTREAM, messages: user('hi'), max_tokens: 5 }),
    );
    expect(err.status).toBe(402);
    expect(err.error).toMatchObject({ error_id: 'INSUFFICIENT_CREDITS', code: 'insufficient_credits' });
    expect(fake.requests).toHaveLength(0);

    expect(await gantry.gantry.services.credits.grant(account.id, 100, 'welcome')).toBe(100);
    const completion = await account.client.chat.completions.create({
      model: UPSTREAM,
      messages: user('now it works'),
      max_tokens: 20,
    });
    expect(completion.choices[0]?.message.content).toBe(fakeReply('now it works'));
    const record = await onlyRecord(account.id);
    const tokens = (completion.usage?.prompt_tokens ?? 0) + (completion.usage?.completion_tokens ?? 0);
    expect(record.credits).toBeCloseTo(tokens, 6);
    expect(await balance(account.id)).toBeCloseTo(100 - record.credits, 6);

    // The check uses the worst case: the estimated prompt plus max_tokens (else the model's default).
    const tooDear = await rejection(
      account.client.chat.completions.create({ model: UPSTREAM, messages: user('hi'), max_tokens: 200 }),
    );
    expect(tooDear.status).toBe(402);
    expect((tooDear.error as { error_id?: string }).error_id).toBe('INSUFFICIENT_CREDITS');
    // Embeddings reserve only their input.
    const embedding = await account.client.embeddings.create({ model: EMBED, input: 'cheap' });
    expect(embedding.data).toHaveLength(1);
    expect(fake.requests).toHaveLength(1);
  });

  it('refuses everything billable with 402 PAYMENT_REQUIRED once the real cost took the balance below 0', async () => {
    const account = await newAccount(50);
    // Admitted on its estimate (a few prompt tokens + max_tokens 10), the call costs what the upstream reports.
    scripted.setBehavior({ prompt: 100, completion: 10 });
    await account.client.chat.completions.create({ model: SCRIPTED, messages: user('hi') });
    const record = await onlyRecord(account.id);
    expect(record.credits).toBeCloseTo(110, 6);
    expect(await balance(account.id)).toBeCloseTo(-60, 6);

    const err = await rejection(
      account.client.chat.completions.create({ model: CHAT, messages: user('hi'), max_tokens: 1 }),
    );
    expect(err.status).toBe(402);
    expect(err.error).toMatchObject({ error_id: 'PAYMENT_REQUIRED', code: 'payment_required' });
    expect(scripted.requests).toHaveLength(1);

    // Non-billable models stay free, even now; they are metered at no cost.
    const free = await account.client.chat.completions.create({ model: FREE, messages: user('free?') });
    expect(free.choices[0]?.message.content).toContain('free?');
    const records = await recordsOf(account.id, 2);
    const freeRecord = records.find((r) => r.model === FREE);
    expect(freeRecord).toMatchObject({ cost: 0, credits: 0, outcome: 'ok' });
    expect(freeRecord?.input_tokens).toBeGreaterThan(0);
    expect(await balance(account.id)).toBeCloseTo(-60, 6);

    // Paying the debt reopens the account.
    await gantry.gantry.services.credits.grant(account.id, 100, 'top-up');
    await account.client.chat.completions.create({ model: CHAT, messages: user('hi'), max_tokens: 1 });
  });

  it('never refuses a non-billable model at 0 credits', async () => {
    const account = await newAccount(0);
    for (let i = 0; i < 3; i++) {
      await account.client.chat.completions.create({ model: FREE, messages: user('free'), stream: i === 1 });
    }
    const records = await recordsOf(account.id, 3);
    expect(records.map((r) => [r.outcome, r.credits])).toEqual([
      ['ok', 0],
      ['ok', 0],
      ['ok', 0],
    ]);
    expect(await balance(account.id)).toBe(0);
  });
});

describe('the gantry credits command', () => {
  const ROOT = new URL('../..', import.meta.url).pathname;
  const TSX = pathToFileURL(join(ROOT, 'node_modules/tsx/dist/loader.mjs')).href;

  function gantryCli(
    args: string[],
    cwd: string,
  ): Promise<{ code: number | null; stdout: string; stderr: string }> {
    return new Promise((resolve, reject) => {
      const child = spawn(process.execPath, ['--import', TSX, join(ROOT, 'src/main.ts'), ...args], {
        cwd,
        env: { ...process.env, LOG_LEVEL: 'warn' },
      });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (d: Buffer) => {
        stdout += d.toString();
      });
      child.stderr.on('data', (d: Buffer) => {
        stderr += d.toString();
      });
      child.on('error', reject);
      child.on('exit', (code) => resolve({ code, stdout, stderr }));
    });
  }

  /** `gantry ARGS` through the CLI's runCli(), in this process, with its output captured. */
  async function inProcess(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
    const out: string[] = [];
    const err: string[] = [];
    const stdout = vi.spyOn(process.stdout, 'write').mockImplementation((chunk) => {
      out.push(String(chunk));
      return true;
    });
    const stderr = vi.spyOn(process.stderr, 'write').mockImplementation((chunk) => {
      err.push(String(chunk));
      return true;
    });
    try {
      const code = await runCli(args);
      return { code, stdout: out.join(''), stderr: err.join('') };
    } finally {
      stdout.mockRestore();
      stderr.mockRestore();
    }
  }

  /** A fresh folder with a config (data dir inside it, account acme, 0 credits by default) for the CLI. */
  function creditsDataDir(): { cwd: string; dataDir: string; configPath: string; yaml: string } {
    const cwd = mkdtempSync(join(tmpdir(), 'gantry-credits-'));
    const dataDir = join(cwd, 'data');
    const configPath = join(cwd, 'gantry.yaml');
    const yaml = `
server: { data_dir: ${dataDir} }
providers:
  local: { kind: local }
credits: { default_balance: 0 }
accounts: [{ name: acme }]
${modelsYaml()}`;
    writeFileSync(configPath, yaml);
    return { cwd, dataDir, configPath, yaml };
  }

  it('grants credits and shows balances on a data dir that a running Gantry uses', async () => {
    const { cwd, dataDir, configPath, yaml } = creditsDataDir();
    const cli = (...args: string[]) => gantryCli([...args, '--config', configPath], cwd);

    // The real command, as an operator runs it (spawning costs ~1.5 s, so twice only).
    const granted = await cli('credits', 'grant', '--account', 'acme', '--amount', '50', '--note', 'welcome');
    expect(granted).toMatchObject({ code: 0, stdout: '50\n' });
    // Its mistakes, through the same entry point run in this process.
    expect(
      await inProcess('credits', 'grant', '--account', 'nobody', '--amount', '5', '--config', configPath),
    ).toMatchObject({ code: 1, stderr: expect.stringContaining('no account "nobody"') });
    expect((await inProcess('credits', 'grant', '--account', 'acme', '--config', configPath)).code).toBe(2);
    expect(
      (await inProcess('credits', 'grant', '--account', 'acme', '--amount', 'lots', '--config', configPath))
        .code,
    ).toBe(2);
    expect((await inProcess('credits', 'balance', '--config', configPath)).code).toBe(2);
    expect(await inProcess('credits', 'balance', '--account', 'acme', '--config', configPath)).toMatchObject({
      code: 0,
      stdout: '50\n',
    });

    // A Gantry on the same data dir sees the grant and debits what it serves.
    const config = parseConfig(yaml, configPath, {});
    const store = new SqliteStore(join(dataDir, 'gantry.db'));
    syncAccounts(store, config);
    const key = addKey(store, 'acme');
    const { app, gantry: served } = await buildApp(config, store, { logger: false, processMetrics: false });
    let spent = 0;
    try {
      await app.listen({ host: '127.0.0.1', port: 0 });
      const { port } = app.server.address() as AddressInfo;
      const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: key, maxRetries: 0 });
      const completion = await client.chat.completions.create({
        model: CHAT,
        messages: user('hi'),
        max_tokens: 5,
      });
      spent = (completion.usage?.prompt_tokens ?? 0) + (completion.usage?.completion_tokens ?? 0);
      expect(spent).toBeGreaterThan(0);
      await served.services.usage.flush();
    } finally {
      await app.close();
      store.close();
    }

    const shown = await cli('credits', 'balance', '--account', 'acme');
    expect(shown.code).toBe(0);
    expect(Number(shown.stdout)).toBeCloseTo(50 - spent, 6);
    // A negative grant is a correction; it may take the balance below 0.
    const corrected = await inProcess(
      'credits',
      'grant',
      '--account',
      'acme',
      '--amount=-100',
      '--config',
      configPath,
    );
    expect(corrected.code).toBe(0);
    expect(Number(corrected.stdout)).toBeCloseTo(50 - spent - 100, 6);
  });

  it('refuses on a data dir whose credits an older Gantry kept in gantry.db, until the server has moved them', async () => {
    const { dataDir, configPath, yaml } = creditsDataDir();
    const config = parseConfig(yaml, configPath, {});
    // The data dir as an earlier Gantry left it: balances and movements in gantry.db.
    const old = new SqliteStore(join(dataDir, 'gantry.db'));
    syncAccounts(old, config);
    const acme = old.getAccountByName('acme');
    if (!acme) throw new Error('no account acme');
    new SqliteCreditStore(old.handle, { defaultBalance: 0 }).grant(acme.id, 7, 'granted by the old version');
    old.close();

    const refused = await inProcess('credits', 'balance', '--account', 'acme', '--config', configPath);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('run `gantry serve` once');
    expect(
      await inProcess('credits', 'grant', '--account', 'acme', '--amount', '1', '--config', configPath),
    ).toMatchObject({ code: 1 });

    // The server's start moves them; from then on the CLI works on ledger.db.
    const store = new SqliteStore(join(dataDir, 'gantry.db'));
    const { app } = await buildApp(config, store, { logger: false, processMetrics: false });
    await app.close();
    store.close();
    expect(await inProcess('credits', 'balance', '--account', 'acme', '--config', configPath)).toMatchObject({
      code: 0,
      stdout: '7\n',
    });
  });
});
