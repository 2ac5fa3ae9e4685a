/**
 * Distributed mode end to end: real, separate `gantry serve` processes (tsx on src/main.ts) sharing one
 * real redis-server, in front of a fake OpenAI-compatible upstream that counts the requests in flight per
 * upstream model. Covers: shared request and concurrency ceilings under a burst split across processes,
 * leases of a SIGKILLed process expiring, Redis stopped and restarted under both failure policies, and
 * usage records reaching the Redis Stream exactly once (graceful SIGTERM included).
 *
 * Each process has its own SQLite store (its own data folder): the processes meet only on Redis, where
 * limits, credits and usage are keyed by account id, so they share them only because an account's id is
 * derived from its name (the "one account id" test checks this for config and bootstrap accounts).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import {
  createServer,
  Agent as HttpAgent,
  request as httpRequest,
  type IncomingMessage,
  type ServerResponse,
} from 'node:http';
import { type AddressInfo, connect, createServer as createNetServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { UsageRecord } from '../../src/usage/record.js';
import { ensureConsumerGroup, readUsage } from '../../src/usage/redis-consumer.js';
import { fromStreamFields } from '../../src/usage/redis-fields.js';
import { type GantryProcess, spawnGantry, stopAllGantry } from '../helpers/gantry-process.js';
import { describeRedis, startRedis, type TestRedis } from '../helpers/redis.js';

const KEY = 'gty_e2e-distributed-acme-0123456789abcdefghijklmnop';
/** A second key of acme. */
const KEY_2 = 'gty_e2e-distributed-acme-second-0123456789abcdefghij';
/** The key of the `default` account that every process creates at start (GANTRY_BOOTSTRAP_KEY). */
const BOOTSTRAP_KEY = 'gty_e2e-distributed-bootstrap-0123456789abcdefghij';
const WINDOW_MS = 2_000;
const LEASE_MS = 2_000;
const SHARED_STREAM = 'e2e:{usage}';
const DEFAULT_STREAM = 'gantry:{usage}';
/** The requests ceiling of test/probe: high enough never to refuse, present so answers carry a quota. */
const PROBE_LIMIT = 1_000_000;

// ---------------------------------------------------------------------------------------------------
// A counting upstream: OpenAI-compatible chat completions (JSON and SSE with usage), with the number of
// requests in flight per upstream model. The last user message paces the answer: "pace 5x100" sends 5
// content chunks 100 ms apart (default: 3 chunks at once). A request counts as in flight from the moment
// its body is read until its response closes (finished, or the client gone).
// ---------------------------------------------------------------------------------------------------

interface ModelStats {
  total: number;
  inflight: number;
  maxInflight: number;
}

interface CountingUpstream {
  origin: string;
  stats(model: string): ModelStats;
  close(): Promise<void>;
}

async function startCountingUpstream(): Promise<CountingUpstream> {
  const stats = new Map<string, ModelStats>();
  const sockets = new Set<Socket>();
  const statsOf = (model: string): ModelStats => {
    let s = stats.get(model);
    if (!s) {
      s = { total: 0, inflight: 0, maxInflight: 0 };
      stats.set(model, s);
    }
    return s;
  };

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    if (req.method !== 'POST' || req.url !== '/v1/chat/completions') {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { message: 'no such route', type: 'invalid_request_error' } }));
      return;
    }
    const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as {
      model: string;
      stream?: boolean;
      stream_options?: { include_usage?: boolean };
      messages: Array<{ role: string; content: string }>;
    };
    const s = statsOf(body.model);
    s.total++;
    s.inflight++;
    s.maxInflight = Math.max(s.maxInflight, s.inflight);
    res.once('close', () => {
      s.inflight--;
    });

    const text = body.messages.at(-1)?.content ?? '';
    const pace = /pace (\d+)x(\d+)/.exec(text);
    const count = pace ? Number(pace[1]) : 3;
    const delayMs = pace ? Number(pace[2]) : 0;
    const words = Array.from({ length: count }, (_, i) => ` w${i}`);
    const usage = { prompt_tokens: 5, completion_tokens: count, total_tokens: 5 + count };
    const id = `chatcmpl-count${s.total}`;
    const created = Math.floor(Date.now() / 1000);

    if (body.stream !== true) {
      if (delayMs > 0) await sleep(delayMs * count);
      if (res.destroyed) return;
      const message = { role: 'assistant', content: words.join('') };
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          id,
          object: 'chat.completion',
          created,
          model: body.model,
          choices: [{ index: 0, message, logprobs: null, finish_reason: 'stop' }],
          usage,
        }),
      );
      return;
    }
    const frame = (choices: unknown[], extra: Record<string, unknown> = {}): string =>
      `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created, model: body.model, choices, ...extra })}\n\n`;
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    res.write(frame([{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }]));
    for (const word of words) {
      if (delayMs > 0) await sleep(delayMs);
      if (res.destroyed) return;
      res.write(frame([{ index: 0, delta: { content: word }, finish_reason: null }]));
    }
    res.write(frame([{ index: 0, delta: {}, finish_reason: 'stop' }]));
    if (body.stream_options?.include_usage) res.write(frame([], { usage }));
    res.end('data: [DONE]\n\n');
  }

  const server = createServer((req, res) => {
    handle(req, res).catch(() => res.destroy());
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    origin: `http://127.0.0.1:${port}`,
    stats: statsOf,
    close: async () => {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const socket of sockets) socket.destroy();
      await closed;
    },
  };
}

