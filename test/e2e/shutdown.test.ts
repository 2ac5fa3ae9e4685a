/**
 * Graceful shutdown of a real `gantry serve` process (test/helpers/gantry-process.ts), in embedded mode
 * and on a real Redis: streams still running at the drain deadline (server.shutdown_timeout_seconds) end
 * with the mid-stream error event and a clean end of the response, every usage record reaches its sink
 * (data/ledger.db, the Redis Stream) before the process exits, and the SQLite files are checkpointed, so
 * gantry.db and ledger.db hold their data without their -wal files. With upstreams gone silent (an
 * inference stream, a forwarded answer, a prediction watched on its stream), the deadline still ends every
 * stream, aborts every upstream call at once and the process exits about two seconds later.
 */
import { copyFileSync, existsSync, statSync, writeFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import Database from 'libsql';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { type FakeOpenAI, startFakeOpenAI } from '../helpers/fake-openai.js';
import { type RecordingServer, startRecordingServer, writePaced } from '../helpers/fake-server.js';
import { type GantryProcess, spawnGantry, stopAllGantry } from '../helpers/gantry-process.js';
import { describeRedis, startRedis, type TestRedis } from '../helpers/redis.js';
import { removeTempDirs, tempDir } from '../helpers/temp-dirs.js';
import { until } from '../helpers/wait.js';

const KEY = 'gty_e2e-shutdown-bootstrap-0123456789abcdefghijklmn';
const STREAMS = 6;
const DEADLINE_S = 2;
/** The local model echoes the prompt: 300 words at 100 ms per chunk of about three tokens is ~10 s. */
const LONG_PROMPT = Array.from({ length: 300 }, (_, i) => `word${i}`).join(' ');
const STREAM_STREAM = 'e2e:{usage}';

function config(redis?: TestRedis): string {
  const path = join(tempDir('gantry-shutdown-config-'), 'gantry.yaml');
  writeFileSync(
    path,
    `
server:
  log_level: warn
  shutdown_timeout_seconds: ${DEADLINE_S}
providers:
  local: { kind: local, chunk_delay_ms: 100 }
tiers:
  default: {}
usage:
  stream: "${STREAM_STREAM}"
${redis ? `redis: { url: "${redis.url}" }` : ''}
models:
  - namespace: gantry/local-chat
    name: Local chat
    type: text
    vendor: { name: Gantry, slug: gantry }
    serves: [inference]
    apis: [chat, responses]
    routes: [{ provider: local, model: local-chat }]
`,
  );
  return path;
}

interface StreamResult {
  body: string;
  /** 'end' when the response ended cleanly (its last chunk arrived), else what cut it. */
  ending: 'end' | 'aborted' | 'error';
  headers: Record<string, string | string[] | undefined>;
}

/**
 * A streamed call (a POST of `body`, or a GET when it is null); resolves `started` at the first body bytes
 * and `done` once the response is over.
 */
function stream(
  g: GantryProcess,
  path = '/v1/chat/completions',
  body: unknown = {
    model: 'gantry/local-chat',
    stream: true,
    messages: [{ role: 'user', content: LONG_PROMPT }],
  },
  headers: Record<string, string> = {},
): { started: Promise<void>; done: Promise<StreamResult> } {
  let onStart: () => void = () => undefined;
  const started = new Promise<void>((resolve) => {
    onStart = resolve;
  });
  const done = new Promise<StreamResult>((resolve) => {
    const text = body === null ? '' : JSON.stringify(body);
    const req = httpRequest(`${g.origin}${path}`, {
      method: body === null ? 'GET' : 'POST',
      headers: {
        'x-api-key': KEY,
        ...(body === null
          ? {}
          : { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(text)) }),
        ...headers,
      },
    });
    req.on('error', () => resolve({ body: '', ending: 'error', headers: {} }));
    req.on('response', (res) => {
      let received = '';
      let settled = false;
      const settle = (ending: StreamResult['ending']) => {
        if (settled) return;
        settled = true;
        resolve({ body: received, ending, headers: res.headers });
      };
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        received += chunk;
        onStart();
      });
      res.on('aborted', () => settle('aborted'));
      res.on('error', () => settle('error'));
      res.on('end', () => settle('end'));
      res.on('close', () => settle(res.complete ? 'end' : 'aborted'));
    });
    req.end(text);
  });
  return { started, done };
}

/** The `data:` payloads of an SSE body. */
function dataOf(body: string): string[] {
  return body
    .split('\n\n')
    .filter((frame) => frame.startsWith('data: '))
    .map((frame) => frame.slice(6));
}

function countRows(path: string, table: string): number {
  const db = new Database(path);
  try {
    return (db.prepare(`SELECT COUNT(*) AS n FROM ${table}`).get() as { n: number }).n;
  } finally {
    db.close();
  }
}

