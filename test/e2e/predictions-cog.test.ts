/**
 * The Predictions API in front of a Cog server, end to end through Gantry's HTTP API: a real Gantry
 * (test/helpers/gantry.ts) with `cog` providers pointing at the fake Cog server (test/helpers/fake-cog.ts).
 *
 * - The model `acme/flux` has no input_schema in the config: Gantry reads it from the server's
 *   /openapi.json at start, shows it on GET /v1/models/{slug}?fields=input_schema and validates inputs
 *   with it before the Cog server sees anything.
 * - Synchronous mode (one blocking PUT) and async mode (`async: true`: Prefer: respond-async, and the
 *   Cog server POSTs its webhooks back to /internal/backends/{provider}/{id}?token=…).
 * - Outputs are copied into Gantry's file store: the URLs a client gets are Gantry's signed /v1/files
 *   links, downloadable without an API key.
 * - Cancel, Cog's failures (the model raised) and a Cog server that cannot be reached.
 */
import { connect, createServer, type Socket } from 'node:net';
import sharp from 'sharp';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { CONCATENATED_OUTPUT, type FakeCog, startFakeCog } from '../helpers/fake-cog.js';
import { predictionModelYaml, startGantry, type TestGantry } from '../helpers/gantry.js';
import { closedPort } from '../helpers/ports.js';
import { parseSse, type SseEvent } from '../helpers/sse-events.js';
import { sleep, until } from '../helpers/wait.js';
import { startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.js';

type Json = Record<string, unknown>;

const TERMINAL = new Set(['succeeded', 'failed', 'canceled']);

/** A small client of one Gantry: JSON in, status and JSON out, with the test account's key. */
function client(gantry: () => TestGantry) {
  async function call(method: string, path: string, body?: unknown, key: string | null = gantry().key) {
    const headers: Record<string, string> = {};
    if (key) headers['x-api-key'] = key;
    if (body !== undefined) headers['content-type'] = 'application/json';
    const res = await fetch(gantry().origin + path, {
      method,
      headers,
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await res.text();
    let json: Json = {};
    try {
      json = JSON.parse(text) as Json;
    } catch {
      // not JSON: callers look at `text`
    }
    return { status: res.status, body: json, text };
  }

  async function create(body: Json) {
    const res = await call('POST', '/v1/predictions', body);
    expect(res.status, res.text).toBe(200);
    return res.body;
  }

  const get = async (id: string) => {
    const res = await call('GET', `/v1/predictions/${id}`);
    expect(res.status, res.text).toBe(200);
    return res.body;
  };

  /** Polls GET /v1/predictions/{id} until `done` says so (default: a terminal status). */
  async function waitFor(id: string, done = (p: Json) => TERMINAL.has(String(p.status)), timeoutMs = 10_000) {
    const until = Date.now() + timeoutMs;
    let last: Json = {};
    while (Date.now() < until) {
      last = await get(id);
      if (done(last)) return last;
      await sleep(25);
    }
    throw new Error(`prediction ${id} did not get there in ${timeoutMs} ms; last: ${JSON.stringify(last)}`);
  }

  return { call, create, get, waitFor };
}

/** The predictions PUT to the fake (not the /openapi.json read nor the cancels). */
function creates(cog: FakeCog) {
  return cog.requests.filter((r) => r.method === 'PUT' || (r.method === 'POST' && r.path === '/predictions'));
}

// ---------------------------------------------------------------------------------------------------
// Synchronous mode
// ---------------------------------------------------------------------------------------------------

describe('Cog provider, synchronous mode', () => {
  let cog: FakeCog;
  let gantry: TestGantry;
  const api = client(() => gantry);

  beforeAll(async () => {
    cog = await startFakeCog();
    const dead = await closedPort();
    gantry = await startGantry(`
providers:
  cog: { kind: cog, base_url: "${cog.origin}" }
  cog-down: { kind: cog, base_url: "http://127.0.0.1:${dead}" }
tiers:
  default: {}
predictions:
  max_attempts: 2
models:${predictionModelYaml('acme/flux', 'cog')}${predictionModelYaml(
      'acme/flux-down',
      'cog-down',
      `
    input_schema: { type: object, required: [prompt], properties: { prompt: { type: string } } }
    output_schema: { type: array, items: { type: string, format: uri } }`,
    )}
`);
  });
  afterAll(async () => {
    await gantry?.close();
    await cog?.close();
  });
  beforeEach(async () => {
    await cog.idle();
    cog.reset();
  });

  it('shows the input schema read from the Cog server on GET /v1/models/{slug}?fields=input_schema', async () => {
    const res = await api.call('GET', '/v1/models/acme/flux?fields=input_schema');
    expect(res.status, res.text).toBe(200);
    const schema = res.body.input_schema as Json;
    expect(schema).toBeDefined();
    expect(schema.type).toBe('object');
    expect(schema.required).toEqual(['prompt']);
    const properties = schema.properties as Record<string, Json>;
    expect(Object.keys(properties).sort()).toEqual(
      ['aspect_ratio', 'num_outputs', 'output_format', 'prompt', 'seed'].sort(),
    );
    expect(properties.prompt).toMatchObject({ type: 'string', 'x-order': 0 });
    expect(properties.num_outputs).toMatchObject({ type: 'integer', minimum: 1, maximum: 4, default: 1 });
    // The enums behind `allOf: [{$ref}]` in Cog's document are visible to a client.
    expect(JSON.stringify(properties.aspect_ratio)).toContain('16:9');
    expect(JSON.stringify(properties.output_format)).toContain('webp');
    expect(JSON.stringify(schema)).not.toContain('$ref');
    // Asked for input_schema only.
    expect(res.body).not.toHaveProperty('output_schema');

    const plain = await api.call('GET', '/v1/models/acme/flux');
    expect(plain.body).not.toHaveProperty('input_schema');
    const both = await api.call('GET', '/v1/models/acme/flux?fields=input_schema,output_schema');
    expect(both.body.output_schema).toMatchObject({
      type: 'array',
      items: { type: 'string', format: 'uri' },
    });
  });

  it('refuses an input outside the enum with 400 INVALID_INPUT before the Cog server sees anything', async () => {
    const res = await api.call('POST', '/v1/predictions', {
      model: 'acme/flux',
      input: { prompt: 'a red fox', aspect_ratio: '7:5' },
    });
    expect(res.status, res.text).toBe(400);
    const error = res.body.error as Json;
    expect(error.error_id).toBe('INVALID_INPUT');
    expect(String(error.message)).toContain('aspect_ratio');
    // Missing required prompt and an out-of-range integer are refused the same way.
    const missing = await api.call('POST', '/v1/predictions', {
      model: 'acme/flux',
      input: { num_outputs: 9 },
    });
    expect(missing.status).toBe(400);
    expect((missing.body.error as Json).error_id).toBe('INVALID_INPUT');
    expect(String((missing.body.error as Json).message)).toContain('prompt');
    expect(String((missing.body.error as Json).message)).toContain('num_outputs');
    await sleep(100);
    expect(creates(cog)).toHaveLength(0);
  });

  it('runs a prediction and copies its outputs into Gantry storage (downloadable real PNGs)', async () => {
    const created = await api.create({
      model: 'acme/flux',
      input: { prompt: 'a red fox', num_outputs: 2, aspect_ratio: '16:9' },
      await: true,
    });
    expect(created.status, JSON.stringify(created)).toBe('succeeded');
    const id = String(created.id);

    // What the Cog server got: Gantry's id, the input with the schema's defaults.
    const [put] = creates(cog);
    expect(put?.method).toBe('PUT');
    expect(put?.path).toBe(`/predictions/${id}`);
    expect(put?.body?.id).toBe(id);
    expect(put?.body?.input).toEqual({
      prompt: 'a red fox',
      num_outputs: 2,
      aspect_ratio: '16:9',
      output_format: 'webp',
    });
    expect(put?.headers.prefer).toBeUndefined();

    const prediction = await api.get(id);
    expect(prediction.status).toBe('succeeded');
    expect(prediction.error).toBeNull();
    expect(String(prediction.logs)).toContain('Using seed: 42');
    const output = prediction.output as string[];
    expect(output).toHaveLength(2);
    for (const url of output) {
      expect(url.startsWith(`${gantry.origin}/v1/files/`), url).toBe(true);
      expect(url).not.toContain('data:');
      expect(url).not.toContain(cog.origin);
      // Signed links: no API key needed.
      const res = await fetch(url);
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toMatch(/^image\/png/);
      const bytes = Buffer.from(await res.arrayBuffer());
      expect(bytes.equals(cog.png)).toBe(true);
      const meta = await sharp(bytes).metadata();
      expect(meta.format).toBe('png');
      expect([meta.width, meta.height]).toEqual([8, 8]);
    }
    const metadata = prediction.metadata as { storage: { files: Json[] }; data_available: boolean };
    expect(metadata.data_available).toBe(true);
    expect(metadata.storage.files.map((f) => f.url)).toEqual(output);
    for (const file of metadata.storage.files) {
      expect(file.type).toBe('image/png');
      expect(file.size).toBe(cog.png.length);
    }
    const metrics = prediction.metrics as Json;
    expect(metrics.image_count).toBe(2);
    expect(typeof metrics.predict_time).toBe('number');
    expect(typeof metrics.total_time).toBe('number');
  });

  it('cancels a running Cog prediction: the Cog server gets the cancel, the status is canceled', async () => {
    cog.setBehavior({ stepMs: 400 });
    const created = await api.create({ model: 'acme/flux', input: { prompt: 'slow fox' } });
    const id = String(created.id);
    await until('the Cog server to run the prediction', () => cog.running().includes(id));

    const res = await api.call('POST', `/v1/predictions/${id}/cancel`);
    expect(res.status, res.text).toBe(200);
    expect(res.body.success).toBe(true);
    expect(res.body.status).toBe('canceled');

    await until('the cancel call on the Cog server', () => cog.canceled.includes(id));
    const cancelCall = cog.requests.find(
      (r) => r.method === 'POST' && r.path === `/predictions/${id}/cancel`,
    );
    expect(cancelCall).toBeDefined();
    await cog.idle();
    await sleep(200);
    const prediction = await api.get(id);
    expect(prediction.status).toBe('canceled');
    expect(prediction.output).toBeNull();
    expect(prediction.error).toBeNull();
    // A second cancel: already terminal.
    const again = await api.call('POST', `/v1/predictions/${id}/cancel`);
    expect(again.status).toBe(409);
    expect((again.body.error as Json).error_id).toBe('PREDICTION_NOT_CANCELLABLE');
  });

  it("fails a prediction with Cog's error text; GET still answers 200", async () => {
    cog.setBehavior({ fail: 'CUDA out of memory. Tried to allocate 2.00 GiB' });
    const created = await api.create({ model: 'acme/flux', input: { prompt: 'a fox' }, await: true });
    expect(created.status).toBe('failed');
    const res = await api.call('GET', `/v1/predictions/${String(created.id)}`);
    expect(res.status).toBe(200);
    expect(res.body.status).toBe('failed');
    expect(res.body.error).toBe('CUDA out of memory. Tried to allocate 2.00 GiB');
    expect(res.body.output).toBeNull();
    expect(String(res.body.logs)).toContain('RuntimeError: CUDA out of memory');
    // A model error is not retried: one run on the Cog server.
    expect(creates(cog)).toHaveLength(1);
  });

  it('fails a prediction whose Cog server is down, after its retries (max_attempts: 2)', async () => {
    const started = Date.now();
    const created = await api.create({ model: 'acme/flux-down', input: { prompt: 'a fox' }, await: true });
    const id = String(created.id);
    const prediction = created.status === 'failed' ? created : await api.waitFor(id);
    expect(prediction.status).toBe('failed');
    expect(String(prediction.error)).toMatch(/could not reach the Cog server/);
    expect(String(prediction.error)).toContain('ECONNREFUSED');
    expect(prediction.output).toBeNull();
    // The second attempt comes after the queue's back-off (500 ms): the first did not fail it.
    expect(Date.now() - started).toBeGreaterThanOrEqual(400);
    const res = await api.call('GET', `/v1/predictions/${id}`);
    expect(res.status).toBe(200);
  });
});

// ---------------------------------------------------------------------------------------------------
// Async mode
// ---------------------------------------------------------------------------------------------------

/**
 * A TCP relay standing in for a load balancer in front of Gantry: it listens first (so its address can
 * be Gantry's `server.public_url`), and forwards to Gantry once Gantry listens.
 */
async function startRelay() {
  let target = 0;
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    const upstream = connect(target, '127.0.0.1');
    sockets.add(socket);
    sockets.add(upstream);
    socket.on('close', () => sockets.delete(socket));
    upstream.on('close', () => sockets.delete(upstream));
    socket.on('error', () => upstream.destroy());
    upstream.on('error', () => socket.destroy());
    socket.pipe(upstream).pipe(socket);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return {
    origin: `http://127.0.0.1:${port}`,
    forwardTo(origin: string) {
      target = Number(new URL(origin).port);
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

function asyncYaml(cog: FakeCog, publicUrl?: string, uploading?: FakeCog, texts?: FakeCog): string {
  return `
${publicUrl ? `server: { public_url: "${publicUrl}" }` : ''}
providers:
  cog-async: { kind: cog, base_url: "${cog.origin}", async: true, allow_private_outputs: true }
${uploading ? `  cog-upload: { kind: cog, base_url: "${uploading.origin}", async: true, allow_private_outputs: true }` : ''}
${texts ? `  cog-text: { kind: cog, base_url: "${texts.origin}", async: true }` : ''}
tiers:
  default: {}
predictions:
  max_attempts: 2
  webhooks: { allow_private: true, backoff_base_ms: 50, backoff_max_ms: 200 }
models:${predictionModelYaml('acme/flux', 'cog-async')}${uploading ? predictionModelYaml('acme/flux-upload', 'cog-upload') : ''}${
    texts ? predictionModelYaml('acme/text-async', 'cog-text') : ''
  }
`;
}

describe('Cog provider, async mode, Gantry reached on its listening address (no public_url)', () => {
  let cog: FakeCog;
  let gantry: TestGantry;
  const api = client(() => gantry);

  beforeAll(async () => {
    cog = await startFakeCog({ throttleMs: 0 });
    gantry = await startGantry(asyncYaml(cog));
  });
  afterAll(async () => {
    await gantry?.close();
    await cog?.close();
  });

  it('gives the Cog server a callback URL on the address Gantry listens on, and the prediction succeeds', async () => {
    const created = await api.create({ model: 'acme/flux', input: { prompt: 'a fox' } });
    const id = String(created.id);
    try {
      await until('the Cog server to get the prediction', () => creates(cog).length > 0);
      const hook = String(creates(cog)[0]?.body?.webhook);
      // BUG: the callback base is computed before Gantry listens: http://127.0.0.1:0/internal/backends/…
      expect(hook.startsWith(`${gantry.origin}/internal/backends/cog-async/${id}?token=`), hook).toBe(true);
      const done = await api.waitFor(id, undefined, 5_000);
      expect(done.status).toBe('succeeded');
    } finally {
      // A run whose webhooks never arrive would hold Gantry's shutdown for its whole grace period.
      await api.call('POST', `/v1/predictions/${id}/cancel`);
    }
  });
});

describe('Cog provider, async mode (webhooks back to Gantry through its public_url)', () => {
  let cog: FakeCog;
  /** A Cog server started with --upload-url: its file outputs are URLs it serves, for Gantry to copy. */
  let uploading: FakeCog;
  /** A language model: its Output is Cog's concatenated iterator. */
  let texts: FakeCog;
  let gantry: TestGantry;
  let relay: Awaited<ReturnType<typeof startRelay>>;
  let receiver: WebhookReceiver;
  const logLines: string[] = [];
  const api = client(() => gantry);

  beforeAll(async () => {
    // throttleMs 0: every log line is its own webhook, so logs show while the prediction runs.
    cog = await startFakeCog({ throttleMs: 0 });
    uploading = await startFakeCog({ throttleMs: 0, uploadFiles: true });
    texts = await startFakeCog({ throttleMs: 0, outputSchema: CONCATENATED_OUTPUT });
    relay = await startRelay();
    gantry = await startGantry(
      asyncYaml(cog, relay.origin, uploading, texts),
      {},
      {
        onLog: (line) => logLines.push(line),
      },
    );
    relay.forwardTo(gantry.origin);
    const secret = (await api.call('GET', '/v1/webhooks/secret')).body.key as string;
    receiver = await startWebhookReceiver({ secret });
  });
  afterAll(async () => {
    await gantry?.close();
    await cog?.close();
    await uploading?.close();
    await texts?.close();
    await receiver?.close();
    await relay?.close();
  });
  beforeEach(async () => {
    await Promise.all([cog.idle(), uploading.idle(), texts.idle()]);
    cog.reset();
    uploading.reset();
    texts.reset();
    receiver.reset();
  });

  it('runs a prediction through webhooks: logs show while it runs, outputs end in Gantry storage', async () => {
    cog.setBehavior({ stepMs: 250 });
    const created = await api.create({
      model: 'acme/flux',
      input: { prompt: 'a red fox', num_outputs: 2 },
      webhook: { url: receiver.url },
    });
    const id = String(created.id);

    // The Cog server was asked to answer at once and to call Gantry back.
    await until('the Cog server to get the prediction', () => creates(cog).length > 0);
    const [put] = creates(cog);
    expect(put?.headers.prefer).toBe('respond-async');
    const hook = String(put?.body?.webhook);
    expect(hook.startsWith(`${relay.origin}/internal/backends/cog-async/${id}?token=`), hook).toBe(true);
    expect(put?.body?.webhook_events_filter).toEqual(['start', 'output', 'logs', 'completed']);

    // Logs arrive with the logs webhooks, before the prediction is done.
    const running = await api.waitFor(id, (p) => String(p.logs).includes('Using seed: 42'), 5_000);
    expect(running.status).toBe('processing');

    const done = await api.waitFor(id, undefined, 5_000);
    expect(done.status, JSON.stringify(done)).toBe('succeeded');
    expect(String(done.logs)).toContain('100%|██████████| 4/4');
    expect(String(done.logs).match(/Using seed: 42/g)).toHaveLength(1);

    // Every webhook the fake sent reached Gantry and was taken.
    expect(cog.webhooks.length).toBeGreaterThanOrEqual(5);
    expect(cog.webhooks.map((w) => w.responseStatus)).toEqual(cog.webhooks.map(() => 200));
    expect(cog.webhooks.at(-1)?.body.status).toBe('succeeded');

    // Outputs: Gantry's links to its own copies.
    const output = done.output as string[];
    expect(output).toHaveLength(2);
    for (const url of output) {
      expect(url.startsWith(`${relay.origin}/v1/files/`), url).toBe(true);
      const res = await fetch(url);
      expect(res.status).toBe(200);
      const bytes = Buffer.from(await res.arrayBuffer());
      expect(bytes.equals(cog.png)).toBe(true);
      expect((await sharp(bytes).metadata()).format).toBe('png');
    }
    expect(JSON.stringify(done)).not.toContain(cog.origin);

    // The caller's own webhooks: started, then succeeded, signed.
    const deliveries = await receiver.waitFor(2);
    expect(deliveries.map((d) => d.event)).toEqual(['prediction.started', 'prediction.succeeded']);
    for (const d of deliveries) expect(d.signatureValid, d.signatureError).toBe(true);
    expect(deliveries[1]?.body?.output).toEqual(output);
  });

  it('copies the files a Cog server uploaded (URL outputs) into Gantry storage', async () => {
    const created = await api.create({ model: 'acme/flux-upload', input: { prompt: 'a fox' } });
    const id = String(created.id);
    const done = await api.waitFor(id, undefined, 8_000);
    const outputs = uploading.webhooks.at(-1)?.body.output as string[];
    expect(outputs[0]).toBe(uploading.uploadUrl(id, 'output.png'));
    // A download failure is no reason to run (and pay for) the model again: one run on the Cog server.
    expect.soft(creates(uploading).length, 'runs on the Cog server for one prediction').toBe(1);
    // BUG: "Could not download output 0: maxRedirections is not supported, use the redirect interceptor"
    expect(done.error).toBeNull();
    expect(done.status).toBe('succeeded');
    const [url] = done.output as string[];
    expect(String(url).startsWith(`${relay.origin}/v1/files/`), url).toBe(true);
    const bytes = Buffer.from(await (await fetch(String(url))).arrayBuffer());
    expect(bytes.equals(uploading.png)).toBe(true);
  });

  it('answers 404 to a forged callback and keeps the prediction on course', async () => {
    cog.setBehavior({ stepMs: 200 });
    const created = await api.create({ model: 'acme/flux', input: { prompt: 'a fox' } });
    const id = String(created.id);
    await until('the Cog server to run it', () => cog.running().includes(id));
    const forged = {
      id,
      status: 'succeeded',
      output: ['https://evil.example/owned.png'],
      logs: 'forged\n',
    };
    const post = (path: string, body: unknown = forged) => api.call('POST', path, body, null);

    const badToken = await post(`/internal/backends/cog-async/${id}?token=forged-token`);
    expect(badToken.status, badToken.text).toBe(404);
    const noToken = await post(`/internal/backends/cog-async/${id}`);
    expect(noToken.status).toBe(404);
    // The real token, for another prediction id or another provider name, is no good either.
    const realToken = new URL(String(creates(cog)[0]?.body?.webhook)).searchParams.get('token') ?? '';
    expect(realToken).not.toBe('');
    const otherId = await post(
      `/internal/backends/cog-async/00000000-0000-4000-8000-000000000000?token=${realToken}`,
    );
    expect(otherId.status).toBe(404);
    const otherProvider = await post(`/internal/backends/nope/${id}?token=${realToken}`);
    expect(otherProvider.status).toBe(404);

    const done = await api.waitFor(id, undefined, 5_000);
    expect(done.status).toBe('succeeded');
    expect(JSON.stringify(done.output)).not.toContain('evil.example');
    expect(String(done.logs)).not.toContain('forged');

    // Once the run is over its own token is stale: a replayed webhook is refused.
    const replay = await post(`/internal/backends/cog-async/${id}?token=${realToken}`);
    expect(replay.status).toBe(404);
    const after = await api.get(id);
    expect(after.output).toEqual(done.output);
  });

  it('cancels a running async prediction: the Cog server gets the cancel, the status stays canceled', async () => {
    cog.setBehavior({ stepMs: 400 });
    const created = await api.create({
      model: 'acme/flux',
      input: { prompt: 'slow fox' },
      webhook: { url: receiver.url },
    });
    const id = String(created.id);
    await api.waitFor(id, (p) => p.status === 'processing', 5_000);

    const res = await api.call('POST', `/v1/predictions/${id}/cancel`);
    expect(res.status, res.text).toBe(200);
    expect(res.body.status).toBe('canceled');
    await until('the cancel call on the Cog server', () => cog.canceled.includes(id));
    await cog.idle();
    await sleep(200);
    const prediction = await api.get(id);
    expect(prediction.status).toBe('canceled');
    expect(prediction.output).toBeNull();
    const deliveries = await receiver.waitFor(2);
    expect(deliveries.map((d) => d.event)).toEqual(['prediction.started', 'prediction.canceled']);
  });

  it("fails with Cog's error text when the model raises; GET answers 200", async () => {
    cog.setBehavior({ fail: 'NSFW content detected in the output' });
    const created = await api.create({ model: 'acme/flux', input: { prompt: 'a fox' } });
    const done = await api.waitFor(String(created.id), undefined, 5_000);
    expect(done.status).toBe('failed');
    const res = await api.call('GET', `/v1/predictions/${String(created.id)}`);
    expect(res.status).toBe(200);
    expect(res.body.error).toBe('NSFW content detected in the output');
    expect(res.body.output).toBeNull();
    expect(String(res.body.logs)).toContain('Traceback');
  });

  it('streams a language model’s tokens as they come, adding up to the final text', async () => {
    texts.setBehavior({
      stepMs: 60,
      logs: ['warming up'],
      iterator: true,
      output: ['Onions', ' bloom', ' at dusk'],
    });
    const created = await api.create({ model: 'acme/text-async', input: { prompt: 'haiku' }, stream: true });
    const id = String(created.id);
    const res = await fetch(String((created.urls as Json).stream), {
      headers: { 'x-api-key': gantry.key },
      signal: AbortSignal.timeout(10_000),
    });
    const events = parseSse(await res.text());
    const done = await api.waitFor(id, undefined, 5_000);

    expect(done.output).toBe('Onions bloom at dusk');
    const pieces = events.filter((e) => e.event === 'output').map((e) => e.data);
    // Each token came with its own output webhook, before the end.
    expect(pieces).toEqual(['Onions', ' bloom', ' at dusk']);
    expect(events.at(-1)?.event).toBe('done');
  });

  it('keeps the callback token, the credential of the callback route, out of the logs', async () => {
    const created = await api.create({ model: 'acme/flux', input: { prompt: 'a fox' } });
    const done = await api.waitFor(String(created.id), undefined, 5_000);
    expect(done.status).toBe('succeeded');
    const token = new URL(String(creates(cog)[0]?.body?.webhook)).searchParams.get('token') ?? '';
    expect(token.length).toBeGreaterThan(20);
    await sleep(100);
    const logs = logLines.join('\n');
    // The callbacks were logged...
    expect(logs).toContain(`/internal/backends/cog-async/${String(created.id)}`);
    // BUG: ...with their `?token=…`: anyone who reads the logs can post results for a running prediction.
    expect(logs).not.toContain(token);
  });
});

// ---------------------------------------------------------------------------------------------------
// Outputs keep the shape the model produced (README, Predictions: outputs)
// ---------------------------------------------------------------------------------------------------

/** A pydantic BaseModel output (`class Output(BaseModel)`): files beside plain values. */
const OBJECT_OUTPUT = {
  title: 'Output',
  type: 'object',
  properties: {
    images: { title: 'Images', type: 'array', items: { type: 'string', format: 'uri' } },
    mask: { title: 'Mask', anyOf: [{ type: 'string', format: 'uri' }, { type: 'null' }] },
    seed: { title: 'Seed', type: 'integer' },
    caption: { title: 'Caption', type: 'string' },
    scores: { title: 'Scores', type: 'array', items: { type: 'number' } },
  },
  required: ['images', 'seed'],
};

describe('Cog provider, outputs keep the shape the model produced', () => {
  const fakes: Record<'numbers' | 'labels' | 'objects' | 'text' | 'slow', FakeCog> = {} as never;
  let gantry: TestGantry;
  let receiver: WebhookReceiver;
  const api = client(() => gantry);

  beforeAll(async () => {
    fakes.numbers = await startFakeCog({
      outputSchema: { title: 'Output', type: 'array', items: { type: 'number' } },
    });
    fakes.labels = await startFakeCog({
      outputSchema: { title: 'Output', type: 'array', items: { type: 'string' } },
    });
    fakes.objects = await startFakeCog({ outputSchema: OBJECT_OUTPUT });
    fakes.text = await startFakeCog({ outputSchema: CONCATENATED_OUTPUT });
    fakes.slow = await startFakeCog();
    const names = Object.keys(fakes) as Array<keyof typeof fakes>;
    gantry = await startGantry(`
providers:
${names.map((n) => `  cog-${n}: { kind: cog, base_url: "${fakes[n].origin}" }`).join('\n')}
tiers:
  default: {}
predictions:
  webhooks: { allow_private: true, backoff_base_ms: 50, backoff_max_ms: 200 }
models:${names.map((n) => predictionModelYaml(`acme/${n}`, `cog-${n}`)).join('')}
`);
    const secret = (await api.call('GET', '/v1/webhooks/secret')).body.key as string;
    receiver = await startWebhookReceiver({ secret });
  });
  afterAll(async () => {
    await gantry?.close();
    await Promise.all(Object.values(fakes).map((f) => f.close()));
    await receiver?.close();
  });
  beforeEach(async () => {
    await Promise.all(Object.values(fakes).map((f) => f.idle()));
    for (const f of Object.values(fakes)) f.reset();
    receiver.reset();
  });

  async function readStream(url: string): Promise<SseEvent[]> {
    const res = await fetch(url, {
      headers: { 'x-api-key': gantry.key },
      signal: AbortSignal.timeout(10_000),
    });
    expect(res.status).toBe(200);
    return parseSse(await res.text());
  }

  it('returns a list of numbers as the numbers, not glued text', async () => {
    fakes.numbers.setBehavior({ output: [0.25, -0.5, 0.125] });
    const done = await api.create({ model: 'acme/numbers', input: { prompt: 'embed' }, await: true });
    expect(done.status, JSON.stringify(done)).toBe('succeeded');
    expect(done.output).toEqual([0.25, -0.5, 0.125]);
    const metadata = done.metadata as { storage: { files: Json[] }; data_available: boolean };
    expect(metadata.storage.files).toEqual([]);
    expect(metadata.data_available).toBe(true);
  });

  it('keeps an output key `__proto__` as data, with the signed link of its file in it', async () => {
    fakes.objects.setBehavior({
      output: JSON.parse('{"__proto__":{"file":"output.png"},"seed":3}') as never,
    });
    const done = await api.create({ model: 'acme/objects', input: { prompt: 'x' }, await: true });
    expect(done.status, JSON.stringify(done)).toBe('succeeded');
    const output = done.output as Record<string, unknown>;
    expect(Object.hasOwn(output, '__proto__')).toBe(true);
    expect(output.seed).toBe(3);
    const link = String(Object.getOwnPropertyDescriptor(output, '__proto__')?.value);
    expect(link).toContain('/output_0.png');
    expect((await fetch(link)).status).toBe(200);
  });

  it('keeps text that starts with "data:" as text where the schema says a plain string', async () => {
    fakes.labels.setBehavior({ output: ['data: loss 0.25, accuracy 0.9', 'data:text/plain,hi'] });
    const done = await api.create({ model: 'acme/labels', input: { prompt: 'x' }, await: true });
    expect(done.status, JSON.stringify(done)).toBe('succeeded');
    expect(done.output).toEqual(['data: loss 0.25, accuracy 0.9', 'data:text/plain,hi']);
  });

  it('fails an output nested deeper than 128 levels with a clear error', async () => {
    let deep: unknown = 1;
    for (let i = 0; i < 200; i++) deep = [deep];
    fakes.numbers.setBehavior({ output: deep as never });
    const done = await api.create({ model: 'acme/numbers', input: { prompt: 'x' }, await: true });
    expect(done.status).toBe('failed');
    expect(done.error).toBe('the output nests deeper than 128 levels');
  });

  it('returns a list of labels as a list (no concatenation without the schema saying so)', async () => {
    fakes.labels.setBehavior({ iterator: true, output: ['cat', 'dog', 'bird'] });
    const done = await api.create({ model: 'acme/labels', input: { prompt: 'classify' }, await: true });
    expect(done.output).toEqual(['cat', 'dog', 'bird']);
  });

  it('copies files anywhere in an object output and puts signed links in their places', async () => {
    fakes.objects.setBehavior({
      output: {
        images: [{ file: 'output.png' }, { file: 'output.jpg' }],
        mask: { file: 'output.png' },
        seed: 7,
        caption: 'https://example.com/about-this-model',
        scores: [0.5, 0.25],
      },
    });
    const created = await api.create({
      model: 'acme/objects',
      input: { prompt: 'two squares' },
      webhook: { url: receiver.url, events: ['completed'] },
      await: true,
    });
    expect(created.status, JSON.stringify(created)).toBe('succeeded');
    const done = await api.get(String(created.id));
    const output = done.output as {
      images: string[];
      mask: string;
      seed: number;
      caption: string;
      scores: number[];
    };
    expect(output.seed).toBe(7);
    expect(output.scores).toEqual([0.5, 0.25]);
    // A plain string whose schema says `type: string` stays the model's text, even when it is a URL.
    expect(output.caption).toBe('https://example.com/about-this-model');
    const links = [...output.images, output.mask];
    expect(links).toHaveLength(3);
    for (const link of links) expect(link.startsWith(`${gantry.origin}/v1/files/`), link).toBe(true);
    expect(JSON.stringify(done)).not.toContain('data:');

    const files = (done.metadata as { storage: { files: Json[] } }).storage.files;
    expect(files.map((f) => [f.name, f.type])).toEqual([
      ['output_0.png', 'image/png'],
      ['output_1.jpg', 'image/jpeg'],
      ['output_2.png', 'image/png'],
    ]);
    expect(files.map((f) => f.url)).toEqual(links);
    const bodies = await Promise.all(
      links.map(async (l) => Buffer.from(await (await fetch(l)).arrayBuffer())),
    );
    expect(bodies.map((b) => b.equals(fakes.objects.png))).toEqual([true, false, true]);
    expect(bodies[1]?.equals(fakes.objects.jpeg)).toBe(true);

    // The webhook carries the same shape.
    const [delivery] = await receiver.waitFor(1);
    expect(delivery?.event).toBe('prediction.succeeded');
    expect(delivery?.body?.output).toEqual(done.output);
  });

  it('streams a concatenated text as pieces that add up to the output; other outputs as one JSON event', async () => {
    fakes.text.setBehavior({ iterator: true, output: ['Hel', 'lo', ' world'] });
    const text = await api.create({
      model: 'acme/text',
      input: { prompt: 'greet' },
      stream: true,
      await: true,
    });
    expect(text.output).toBe('Hello world');
    const textEvents = await readStream((text.urls as Json).stream as string);
    const pieces = textEvents.filter((e) => e.event === 'output').map((e) => e.data);
    expect(pieces.join('')).toBe('Hello world');
    expect(textEvents.at(-1)?.event).toBe('done');

    fakes.numbers.setBehavior({ output: [1, 2.5] });
    const numbers = await api.create({
      model: 'acme/numbers',
      input: { prompt: 'n' },
      stream: true,
      await: true,
    });
    const numberEvents = (await readStream((numbers.urls as Json).stream as string)).filter(
      (e) => e.event === 'output',
    );
    expect(numberEvents.map((e) => JSON.parse(e.data))).toEqual([[1, 2.5]]);
  });

  it('is processing, with started_at and prediction.started, once the synchronous Cog server has the request', async () => {
    fakes.slow.setBehavior({ stepMs: 300, logs: ['step 1', 'step 2', 'step 3'] });
    const created = await api.create({
      model: 'acme/slow',
      input: { prompt: 'slow fox' },
      webhook: { url: receiver.url, events: ['started', 'completed'] },
    });
    const id = String(created.id);
    await until('the Cog server to run the prediction', () => fakes.slow.running().includes(id));

    const [started] = await receiver.waitFor(1);
    expect(started?.event).toBe('prediction.started');
    const running = await api.get(id);
    // Cog has not answered yet: the model is still at work.
    expect(fakes.slow.running()).toContain(id);
    expect(running.status).toBe('processing');
    expect(running.started_at).not.toBeNull();

    const done = await api.waitFor(id, undefined, 5_000);
    expect(done.status).toBe('succeeded');
    const events = (await receiver.waitFor(2)).map((d) => d.event);
    expect(events).toEqual(['prediction.started', 'prediction.succeeded']);
  });
});

// ---------------------------------------------------------------------------------------------------
// A synchronous run retried after its connection broke
// ---------------------------------------------------------------------------------------------------

/**
 * A TCP relay in front of the Cog server that resets (RST) the connection of the first prediction
 * request once it has arrived, as a stale keep-alive connection dropped by a proxy would: the request
 * was sent (Gantry reported `processing`) and no answer comes. Everything else is relayed.
 */
async function startResettingRelay(target: string) {
  const port = Number(new URL(target).port);
  const sockets = new Set<Socket>();
  const state = { resets: 0 };
  const server = createServer((socket) => {
    const upstream = connect(port, '127.0.0.1');
    for (const s of [socket, upstream]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
    }
    socket.on('error', () => upstream.destroy());
    upstream.on('error', () => socket.destroy());
    socket.on('data', (chunk: Buffer) => {
      if (state.resets === 0 && /^(PUT|POST) \/predictions/m.test(chunk.toString('latin1'))) {
        state.resets++;
        upstream.destroy();
        socket.resetAndDestroy();
        return;
      }
      upstream.write(chunk);
    });
    upstream.pipe(socket);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port: own } = server.address() as { port: number };
  return {
    origin: `http://127.0.0.1:${own}`,
    state,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

describe('Cog provider, synchronous mode, a connection reset after the request was sent', () => {
  let cog: FakeCog;
  let relay: Awaited<ReturnType<typeof startResettingRelay>>;
  let gantry: TestGantry;
  let receiver: WebhookReceiver;
  const api = client(() => gantry);

  beforeAll(async () => {
    cog = await startFakeCog();
    relay = await startResettingRelay(cog.origin);
    gantry = await startGantry(`
providers:
  cog-flaky: { kind: cog, base_url: "${relay.origin}" }
tiers:
  default: {}
predictions:
  max_attempts: 3
  webhooks: { allow_private: true, backoff_base_ms: 50, backoff_max_ms: 200 }
models:${predictionModelYaml('acme/flaky', 'cog-flaky')}
`);
    const secret = (await api.call('GET', '/v1/webhooks/secret')).body.key as string;
    receiver = await startWebhookReceiver({ secret });
  });
  afterAll(async () => {
    await gantry?.close();
    await relay?.close();
    await cog?.close();
    await receiver?.close();
  });

  it('stays processing across the retry: one prediction.started, started_at kept, then succeeded', async () => {
    const created = await api.create({
      model: 'acme/flaky',
      input: { prompt: 'a fox' },
      webhook: { url: receiver.url, events: ['started', 'completed'] },
    });
    const id = String(created.id);
    const done = await api.waitFor(id, undefined, 10_000);
    expect(done.status, JSON.stringify(done)).toBe('succeeded');
    // The first request was sent and reset; the retry reached the Cog server.
    expect(relay.state.resets).toBe(1);
    expect(creates(cog)).toHaveLength(1);

    const deliveries = await receiver.waitFor(2);
    await sleep(300); // a second `start` would have been queued with the retry, long before this
    expect(receiver.requests.map((d) => d.event)).toEqual(['prediction.started', 'prediction.succeeded']);
    const started = receiver.requests[0]?.body;
    expect(started?.status).toBe('processing');
    expect(started?.started_at).toEqual(expect.any(String));
    expect(done.started_at).toBe(started?.started_at);
    expect(deliveries[1]?.body?.status).toBe('succeeded');
  });
});