// ---------------------------------------------------------------------------------------------------
// Config, stores, processes
// ---------------------------------------------------------------------------------------------------

interface ConfigOptions {
  policy: 'open' | 'closed';
  flushMs: number;
  /** usage.stream; absent: the default gantry:{usage}. */
  stream?: string;
  redisTimeoutMs?: number;
}

/**
 * One account `acme` (key from $ACME_KEY) on tier default (2 s windows, no account-wide ceilings); one
 * model per scenario, each routed to its own upstream model name so the upstream counts them apart.
 */
function configYaml(upstream: string, o: ConfigOptions): string {
  const model = (namespace: string, upstreamModel: string, extra = ''): string => `
  - namespace: ${namespace}
    name: ${namespace}
    type: text
    apis: [chat]
    routes: [{ provider: up, model: ${upstreamModel} }]${extra}`;
  return `
server:
  log_level: warn
providers:
  up:
    kind: openai
    base_url: ${upstream}/v1
    timeouts: { connect_ms: 2000, first_byte_ms: 10000, idle_ms: 10000, total_ms: 60000 }
tiers:
  default:
    window_seconds: ${WINDOW_MS / 1000}
accounts:
  - name: acme
    keys:
      - { name: k, key_env: ACME_KEY }
      - { name: k2, key_env: ACME_KEY_2 }
limits:
  failure_policy: ${o.policy}
  lease_seconds: ${LEASE_MS / 1000}
  redis_timeout_ms: ${o.redisTimeoutMs ?? 200}
usage:
  flush_ms: ${o.flushMs}${o.stream ? `\n  stream: "${o.stream}"` : ''}
models:${model('test/burst', 'burst', '\n    limits: { requests: 10 }')}${model(
    'test/conc',
    'conc',
    '\n    limits: { concurrency: 3 }',
  )}${model('test/lease', 'lease', '\n    limits: { concurrency: 3 }')}${model('test/usage', 'usage')}${model(
    'test/shutdown',
    'shutdown',
  )}${model('test/drain', 'drain')}${model('test/boot', 'boot')}${model('test/down', 'down', '\n    limits: { requests: 3 }')}${model(
    'test/paid',
    'paid',
    '\n    billable: true\n    pricing: { amount: 1, currency: USD, unit: million_token }',
  )}${model('test/probe', 'probe', `\n    limits: { requests: ${PROBE_LIMIT} }`)}
`;
}

const tempDirs: string[] = [];

function tempDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  tempDirs.push(dir);
  return dir;
}

function writeConfig(upstream: string, o: ConfigOptions): string {
  const path = join(tempDir('gantry-e2e-config-'), 'gantry.yaml');
  writeFileSync(path, configYaml(upstream, o));
  return path;
}

/** A Gantry process with its own, fresh data folder, on the test Redis (or on `redis` when a URL). */
function startGantry(name: string, config: string, redis: TestRedis | string): Promise<GantryProcess> {
  return spawnGantry({
    name,
    config,
    dataDir: tempDir('gantry-e2e-data-'),
    env: {
      REDIS_URL: typeof redis === 'string' ? redis : redis.url,
      ACME_KEY: KEY,
      ACME_KEY_2: KEY_2,
      GANTRY_BOOTSTRAP_KEY: BOOTSTRAP_KEY,
    },
  });
}