/** Starts STREAMS long streams, SIGTERMs the process once all have begun, and returns how they ended. */
async function cutAtDeadline(g: GantryProcess): Promise<StreamResult[]> {
  const calls = Array.from({ length: STREAMS }, () => stream(g));
  await Promise.all(calls.map((c) => c.started));
  const signalledAt = Date.now();
  g.kill('SIGTERM');
  const results = await Promise.all(calls.map((c) => c.done));
  const exit = await g.exited;
  expect(exit.code).toBe(0);
  // The deadline applied (not the old fixed 10 s), and the streams were still running when it came.
  expect(Date.now() - signalledAt).toBeLessThan(DEADLINE_S * 1000 + 4_000);
  return results;
}

function expectCutCleanly(results: StreamResult[]): void {
  for (const result of results) {
    expect(result.ending).toBe('end');
    const events = dataOf(result.body);
    expect(events.length).toBeGreaterThan(1);
    const last = JSON.parse(events.at(-1) as string) as { error?: { code?: string; type?: string } };
    expect(last.error?.code).toBe('service_unavailable');
    expect(last.error?.type).toBe('server_error');
    // Cut, not finished: no [DONE] after the error.
    expect(result.body).not.toContain('[DONE]');
  }
}

afterEach(async () => {
  await stopAllGantry(3_000);
});

afterAll(() => {
  removeTempDirs();
});

describe('SIGTERM in embedded mode', () => {
  it('ends running streams at the deadline with an error event and a clean end, and writes every usage record', async () => {
    const dataDir = tempDir('gantry-shutdown-data-');
    const g = await spawnGantry({ config: config(), dataDir, env: { GANTRY_BOOTSTRAP_KEY: KEY } });
    const results = await cutAtDeadline(g);
    expectCutCleanly(results);
    expect(g.output()).not.toContain('usage records dropped');

    // Checkpointed at exit: no -wal left with data in it, and copies of the two files alone hold everything.
    for (const file of ['gantry.db', 'ledger.db']) {
      const wal = join(dataDir, `${file}-wal`);
      expect(existsSync(wal) ? statSync(wal).size : 0).toBe(0);
    }
    const copies = tempDir('gantry-shutdown-copy-');
    copyFileSync(join(dataDir, 'gantry.db'), join(copies, 'gantry.db'));
    copyFileSync(join(dataDir, 'ledger.db'), join(copies, 'ledger.db'));
    expect(countRows(join(copies, 'ledger.db'), 'usage_records')).toBe(STREAMS);
    expect(countRows(join(copies, 'gantry.db'), 'api_keys')).toBe(1);
  }, 60_000);
});

/** A config whose only model streams from `upstream`, with no timer of Gantry's that could end a stall first. */
function stallingConfig(upstream: FakeOpenAI, forwardUpstream: RecordingServer<object>): string {
  const path = join(tempDir('gantry-shutdown-config-'), 'gantry.yaml');
  writeFileSync(
    path,
    `
server:
  log_level: warn
  shutdown_timeout_seconds: ${DEADLINE_S}
providers:
  stalling:
    kind: openai
    base_url: ${upstream.url}
    timeouts: { connect_ms: 1000, first_byte_ms: 60000, idle_ms: 60000, total_ms: 60000 }
  forwarding:
    kind: openai
    base_url: ${forwardUpstream.origin}/v1
    timeouts: { connect_ms: 1000, first_byte_ms: 60000, idle_ms: 60000, total_ms: 60000 }
tiers:
  default: {}
models:
  - namespace: gantry/stalling-chat
    name: Stalling chat
    type: text
    vendor: { name: Gantry, slug: gantry }
    serves: [inference]
    apis: [chat]
    routes: [{ provider: stalling, model: stalling-chat }]
  - namespace: gantry/stalling-prediction
    name: Stalling prediction
    type: text
    vendor: { name: Gantry, slug: gantry }
    serves: [predictions]
    routes: [{ provider: stalling, model: stalling-chat }]
  - namespace: acme/speech
    name: Speech
    type: audio
    apis: [other]
    routes: [{ provider: forwarding, model: tts-1 }]
`,
  );
  return path;
}

