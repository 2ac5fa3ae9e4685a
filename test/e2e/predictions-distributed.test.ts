/**
 * The Predictions API in distributed mode, end to end: real `gantry serve` processes (tsx on src/main.ts,
 * test/helpers/gantry-process.ts) started with GANTRY_ROLE=api|worker|all (what `--role` reads when the
 * flag is absent), meeting on a real redis-server (RedisPredictionStore, BullMQ, Redis pub/sub).
 *
 * - api + worker split: create through the api (with and without `await`), the worker runs it, the file
 *   downloads from the api, GET and list from the api; signed webhooks sent by the worker, in order, a
 *   refused one retried; cancel on the api while the worker renders a video (ffmpeg stops, no mp4, no
 *   succeeded webhook); SIGTERM to a worker mid-video; a create whose queueing failed, retried with its
 *   Idempotency-Key; a worker without a public URL.
 * - two `all` instances: one webhook secret; one Idempotency-Key used on both at once; a stream created
 *   on A and read live on B (progress visible on A); a late subscriber on B replays it.
 * - a worker SIGKILLed mid-video: another worker picks the job up (BullMQ stalled-job recovery).
 * - Redis (AOF) stopped and started while predictions wait with no worker: a worker started afterwards
 *   runs them all and delivers a webhook that was pending across the restart.
 *
 * Every process of a scenario shares GANTRY_SECRET_KEY (sealed secrets, signed file links and webhook
 * secrets must agree), `predictions.files_dir` (the api serves files the worker wrote) and the account
 * `test` with the same key from the config (accounts and keys live in each process's own SQLite; the
 * account id is derived from its name, so every instance agrees on it).
 *
 * public_url: where an api and a worker are split, both get GANTRY_PUBLIC_URL = the api's address (the
 * api listens on a port chosen beforehand), as a deployment behind one address must: the worker writes
 * absolute links into webhook bodies and stream events, and it serves no API or files itself. One test
 * shows what a worker without it sends. The two `all` instances have none: each serves files and the API.
 *
 * Time: the worker-kill scenario waits for BullMQ's stalled-job recovery (the default lock of 30 s,
 * `predictions.worker_lock_seconds`, stall checks every half lock), 35-50 s in all, so the three top-level suites are
 * `concurrent` and run side by side; inside each, tests run one after the other. About 60-90 s in all.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, it } from 'vitest';
import { type GantryProcess, spawnGantry } from '../helpers/gantry-process.js';
import { freePort } from '../helpers/ports.js';
import { describeRedis, startRedis, type TestRedis } from '../helpers/redis.js';
import { type Res, restCall } from '../helpers/rest.js';
import { parseSse as parseSseEvents, type SseEvent as SseEventText } from '../helpers/sse-events.js';
import { removeTempDirs, tempDir } from '../helpers/temp-dirs.js';
import { sleep, waitFor } from '../helpers/wait.js';
import { startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.js';

type Role = 'api' | 'worker' | 'all';

const KEY = 'gty_e2e-predictions-distributed-0123456789abcdefghij';
/** One secret for every process of the file: 32 bytes as 64 hex characters. */
const SECRET_KEY = randomBytes(32).toString('hex');
const IMAGE = 'gantry/local-image';
const VIDEO = 'gantry/local-video';
/** About 3 s of ffmpeg work here (more under load): long enough to cancel, kill or stream it. */
const SLOW_VIDEO = { prompt: 'a slow pan over a stormy sea', resolution: '720p', duration: 10 };
/** Under a second here: sure to end within a worker's 10 s shutdown grace, even on a busy machine. */
const MEDIUM_VIDEO = { prompt: 'a short walk in the park', resolution: '360p', duration: 10 };
const TERMINAL = ['succeeded', 'failed', 'canceled'];
const PNG_MAGIC = '89504e470d0a1a0a';

interface Prediction {
  id: string;
  status: string;
  stream: boolean;
  output: string[] | string | null;
  error: string | null;
  logs: string;
  webhook: { url: string | null; events: string[] };
  metrics: { progress?: number };
  metadata: { storage: { files: Array<{ name: string; type: string; size: number; url: string }> } };
  urls: { get: string; cancel: string; stream: string; delete: string };
}

interface Delivery {
  id: string;
  event: string;
  state: string;
  attempts: number;
  created_at: string;
  log: Array<{ outcome: string; status: number | null }>;
}

// ---------------------------------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------------------------------

afterAll(removeTempDirs);

