/**
 * GET /admin/v1/usage end to end, in both modes: real `gantry serve` processes (embedded: the ledger
 * thread writing data/ledger.db; distributed: the Redis Stream sink on a real redis-server) answer chat
 * calls (JSON and streamed) and embeddings on the local models, then the usage answer shows them per day,
 * account and model with the right counts, tokens and cost. Also: filters, the default range, an owner's
 * session seeing only its own account, and the date errors.
 *
 * The models cost 1000 USD per million tokens and 1 USD is 1000 credits (the default rate): a token costs
 * exactly one credit, so each row's cost is its tokens.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addDays, dayOf } from '../../src/usage/query-days.js';
import { type GantryProcess, spawnGantry } from '../helpers/gantry-process.js';
import { describeRedis, startRedis, type TestRedis } from '../helpers/redis.js';
import { type Res, restCall } from '../helpers/rest.js';
import { waitFor } from '../helpers/wait.js';

const ADMIN_KEY = 'admin-key-for-usage-tests-0123456789abcdef';
const ACME_KEY = 'gty_e2e-usage-acme-0123456789abcdefghijklmnopqrst';
const BETA_KEY = 'gty_e2e-usage-beta-0123456789abcdefghijklmnopqrst';
const CHAT = 'gantry/local-chat';
const EMBED = 'gantry/local-embed';
const ONE_CREDIT_PER_TOKEN = '{ amount: 1000, currency: USD, unit: million_token }';

const CONFIG = `
providers:
  local: { kind: local }
tiers:
  default: {}
accounts:
  - name: acme
    keys: [{ name: k, key_env: ACME_KEY }]
  - name: beta
    keys: [{ name: k, key_env: BETA_KEY }]
usage: { flush_ms: 20 }
models:
  - namespace: ${CHAT}
    name: Local chat
    type: text
    vendor: { name: Gantry, slug: gantry }
    apis: [chat]
    billable: true
    pricing: ${ONE_CREDIT_PER_TOKEN}
    routes: [{ provider: local, model: local-chat }]
    defaults: { max_tokens: 40 }
  - namespace: ${EMBED}
    name: Local embeddings
    type: text
    vendor: { name: Gantry, slug: gantry }
    apis: [embeddings]
    billable: true
    pricing: ${ONE_CREDIT_PER_TOKEN}
    routes: [{ provider: local, model: local-embed }]
`;

interface Row {
  day: string;
  account_id: string;
  model: string;
  requests: number;
  input_tokens: number;
  output_tokens: number;
  cost: number;
}

interface UsageAnswer {
  data: Row[];
  from: string;
  to: string;
}

interface ErrorAnswer {
  error: { error_id: string; http_status: number };
}

interface Totals {
  requests: number;
  input_tokens: number;
  output_tokens: number;
}

const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

function usageSuite(mode: 'embedded' | 'redis'): void {
  let redis: TestRedis | undefined;
  let g: GantryProcess;
  let acmeId: string;
  let betaId: string;
  /** The UTC days the calls were made on (two only if the test ran across midnight). */
  let days: Set<string>;
  const expected = new Map<string, Totals>();

  const admin = <T>(query = '') =>
    restCall<T>(g.origin, 'GET', `/admin/v1/usage${query}`, {
      key: null,
      headers: { authorization: `Bearer ${ADMIN_KEY}` },
    });

  async function signIn(key: string): Promise<{ cookie: string; accountId: string }> {
    const res = await restCall<{ account: { id: string } }>(g.origin, 'POST', '/admin/v1/session', {
      key: null,
      body: { key },
    });
    expect(res.status).toBe(200);
    const cookie = (res.headers.get('set-cookie') ?? '').split(';')[0] as string;
    return { cookie, accountId: res.body.account.id };
  }

  function add(accountId: string, model: string, input: number, output: number): void {
    const key = `${accountId} ${model}`;
    const t = expected.get(key) ?? { requests: 0, input_tokens: 0, output_tokens: 0 };
    t.requests += 1;
    t.input_tokens += input;
    t.output_tokens += output;
    expected.set(key, t);
  }

  /** The answer's rows summed over the days of the calls, per account and model. */
  function totals(rows: Row[]): Map<string, Totals & { cost: number }> {
    const out = new Map<string, Totals & { cost: number }>();
    for (const row of rows) {
      expect(days.has(row.day)).toBe(true);
      const key = `${row.account_id} ${row.model}`;
      const t = out.get(key) ?? { requests: 0, input_tokens: 0, output_tokens: 0, cost: 0 };
      t.requests += row.requests;
      t.input_tokens += row.input_tokens;
      t.output_tokens += row.output_tokens;
      t.cost += row.cost;
      out.set(key, t);
    }
    return out;
  }

  beforeAll(async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'gantry-e2e-usage-'));
    dirs.push(dataDir);
    const config = join(dataDir, 'gantry.yaml');
    writeFileSync(config, CONFIG);
    const env: NodeJS.ProcessEnv = { ACME_KEY, BETA_KEY, GANTRY_ADMIN_KEY: ADMIN_KEY };
    if (mode === 'redis') {
      redis = await startRedis();
      env.REDIS_URL = redis.url;
    }
    g = await spawnGantry({ name: mode, config, dataDir, env });
    acmeId = (await signIn(ACME_KEY)).accountId;
    betaId = (await signIn(BETA_KEY)).accountId;

    const first = dayOf(Date.now());
    const acme = new OpenAI({ apiKey: ACME_KEY, baseURL: g.baseURL, maxRetries: 0 });
    const beta = new OpenAI({ apiKey: BETA_KEY, baseURL: g.baseURL, maxRetries: 0 });
    for (const text of ['Hello there', 'Tell me a story about a lighthouse']) {
      const reply = await acme.chat.completions.create({
        model: CHAT,
        messages: [{ role: 'user', content: text }],
      });
      add(acmeId, CHAT, reply.usage?.prompt_tokens ?? -1, reply.usage?.completion_tokens ?? -1);
    }
    const stream = await acme.chat.completions.create({
      model: CHAT,
      messages: [{ role: 'user', content: 'Stream me something' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    let streamed: OpenAI.CompletionUsage | undefined;
    for await (const chunk of stream) streamed = chunk.usage ?? streamed;
    add(acmeId, CHAT, streamed?.prompt_tokens ?? -1, streamed?.completion_tokens ?? -1);
    const embedded = await acme.embeddings.create({ model: EMBED, input: 'embed these words' });
    add(acmeId, EMBED, embedded.usage.prompt_tokens, 0);
    const other = await beta.chat.completions.create({
      model: CHAT,
      messages: [{ role: 'user', content: 'Hi from beta' }],
    });
    add(betaId, CHAT, other.usage?.prompt_tokens ?? -1, other.usage?.completion_tokens ?? -1);
    days = new Set([first, dayOf(Date.now())]);
  }, 60_000);

  afterAll(async () => {
    await g?.stop();
    await redis?.close();
  });

  it('shows every call per day, account and model with its requests, tokens and cost', async () => {
    // Records reach the store in batches (every 20 ms here): wait for the last of them.
    const answer = await waitFor('the five calls in the usage answer', async () => {
      const res = await admin<UsageAnswer>();
      expect(res.status).toBe(200);
      const requests = res.body.data.reduce((sum, row) => sum + row.requests, 0);
      return requests >= 5 ? res.body : undefined;
    });
    const got = totals(answer.data);
    expect([...got.keys()].sort()).toEqual([...expected.keys()].sort());
    for (const [key, want] of expected) {
      expect(got.get(key)).toEqual({ ...want, cost: want.input_tokens + want.output_tokens });
    }
    expect(got.get(`${acmeId} ${CHAT}`)?.requests).toBe(3);
    expect(got.get(`${acmeId} ${CHAT}`)?.input_tokens).toBeGreaterThan(0);
    expect(got.get(`${acmeId} ${CHAT}`)?.output_tokens).toBeGreaterThan(0);
    // The default range: the last 30 days, today (UTC) included.
    expect(answer.to).toBe(dayOf(Date.now()));
    expect(answer.from).toBe(addDays(answer.to, -29));
    for (const row of answer.data) {
      expect(Object.keys(row).sort()).toEqual(
        ['account_id', 'cost', 'day', 'input_tokens', 'model', 'output_tokens', 'requests'].sort(),
      );
    }
  });

  it('filters by account, model and day range', async () => {
    const byAccount = await admin<UsageAnswer>(`?account=${betaId}`);
    expect(byAccount.body.data.map((r) => [r.account_id, r.model])).toEqual([[betaId, CHAT]]);
    const byModel = await admin<UsageAnswer>(`?model=${encodeURIComponent(EMBED)}`);
    expect(byModel.body.data.map((r) => [r.account_id, r.model, r.requests])).toEqual([[acmeId, EMBED, 1]]);
    const both = await admin<UsageAnswer>(`?account=${acmeId}&model=${encodeURIComponent(CHAT)}`);
    expect(totals(both.body.data).get(`${acmeId} ${CHAT}`)?.requests).toBe(3);
    const today = dayOf(Date.now());
    const tomorrow = addDays(today, 1);
    const later = await admin<UsageAnswer>(`?from=${tomorrow}&to=${tomorrow}`);
    expect(later.status).toBe(200);
    expect(later.body).toEqual({ data: [], from: tomorrow, to: tomorrow });
    const earlier = await admin<UsageAnswer>(`?from=2020-01-01&to=2020-01-31`);
    expect(earlier.body.data).toEqual([]);
    const explicit = await admin<UsageAnswer>(`?from=${addDays(today, -1)}&to=${today}`);
    expect(explicit.body.data.reduce((s, r) => s + r.requests, 0)).toBe(5);
  });

  it("gives an owner's console session its own account only", async () => {
    const { cookie } = await signIn(BETA_KEY);
    const own = await restCall<UsageAnswer>(g.origin, 'GET', '/admin/v1/usage', {
      key: null,
      headers: { cookie },
    });
    expect(own.status).toBe(200);
    expect(own.body.data.map((r) => [r.account_id, r.model, r.requests])).toEqual([[betaId, CHAT, 1]]);
    const named = await restCall<UsageAnswer>(g.origin, 'GET', `/admin/v1/usage?account=${betaId}`, {
      key: null,
      headers: { cookie },
    });
    expect(named.body.data).toEqual(own.body.data);
    const another = await restCall<ErrorAnswer>(g.origin, 'GET', `/admin/v1/usage?account=${acmeId}`, {
      key: null,
      headers: { cookie },
    });
    expect(another.status).toBe(404);
    expect(another.body.error.error_id).toBe('NOT_FOUND');
  });

  it('refuses bad dates with the catalogue errors, and an account key with 401', async () => {
    const expectError = (res: Res<ErrorAnswer>, status: number, id: string) => {
      expect(res.status).toBe(status);
      expect(res.body.error.error_id).toBe(id);
    };
    expectError(await admin<ErrorAnswer>('?from=2026-13-01'), 400, 'INVALID_DATE_FORMAT');
    expectError(await admin<ErrorAnswer>('?to=2026-02-30'), 400, 'INVALID_DATE_FORMAT');
    expectError(await admin<ErrorAnswer>('?from=yesterday'), 400, 'INVALID_DATE_FORMAT');
    expectError(await admin<ErrorAnswer>('?from=2026-03-05&to=2026-03-01'), 400, 'INVALID_DATE_RANGE');
    expectError(await admin<ErrorAnswer>('?from=2024-01-01&to=2026-01-01'), 400, 'INVALID_DATE_RANGE');
    expectError(await admin<ErrorAnswer>('?account=a&account=b'), 400, 'INVALID_PARAMETER');
    const withApiKey = await restCall<ErrorAnswer>(g.origin, 'GET', '/admin/v1/usage', {
      key: null,
      headers: { authorization: `Bearer ${ACME_KEY}` },
    });
    expectError(withApiKey, 401, 'UNAUTHORIZED');
    expectError(
      await restCall<ErrorAnswer>(g.origin, 'GET', '/admin/v1/usage', { key: null }),
      401,
      'UNAUTHORIZED',
    );
  });
}

describe('GET /admin/v1/usage, embedded mode (SQLite ledger)', () => {
  usageSuite('embedded');
});

describeRedis('GET /admin/v1/usage, distributed mode (Redis)', () => {
  usageSuite('redis');
});