describe('SIGTERM with an upstream gone silent', () => {
  let upstream: FakeOpenAI | undefined;
  let forwardUpstream: RecordingServer<object> | undefined;
  afterAll(async () => {
    await upstream?.close();
    await forwardUpstream?.close();
  });

  it('ends the stream at the deadline, aborts the upstream call at once and exits soon after', async () => {
    // The role chunk and one content chunk, then silence: only the deadline can end these streams.
    upstream = await startFakeOpenAI({ behavior: { stallAfterChunks: 2 } });
    // A forwarded answer (relayed byte for byte): its first bytes, then silence.
    forwardUpstream = await startRecordingServer<object>(
      (ex) => {
        ex.res.writeHead(200, { 'content-type': 'audio/mpeg' });
        return writePaced(ex, ['first bytes', 'never sent'], { stallAfter: 1 });
      },
      { name: 'forward upstream', behavior: {}, errorBody: (message) => ({ error: { message } }) },
    );
    const dataDir = tempDir('gantry-shutdown-data-');
    const g = await spawnGantry({
      config: stallingConfig(upstream, forwardUpstream),
      dataDir,
      env: { GANTRY_BOOTSTRAP_KEY: KEY },
    });
    const body = { model: 'gantry/stalling-chat', stream: true, messages: [{ role: 'user', content: 'hi' }] };
    const calls = [
      stream(g, '/v1/chat/completions', body),
      stream(g, '/v1/chat/completions?via=fastify', body),
    ];
    const forwarded = stream(g, '/v1/audio/speech', { model: 'acme/speech', input: 'hi', voice: 'alloy' });
    // A prediction whose upstream goes silent, watched on its stream.
    const created = await fetch(`${g.origin}/v1/predictions`, {
      method: 'POST',
      headers: { 'x-api-key': KEY, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gantry/stalling-prediction', input: { prompt: 'hi' }, stream: true }),
    });
    const { id } = (await created.json()) as { id: string };
    const watched = stream(g, `/v1/predictions/${id}/stream`, null);
    await Promise.all([...calls, forwarded, watched].map((c) => c.started));
    const signalledAt = Date.now();
    g.kill('SIGTERM');
    const exchanges = [...(await upstream.waitForRequests(3)), ...(await forwardUpstream.waitForRequests(1))];
    const outcomes = await Promise.all(exchanges.map((e) => e.settled));
    // The upstream calls end at the deadline, not when the process does.
    const upstreamEndedAfter = Date.now() - signalledAt;
    expect(outcomes).toEqual(['aborted', 'aborted', 'aborted', 'aborted']);
    const results = await Promise.all(calls.map((c) => c.done));
    // The forwarded answer is cut short, with a clean end and nothing added.
    const relayed = await forwarded.done;
    expect(relayed.ending).toBe('end');
    expect(relayed.body).toBe('first bytes');
    // The prediction stream ends cleanly without `done` (the prediction is not over: the client resumes).
    const predictionStream = await watched.done;
    expect(predictionStream.ending).toBe('end');
    expect(predictionStream.body).toContain('event: output');
    expect(predictionStream.body).not.toContain('event: done');
    const exit = await g.exited;
    const exitedAfter = Date.now() - signalledAt;
    expect(exit.code).toBe(0);
    expect(upstreamEndedAfter).toBeGreaterThanOrEqual(DEADLINE_S * 1000 - 100);
    expect(upstreamEndedAfter).toBeLessThan(DEADLINE_S * 1000 + 1_000);
    expect(exitedAfter).toBeLessThan(DEADLINE_S * 1000 + 2_500);
    expectCutCleanly(results);
    expect(g.output()).not.toContain('usage records dropped');
    expect(countRows(join(dataDir, 'ledger.db'), 'usage_records')).toBe(3);
  }, 60_000);
});

describeRedis('SIGTERM on Redis', () => {
  let redis: TestRedis | undefined;
  afterAll(async () => {
    await redis?.close();
  });

  it('ends running streams at the deadline and puts every usage record on the stream', async () => {
    redis = await startRedis();
    const dataDir = tempDir('gantry-shutdown-data-');
    const g = await spawnGantry({
      config: config(redis),
      dataDir,
      env: { GANTRY_BOOTSTRAP_KEY: KEY, GANTRY_SECRET_KEY: 'a'.repeat(64) },
    });
    const results = await cutAtDeadline(g);
    expectCutCleanly(results);
    expect(g.output()).not.toContain('usage records dropped');
    const client = new Redis(redis.url);
    try {
      expect(await client.xlen(STREAM_STREAM)).toBe(STREAMS);
    } finally {
      client.disconnect();
    }
  }, 60_000);
});

describe('Connection: close', () => {
  it('a stream answer honours the client asking to close the connection', async () => {
    const dataDir = tempDir('gantry-shutdown-data-');
    const g = await spawnGantry({ config: config(), dataDir, env: { GANTRY_BOOTSTRAP_KEY: KEY } });
    const short = { model: 'gantry/local-chat', stream: true, messages: [{ role: 'user', content: 'hi' }] };
    for (const path of ['/v1/chat/completions', '/v1/chat/completions?via=fastify']) {
      const closing = await stream(g, path, short, { connection: 'close' }).done;
      expect(closing.ending).toBe('end');
      expect(closing.headers.connection).toBe('close');
      const kept = await stream(g, path, short).done;
      expect(kept.headers.connection).toBe('keep-alive');
    }
    await until('the server to still answer', async () => (await fetch(`${g.origin}/healthz`)).ok);
  }, 60_000);
});