/** A config for one scenario: local image and video models, the account `test`, its files dir. */
function writeConfig(filesDir: string): string {
  const path = join(tempDir('gantry-pd-config-'), 'gantry.yaml');
  writeFileSync(
    path,
    `
server:
  log_level: warn
providers:
  local: { kind: local }
tiers:
  default: {}
accounts:
  - name: test
    keys: [{ name: k, key_env: TEST_KEY }]
usage: { flush_ms: 50 }
predictions:
  files_dir: ${JSON.stringify(filesDir)}
  await_timeout_seconds: 20
  webhooks: { allow_private: true, backoff_base_ms: 100, backoff_max_ms: 500, timeout_ms: 2000 }
models:
  - { namespace: ${IMAGE}, name: Local image, type: image, vendor: { name: Gantry, slug: gantry }, serves: [predictions], routes: [{ provider: local, model: local-image }] }
  - { namespace: ${VIDEO}, name: Local video, type: video, vendor: { name: Gantry, slug: gantry }, serves: [predictions], routes: [{ provider: local, model: local-video }] }
`,
  );
  return path;
}

interface Scenario {
  redis: TestRedis;
  config: string;
  filesDir: string;
}

async function scenario(aof = false): Promise<Scenario> {
  const filesDir = tempDir('gantry-pd-files-');
  return { redis: await startRedis({ aof }), config: writeConfig(filesDir), filesDir };
}

interface StartOptions {
  /** GANTRY_PUBLIC_URL; absent: the process's own address. */
  publicUrl?: string;
  /** A fixed port (so the public URL can name it before start); default a random one. */
  port?: number;
}

async function gantry(s: Scenario, name: string, role: Role, options: StartOptions = {}) {
  const g = await spawnGantry({
    name,
    config: s.config,
    dataDir: tempDir(`gantry-pd-data-${name}-`),
    startTimeoutMs: 60_000,
    env: {
      REDIS_URL: s.redis.url,
      GANTRY_ROLE: role,
      GANTRY_SECRET_KEY: SECRET_KEY,
      TEST_KEY: KEY,
      ...(options.port === undefined ? {} : { PORT: String(options.port) }),
      ...(options.publicUrl === undefined ? {} : { GANTRY_PUBLIC_URL: options.publicUrl }),
    },
  });
  if (!g.output().includes(`(role: ${role},`)) throw new Error(`${name} is not role ${role}:\n${g.output()}`);
  return g;
}

/**
 * Starts processes together; if one fails to start, stops the others before rethrowing (otherwise a
 * process that did start would be left without an owner to stop it).
 */
async function startTogether<T extends Array<Promise<GantryProcess>>>(
  ...starting: T
): Promise<{ [K in keyof T]: GantryProcess }> {
  const results = await Promise.allSettled(starting);
  const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  const started = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
  if (failed) {
    await Promise.all(started.map((g) => g.stop(1_000)));
    throw failed.reason;
  }
  return started as { [K in keyof T]: GantryProcess };
}

/** An address for an api instance, chosen before it starts so that every process can be told it. */
async function apiAddress(): Promise<{ port: number; publicUrl: string }> {
  const port = await freePort();
  return { port, publicUrl: `http://127.0.0.1:${port}` };
}

