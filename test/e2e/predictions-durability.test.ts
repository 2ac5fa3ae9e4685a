/**
 * Durability of predictions in embedded mode (no Redis): real `gantry serve` child processes
 * (test/helpers/gantry-process.ts) on a data folder of their own, killed and started again on the same
 * folder. Embedded mode keeps its queue in memory: what survives a process is what the SQLite store
 * (data_dir/gantry.db) knows, and a new process must pick it up again at start.
 *
 * - SIGKILL while a `local-video` prediction renders: after a restart it is run again and succeeds, and
 *   its webhook receiver gets prediction.succeeded.
 * - A webhook whose receiver is down (a closed port) is still pending after a restart, and is delivered
 *   once the receiver listens.
 * - SIGTERM while predictions run: the process exits within its shutdown grace, and after a restart no
 *   prediction is left in starting/processing.
 *
 * These tests start several processes (each a cold tsx start) and render real H.264 video with ffmpeg,
 * so they take tens of seconds: each test states its own timeout and why.
 */
import { writeFileSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { join } from 'node:path';
import { Webhook } from 'standardwebhooks';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  FAKE_OFFICIAL_MODEL,
  FAKE_PNG,
  FAKE_REPLICATE_TOKEN,
  type FakeReplicate,
  startFakeReplicate,
} from '../helpers/fake-replicate.js';
import { type GantryProcess, spawnGantry, stopAllGantry } from '../helpers/gantry-process.js';
import { closedPort } from '../helpers/ports.js';
import { removeTempDirs, tempDir } from '../helpers/temp-dirs.js';
import { sleep, until } from '../helpers/wait.js';
import { startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.js';

type Json = Record<string, unknown>;

const KEY = 'gty_e2e-durability-bootstrap-0123456789abcdefghij';
const TERMINAL = new Set(['succeeded', 'failed', 'canceled']);
/** server.shutdown_timeout_seconds (default 10 s): it bounds both the HTTP drain and the prediction queue's grace. */
const SHUTDOWN_GRACE_MS = 10_000;
/** What a process may take past its grace to abort its jobs, flush and exit (on a busy test machine). */
const EXIT_SLACK_MS = 3_000;
/** About 5 s of ffmpeg work on a small machine: long enough to kill the process in the middle of it. */
const SLOW_VIDEO = { prompt: 'a slow pan over a stormy sea', duration: 10, resolution: '720p' };
const QUICK_VIDEO = { prompt: 'a quick look at a calm lake', duration: 5, resolution: '180p' };

const CONFIG = `
server:
  log_level: warn
providers:
  local: { kind: local }
tiers:
  default: {}
predictions:
  webhooks: { allow_private: true, backoff_base_ms: 200, backoff_max_ms: 1000, timeout_ms: 2000 }
models:
  - namespace: gantry/local-video
    name: Local video
    type: video
    vendor: { name: Gantry, slug: gantry }
    serves: [predictions]
    routes: [{ provider: local, model: local-video }]
`;

let configPath: string;

beforeAll(() => {
  configPath = join(tempDir('gantry-durability-config-'), 'gantry.yaml');
  writeFileSync(configPath, CONFIG);
});

afterEach(async () => {
  await stopAllGantry(3_000);
});

afterAll(async () => {
  await stopAllGantry(1_000);
  removeTempDirs();
});

/** Gantry on `dataDir`, with the bootstrap key KEY. */
function start(dataDir: string, name: string, config = configPath): Promise<GantryProcess> {
  return spawnGantry({ name, config, dataDir, env: { GANTRY_BOOTSTRAP_KEY: KEY } });
}

/** A config with a partner model on the fake Replicate API. */
function partnerConfig(fake: FakeReplicate): string {
  const path = join(tempDir('gantry-durability-config-'), 'gantry.yaml');
  writeFileSync(
    path,
    `
server:
  log_level: warn
providers:
  replicate: { kind: replicate, base_url: "${fake.url}", poll_interval_ms: 100, allow_private_outputs: true }
tiers:
  default: {}
models:
  - namespace: partner/model
    name: Partner model
    type: image
    vendor: { name: Partner, slug: partner }
    serves: [predictions]
    metadata: { inference_party: partner }
    routes: [{ provider: replicate, model: ${FAKE_OFFICIAL_MODEL} }]
    input_schema:
      type: object
      properties:
        prompt: { type: string }
        replicate_api_key: { type: string, format: password }
    output_schema: { type: array, items: { type: string, format: uri } }
`,
  );
  return path;
}

async function call(g: GantryProcess, method: string, path: string, body?: unknown) {
  const headers: Record<string, string> = { 'x-api-key': KEY };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(g.origin + path, {
    method,
    headers,
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  let json: Json = {};
  try {
    json = JSON.parse(text) as Json;
  } catch {
    // not JSON
  }
  return { status: res.status, body: json, text };
}

async function createVideo(g: GantryProcess, input: Json, webhook: Json): Promise<string> {
  const res = await call(g, 'POST', '/v1/predictions', { model: 'gantry/local-video', input, webhook });
  expect(res.status, res.text).toBe(200);
  return String(res.body.id);
}

async function getPrediction(g: GantryProcess, id: string): Promise<Json> {
  const res = await call(g, 'GET', `/v1/predictions/${id}`);
  expect(res.status, res.text).toBe(200);
  return res.body;
}

async function waitFor(
  g: GantryProcess,
  id: string,
  done: (p: Json) => boolean = (p) => TERMINAL.has(String(p.status)),
  timeoutMs = 30_000,
): Promise<Json> {
  const until = Date.now() + timeoutMs;
  let last: Json = {};
  while (Date.now() < until) {
    last = await getPrediction(g, id);
    if (done(last)) return last;
    await sleep(50);
  }
  throw new Error(`prediction ${id} did not get there in ${timeoutMs} ms; last: ${JSON.stringify(last)}`);
}

async function webhookSecret(g: GantryProcess): Promise<string> {
  return (await call(g, 'GET', '/v1/webhooks/secret')).body.key as string;
}

/** Downloads an output link (no key: it is signed) and checks it is an MP4 file. */
async function expectMp4(url: string): Promise<void> {
  const res = await fetch(url);
  expect(res.status).toBe(200);
  const bytes = Buffer.from(await res.arrayBuffer());
  expect(bytes.length).toBeGreaterThan(1000);
  expect(bytes.subarray(4, 8).toString('latin1')).toBe('ftyp');
}

interface Delivery {
  headers: IncomingHttpHeaders;
  rawBody: string;
  body: Json;
}

/**
 * A receiver on a port chosen in advance (the helper's receiver takes a random one): the webhook URL
 * must stay the same while the receiver is down and once it is up.
 */
async function listenOn(port: number): Promise<{ deliveries: Delivery[]; close(): Promise<void> }> {
  const deliveries: Delivery[] = [];
  const server: Server = createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (chunk: Buffer) => parts.push(chunk));
    req.on('end', () => {
      const rawBody = Buffer.concat(parts).toString('utf8');
      let body: Json = {};
      try {
        body = JSON.parse(rawBody) as Json;
      } catch {
        // recorded as it is
      }
      deliveries.push({ headers: req.headers, rawBody, body });
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve());
  });
  return {
    deliveries,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

describe('predictions survive their process (embedded mode)', () => {
  let receiver: WebhookReceiver | undefined;
  afterEach(async () => {
    await receiver?.close();
    receiver = undefined;
  });

  // Long timeout: two cold process starts (~3-10 s each under load) and a ~5 s video rendered twice.
  it('re-runs a prediction whose process was SIGKILLed mid-run; the receiver gets prediction.succeeded', async () => {
    const dataDir = tempDir('gantry-durability-data-');
    const first = await start(dataDir, 'first');
    const secret = await webhookSecret(first);
    receiver = await startWebhookReceiver({ secret });
    const id = await createVideo(first, SLOW_VIDEO, { url: receiver.url });

    const running = await waitFor(first, id, (p) => p.status === 'processing', 15_000);
    expect(running.output).toBeNull();
    // The started webhook is out, and recorded as delivered, before the kill: so the receiver should see
    // it once (delivery is at least once: one acknowledged but not yet recorded would come again).
    const [started] = await receiver.waitFor(1, 10_000);
    expect(started?.event).toBe('prediction.started');
    let startedState = '';
    for (let i = 0; i < 50 && startedState !== 'delivered'; i++) {
      const log = (await call(first, 'GET', `/v1/predictions/${id}/webhooks`)).body.data as Json[];
      startedState = String(log.find((d) => d.event === 'prediction.started')?.state);
      if (startedState !== 'delivered') await sleep(50);
    }
    expect(startedState).toBe('delivered');
    // Still rendering: the kill lands mid-run.
    expect((await getPrediction(first, id)).status).toBe('processing');

    first.kill('SIGKILL');
    expect((await first.exited).signal).toBe('SIGKILL');

    const second = await start(dataDir, 'second');
    expect(await webhookSecret(second)).toBe(secret);
    const done = await waitFor(second, id, undefined, 40_000);
    expect(done.status, JSON.stringify(done)).toBe('succeeded');
    expect(done.error).toBeNull();
    const output = done.output as string | string[];
    const url = Array.isArray(output) ? output[0] : output;
    expect(String(url).startsWith(`${second.origin}/v1/files/`), String(url)).toBe(true);
    await expectMp4(String(url));

    const deliveries = await receiver.waitFor(2, 10_000);
    await sleep(500);
    const events = receiver.requests.map((d) => d.event);
    expect(events).toEqual(['prediction.started', 'prediction.succeeded']);
    const succeeded = deliveries[1];
    expect(succeeded?.signatureValid, succeeded?.signatureError).toBe(true);
    expect(succeeded?.body?.id).toBe(id);
    expect(succeeded?.body?.status).toBe('succeeded');
  }, 90_000);

  // Long timeout: two cold process starts and a short video.
  it('keeps a webhook pending while its receiver is down, across a restart, and delivers it once it is up', async () => {
    const dataDir = tempDir('gantry-durability-data-');
    const port = await closedPort();
    const url = `http://127.0.0.1:${port}/hook`;
    const first = await start(dataDir, 'first');
    const secret = await webhookSecret(first);
    const id = await createVideo(first, QUICK_VIDEO, { url, events: ['prediction.succeeded'] });
    const done = await waitFor(first, id, undefined, 20_000);
    expect(done.status).toBe('succeeded');

    // Tried at least once, refused (nobody listens), still pending.
    let log: Json[] = [];
    for (let i = 0; i < 100; i++) {
      log = (await call(first, 'GET', `/v1/predictions/${id}/webhooks`)).body.data as Json[];
      if (Number(log[0]?.attempts ?? 0) >= 1) break;
      await sleep(100);
    }
    expect(log).toHaveLength(1);
    expect(log[0]?.event).toBe('prediction.succeeded');
    expect(log[0]?.state).toBe('pending');
    expect(Number(log[0]?.attempts)).toBeGreaterThanOrEqual(1);
    expect((log[0]?.log as Json[] | undefined)?.[0]?.outcome).toBe('retry');

    await first.stop(SHUTDOWN_GRACE_MS + EXIT_SLACK_MS);
    const up = await listenOn(port);
    try {
      // Nothing may arrive from the stopped process.
      await sleep(300);
      expect(up.deliveries).toHaveLength(0);

      const second = await start(dataDir, 'second');
      await until('the pending webhook', () => up.deliveries.length >= 1, 15_000);
      await sleep(500);
      expect(up.deliveries).toHaveLength(1);
      const delivery = up.deliveries[0] as Delivery;
      expect(delivery.body.webhook_event_type).toBe('prediction.succeeded');
      expect(delivery.body.id).toBe(id);
      expect(delivery.body.status).toBe('succeeded');
      // Signed with the same (persisted) account secret.
      const header = (name: string) => String(delivery.headers[name] ?? '');
      expect(() =>
        new Webhook(secret).verify(delivery.rawBody, {
          'webhook-id': header('webhook-id'),
          'webhook-timestamp': header('webhook-timestamp'),
          'webhook-signature': header('webhook-signature'),
        }),
      ).not.toThrow();

      let state = '';
      for (let i = 0; i < 50 && state !== 'delivered'; i++) {
        const after = (await call(second, 'GET', `/v1/predictions/${id}/webhooks`)).body.data as Json[];
        state = String(after[0]?.state);
        if (state !== 'delivered') await sleep(100);
      }
      expect(state).toBe('delivered');
    } finally {
      await up.close();
    }
  }, 90_000);

  // Long timeout: up to the 10 s shutdown grace, two cold starts and the videos possibly rendered twice.
  it('exits within its grace on SIGTERM while predictions run, and none is left unfinished after a restart', async () => {
    const dataDir = tempDir('gantry-durability-data-');
    const first = await start(dataDir, 'first');
    const secret = await webhookSecret(first);
    receiver = await startWebhookReceiver({ secret });
    // Three slow videos at once on a small machine: likely still running when the grace ends.
    const ids = await Promise.all(
      [0, 1, 2].map((i) =>
        createVideo(first, { ...SLOW_VIDEO, aspect_ratio: '9:21', seed: i }, { url: receiver?.url }),
      ),
    );
    for (const id of ids) await waitFor(first, id, (p) => p.status === 'processing', 15_000);

    const sentAt = Date.now();
    first.kill('SIGTERM');
    const exit = await Promise.race([
      first.exited,
      sleep(SHUTDOWN_GRACE_MS + 10_000).then(() => 'still running' as const),
    ]);
    const tookMs = Date.now() - sentAt;
    expect(exit, first.output()).not.toBe('still running');
    expect(exit).toEqual({ code: 0, signal: null });
    expect(tookMs, `exited ${tookMs} ms after SIGTERM`).toBeLessThanOrEqual(
      SHUTDOWN_GRACE_MS + EXIT_SLACK_MS,
    );

    const second = await start(dataDir, 'second');
    for (const id of ids) {
      const done = await waitFor(second, id, undefined, 60_000);
      expect(['succeeded', 'failed', 'canceled']).toContain(done.status);
      // Nothing failed the prediction: a shutdown is not the model's fault.
      expect(done.status, JSON.stringify(done)).toBe('succeeded');
    }
    // Every prediction's terminal webhook arrives exactly once (from either process).
    await until(
      'the terminal webhooks',
      () =>
        ids.every((id) =>
          receiver?.requests.some((r) => r.body?.id === id && r.event === 'prediction.succeeded'),
        ),
      15_000,
    );
    await sleep(500);
    for (const id of ids) {
      const terminal = (receiver?.requests ?? []).filter(
        (r) => r.body?.id === id && r.event === 'prediction.succeeded',
      );
      expect(terminal, id).toHaveLength(1);
    }
  }, 150_000);

  // Long timeout: the whole 10 s shutdown grace, and two cold starts.
  it('on SIGTERM past the grace, stops a running partner prediction on the partner before it exits', async () => {
    // A partner prediction that runs for a minute: still running when the grace ends.
    const fake = await startFakeReplicate({ behavior: { processingMs: 60_000, maxHoldMs: 50 } });
    try {
      const config = partnerConfig(fake);
      const dataDir = tempDir('gantry-durability-data-');
      const first = await start(dataDir, 'first', config);
      const created = await call(first, 'POST', '/v1/predictions', {
        model: 'partner/model',
        input: { prompt: 'a long one', replicate_api_key: FAKE_REPLICATE_TOKEN },
      });
      expect(created.status, created.text).toBe(200);
      const id = String(created.body.id);
      await waitFor(first, id, (p) => p.status === 'processing', 15_000);
      expect(fake.predictions).toHaveLength(1);

      const sentAt = Date.now();
      first.kill('SIGTERM');
      const exit = await Promise.race([
        first.exited,
        sleep(SHUTDOWN_GRACE_MS + 10_000).then(() => 'still running' as const),
      ]);
      const tookMs = Date.now() - sentAt;
      expect(exit).toEqual({ code: 0, signal: null });
      expect(tookMs, `exited ${tookMs} ms after SIGTERM`).toBeLessThanOrEqual(
        SHUTDOWN_GRACE_MS + EXIT_SLACK_MS,
      );
      // At the deadline the run is aborted, and the partner told to stop it: nobody would collect its result.
      const original = fake.predictions[0];
      expect(
        original?.cancelRequests,
        'cancel requests for the abandoned partner run',
      ).toBeGreaterThanOrEqual(1);

      // After a restart the prediction is run again (quickly now) and ends terminal, not failed.
      // (Outputs as data: URIs, so this does not depend on downloading partner URLs.)
      fake.setBehavior({
        processingMs: 100,
        output: { kind: 'raw', value: [`data:image/png;base64,${FAKE_PNG.toString('base64')}`] },
      });
      const second = await start(dataDir, 'second', config);
      const done = await waitFor(second, id, undefined, 20_000);
      expect(done.status, JSON.stringify(done)).toBe('succeeded');
      // The first partner run was stopped one way or another: only the re-run is left to bill.
      expect(original?.canceledBy, 'how the first partner run ended').toBeDefined();
    } finally {
      await fake.close();
    }
  }, 90_000);
});
