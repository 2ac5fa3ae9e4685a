/**
 * GET /metrics parsed with a real Prometheus text-format parser after real traffic through the
 * official OpenAI SDK: chat (JSON and stream), embeddings, responses, a 429, and an upstream failure that
 * falls back. Checks names, types and labels, the OpenTelemetry GenAI names, gauges back at rest, label
 * values bounded (route patterns, never a key or an account), and the bearer token on the endpoint.
 */
import { createRequire } from 'node:module';
import { connect, type Socket } from 'node:net';
import OpenAI, { RateLimitError } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashKey } from '../../src/auth/keys.js';
import { type FakeOpenAI, startFakeOpenAI } from '../helpers/fake-openai.js';
import { LOCAL_CONFIG, startGantry, type TestGantry } from '../helpers/gantry.js';
import { until } from '../helpers/wait.js';

/** parse-prometheus-text-format ships no types; this is the part of its output the tests read. */
interface ParsedSample {
  labels?: Record<string, string>;
  value?: string;
  buckets?: Record<string, string>;
  count?: string;
  sum?: string;
}
interface ParsedFamily {
  name: string;
  help: string;
  type: 'COUNTER' | 'GAUGE' | 'HISTOGRAM' | 'SUMMARY' | 'UNTYPED';
  metrics: ParsedSample[];
}
const parsePrometheusTextFormat = createRequire(import.meta.url)('parse-prometheus-text-format') as (
  text: string,
) => ParsedFamily[];

const METRICS_TOKEN = 'metrics-scrape-token-0123456789';
const CHAT = 'gantry/local-chat';
const SLOW = 'gantry/slow-chat';
const EMBED = 'gantry/local-embed';
const LIMITED = 'gantry/limited-chat';
const FALLBACK = 'acme/fallback-chat';

let fake: FakeOpenAI;
let gantry: TestGantry;
let client: OpenAI;

beforeAll(async () => {
  fake = await startFakeOpenAI({ behavior: { status: 503 } });
  gantry = await startGantry(
    `
providers:
  local: { kind: local }
  slow: { kind: local, chunk_delay_ms: 30 }
  flaky:
    kind: openai
    base_url: ${fake.url}
    timeouts: { connect_ms: 1000, first_byte_ms: 5000, idle_ms: 5000, total_ms: 10000 }
tiers:
  default:
    window_seconds: 2
    models:
      ${LIMITED}: { requests: 1 }
metrics: { token_env: GANTRY_METRICS_TOKEN }
models:
  - { namespace: ${CHAT}, name: Chat, type: text, apis: [chat, responses], routes: [{ provider: local, model: local-chat }] }
  - { namespace: ${SLOW}, name: Slow chat, type: text, routes: [{ provider: slow, model: local-chat }] }
  - { namespace: ${EMBED}, name: Embed, type: text, apis: [embeddings], routes: [{ provider: local, model: local-embed }] }
  - { namespace: ${LIMITED}, name: Limited chat, type: text, routes: [{ provider: local, model: local-chat }] }
  - namespace: ${FALLBACK}
    name: Chat with a fallback
    type: text
    routes: [{ provider: flaky, model: fake-model }, { provider: local, model: local-chat }]
`,
    { GANTRY_METRICS_TOKEN: METRICS_TOKEN },
  );
  client = new OpenAI({ baseURL: gantry.baseURL, apiKey: gantry.key, maxRetries: 0 });
});
afterAll(async () => {
  await gantry?.close();
  await fake?.close();
});

interface Scrape {
  text: string;
  family(name: string): ParsedFamily;
  /** Every series of a sample name, histogram parts (`_count`, `_sum`, `_bucket`) included, with labels. */
  series(name: string): Array<{ labels: Record<string, string>; value: number }>;
  /** The value of the one series of `name` whose labels include `labels`; 0 when there is none. */
  value(name: string, labels?: Record<string, string>): number;
}

/**
 * Every sample by name, histograms split into their `_bucket`, `_sum` and `_count` series with labels. Untyped,
 * those alternate (bucket, sum, count for each label set), so one name comes back as several families.
 */