/** ffmpeg processes a Gantry process has running now. */
function ffmpegChildren(g: GantryProcess): number[] {
  try {
    const out = execFileSync('ps', ['-o', 'pid=,args=', '--ppid', String(g.pid)], { encoding: 'utf8' });
    return out
      .split('\n')
      .filter((line) => /ffmpeg/.test(line))
      .map((line) => Number.parseInt(line.trim(), 10));
  } catch {
    return []; // ps exits 1 when the process has no children
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

// ---------------------------------------------------------------------------------------------------
// Client
// ---------------------------------------------------------------------------------------------------

function call<T = Prediction>(
  g: GantryProcess | string,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<Res<T>> {
  return restCall<T>(typeof g === 'string' ? g : g.origin, method, path, { key: KEY, body, headers });
}

async function create(g: GantryProcess, body: Record<string, unknown>): Promise<Prediction> {
  const res = await call(g, 'POST', '/v1/predictions', body);
  if (res.status !== 200) throw new Error(`create on ${g.name}: ${res.status} ${res.text}`);
  return res.body;
}

async function get(g: GantryProcess, id: string): Promise<Prediction> {
  const res = await call(g, 'GET', `/v1/predictions/${id}`);
  if (res.status !== 200) throw new Error(`GET ${id} on ${g.name}: ${res.status} ${res.text}`);
  return res.body;
}

async function deliveries(g: GantryProcess, id: string): Promise<Delivery[]> {
  const res = await call<{ data: Delivery[] }>(g, 'GET', `/v1/predictions/${id}/webhooks`);
  if (res.status !== 200) throw new Error(`webhooks of ${id}: ${res.status} ${res.text}`);
  return res.body.data;
}

async function webhookSecret(g: GantryProcess): Promise<string> {
  const res = await call<{ key: string }>(g, 'GET', '/v1/webhooks/secret');
  if (res.status !== 200 || !/^whsec_/.test(res.body?.key ?? ''))
    throw new Error(`webhook secret of ${g.name}: ${res.status} ${res.text}`);
  return res.body.key;
}

async function pollUntil(g: GantryProcess, id: string, statuses: string[], timeoutMs = 30_000) {
  let last: Prediction | undefined;
  try {
    return await waitFor(
      `${id} to be ${statuses.join('|')}`,
      async () => {
        last = await get(g, id);
        return statuses.includes(last.status) ? last : undefined;
      },
      timeoutMs,
    );
  } catch (error) {
    throw new Error(`${(error as Error).message}; last seen: ${JSON.stringify(last)}`);
  }
}

/** The webhooks a receiver got for one prediction, in arrival order. */
function webhooksOf(receiver: WebhookReceiver, id: string) {
  return receiver.requests.filter((r) => r.body?.id === id);
}

async function waitForWebhook(receiver: WebhookReceiver, id: string, event: string, timeoutMs = 20_000) {
  return waitFor(
    `the ${event} webhook of ${id}`,
    () => webhooksOf(receiver, id).find((r) => r.event === event),
    timeoutMs,
  );
}

/** A webhook's body: the Prediction object plus webhook_event_type. */
function bodyOf(hook: { body: unknown }): Prediction {
  if (hook.body === undefined) throw new Error('the webhook had no JSON body');
  return hook.body as Prediction;
}

/** GETs a file link (no API key: the signature is the credential). */
async function download(url: string) {
  const res = await fetch(url);
  const data = Buffer.from(await res.arrayBuffer());
  return { status: res.status, type: res.headers.get('content-type'), data };
}

function filesOf(s: Scenario, id: string): string[] {
  const dir = join(s.filesDir, id);
  return existsSync(dir) ? readdirSync(dir) : [];
}

/** The webhook jobs BullMQ holds (waiting, delayed, active), for failure messages. */
async function webhookJobs(s: Scenario): Promise<string> {
  const redis = new Redis(s.redis.url);
  try {
    const q = 'gantry:{jobs}:webhooks';
    const [wait, delayed, active] = await Promise.all([
      redis.llen(`${q}:wait`),
      redis.zcard(`${q}:delayed`),
      redis.llen(`${q}:active`),
    ]);
    return `${wait} waiting, ${delayed} delayed, ${active} active`;
  } finally {
    redis.disconnect();
  }
}

// ---------------------------------------------------------------------------------------------------
// SSE
// ---------------------------------------------------------------------------------------------------

interface SseEvent extends Omit<SseEventText, 'id'> {
  id: number | undefined;
}

interface SseStream {
  status: number;
  /** Resolves once the server ended the stream (rejects after the timeout with what came so far). */
  done: Promise<SseEvent[]>;
}

/** The events of a stream, with their ids (the prediction's seqs) as numbers. */
function parseSse(raw: string): SseEvent[] {
  return parseSseEvents(raw).map((e) => ({ ...e, id: e.id === undefined ? undefined : Number(e.id) }));
}

/** Opens GET /v1/predictions/{id}/stream; resolves once the response headers arrived. */
async function openStream(
  g: GantryProcess,
  id: string,
  options: { lastEventId?: number; timeoutMs?: number } = {},
): Promise<SseStream> {
  const controller = new AbortController();
  const headers: Record<string, string> = { 'x-api-key': KEY, accept: 'text/event-stream' };
  if (options.lastEventId !== undefined) headers['last-event-id'] = String(options.lastEventId);
  const res = await fetch(`${g.origin}/v1/predictions/${id}/stream`, { headers, signal: controller.signal });
  let raw = '';
  const done = (async () => {
    const timer = setTimeout(() => controller.abort(), options.timeoutMs ?? 20_000);
    try {
      const reader = (res.body as ReadableStream<Uint8Array>).getReader();
      const decoder = new TextDecoder();
      for (;;) {
        const { value, done: end } = await reader.read();
        if (end) return parseSse(raw);
        raw += decoder.decode(value, { stream: true });
      }
    } catch (error) {
      throw new Error(
        `the stream of ${id} on ${g.name} did not end (${(error as Error).message}); got:\n${raw}`,
      );
    } finally {
      clearTimeout(timer);
    }
  })();
  done.catch(() => undefined);
  return { status: res.status, done };
}

// ===================================================================================================
// Worker killed mid-prediction (slow: runs concurrently with the suite below)
// ===================================================================================================

describeRedis('distributed predictions: worker SIGKILLed mid-prediction', { concurrent: true }, () => {
  let s: Scenario;
  let api: GantryProcess;
  let first: GantryProcess;
  let publicUrl: string;
  let receiver: WebhookReceiver;

  beforeAll(async () => {
    s = await scenario();
    const address = await apiAddress();
    publicUrl = address.publicUrl;
    [api, first] = await startTogether(
      gantry(s, 'kill-api', 'api', address),
      gantry(s, 'kill-worker-1', 'worker', { publicUrl }),
    );
    receiver = await startWebhookReceiver({ secret: await webhookSecret(api) });
  }, 120_000);

  afterAll(async () => {
    await receiver?.close();
    await Promise.all([api?.stop(3_000), first?.stop(1_000)]);
    await s?.redis.close();
  });

  // BullMQ gives a dead worker's job to another worker only once its lock (30 s, renewed every 15 s)
  // expired and a stall check (every 15 s) saw it twice: 30-45 s after the kill, plus the re-run.
  it('another worker finishes the job of a SIGKILLed one: terminal, never stuck', {
    timeout: 120_000,
  }, async ({ expect }) => {
    const p = await create(api, { model: VIDEO, input: SLOW_VIDEO, webhook: { url: receiver.url } });
    await pollUntil(api, p.id, ['processing']);
    const encoders = await waitFor('ffmpeg on worker 1', () => {
      const pids = ffmpegChildren(first);
      return pids.length > 0 ? pids : undefined;
    });
    first.kill('SIGKILL');
    await first.exited;
    // The orphaned encoder dies on its broken pipe; it is ours, so make sure.
    await sleep(500);
    for (const pid of encoders.filter(alive)) process.kill(pid, 'SIGKILL');
    expect((await get(api, p.id)).status).toBe('processing');

    const killedAt = Date.now();
    const second = await gantry(s, 'kill-worker-2', 'worker', { publicUrl });
    try {
      const final = await pollUntil(api, p.id, TERMINAL, 90_000);
      const recoveredMs = Date.now() - killedAt;
      expect(['succeeded', 'failed'], JSON.stringify(final)).toContain(final.status);
      if (final.status === 'succeeded') {
        expect(typeof final.output).toBe('string');
        const file = await download(final.output as string);
        expect(file.status).toBe(200);
        expect(file.type).toBe('video/mp4');
        expect(file.data.subarray(4, 8).toString('latin1')).toBe('ftyp');
        expect(filesOf(s, p.id)).toContain('output.mp4');
      } else {
        expect(final.error).toEqual(expect.any(String));
        expect(final.error).not.toMatch(/at .*\.(ts|js):\d+/);
      }
      // One started (the re-run finds it processing already), then exactly one terminal event.
      const end = await waitForWebhook(receiver, p.id, `prediction.${final.status}`);
      expect(end.signatureValid).toBe(true);
      await sleep(300);
      // At least once: a delivery the killed worker sent but had not recorded is sent again with the
      // same webhook-id; receivers dedupe on it. Distinct deliveries: one started, one terminal.
      const distinct = new Map(webhooksOf(receiver, p.id).map((r) => [r.headers['webhook-id'], r.event]));
      expect([...distinct.values()]).toEqual(['prediction.started', `prediction.${final.status}`]);
      // Stays terminal.
      expect((await get(api, p.id)).status).toBe(final.status);
      expect(recoveredMs).toBeLessThan(90_000);
    } finally {
      await second.stop(3_000);
    }
  });
});

// ===================================================================================================
// api + worker split (concurrently with the other suites; its tests one after the other)
// ===================================================================================================

describeRedis('distributed predictions: api + worker split', { concurrent: true, timeout: 60_000 }, () => {
  describe.sequential('--role api and --role worker on one Redis', () => {
    let s: Scenario;
    let api: GantryProcess;
    let worker: GantryProcess;
    let publicUrl: string;
    let secret: string;
    let receiver: WebhookReceiver;

    beforeAll(async () => {
      s = await scenario();
      const address = await apiAddress();
      publicUrl = address.publicUrl;
      [api, worker] = await startTogether(
        gantry(s, 'split-api', 'api', address),
        gantry(s, 'split-worker', 'worker', { publicUrl }),
      );
      secret = await webhookSecret(api);
      receiver = await startWebhookReceiver({ secret });
    }, 120_000);

    afterAll(async () => {
      await receiver?.close();
      await Promise.all([api?.stop(3_000), worker?.stop(3_000)]);
      await s?.redis.close();
    });

    it('await: true through the api: the worker runs it; the file downloads from the api', async ({
      expect,
    }) => {
      const p = await create(api, {
        model: IMAGE,
        input: { prompt: 'a red fox at dawn', seed: 7 },
        await: true,
      });
      expect(p.status).toBe('succeeded');
      expect(p.urls.get).toBe(`${publicUrl}/v1/predictions/${p.id}`);
      expect(Array.isArray(p.output) && p.output.length).toBe(1);
      const url = (p.output as string[])[0] as string;
      expect(url.startsWith(`${publicUrl}/v1/files/${p.id}/`)).toBe(true);
      expect(p.logs).toMatch(/Using seed: 7/);
      const file = await download(url);
      expect(file.status).toBe(200);
      expect(file.type).toBe('image/png');
      expect(file.data.subarray(0, 8).toString('hex')).toBe(PNG_MAGIC);
      expect(file.data.length).toBe(p.metadata.storage.files[0]?.size);
      // Written by the worker into the shared files dir.
      expect(filesOf(s, p.id)).toContain('output_0.png');
    });

    it('without await: starting at first, then succeeded; GET and list from the api', async ({ expect }) => {
      const p = await create(api, { model: IMAGE, input: { prompt: 'a blue whale', num_outputs: 2 } });
      expect(p.status).toBe('starting');
      expect(p.output).toBeNull();
      const done = await pollUntil(api, p.id, TERMINAL);
      expect(done.status).toBe('succeeded');
      expect(done.output).toHaveLength(2);
      for (const url of done.output as string[]) {
        const file = await download(url);
        expect(file.status).toBe(200);
        expect(file.data.subarray(0, 8).toString('hex')).toBe(PNG_MAGIC);
      }
      const list = await call<{ data: Prediction[]; pagination: { total: number } }>(
        api,
        'GET',
        `/v1/predictions?model=${IMAGE}`,
      );
      expect(list.status).toBe(200);
      const listed = list.body.data.find((x) => x.id === p.id);
      expect(listed?.status).toBe('succeeded');
      expect(listed?.output).toEqual(done.output);
      expect(list.body.pagination.total).toBeGreaterThanOrEqual(2);

      // The worker serves no API (nor files); the api runs no jobs (the next suites show that).
      expect((await call(worker, 'GET', `/v1/predictions/${p.id}`)).status).toBe(404);
      expect((await fetch(`${worker.origin}/healthz`)).status).toBe(200);
    });

    it('webhooks from the worker: signed with the secret the api gives, started before succeeded', async ({
      expect,
    }) => {
      // Several at once, so an ordering race has a chance to show.
      const created = await Promise.all(
        Array.from({ length: 6 }, (_, i) =>
          create(api, {
            model: IMAGE,
            input: { prompt: `a lighthouse ${i}` },
            webhook: { url: receiver.url, events: ['started', 'completed'] },
          }),
        ),
      );
      for (const p of created) {
        const succeeded = await waitForWebhook(receiver, p.id, 'prediction.succeeded');
        expect(succeeded.signatureValid, succeeded.signatureError).toBe(true);
        expect(succeeded.gantrySignatureValid).toBe(true);
        expect(succeeded.body?.status).toBe('succeeded');
        // The links in the body are the api's and work.
        expect(succeeded.body?.urls).toMatchObject({ get: `${publicUrl}/v1/predictions/${p.id}` });
        const url = (bodyOf(succeeded).output as string[])[0] as string;
        expect(url.startsWith(`${publicUrl}/v1/files/`)).toBe(true);
        expect((await download(url)).status).toBe(200);

        const got = webhooksOf(receiver, p.id);
        expect(
          got.map((r) => r.event),
          `order of the webhooks of ${p.id}`,
        ).toEqual(['prediction.started', 'prediction.succeeded']);
        expect(got[0]?.body?.status).toBe('processing');
        for (const r of got) {
          expect(r.signatureValid).toBe(true);
          expect(r.gantrySignatureValid).toBe(true);
        }
        const log = await deliveries(api, p.id);
        expect(log.map((d) => [d.event, d.state, d.attempts])).toEqual([
          ['prediction.started', 'delivered', 1],
          ['prediction.succeeded', 'delivered', 1],
        ]);
        expect(got.map((r) => r.headers['webhook-id'])).toEqual(log.map((d) => d.id));
      }
    });

    it('a refused delivery is retried by the worker, and the next event waits for it', async ({ expect }) => {
      receiver.nextResponses({ status: 500 });
      const p = await create(api, {
        model: IMAGE,
        input: { prompt: 'a stubborn mule' },
        webhook: { url: receiver.url },
      });
      await waitForWebhook(receiver, p.id, 'prediction.succeeded');
      const got = webhooksOf(receiver, p.id);
      expect(
        got.map((r) => [r.event, r.reply === 'hang' || r.reply === 'close' ? r.reply : r.reply.status]),
      ).toEqual([
        ['prediction.started', 500],
        ['prediction.started', 200],
        ['prediction.succeeded', 200],
      ]);
      // Same webhook-id on the retry, signed anew.
      expect(got[1]?.headers['webhook-id']).toBe(got[0]?.headers['webhook-id']);
      expect(got.every((r) => r.signatureValid)).toBe(true);
      const log = await deliveries(api, p.id);
      expect(log.map((d) => [d.event, d.state, d.attempts, d.log.map((l) => l.outcome)])).toEqual([
        ['prediction.started', 'delivered', 2, ['retry', 'delivered']],
        ['prediction.succeeded', 'delivered', 1, ['delivered']],
      ]);
    });

    it('cancel on the api while the worker renders a video: canceled, ffmpeg stops, no mp4, no succeeded webhook', async ({
      expect,
    }) => {
      const p = await create(api, { model: VIDEO, input: SLOW_VIDEO, webhook: { url: receiver.url } });
      await pollUntil(api, p.id, ['processing']);
      await waitFor('ffmpeg on the worker', () => (ffmpegChildren(worker).length > 0 ? true : undefined));

      const res = await call<{ success: boolean; status: string; prediction: Prediction }>(
        api,
        'POST',
        `/v1/predictions/${p.id}/cancel`,
      );
      expect(res.status, res.text).toBe(200);
      expect(res.body.status).toBe('canceled');
      // The cancel crossed to the worker over the bus: its encoder stops.
      await waitFor(
        'ffmpeg on the worker to stop',
        () => (ffmpegChildren(worker).length === 0 ? true : undefined),
        2_000,
      );

      const canceled = await waitForWebhook(receiver, p.id, 'prediction.canceled');
      expect(canceled.signatureValid).toBe(true);
      // Longer than the video would have taken: nothing more comes.
      await sleep(3_500);
      const final = await get(api, p.id);
      expect(final.status).toBe('canceled');
      expect(final.output).toBeNull();
      expect(final.metadata.storage.files).toEqual([]);
      expect(filesOf(s, p.id)).toEqual([]);
      expect(webhooksOf(receiver, p.id).map((r) => r.event)).toEqual([
        'prediction.started',
        'prediction.canceled',
      ]);
      expect((await deliveries(api, p.id)).map((d) => d.event)).toEqual([
        'prediction.started',
        'prediction.canceled',
      ]);
    });

    // A prediction that finishes while its worker drains schedules its webhook through a queue that is
    // closing: the queue keeps taking adds until its connections close, and a sweep would find it anyway.
    it('SIGTERM to the worker mid-video: it finishes during the drain, and its succeeded webhook is delivered', async ({
      expect,
    }) => {
      const p = await create(api, { model: VIDEO, input: MEDIUM_VIDEO, webhook: { url: receiver.url } });
      await pollUntil(api, p.id, ['processing']);
      const sigtermAt = Date.now();
      worker.kill('SIGTERM');
      expect((await worker.exited).code).toBe(0);
      // The drain (10 s grace) let the video finish.
      const done = await get(api, p.id);
      expect(done.status).toBe('succeeded');
      expect((await download(done.output as string)).status).toBe(200);
      const before = await deliveries(api, p.id);
      const succeeded = before.find((d) => d.event === 'prediction.succeeded');
      expect(Date.parse(succeeded?.created_at ?? ''), 'finished during the drain').toBeGreaterThanOrEqual(
        sigtermAt,
      );

      worker = await gantry(s, 'split-worker-2', 'worker', { publicUrl });
      const arrived = await waitForWebhook(receiver, p.id, 'prediction.succeeded', 8_000).catch(
        () => undefined,
      );
      const log = await deliveries(api, p.id);
      const jobs = await webhookJobs(s);
      expect(arrived?.event, `deliveries: ${JSON.stringify(log)}; BullMQ webhooks queue: ${jobs}`).toBe(
        'prediction.succeeded',
      );
    });

    // createPrediction (service.ts) stores the prediction, then queues it; when the queue fails it answers
    // 503 "retry with backoff (same Idempotency-Key)". The retry must give a prediction that runs.
    it('a create whose queueing failed, retried with the same Idempotency-Key, runs', async ({ expect }) => {
      const redis = new Redis(s.redis.url);
      const idKey = 'gantry:{jobs}:predictions:id';
      const body = { model: IMAGE, input: { prompt: 'a retried create' } };
      const headers = { 'idempotency-key': `retry-${randomBytes(4).toString('hex')}` };
      try {
        // BullMQ's job counter holding a non-number makes every add fail while the store still works.
        const saved = await redis.get(idKey);
        await redis.set(idKey, 'not-a-number');
        const refused = await call(api, 'POST', '/v1/predictions', body, headers);
        if (saved === null) await redis.del(idKey);
        else await redis.set(idKey, saved);
        expect(refused.status, refused.text).toBe(503);
        expect(refused.headers.get('retry-after')).toBe('1');

        const retried = await call(api, 'POST', '/v1/predictions', body, headers);
        expect(retried.status, retried.text).toBe(200);
        const final = await pollUntil(api, retried.body.id, TERMINAL, 5_000).catch((e: Error) => e);
        expect(final instanceof Error ? final.message : final.status).toBe('succeeded');
      } finally {
        redis.disconnect();
      }
    });

    // A worker's links (webhook bodies, stream events) must reach the API instances, so a worker
    // without a public URL is refused at start instead of writing links to itself.
    it('refuses to start a worker without public_url, naming the setting', async ({ expect }) => {
      await expect(gantry(s, 'split-worker-no-url', 'worker')).rejects.toThrow(
        /exited \(2\)[\s\S]*public_url/,
      );
    });
  });
});

// ===================================================================================================
// Two `all` instances, then a Redis restart (concurrently with the other suites)
// ===================================================================================================

describeRedis(
  'distributed predictions: all instances, Redis restart',
  { concurrent: true, timeout: 60_000 },
  () => {
    describe.sequential('two --role all instances: SSE across instances', () => {
      let s: Scenario;
      let a: GantryProcess;
      let b: GantryProcess;
      let receiver: WebhookReceiver;
      let streamed: { id: string; events: SseEvent[] } | undefined;

      beforeAll(async () => {
        s = await scenario();
        [a, b] = await startTogether(gantry(s, 'all-A', 'all'), gantry(s, 'all-B', 'all'));
        receiver = await startWebhookReceiver({ secret: await webhookSecret(a) });
      }, 120_000);

      afterAll(async () => {
        await receiver?.close();
        await Promise.all([a?.stop(3_000), b?.stop(3_000)]);
        await s?.redis.close();
      });

      it('every instance gives the same webhook secret', async ({ expect }) => {
        expect(await webhookSecret(b)).toBe(await webhookSecret(a));
      });

      it('the same Idempotency-Key on A and B at once: one prediction, run once', async ({ expect }) => {
        const headers = { 'idempotency-key': `both-${randomBytes(4).toString('hex')}` };
        const prompt = `one of a kind ${randomBytes(4).toString('hex')}`;
        const body = { model: IMAGE, input: { prompt } };
        const [fromA, fromB] = await Promise.all([
          call(a, 'POST', '/v1/predictions', body, headers),
          call(b, 'POST', '/v1/predictions', body, headers),
        ]);
        expect([fromA.status, fromB.status]).toEqual([200, 200]);
        expect(fromA.body.id).toBe(fromB.body.id);
        const replays = [fromA, fromB].filter((r) => r.headers.get('idempotent-replayed') === 'true');
        expect(replays, 'exactly one of them is the replay').toHaveLength(1);
        const done = await pollUntil(b, fromA.body.id, TERMINAL);
        expect(done.status).toBe('succeeded');
        const list = await call<{ data: Prediction[] }>(
          a,
          'GET',
          `/v1/predictions?model=${IMAGE}&per_page=50`,
        );
        const same = list.body.data.filter(
          (x) => (x as unknown as { input: { prompt: string } }).input.prompt === prompt,
        );
        expect(same.map((x) => x.id)).toEqual([fromA.body.id]);
      });

      it('a stream created on A, read live on B: logs, output, then done', async ({ expect }) => {
        const p = await create(a, {
          model: VIDEO,
          input: SLOW_VIDEO,
          stream: true,
          webhook: { url: receiver.url, events: ['completed'] },
        });
        expect(p.stream).toBe(true);
        expect(p.urls.stream).toBe(`${a.origin}/v1/predictions/${p.id}/stream`);
        const stream = await openStream(b, p.id);
        expect(stream.status).toBe(200);
        // Joined while it ran: what follows came live over Redis pub/sub (whichever worker runs it).
        expect(TERMINAL).not.toContain((await get(b, p.id)).status);
        // Meanwhile A shows the progress the worker writes to the store.
        const progress: number[] = [];
        const watching = (async () => {
          for (;;) {
            const now = await get(a, p.id);
            progress.push(now.metrics.progress ?? -1);
            if (TERMINAL.includes(now.status)) return;
            await sleep(100);
          }
        })();
        const events = await stream.done;
        await watching;
        expect(
          progress.some((x) => x > 0 && x < 100),
          `progress seen on A: ${progress.join(',')}`,
        ).toBe(true);
        expect(progress.at(-1)).toBe(100);
        streamed = { id: p.id, events };
        const names = events.map((e) => e.event);

        expect(names).toContain('logs');
        expect(
          events
            .filter((e) => e.event === 'logs')
            .map((e) => e.data)
            .join('\n'),
        ).toMatch(/Rendering 10 s/);
        expect(names.at(-1)).toBe('done');
        expect(JSON.parse(events.at(-1)?.data ?? '{}')).toEqual({ status: 'succeeded' });
        // Seqs as SSE ids: 1, 2, 3… with no gap or repeat.
        expect(events.map((e) => e.id)).toEqual(events.map((_, i) => i + 1));

        const final = await get(a, p.id);
        expect(final.status).toBe('succeeded');
        // The output event carries the output (a video: one URL), before done, where the stream ends.
        expect(names, 'stream events seen on B').toContain('output');
        expect(names.indexOf('output')).toBeLessThan(names.indexOf('done'));
        const url = JSON.parse(events.find((e) => e.event === 'output')?.data ?? 'null') as string;
        // Signed by whichever instance ran it (no public URL here): the same link, maybe another origin.
        const link = (u: string) => `${new URL(u).pathname}${new URL(u).search}`;
        expect(link(url)).toBe(link(final.output as string));
        expect((await download(url)).status).toBe(200);
      });

      it('a late subscriber on B after completion gets the full replay; Last-Event-ID resumes', async ({
        expect,
      }) => {
        if (!streamed) throw new Error('needs the stream of the previous test');
        const { id, events } = streamed;
        const replay = await (await openStream(b, id, { timeoutMs: 5_000 })).done;
        expect(replay).toEqual(events);
        // The same replay from A.
        expect(await (await openStream(a, id, { timeoutMs: 5_000 })).done).toEqual(events);
        // Resuming after the first event gives the rest.
        const resumed = await (await openStream(b, id, { lastEventId: 1, timeoutMs: 5_000 })).done;
        expect(resumed).toEqual(events.slice(1));
        expect(replay.map((e) => e.event)).toEqual(expect.arrayContaining(['logs', 'output', 'done']));
      });
    });

    describe.sequential('Redis (AOF) restarted while predictions are queued', () => {
      let s: Scenario;
      let api: GantryProcess;
      let publicUrl: string;
      let receiver: WebhookReceiver;

      beforeAll(async () => {
        s = await scenario(true);
        const address = await apiAddress();
        publicUrl = address.publicUrl;
        api = await gantry(s, 'aof-api', 'api', address);
        receiver = await startWebhookReceiver({ secret: await webhookSecret(api) });
      }, 120_000);

      afterAll(async () => {
        await receiver?.close();
        await api?.stop(3_000);
        await s?.redis.close();
      });

      it('a worker started after the restart runs them all, and a pending delivery survives', async ({
        expect,
      }) => {
        const webhook = { url: receiver.url };
        const queued = await Promise.all(
          Array.from({ length: 3 }, (_, i) =>
            create(api, { model: IMAGE, input: { prompt: `a quiet harbour ${i}` }, webhook }),
          ),
        );
        // Canceled with no worker: its prediction.canceled delivery waits in the queue.
        const canceled = await create(api, { model: IMAGE, input: { prompt: 'never drawn' }, webhook });
        const cancel = await call(api, 'POST', `/v1/predictions/${canceled.id}/cancel`);
        expect(cancel.status, cancel.text).toBe(200);
        await sleep(500);
        // The api runs nothing.
        for (const p of queued) expect((await get(api, p.id)).status).toBe('starting');
        expect((await deliveries(api, canceled.id)).map((d) => [d.event, d.state, d.attempts])).toEqual([
          ['prediction.canceled', 'pending', 0],
        ]);
        expect(receiver.requests).toHaveLength(0);

        await s.redis.stop();
        await s.redis.start();
        // The api reconnects by itself and still takes predictions.
        await waitFor('the api to read Redis again', async () => {
          const res = await call(api, 'GET', `/v1/predictions/${canceled.id}`);
          return res.status === 200 ? true : undefined;
        });
        const after = await create(api, { model: IMAGE, input: { prompt: 'after the restart' }, webhook });
        expect((await get(api, queued[0]?.id as string)).status).toBe('starting');

        const worker = await gantry(s, 'aof-worker', 'worker', { publicUrl });
        try {
          for (const p of [...queued, after]) {
            const done = await pollUntil(api, p.id, TERMINAL);
            expect(done.status, JSON.stringify(done)).toBe('succeeded');
            expect((await download((done.output as string[])[0] as string)).status).toBe(200);
            const hook = await waitForWebhook(receiver, p.id, 'prediction.succeeded');
            expect(hook.signatureValid).toBe(true);
          }
          const hook = await waitForWebhook(receiver, canceled.id, 'prediction.canceled');
          expect(hook.signatureValid).toBe(true);
          expect(hook.body?.status).toBe('canceled');
          expect((await deliveries(api, canceled.id)).map((d) => [d.event, d.state])).toEqual([
            ['prediction.canceled', 'delivered'],
          ]);
          // The canceled one never ran.
          expect((await get(api, canceled.id)).status).toBe('canceled');
          expect(filesOf(s, canceled.id)).toEqual([]);
          expect(webhooksOf(receiver, canceled.id).map((r) => r.event)).toEqual(['prediction.canceled']);
        } finally {
          await worker.stop(3_000);
        }
      });
    });
  },
);