// ---------------------------------------------------------------------------------------------------
// Client side
// ---------------------------------------------------------------------------------------------------

interface Reply {
  status: number;
  headers: Headers;
  text: string;
  ms: number;
  /** The parsed JSON body when it is JSON. */
  json: { error?: { code?: string; error_id?: string; details?: { metric?: string } } } | undefined;
}

function chatRequest(g: GantryProcess, model: string, stream: boolean, text: string, key = KEY) {
  return fetch(`${g.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model, stream, max_tokens: 64, messages: [{ role: 'user', content: text }] }),
  });
}

async function chat(
  g: GantryProcess,
  model: string,
  options: { stream?: boolean; text?: string; key?: string } = {},
): Promise<Reply> {
  const started = performance.now();
  const res = await chatRequest(g, model, options.stream ?? false, options.text ?? 'hello', options.key);
  const text = await res.text();
  let json: Reply['json'];
  try {
    json = JSON.parse(text) as Reply['json'];
  } catch {
    json = undefined;
  }
  return { status: res.status, headers: res.headers, text, ms: performance.now() - started, json };
}

/** A stream held open: resolves once the first bytes arrived; `done` settles when the stream ends. */
async function openStream(g: GantryProcess, model: string, text: string) {
  const res = await chatRequest(g, model, true, text);
  expect(res.status).toBe(200);
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  const decoder = new TextDecoder();
  const first = await reader.read();
  let received = first.value ? decoder.decode(first.value, { stream: true }) : '';
  const done = (async () => {
    for (;;) {
      const { value, done: end } = await reader.read();
      if (end) return received;
      received += decoder.decode(value, { stream: true });
    }
  })();
  // A killed process breaks the stream: callers that care await `done`; the others must not crash.
  done.catch(() => undefined);
  return { done, received: () => received };
}

/**
 * A stream over node:http with the given agent (to choose keep-alive or Connection: close); resolves once
 * the first bytes arrived; `done` resolves with the whole body when the response ends.
 */
async function streamOverHttp(g: GantryProcess, model: string, text: string, agent: HttpAgent) {
  const body = JSON.stringify({
    model,
    stream: true,
    max_tokens: 64,
    messages: [{ role: 'user', content: text }],
  });
  return new Promise<{ done: Promise<string> }>((resolve, reject) => {
    const req = httpRequest(
      `${g.baseURL}/chat/completions`,
      {
        method: 'POST',
        agent,
        headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
      },
      (res) => {
        let received = '';
        const done = new Promise<string>((resolveDone, rejectDone) => {
          res.on('end', () => resolveDone(received));
          res.on('error', rejectDone);
        });
        done.catch(() => undefined);
        res.setEncoding('utf8');
        res.once('data', () => resolve({ done }));
        res.on('data', (chunk: string) => {
          received += chunk;
        });
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/** Waits until `offsetMs` into the next fixed rate-limit window, so a short burst stays inside one. */
async function atWindowStart(offsetMs = 30): Promise<void> {
  const now = Date.now();
  await sleep(WINDOW_MS - (now % WINDOW_MS) + offsetMs);
}

/**
 * Waits until the process's limiter answers from Redis: an admission on Redis carries the quota headers,
 * one decided by the failure policy does not (fail open) or is a 503 (fail closed).
 *
 * Needed because of a BUG (see the report and the skipped test below): `gantry serve` listens before the
 * limiter's Redis connection is ready, so the first requests after start can be decided by the failure
 * policy even though Redis is up.
 */
async function limiterReady(g: GantryProcess): Promise<void> {
  await until(`the limiter of ${g.name} connected`, 10_000, async () => {
    const r = await chat(g, 'test/probe');
    return r.headers.get('x-ratelimit-limit-requests') === String(PROBE_LIMIT) ? true : undefined;
  });
}

async function metricsText(g: GantryProcess): Promise<string> {
  const res = await fetch(`${g.origin}/metrics`);
  expect(res.status).toBe(200);
  return res.text();
}

/** The value of one sample, e.g. metric(text, 'gantry_limiter_up', 'backend="redis"'); undefined when absent. */
function metric(text: string, name: string, labels: string): number | undefined {
  for (const line of text.split('\n')) {
    if (line.startsWith(`${name}{${labels}} `)) return Number(line.slice(name.length + labels.length + 3));
  }
  return undefined;
}

async function until<T>(what: string, timeoutMs: number, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(100);
  }
}

/** A billing consumer: reads (and acknowledges) with a consumer group until `enough` holds or time is up. */
async function consumeUntil(
  redis: Redis,
  stream: string,
  group: string,
  got: UsageRecord[],
  enough: (records: UsageRecord[]) => boolean,
  timeoutMs: number,
): Promise<UsageRecord[]> {
  const deadline = Date.now() + timeoutMs;
  while (!enough(got) && Date.now() < deadline) {
    got.push(...(await readUsage(redis, stream, group, 'e2e-consumer', 1000, { blockMs: 200 })));
  }
  return got;
}

/** Every record of the stream (XRANGE, no group), to look without consuming. */
async function streamRecords(redis: Redis, stream: string): Promise<UsageRecord[]> {
  const entries = await redis.xrange(stream, '-', '+');
  return entries.map(([, fields]) => fromStreamFields(fields));
}

/** The records of one model on the shared stream, without consuming them. */
async function recordsOf(redis: Redis, model: string): Promise<UsageRecord[]> {
  return (await streamRecords(redis, SHARED_STREAM)).filter((r) => r.model === model);
}

function newRedisClient(url: string): Redis {
  const client = new Redis(url, { maxRetriesPerRequest: 1, retryStrategy: () => 100 });
  client.on('error', () => undefined);
  return client;
}

let upstream: CountingUpstream;

beforeAll(async () => {
  upstream = await startCountingUpstream();
});

afterAll(async () => {
  await stopAllGantry();
  await upstream?.close();
  for (const dir of tempDirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

// ---------------------------------------------------------------------------------------------------
// Four processes sharing one Redis: A and B serve, C and D are shut down
// ---------------------------------------------------------------------------------------------------

describeRedis('distributed: Gantry processes sharing one Redis', () => {
  let redis: TestRedis;
  let consumer: Redis;
  let a: GantryProcess;
  let b: GantryProcess;
  /** C and D flush usage only every minute: what reaches the stream comes from the shutdown flush. */
  let c: GantryProcess;
  let d: GantryProcess;

  beforeAll(async () => {
    redis = await startRedis();
    consumer = newRedisClient(redis.url);
    // A generous Redis deadline: a busy 2-CPU machine must not turn a burst into fail-open admissions.
    const shared = writeConfig(upstream.origin, {
      policy: 'open',
      flushMs: 50,
      stream: SHARED_STREAM,
      redisTimeoutMs: 2000,
    });
    const lazy = writeConfig(upstream.origin, {
      policy: 'open',
      flushMs: 60_000,
      stream: SHARED_STREAM,
      redisTimeoutMs: 2000,
    });
    [a, b, c, d] = await Promise.all([
      startGantry('A', shared, redis),
      startGantry('B', shared, redis),
      startGantry('C', lazy, redis),
      startGantry('D', lazy, redis),
    ]);
    await Promise.all([a, b, c, d].map(limiterReady));
  });

  afterAll(async () => {
    await Promise.all([a?.stop(), b?.stop(), c?.stop(), d?.stop()]);
    consumer?.disconnect();
    await redis?.close();
  });

  it('a burst split across both processes never gets more than the requests ceiling', async () => {
    const before = upstream.stats('burst').total;
    await atWindowStart();
    const replies = await Promise.all(
      Array.from({ length: 40 }, (_, i) => chat(i % 2 === 0 ? a : b, 'test/burst')),
    );
    const ok = replies.filter((r) => r.status === 200);
    const refused = replies.filter((r) => r.status === 429);
    // Either process alone would admit 10 of its 20: together they admit 10, because the bucket is shared.
    expect(ok).toHaveLength(10);
    expect(refused).toHaveLength(30);
    expect(upstream.stats('burst').total - before).toBe(10);
    for (const r of refused) {
      expect(r.json?.error?.error_id).toBe('RATE_LIMIT_EXCEEDED');
      expect(r.json?.error?.details?.metric).toBe('requests');
    }
    // No admission was decided by the failure policy (which would not count against the bucket).
    for (const g of [a, b]) {
      expect(metric(await metricsText(g), 'gantry_limiter_unavailable_total', 'policy="open"') ?? 0).toBe(0);
    }
  });

  it('the concurrency ceiling holds across both processes with slow streams', async () => {
    const stats = upstream.stats('conc');
    const before = stats.total;
    let refusals = 0;
    const client = async (g: GantryProcess) => {
      const deadline = Date.now() + 15_000;
      for (;;) {
        const r = await chat(g, 'test/conc', { stream: true, text: 'pace 5x100' });
        if (r.status === 200) {
          expect(r.text).toContain('data: [DONE]');
          return;
        }
        expect(r.status).toBe(429);
        expect(r.json?.error?.details?.metric).toBe('concurrency');
        refusals++;
        if (Date.now() > deadline) throw new Error('never admitted');
        await sleep(30 + Math.random() * 40);
      }
    };
    await Promise.all(Array.from({ length: 12 }, (_, i) => client(i % 2 === 0 ? a : b)));
    expect(stats.total - before).toBe(12);
    expect(stats.maxInflight).toBeLessThanOrEqual(3);
    expect(stats.maxInflight).toBe(3);
    expect(refusals).toBeGreaterThan(0);
    expect(stats.inflight).toBe(0);
  });

  it('a billing consumer group gets exactly one usage record per request from both processes', async () => {
    await ensureConsumerGroup(consumer, SHARED_STREAM, 'billing');
    // A is called with acme's first key, B with its second: the key id tells the processes apart.
    await Promise.all(
      Array.from({ length: 16 }, async (_, i) => {
        const [g, key] = i % 2 === 0 ? [a, KEY] : [b, KEY_2];
        const r = await chat(g, 'test/usage', { stream: i % 4 < 2, text: `request ${i}`, key });
        expect(r.status).toBe(200);
      }),
    );
    const got: UsageRecord[] = [];
    const mine = (records: UsageRecord[]) => records.filter((r) => r.model === 'test/usage');
    await consumeUntil(consumer, SHARED_STREAM, 'billing', got, (rs) => mine(rs).length >= 16, 10_000);
    // Nothing more arrives later (no duplicate from a retry).
    await sleep(300);
    await consumeUntil(consumer, SHARED_STREAM, 'billing', got, () => false, 300);
    const records = mine(got);
    expect(records).toHaveLength(16);
    expect(new Set(records.map((r) => r.id)).size).toBe(16);
    // One account id in both processes (each with its own store), 8 records per process.
    expect(new Set(records.map((r) => r.account_id)).size).toBe(1);
    const byKey = new Map<string, number>();
    for (const r of records) byKey.set(r.key_id, (byKey.get(r.key_id) ?? 0) + 1);
    expect([...byKey.values()].sort()).toEqual([8, 8]);
    for (const r of records) {
      expect(r).toMatchObject({ outcome: 'ok', status: 200, api: 'chat', provider: 'up' });
      expect(r.input_tokens).toBe(5);
      expect(r.output_tokens).toBe(3);
    }
    expect(records.filter((r) => r.stream)).toHaveLength(8);
    // The earlier tests' admitted requests were metered too: 10 for the burst, 12 for the streams.
    expect(got.filter((r) => r.model === 'test/burst')).toHaveLength(10);
    expect(got.filter((r) => r.model === 'test/conc')).toHaveLength(12);
  });

  it('every process knows a config account and the bootstrap account under one id', async () => {
    for (const g of [a, b]) {
      for (const key of [KEY, BOOTSTRAP_KEY]) {
        expect((await chat(g, 'test/boot', { key, text: key === KEY ? 'acme' : 'bootstrap' })).status).toBe(
          200,
        );
      }
    }
    const records = await until('the records of both processes', 5_000, async () => {
      const all = await recordsOf(consumer, 'test/boot');
      return all.length >= 4 ? all : undefined;
    });
    expect(records).toHaveLength(4);
    // Two accounts (acme and default), each with the same id in A and in B.
    const accounts = new Map<string, number>();
    for (const r of records) accounts.set(r.account_id, (accounts.get(r.account_id) ?? 0) + 1);
    expect([...accounts.values()]).toEqual([2, 2]);
  });

  it('a graceful shutdown (SIGTERM) flushes the records of its last requests, in-flight stream included', async () => {
    for (let i = 0; i < 5; i++) {
      expect((await chat(c, 'test/shutdown', { text: `last ${i}` })).status).toBe(200);
    }
    // A client that closes its connection after the stream (Connection: close).
    const agent = new HttpAgent({ keepAlive: false });
    const stream = await streamOverHttp(c, 'test/shutdown', 'pace 8x100', agent);
    // C flushes once a minute: nothing of it is on the stream yet.
    expect(await recordsOf(consumer, 'test/shutdown')).toEqual([]);
    c.kill('SIGTERM');
    const body = await stream.done;
    expect(body).toContain('data: [DONE]');
    expect(await c.exited).toEqual({ code: 0, signal: null });

    const records = await recordsOf(consumer, 'test/shutdown');
    expect(records).toHaveLength(6);
    expect(new Set(records.map((r) => r.id)).size).toBe(6);
    expect(records.filter((r) => r.stream)).toHaveLength(1);
    expect(records.every((r) => r.outcome === 'ok')).toBe(true);
  });

  // BUG (graceful shutdown waits for idle keep-alive connections): serve()'s SIGTERM handler (src/cli.ts)
  // awaits app.close(), and the usage batcher is flushed only in the onClose hook (src/app.ts), i.e. after
  // the HTTP server has closed every connection. forceCloseConnections: 'idle' closes the connections that
  // are idle when close() starts; a connection that was busy (an in-flight stream) and becomes idle
  // afterwards stays open as long as the client keeps it alive (fastify's keepAliveTimeout, 72 s by
  // default). Meanwhile the process does not exit and its records are not written; a supervisor's
  // SIGKILL after its grace period (Docker 10 s, Kubernetes 30 s) then loses them. Suggested fix: once
  // closing, call app.server.closeIdleConnections() as requests finish (e.g. an onResponse hook, or a
  // short interval while closing) or answer with `Connection: close`, with a hard deadline
  // (closeAllConnections()); and/or flush the usage batcher before waiting for connections to drain.
  it('a graceful shutdown finishes within a grace period when a client keeps its connection alive', async () => {
    for (let i = 0; i < 2; i++) expect((await chat(d, 'test/drain', { text: `last ${i}` })).status).toBe(200);
    // The official SDKs and most proxies keep connections alive after a response.
    const agent = new HttpAgent({ keepAlive: true });
    try {
      const stream = await streamOverHttp(d, 'test/drain', 'pace 5x100', agent);
      d.kill('SIGTERM');
      expect(await stream.done).toContain('data: [DONE]');
      // What a supervisor does after its grace period (shortened here).
      const graceful = await Promise.race([d.exited.then(() => true), sleep(3_000).then(() => false)]);
      if (!graceful) d.kill('SIGKILL');
      await d.exited;
      const records = await recordsOf(consumer, 'test/drain');
      expect({ graceful, records: records.length }).toEqual({ graceful: true, records: 3 });
    } finally {
      agent.destroy();
    }
  });

  it('the leases of a killed process expire: the other is refused, then admitted', async () => {
    const stats = upstream.stats('lease');
    // A holds the 3 slots with long streams (they extend their leases while A lives).
    const held = await Promise.all([0, 1, 2].map(() => openStream(a, 'test/lease', 'pace 200x100')));
    expect(stats.inflight).toBe(3);
    const refused = await chat(b, 'test/lease');
    expect(refused.status).toBe(429);
    expect(refused.json?.error?.details?.metric).toBe('concurrency');

    a.kill('SIGKILL');
    const killedAt = Date.now();
    await a.exited;
    for (const s of held) await expect(s.done).rejects.toThrow();
    // The leases outlive their process for up to lease_seconds...
    const stillRefused = await chat(b, 'test/lease');
    expect(stillRefused.status).toBe(429);
    expect(Number(stillRefused.headers.get('retry-after'))).toBeLessThanOrEqual(LEASE_MS / 1000);
    // ...and then expire: B is admitted without anyone releasing them.
    const admitted = await until('B admitted after the leases expired', 6_000, async () => {
      const r = await chat(b, 'test/lease');
      if (r.status === 200) return r;
      expect(r.status).toBe(429);
      return undefined;
    });
    const waited = Date.now() - killedAt;
    expect(admitted.status).toBe(200);
    expect(waited).toBeLessThanOrEqual(LEASE_MS + 1_500);
    // Lease expiry gives all 3 slots back.
    const three = await Promise.all([0, 1, 2].map(() => openStream(b, 'test/lease', 'pace 5x50')));
    for (const s of three) expect(await s.done).toContain('data: [DONE]');
  });
});

// ---------------------------------------------------------------------------------------------------
// Redis stopped during a run
// ---------------------------------------------------------------------------------------------------

describeRedis('distributed: Redis stopped and restarted, failure_policy open', () => {
  let redis: TestRedis;
  let g: GantryProcess;
  let consumer: Redis;
  let okReplies = 0;

  const request = async (model: string, options: { stream?: boolean; text?: string } = {}) => {
    const r = await chat(g, model, options);
    if (r.status === 200) okReplies++;
    return r;
  };

  beforeAll(async () => {
    // AOF: the stream survives the restart, so the records of the outage can be counted afterwards.
    redis = await startRedis({ aof: true });
    const config = writeConfig(upstream.origin, { policy: 'open', flushMs: 50 });
    g = await startGantry('open', config, redis);
    await limiterReady(g);
  });

  afterAll(async () => {
    await g?.stop();
    consumer?.disconnect();
    await redis?.close();
  });

  it('serves without limits while Redis is down, shows it in /metrics, and recovers by itself', async () => {
    const warm = await request('test/down');
    expect(warm.status).toBe(200);
    expect(warm.headers.get('x-ratelimit-limit-requests')).toBe('3');
    expect(metric(await metricsText(g), 'gantry_limiter_up', 'backend="redis"')).toBe(1);

    await redis.stop();
    for (let i = 0; i < 6; i++) {
      const r = await request('test/down', { stream: i % 2 === 1 });
      expect(r.status).toBe(200);
      expect(r.ms).toBeLessThan(1_000);
      // Admitted by the failure policy: no quota to show.
      expect(r.headers.get('x-ratelimit-limit-requests')).toBeNull();
    }
    const down = await metricsText(g);
    expect(metric(down, 'gantry_limiter_up', 'backend="redis"')).toBe(0);
    expect(metric(down, 'gantry_limiter_unavailable_total', 'policy="open"')).toBeGreaterThanOrEqual(6);

    await redis.start();
    // No restart of Gantry: the limiter reconnects and its answers carry a quota again.
    await until('the limiter back on Redis', 6_000, async () => {
      const r = await request('test/down');
      return r.headers.get('x-ratelimit-limit-requests') === '3' ? r : undefined;
    });
    const burst = await Promise.all(Array.from({ length: 6 }, () => request('test/down')));
    expect(burst.filter((r) => r.status === 200).length).toBeLessThanOrEqual(3);
    expect(burst.filter((r) => r.status === 429).length).toBeGreaterThanOrEqual(3);
    expect(metric(await metricsText(g), 'gantry_limiter_up', 'backend="redis"')).toBe(1);

    // Usage of the whole run, outage included, reaches the default stream once Redis is back.
    consumer = newRedisClient(redis.url);
    await ensureConsumerGroup(consumer, DEFAULT_STREAM, 'billing');
    const outage = (records: UsageRecord[]) => records.filter((r) => r.model === 'test/down');
    const got = await consumeUntil(
      consumer,
      DEFAULT_STREAM,
      'billing',
      [],
      (rs) => outage(rs).length >= okReplies,
      12_000,
    );
    await sleep(300);
    await consumeUntil(consumer, DEFAULT_STREAM, 'billing', got, () => false, 300);
    expect(outage(got)).toHaveLength(okReplies);
    expect(new Set(outage(got).map((r) => r.id)).size).toBe(okReplies);
  });

  // BUG (credits on Redis, fail open): see the report. RedisCreditStore.balance() runs on the request
  // path for billable models on the usage connection (offline queue on, maxRetriesPerRequest 1, 5 s
  // command timeout), outside the limiter's failure policy: with Redis down a billable request waits for
  // ioredis to give up and then fails, instead of being served quickly like every other request.
  it('serves a billable model quickly while Redis is down (credit check)', async () => {
    await redis.stop();
    try {
      // Past the 1 s balance cache of any earlier read.
      await sleep(1_100);
      const r = await request('test/paid');
      expect({ status: r.status, fast: r.ms < 1_000 }).toEqual({ status: 200, fast: true });
    } finally {
      await redis.start();
    }
  });
});

describeRedis('distributed: Redis stopped and restarted, failure_policy closed', () => {
  let redis: TestRedis;
  let g: GantryProcess;

  beforeAll(async () => {
    redis = await startRedis();
    const config = writeConfig(upstream.origin, { policy: 'closed', flushMs: 50 });
    g = await startGantry('closed', config, redis);
    await limiterReady(g);
  });

  afterAll(async () => {
    await g?.stop();
    await redis?.close();
  });

  it('refuses with 503 quickly while Redis is down, and recovers by itself', async () => {
    expect((await chat(g, 'test/down')).status).toBe(200);
    const stats = upstream.stats('down');

    await redis.stop();
    const before = stats.total;
    for (let i = 0; i < 6; i++) {
      const r = await chat(g, 'test/down', { stream: i % 2 === 1 });
      expect(r.status).toBe(503);
      expect(r.ms).toBeLessThan(1_000);
      expect(r.json?.error?.error_id).toBe('SERVICE_UNAVAILABLE');
      expect(r.json?.error?.code).toBe('service_unavailable');
      expect(r.headers.get('retry-after')).toBe('1');
    }
    expect(stats.total).toBe(before);
    const down = await metricsText(g);
    expect(metric(down, 'gantry_limiter_up', 'backend="redis"')).toBe(0);
    expect(metric(down, 'gantry_limiter_unavailable_total', 'policy="closed"')).toBeGreaterThanOrEqual(6);
    // The process is still healthy.
    expect((await fetch(`${g.origin}/healthz`)).status).toBe(200);

    await redis.start();
    const back = await until('admitted again after Redis restarted', 6_000, async () => {
      const r = await chat(g, 'test/down');
      if (r.status === 503) return undefined;
      return r;
    });
    expect(back.status).toBe(200);
    expect(back.headers.get('x-ratelimit-limit-requests')).toBe('3');
    const burst = await Promise.all(Array.from({ length: 6 }, () => chat(g, 'test/down')));
    expect(burst.filter((r) => r.status === 200).length).toBeLessThanOrEqual(2);
    expect(burst.filter((r) => r.status === 429).length).toBeGreaterThanOrEqual(4);
    expect(metric(await metricsText(g), 'gantry_limiter_up', 'backend="redis"')).toBe(1);
  });

  // BUG (credits on Redis, fail closed): same cause as the fail-open case; the credit check comes before
  // the limiter, so the configured 503 is not what a billable request gets while Redis is down.
  it('refuses a billable model with a quick 503 while Redis is down (credit check)', async () => {
    await redis.stop();
    try {
      await sleep(1_100);
      const r = await chat(g, 'test/paid');
      expect({ status: r.status, fast: r.ms < 1_000 }).toEqual({ status: 503, fast: true });
    } finally {
      await redis.start();
    }
  });
});

// ---------------------------------------------------------------------------------------------------
// Start-up
// ---------------------------------------------------------------------------------------------------

/** A TCP proxy in front of Redis that delays every reply by `delayMs`: a slow link to a remote Redis. */
async function startSlowLink(port: number, delayMs: number) {
  const sockets = new Set<Socket>();
  const server = createNetServer((client) => {
    const redisSide = connect(port, '127.0.0.1');
    for (const s of [client, redisSide]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.on('error', () => undefined);
    }
    client.on('data', (chunk) => redisSide.write(chunk));
    redisSide.on('data', (chunk) => {
      setTimeout(() => {
        if (!client.destroyed) client.write(chunk);
      }, delayMs);
    });
    client.on('close', () => redisSide.destroy());
    redisSide.on('close', () => setTimeout(() => client.destroy(), delayMs));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address() as AddressInfo;
  return {
    url: `redis://127.0.0.1:${address.port}`,
    close: async () => {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const s of sockets) s.destroy();
      await closed;
    },
  };
}

describeRedis('distributed: start-up', () => {
  // BUG (start-up race): `gantry serve` (src/cli.ts serve → buildApp → createServices in src/services.ts)
  // starts listening without waiting for the limiter's Redis connection: RedisLimiter.ready() (whose doc
  // says "call this at start-up") is never called, and admissions before the connection is ready fail
  // fast with "Stream isn't writeable and enableOfflineQueue options is false". So the first requests
  // after a (re)start are decided by the failure policy although Redis is up: 503 with fail closed, no
  // limits with fail open. A slow link to Redis makes it deterministic; on a busy machine it also happens
  // with a local Redis (seen in this file's runs before limiterReady() was added).
  it('admits the first request once it says it is listening, even over a slow link to Redis', async () => {
    const redis = await startRedis();
    const link = await startSlowLink(redis.port, 300);
    let g: GantryProcess | undefined;
    try {
      const config = writeConfig(upstream.origin, { policy: 'closed', flushMs: 50, redisTimeoutMs: 3_000 });
      g = await startGantry('slow-link', config, link.url);
      const first = await chat(g, 'test/probe');
      expect(first.status).toBe(200);
    } finally {
      await g?.stop();
      await link.close();
      await redis.close();
    }
  });
});