function flatSamples(text: string): Map<string, ParsedSample[]> {
  const samples = new Map<string, ParsedSample[]>();
  for (const family of parsePrometheusTextFormat(
    text.replace(/^# TYPE (\S+) histogram$/gm, '# TYPE $1 untyped'),
  )) {
    samples.set(family.name, [...(samples.get(family.name) ?? []), ...family.metrics]);
  }
  return samples;
}

/**
 * The parser folds a labelled histogram into one label-less entry, so it is run twice: once as is (the
 * families, their types and help), and once with histograms declared untyped, which makes their
 * `_bucket`, `_sum` and `_count` series plain families that keep their labels.
 */
function parse(text: string): Scrape {
  const families = new Map(parsePrometheusTextFormat(text).map((f) => [f.name, f]));
  const flat = flatSamples(text);
  const series = (name: string) =>
    (flat.get(name) ?? []).map((m) => ({ labels: m.labels ?? {}, value: Number(m.value) }));
  return {
    text,
    family(name) {
      const family = families.get(name);
      if (!family) throw new Error(`no metric family ${name} in /metrics`);
      return family;
    },
    series,
    value(name, labels = {}) {
      const matching = series(name).filter((s) =>
        Object.entries(labels).every(([k, v]) => s.labels[k] === v),
      );
      expect(matching.length, `${name} ${JSON.stringify(labels)}`).toBeLessThanOrEqual(1);
      return matching[0]?.value ?? 0;
    },
  };
}

async function scrape(): Promise<Scrape> {
  const res = await fetch(`${gantry.origin}/metrics`, {
    headers: { authorization: `Bearer ${METRICS_TOKEN}` },
  });
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
  return parse(await res.text());
}

/** Scrapes until `ready` holds (metrics of a response are updated when its connection closes). */
async function scrapeUntil(ready: (s: Scrape) => boolean): Promise<Scrape> {
  const deadline = Date.now() + 2000;
  for (;;) {
    const s = await scrape();
    if (ready(s) || Date.now() > deadline) return s;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

const user = (content: string) => [{ role: 'user' as const, content }];

describe('GET /metrics after traffic', () => {
  const used = { input: 0, output: 0, chats: 0 };
  let metrics: Scrape;

  beforeAll(async () => {
    const json = await client.chat.completions.create({ model: CHAT, messages: user('count me') });
    const stream = await client.chat.completions.create({
      model: CHAT,
      messages: user('stream me'),
      stream: true,
      stream_options: { include_usage: true },
    });
    let streamed: OpenAI.CompletionUsage | undefined;
    for await (const chunk of stream) streamed = chunk.usage ?? streamed;
    for (const u of [json.usage, streamed]) {
      used.input += u?.prompt_tokens ?? Number.NaN;
      used.output += u?.completion_tokens ?? Number.NaN;
    }
    used.chats = 2;
    await client.embeddings.create({ model: EMBED, input: 'embed me' });
    await client.responses.create({ model: CHAT, input: 'respond', max_output_tokens: 16 });
    await client.chat.completions.create({ model: LIMITED, messages: user('first') });
    await expect(
      client.chat.completions.create({ model: LIMITED, messages: user('second') }),
    ).rejects.toBeInstanceOf(RateLimitError);
    const fallback = await client.chat.completions.create({ model: FALLBACK, messages: user('fall back') });
    expect(fallback.choices[0]?.message.content).toContain('fall back');
    expect(fake.requests).toHaveLength(1);
    await client.models.list({ query: { limit: 1 } });
    await client.models.retrieve(CHAT);
    await fetch(`${gantry.baseURL}/no-such-route/private-path-segment?x=1`, {
      headers: { authorization: `Bearer ${gantry.key}` },
    });
    // Done once the last chat and the responses call have been counted.
    metrics = await scrapeUntil(
      (s) =>
        s.value('gantry_http_requests_total', { route: '/v1/chat/completions', model: FALLBACK }) === 1 &&
        s.value('gen_ai_server_request_duration_seconds_count', { gen_ai_operation_name: 'responses' }) === 1,
    );
  });

  it('counts HTTP requests by route pattern, method, status, catalogue model and provider', () => {
    expect(metrics.family('gantry_http_requests_total').type).toBe('COUNTER');
    const name = 'gantry_http_requests_total';
    const chat = {
      route: '/v1/chat/completions',
      method: 'POST',
      status: '200',
      model: CHAT,
      provider: 'local',
    };
    expect(metrics.value(name, chat)).toBe(2);
    expect(
      metrics.value(name, { route: '/v1/embeddings', status: '200', model: EMBED, provider: 'local' }),
    ).toBe(1);
    expect(
      metrics.value(name, { route: '/v1/responses', status: '200', model: CHAT, provider: 'local' }),
    ).toBe(1);
    expect(metrics.value(name, { ...chat, model: LIMITED })).toBe(1);
    expect(metrics.value(name, { route: '/v1/chat/completions', status: '429', model: LIMITED })).toBe(1);
    // The provider that answered after the fallback, not the one that failed.
    expect(metrics.value(name, { route: '/v1/chat/completions', status: '200', model: FALLBACK })).toBe(1);
    expect(metrics.value(name, { route: '/v1/chat/completions', model: FALLBACK, provider: 'local' })).toBe(
      1,
    );
    // Route patterns, never raw URLs (no slug, no query string, no unknown path).
    expect(metrics.value(name, { route: '/v1/models', method: 'GET', status: '200' })).toBe(1);
    expect(metrics.value(name, { route: '/v1/models/*', method: 'GET', status: '200' })).toBe(1);
    for (const s of metrics.series(name)) {
      expect(s.labels.route).not.toMatch(/[?%]|local-chat|private-path-segment/);
      expect(Object.keys(s.labels).sort()).toEqual(['method', 'model', 'provider', 'route', 'status']);
    }
    expect(metrics.series(name).some((s) => s.labels.status === '404')).toBe(true);
  });

  it('times HTTP requests in a histogram with the same bounded labels', () => {
    const family = metrics.family('gantry_http_request_duration_seconds');
    expect(family.type).toBe('HISTOGRAM');
    const labels = { route: '/v1/chat/completions', status: '200', model: CHAT, provider: 'local' };
    expect(metrics.value('gantry_http_request_duration_seconds_count', labels)).toBe(2);
    expect(metrics.value('gantry_http_request_duration_seconds_sum', labels)).toBeGreaterThan(0);
    expect(metrics.value('gantry_http_request_duration_seconds_bucket', { ...labels, le: '+Inf' })).toBe(2);
  });

  it('uses the OpenTelemetry GenAI names for operation duration, time to first token and token usage', () => {
    const op = { gen_ai_request_model: CHAT, gen_ai_provider_name: 'local' };
    expect(metrics.family('gen_ai_server_request_duration_seconds').type).toBe('HISTOGRAM');
    expect(
      metrics.value('gen_ai_server_request_duration_seconds_count', { ...op, gen_ai_operation_name: 'chat' }),
    ).toBe(2);
    expect(
      metrics.value('gen_ai_server_request_duration_seconds_count', {
        gen_ai_operation_name: 'embeddings',
        gen_ai_request_model: EMBED,
      }),
    ).toBe(1);
    expect(
      metrics.value('gen_ai_server_request_duration_seconds_count', {
        ...op,
        gen_ai_operation_name: 'responses',
      }),
    ).toBe(1);

    expect(metrics.family('gen_ai_server_time_to_first_token_seconds').type).toBe('HISTOGRAM');
    // Only the chat stream has a first token; JSON answers have none.
    expect(
      metrics.value('gen_ai_server_time_to_first_token_seconds_count', {
        ...op,
        gen_ai_operation_name: 'chat',
      }),
    ).toBe(1);
    expect(
      metrics.value('gen_ai_server_time_to_first_token_seconds_sum', {
        ...op,
        gen_ai_operation_name: 'chat',
      }),
    ).toBeGreaterThan(0);

    expect(metrics.family('gen_ai_client_token_usage').type).toBe('HISTOGRAM');
    const chatTokens = { ...op, gen_ai_operation_name: 'chat' };
    expect(
      metrics.value('gen_ai_client_token_usage_count', { ...chatTokens, gen_ai_token_type: 'input' }),
    ).toBe(2);
    expect(
      metrics.value('gen_ai_client_token_usage_sum', { ...chatTokens, gen_ai_token_type: 'input' }),
    ).toBe(used.input);
    expect(
      metrics.value('gen_ai_client_token_usage_sum', { ...chatTokens, gen_ai_token_type: 'output' }),
    ).toBe(used.output);
    expect(
      metrics.value('gen_ai_client_token_usage_count', {
        gen_ai_operation_name: 'embeddings',
        gen_ai_token_type: 'input',
      }),
    ).toBe(1);
    expect(
      metrics.value('gen_ai_client_token_usage_count', {
        gen_ai_operation_name: 'embeddings',
        gen_ai_token_type: 'output',
      }),
    ).toBe(0);
    const types = new Set(
      metrics.series('gen_ai_client_token_usage_count').map((s) => s.labels.gen_ai_token_type),
    );
    expect([...types].sort()).toEqual(['input', 'output']);
  });

  it('counts tokens by model, provider and direction', () => {
    expect(metrics.family('gantry_tokens_total').type).toBe('COUNTER');
    const labels = { model: EMBED, provider: 'local' };
    expect(metrics.value('gantry_tokens_total', { ...labels, direction: 'input' })).toBeGreaterThan(0);
    expect(metrics.value('gantry_tokens_total', { ...labels, direction: 'output' })).toBe(0);
    expect(
      metrics.value('gantry_tokens_total', { model: CHAT, provider: 'local', direction: 'cached_input' }),
    ).toBe(0);
    // cached_input appears once some upstream reports cached tokens.
    const directions = new Set(metrics.series('gantry_tokens_total').map((s) => s.labels.direction));
    expect(directions).toContain('input');
    expect(directions).toContain('output');
    for (const d of directions) expect(['input', 'output', 'cached_input']).toContain(d);
    // The chat model's tokens: both chats plus the responses call.
    expect(
      metrics.value('gantry_tokens_total', { model: CHAT, provider: 'local', direction: 'input' }),
    ).toBeGreaterThan(used.input);
  });

  it('counts rate-limit rejections by metric and scope, upstream errors by provider and failure, and fallbacks', () => {
    expect(metrics.family('gantry_rate_limit_rejections_total').type).toBe('COUNTER');
    expect(metrics.series('gantry_rate_limit_rejections_total')).toEqual([
      { labels: { metric: 'requests', scope: 'model' }, value: 1 },
    ]);
    expect(metrics.family('gantry_upstream_errors_total').type).toBe('COUNTER');
    expect(metrics.series('gantry_upstream_errors_total')).toEqual([
      { labels: { provider: 'flaky', failure: 'status' }, value: 1 },
    ]);
    expect(metrics.family('gantry_fallbacks_total').type).toBe('COUNTER');
    expect(metrics.series('gantry_fallbacks_total')).toEqual([
      { labels: { provider: 'flaky', model: FALLBACK }, value: 1 },
    ]);
  });

  it('reports the limiter and the usage sinks as up', () => {
    expect(metrics.family('gantry_limiter_up').type).toBe('GAUGE');
    expect(metrics.value('gantry_limiter_up', { backend: 'memory' })).toBe(1);
    expect(metrics.family('gantry_usage_sink_up').type).toBe('GAUGE');
    const sinks = metrics.series('gantry_usage_sink_up');
    expect(sinks.map((s) => s.labels.sink).sort()).toEqual(['credits', 'sqlite']);
    expect(sinks.every((s) => s.value === 1)).toBe(true);
  });

  it('never puts a key, a key id or an account id in a label (or anywhere in the page)', () => {
    const test = gantry.store.getAccountByName('test');
    const keyId = gantry.store.findKeyByHash(hashKey(gantry.key))?.key.id;
    const secrets = [gantry.key, gantry.otherKey, hashKey(gantry.key), test?.id, keyId, 'test-key'];
    expect(secrets.slice(0, 5).every((s) => typeof s === 'string' && s.length > 8)).toBe(true);
    const families = parsePrometheusTextFormat(metrics.text);
    const values = new Set<string>();
    for (const samples of flatSamples(metrics.text).values()) {
      for (const sample of samples) for (const v of Object.values(sample.labels ?? {})) values.add(v);
    }
    expect(families.length).toBeGreaterThan(15);
    expect(values.size).toBeGreaterThan(10);
    for (const secret of secrets) {
      for (const value of values) expect(value).not.toContain(secret as string);
      expect(metrics.text).not.toContain(secret as string);
    }
  });
});

describe('in-flight gauges', () => {
  it('count a stream while it is open and come back to 0 afterwards', async () => {
    const stream = await client.chat.completions.create({
      model: SLOW,
      messages: user('a slow stream of many words to keep it open for a while'),
      stream: true,
    });
    const during = await scrape();
    expect(during.family('gantry_inflight_requests').type).toBe('GAUGE');
    expect(during.family('gantry_inflight_streams').type).toBe('GAUGE');
    expect(during.value('gantry_inflight_streams')).toBe(1);
    expect(during.value('gantry_inflight_requests', { route: 'chat' })).toBe(1);
    for await (const _ of stream) {
      // drain
    }
    await client.embeddings.create({ model: EMBED, input: 'and one more' });
    const after = await scrapeUntil((s) => s.value('gantry_inflight_streams') === 0);
    expect(after.value('gantry_inflight_streams')).toBe(0);
    const inflight = after.series('gantry_inflight_requests');
    expect(inflight.length).toBeGreaterThan(0);
    expect(inflight.every((s) => s.value === 0)).toBe(true);
  });

  it('come back to 0 after a client abandons a stream', async () => {
    const controller = new AbortController();
    const stream = await client.chat.completions.create(
      { model: SLOW, messages: user('abandon this slow stream half way'), stream: true },
      { signal: controller.signal },
    );
    for await (const _ of stream) controller.abort();
    const after = await scrapeUntil((s) => s.value('gantry_inflight_streams') === 0);
    expect(after.value('gantry_inflight_streams')).toBe(0);
    expect(after.series('gantry_inflight_requests').every((s) => s.value === 0)).toBe(true);
    expect(
      after.value('gen_ai_server_request_duration_seconds_count', {
        gen_ai_request_model: SLOW,
        error_type: 'client_aborted',
      }),
    ).toBe(1);
  });
});

describe('the metrics token', () => {
  it('protects /metrics: no token, a wrong token or an API key get 401', async () => {
    for (const authorization of [undefined, 'Bearer wrong-token', `Bearer ${gantry.key}`, METRICS_TOKEN]) {
      const res = await fetch(`${gantry.origin}/metrics`, {
        headers: authorization ? { authorization } : {},
      });
      expect(res.status, String(authorization)).toBe(401);
      const body = (await res.json()) as { error?: { error_id?: string } };
      expect(body.error?.error_id).toBe('UNAUTHORIZED');
    }
    const ok = await fetch(`${gantry.origin}/metrics`, {
      headers: { authorization: `Bearer ${METRICS_TOKEN}` },
    });
    expect(ok.status).toBe(200);
    expect(await ok.text()).toContain('# TYPE gantry_http_requests_total counter');
  });
});

describe('metrics on their own port', () => {
  it('serves GET /metrics on metrics.port and not on the API port', async () => {
    const g = await startGantry(`metrics: { port: 0 }\n${LOCAL_CONFIG}`);
    try {
      const server = (g.app as unknown as { metricsServer: import('node:http').Server }).metricsServer;
      const { port } = server.address() as { port: number };
      const own = await fetch(`http://127.0.0.1:${port}/metrics`);
      expect(own.status).toBe(200);
      expect(await own.text()).toContain('# TYPE gantry_http_requests_total counter');
      const other = await fetch(`http://127.0.0.1:${port}/other`);
      expect(other.status).toBe(404);
      expect(await other.json()).toMatchObject({
        status: false,
        error: { error_id: 'NOT_FOUND', http_status: 404 },
      });
      expect((await fetch(`${g.origin}/metrics`)).status).toBe(404);
    } finally {
      await g.close();
    }
  });

  it('bounds its connections as the API port does: a trickled request is cut, one address holds at most the cap', async () => {
    const g = await startGantry(
      `metrics: { port: 0 }\nserver: { headers_timeout_ms: 300, max_connections_per_ip: 2 }\n${LOCAL_CONFIG}`,
    );
    const sockets: Socket[] = [];
    const open = (port: number) => {
      const socket = connect(port, '127.0.0.1');
      socket.on('error', () => {});
      sockets.push(socket);
      let received = '';
      let closed = false;
      socket.on('data', (chunk: Buffer) => {
        received += chunk.toString('latin1');
      });
      socket.on('close', () => {
        closed = true;
      });
      return { socket, received: () => received, closed: () => closed };
    };
    try {
      const server = (g.app as unknown as { metricsServer: import('node:http').Server }).metricsServer;
      const { port } = server.address() as { port: number };
      // Headers that never end: closed after headers_timeout_ms, not held for good.
      const slow = open(port);
      slow.socket.write('GET /metrics HTTP/1.1\r\nhost: x\r\n');
      await until(
        'the metrics port to close a connection whose headers never end',
        () => slow.closed(),
        3_000,
      );
      // Two open keep-alive connections are the cap: a third is refused with 429.
      const held = [open(port), open(port)];
      for (const conn of held) conn.socket.write('GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n');
      await until('two answers', () => held.every((c) => c.received().startsWith('HTTP/1.1 200')));
      const refused = open(port);
      refused.socket.write('GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n');
      await until('the third connection to be refused', () => refused.closed(), 3_000);
      expect(refused.received()).toMatch(/^HTTP\/1\.1 429/);
    } finally {
      for (const socket of sockets) socket.destroy();
      await g.close();
    }
  });
});
