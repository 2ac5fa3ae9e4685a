/**
 * Health-aware routing end to end: a real Gantry in front of fake upstreams (real HTTP servers on
 * 127.0.0.1) that die, hang, stall, slow down, fail with 500, 429 and 529, and recover; the client is the
 * official OpenAI SDK, what Gantry sends is checked against OpenAI's schemas.
 */
import { createServer, type Server, type Socket } from 'node:net';
import { Redis } from 'ioredis';
import OpenAI from 'openai';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_HISTORY_KEY, RedisStatusHistory } from '../../src/routing/history-redis.js';
import { errorOf } from '../helpers/api-error.js';
import { type FakeOpenAI, fakeReply, startFakeOpenAI } from '../helpers/fake-openai.js';
import { startGantry, type TestGantry } from '../helpers/gantry.js';
import { assertOpenAISchema } from '../helpers/openapi.js';
import { closedPort } from '../helpers/ports.js';
import { describeRedis, startRedis } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';

/** A TCP server that accepts and at once drops every connection (an upstream that died), counting them. */
interface DeadServer {
  url: string;
  connections: number;
  close(): Promise<void>;
}

async function startDeadServer(): Promise<DeadServer> {
  const sockets = new Set<Socket>();
  const dead = { url: '', connections: 0, close: async () => {} };
  const server: Server = createServer((socket) => {
    dead.connections++;
    sockets.add(socket);
    socket.destroy();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  dead.url = `http://127.0.0.1:${(server.address() as { port: number }).port}/v1`;
  dead.close = () => new Promise<void>((resolve) => server.close(() => resolve()));
  return dead;
}

let a: FakeOpenAI;
let b: FakeOpenAI;
let dead: DeadServer;
let refusedUrl: string;
let gantry: TestGantry | undefined;

beforeAll(async () => {
  [a, b, dead] = await Promise.all([startFakeOpenAI(), startFakeOpenAI(), startDeadServer()]);
  refusedUrl = `http://127.0.0.1:${await closedPort()}/v1`;
});

afterEach(async () => {
  await gantry?.close();
  gantry = undefined;
  a.reset();
  b.reset();
});

afterAll(async () => {
  await Promise.all([a.close(), b.close(), dead.close()]);
});

const QUICK = '{ connect_ms: 500, first_byte_ms: 2000, idle_ms: 2000, total_ms: 5000 }';

/** A Gantry whose model acme/chat has the given routes (YAML flow list) and routing block. */
async function start(
  routes: string,
  routing = '',
  global = '',
  env: NodeJS.ProcessEnv = {},
): Promise<OpenAI> {
  gantry = await startGantry(
    `
providers:
  a: { kind: openai, base_url: ${a.url}, timeouts: ${QUICK} }
  b: { kind: openai, base_url: ${b.url}, timeouts: ${QUICK} }
  dead: { kind: openai, base_url: ${dead.url}, timeouts: ${QUICK} }
  refused: { kind: openai, base_url: ${refusedUrl}, timeouts: ${QUICK} }
${global}
models:
  - namespace: acme/chat
    name: Chat
    type: text
    vendor: { name: Acme, slug: acme }
    routes: ${routes}
    ${routing === '' ? '' : `routing: ${routing}`}
`,
    env,
  );
  return new OpenAI({ apiKey: gantry.key, baseURL: gantry.baseURL, maxRetries: 0 });
}

const user = (content: string): OpenAI.ChatCompletionMessageParam[] => [{ role: 'user', content }];

async function ask(client: OpenAI, content = 'hi'): Promise<OpenAI.ChatCompletion> {
  const completion = await client.chat.completions.create({ model: 'acme/chat', messages: user(content) });
  assertOpenAISchema('CreateChatCompletionResponse', completion);
  expect(completion.choices[0]?.message.content).toBe(fakeReply(content));
  return completion;
}

async function modelView(): Promise<Record<string, unknown>> {
  const res = await fetch(`${gantry?.origin}/v1/models/acme/chat`, {
    headers: { authorization: `Bearer ${gantry?.key}` },
  });
  return (await res.json()) as Record<string, unknown>;
}

async function metricsText(): Promise<string> {
  return (await fetch(`${gantry?.origin}/metrics`)).text();
}

/** The value of one sample line of /metrics, e.g. `gantry_deployment_state{...}`. */
function sample(text: string, name: string, labels: Record<string, string>): number | undefined {
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`)) continue;
    if (Object.entries(labels).every(([k, v]) => line.includes(`${k}="${v}"`)))
      return Number(line.split(' ').pop());
  }
  return undefined;
}

describe('circuit breaker', () => {
  it('opens on a dead deployment, then skips it without a connection attempt', async () => {
    const client = await start(
      '[{ provider: dead, model: m }, { provider: b, model: m }]',
      '{ breaker: { consecutive_failures: 2, cooldown_seconds: 60 } }',
    );
    await ask(client, 'one');
    await ask(client, 'two');
    const connections = dead.connections;
    expect(connections).toBeGreaterThanOrEqual(2);
    for (let i = 0; i < 5; i++) await ask(client, `after ${i}`);
    // Open: the dead one is not even connected to.
    expect(dead.connections).toBe(connections);
    expect(b.requests).toHaveLength(7);

    const view = await modelView();
    expect(view.status).toBe('degraded');
    expect(String(view.status_reason)).toContain('1 of 2 deployments');
    const metrics = await metricsText();
    const labels = { model: 'acme/chat', provider: 'dead', upstream_model: 'm' };
    expect(sample(metrics, 'gantry_deployment_state', labels)).toBe(2);
    expect(sample(metrics, 'gantry_breaker_transitions_total', { ...labels, to: 'open' })).toBe(1);
    expect(sample(metrics, 'gantry_model_status', { model: 'acme/chat' })).toBe(1);

    const routing = gantry?.gantry.routing;
    await routing?.flushed();
    const history = await routing?.history.list({ model: 'acme/chat' });
    expect(history?.map((c) => [c.deployment, c.from, c.to])).toEqual([
      [undefined, 'operational', 'degraded'],
      ['dead/m', 'closed', 'open'],
    ]);
    expect(history?.[1]?.reason).toBe('2 consecutive failures');
  });

  it.each([
    ['500', 500],
    ['429', 429],
    ['529', 529],
  ])(
    'counts %s answers, half-opens after the cooldown and closes when the deployment recovers',
    async (_name, status) => {
      const client = await start(
        '[{ provider: a, model: m }, { provider: b, model: m }]',
        '{ breaker: { consecutive_failures: 2, cooldown_seconds: 0.3 } }',
      );
      a.setBehavior({ status });
      await ask(client, 'one');
      await ask(client, 'two');
      expect(a.requests).toHaveLength(2);
      await ask(client, 'three');
      // Open: no request reached a.
      expect(a.requests).toHaveLength(2);

      // a recovers; after the cooldown one trial goes to it and closes the circuit.
      a.setBehavior({});
      await waitFor('half-open', () =>
        gantry?.gantry.routing.of('acme/chat')?.deployments[0]?.breaker.state === 'half_open'
          ? true
          : undefined,
      );
      await ask(client, 'trial');
      expect(a.requests).toHaveLength(3);
      expect(gantry?.gantry.routing.of('acme/chat')?.deployments[0]?.breaker.state).toBe('closed');
      await ask(client, 'again');
      expect(a.requests).toHaveLength(4);
      expect((await modelView()).status).toBe('operational');

      const routing = gantry?.gantry.routing;
      await routing?.flushed();
      const changes = (await routing?.history.list({ model: 'acme/chat' }))?.filter((c) => c.deployment);
      expect(changes?.map((c) => c.to).reverse()).toEqual(['open', 'half_open', 'closed']);
    },
  );

  it('a failed trial opens the circuit again', async () => {
    const client = await start(
      '[{ provider: a, model: m }, { provider: b, model: m }]',
      '{ breaker: { consecutive_failures: 1, cooldown_seconds: 0.2 } }',
    );
    a.setBehavior({ status: 503 });
    await ask(client);
    await waitFor('half-open', () =>
      gantry?.gantry.routing.of('acme/chat')?.deployments[0]?.breaker.state === 'half_open'
        ? true
        : undefined,
    );
    await ask(client);
    expect(a.requests).toHaveLength(2);
    expect(gantry?.gantry.routing.of('acme/chat')?.deployments[0]?.breaker.state).toBe('open');
  });
});

describe('offline model', () => {
  it('answers at once with 503 MODEL_UNAVAILABLE and Retry-After when every deployment is open', async () => {
    const client = await start(
      '[{ provider: dead, model: m }, { provider: refused, model: m }]',
      '{ breaker: { consecutive_failures: 1, cooldown_seconds: 30 } }',
    );
    const first = await errorOf(client.chat.completions.create({ model: 'acme/chat', messages: user('x') }));
    expect(first.status).toBe(502);
    const connections = dead.connections;

    const started = performance.now();
    const refused = await errorOf(
      client.chat.completions.create({ model: 'acme/chat', messages: user('x') }),
    );
    expect(performance.now() - started).toBeLessThan(500);
    expect(refused.status).toBe(503);
    expect(refused.code).toBe('model_unavailable');
    const retryAfter = Number(refused.headers?.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(29);
    expect(retryAfter).toBeLessThanOrEqual(30);
    expect(dead.connections).toBe(connections);

    const stream = await errorOf(
      client.chat.completions.create({ model: 'acme/chat', messages: user('x'), stream: true }),
    );
    expect(stream.status).toBe(503);

    const view = await modelView();
    expect(view.status).toBe('offline');
    const list = await fetch(`${gantry?.origin}/v1/models?status=offline`, {
      headers: { authorization: `Bearer ${gantry?.key}` },
    });
    const body = (await list.json()) as { data: Array<{ id: string }> };
    expect(body.data.map((m) => m.id)).toEqual(['acme/chat']);
  });

  it('the config status stays an operator override', async () => {
    gantry = await startGantry(`
providers:
  dead: { kind: openai, base_url: ${dead.url}, timeouts: ${QUICK} }
models:
  - namespace: acme/chat
    name: Chat
    type: text
    status: operational
    routes: [{ provider: dead, model: m }]
    routing: { breaker: { consecutive_failures: 1, cooldown_seconds: 30 } }
`);
    const client = new OpenAI({ apiKey: gantry.key, baseURL: gantry.baseURL, maxRetries: 0 });
    await errorOf(client.chat.completions.create({ model: 'acme/chat', messages: user('x') }));
    expect(gantry.gantry.routing.statusOf('acme/chat')?.status).toBe('offline');
    expect((await modelView()).status).toBe('operational');
  });
});

describe('failover before the first token', () => {
  it('moves on when a stream stays silent after its role chunk for first_token_ms; the client sees one clean stream', async () => {
    const client = await start(
      '[{ provider: a, model: m }, { provider: b, model: m }]',
      '{ first_token_ms: 300 }',
    );
    a.setBehavior({ stallAfterChunks: 1 });
    const started = performance.now();
    const stream = await client.chat.completions.create({
      model: 'acme/chat',
      messages: user('stalled'),
      stream: true,
    });
    let text = '';
    let roles = 0;
    for await (const chunk of stream) {
      assertOpenAISchema('CreateChatCompletionStreamResponse', chunk);
      if (chunk.choices[0]?.delta.role) roles++;
      text += chunk.choices[0]?.delta.content ?? '';
    }
    expect(text).toBe(fakeReply('stalled'));
    expect(roles).toBe(1);
    expect(performance.now() - started).toBeLessThan(2000);
    expect(b.requests).toHaveLength(1);
    // The stalled attempt was let go.
    expect(await a.requests[0]?.settled).toBe('aborted');
  });

  it('moves on when the upstream hangs before its first byte for first_token_ms', async () => {
    const client = await start(
      '[{ provider: a, model: m }, { provider: b, model: m }]',
      '{ first_token_ms: 300 }',
    );
    a.setBehavior({ delayHeadersMs: 5000 });
    const started = performance.now();
    const stream = await client.chat.completions.create({
      model: 'acme/chat',
      messages: user('hung'),
      stream: true,
    });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
    expect(text).toBe(fakeReply('hung'));
    expect(performance.now() - started).toBeLessThan(2000);
    expect(await a.requests[0]?.settled).toBe('aborted');
  });

  it('after content was sent, a break is one error event (no second deployment)', async () => {
    const client = await start(
      '[{ provider: a, model: m }, { provider: b, model: m }]',
      '{ first_token_ms: 300 }',
    );
    a.setBehavior({ closeAfterChunks: 3 });
    const stream = await client.chat.completions.create({
      model: 'acme/chat',
      messages: user('one two three four five'),
      stream: true,
    });
    const error = await (async () => {
      try {
        for await (const _ of stream) {
        }
      } catch (err) {
        return err;
      }
      return undefined;
    })();
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect(b.requests).toHaveLength(0);
  });
});

describe('strategies', () => {
  it('weighted spreads calls by weight', async () => {
    const client = await start(
      '[{ provider: a, model: m, weight: 1 }, { provider: b, model: m, weight: 3 }]',
      '{ strategy: weighted }',
    );
    const n = 200;
    for (let i = 0; i < n; i += 20) {
      await Promise.all(Array.from({ length: 20 }, (_, j) => ask(client, `w${i + j}`)));
    }
    const share = b.requests.length / n;
    expect(a.requests.length + b.requests.length).toBe(n);
    expect(share).toBeGreaterThan(0.65);
    expect(share).toBeLessThan(0.85);
  });

  it('least_inflight sends a call to the deployment with fewer calls in flight', async () => {
    const client = await start(
      '[{ provider: a, model: m }, { provider: b, model: m }]',
      '{ strategy: least_inflight }',
    );
    a.setBehavior({ delayHeadersMs: 600 });
    const slow = ask(client, 'slow');
    await a.waitForRequests(1);
    await ask(client, 'quick');
    expect(b.requests).toHaveLength(1);
    await slow;
    // Both idle again: the configured order.
    a.setBehavior({});
    await ask(client, 'idle');
    expect(a.requests).toHaveLength(2);
  });

  it('latency prefers the deployment with the lower time to first byte', async () => {
    const client = await start(
      '[{ provider: a, model: m }, { provider: b, model: m }]',
      '{ strategy: latency }',
    );
    a.setBehavior({ delayHeadersMs: 150 });
    // Until both were measured, an unmeasured one counts as fastest.
    for (let i = 0; i < 4; i++) await ask(client, `warm ${i}`);
    expect(a.requests.length).toBeGreaterThan(0);
    expect(b.requests.length).toBeGreaterThan(0);
    const before = a.requests.length;
    for (let i = 0; i < 10; i++) await ask(client, `fast ${i}`);
    expect(a.requests.length).toBe(before);
  });
});

describe('status follows health', () => {
  it('a deployment that slows down makes the model degraded, and operational again when it recovers', async () => {
    const client = await start(
      '[{ provider: a, model: m }]',
      '{ breaker: { min_requests: 3, window_seconds: 1 }, degraded: { ttfb_ms: 100 } }',
    );
    a.setBehavior({ delayHeadersMs: 200 });
    for (let i = 0; i < 3; i++) await ask(client, `slow ${i}`);
    gantry?.gantry.routing.judgeAll();
    expect((await modelView()).status).toBe('degraded');
    a.setBehavior({});
    // The slow calls slide out of the one-second window.
    await waitFor(
      'operational',
      async () => ((await modelView()).status === 'operational' ? true : undefined),
      5000,
    );
  });
});

describe('active probes', () => {
  it('probe idle deployments with GET /models: a failing one opens without client traffic, and closes once it recovers', async () => {
    await start(
      '[{ provider: a, model: m }, { provider: b, model: m }]',
      '{ breaker: { consecutive_failures: 2, cooldown_seconds: 0.3 } }',
      'routing: { probes: { enabled: true, interval_seconds: 0.1, idle_seconds: 0, timeout_ms: 500 } }',
    );
    a.setBehavior({ status: 500 });
    const deployment = gantry?.gantry.routing.of('acme/chat')?.deployments[0];
    await waitFor('probes to open a', () => (deployment?.breaker.state === 'open' ? true : undefined));
    expect(a.requests.every((r) => r.method === 'GET' && r.path === '/v1/models')).toBe(true);
    expect(b.requests.length).toBeGreaterThan(0);
    expect(gantry?.gantry.routing.of('acme/chat')?.deployments[1]?.breaker.state).toBe('closed');

    a.setBehavior({});
    await waitFor('a probe trial to close a', () =>
      deployment?.breaker.state === 'closed' ? true : undefined,
    );
  });
});

describeRedis('distributed mode', () => {
  it('skips an open deployment as in embedded mode, and writes the history to the shared Redis stream', async () => {
    const redis = await startRedis();
    const reader = new Redis(redis.url);
    try {
      const client = await start(
        '[{ provider: dead, model: m }, { provider: b, model: m }]',
        '{ breaker: { consecutive_failures: 1, cooldown_seconds: 60 } }',
        '',
        { REDIS_URL: redis.url },
      );
      await ask(client);
      const connections = dead.connections;
      await ask(client);
      expect(dead.connections).toBe(connections);
      await gantry?.gantry.routing.flushed();
      // Read back by another client, as a status page on another instance would.
      const history = await new RedisStatusHistory(reader, 100, DEFAULT_HISTORY_KEY).list({
        model: 'acme/chat',
      });
      expect(history.map((c) => [c.deployment, c.to])).toEqual([
        [undefined, 'degraded'],
        ['dead/m', 'open'],
      ]);
      await gantry?.close();
      gantry = undefined;
    } finally {
      reader.disconnect();
      await redis.close();
    }
  });
});

describe('overhead', () => {
  it('every inference answer says how long Gantry itself took, and /metrics has the histogram', async () => {
    const client = await start('[{ provider: a, model: m }]');
    a.setBehavior({ delayHeadersMs: 100 });
    const { data, response } = await client.chat.completions
      .create({ model: 'acme/chat', messages: user('timed') })
      .withResponse();
    expect(data.choices[0]?.message.content).toBe(fakeReply('timed'));
    const overhead = Number(response.headers.get('x-gantry-overhead-ms'));
    expect(Number.isFinite(overhead)).toBe(true);
    expect(overhead).toBeGreaterThanOrEqual(0);
    // The upstream's 100 ms are not Gantry's.
    expect(overhead).toBeLessThan(100);

    const stream = await client.chat.completions
      .create({ model: 'acme/chat', messages: user('timed'), stream: true })
      .withResponse();
    const streamed = Number(stream.response.headers.get('x-gantry-overhead-ms'));
    expect(streamed).toBeGreaterThanOrEqual(0);
    expect(streamed).toBeLessThan(100);
    for await (const _ of stream.data) {
    }
    const responses = await client.responses.create({ model: 'acme/chat', input: 'timed' }).withResponse();
    expect(responses.data.output_text).toBe(fakeReply('timed'));
    expect(Number(responses.response.headers.get('x-gantry-overhead-ms'))).toBeLessThan(100);
    const metrics = await metricsText();
    expect(sample(metrics, 'gantry_overhead_seconds_count', { route: 'chat' })).toBe(2);
    expect(sample(metrics, 'gantry_overhead_seconds_count', { route: 'responses' })).toBe(1);
    expect(sample(metrics, 'gantry_deployment_ttfb_seconds_count', { provider: 'a' })).toBe(3);
  });
});
