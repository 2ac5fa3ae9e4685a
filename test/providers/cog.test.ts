import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import sharp from 'sharp';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { CogBackend, type CogBackendOptions } from '../../providers/predictions/cog.js';
import {
  type BackendConfig,
  type BackendContext,
  BackendError,
  type BackendJob,
  type BackendResult,
  type FileOutput,
} from '../../providers/predictions/types.js';
import { CONCATENATED_OUTPUT, type FakeCog, type FakeCogOptions, startFakeCog } from '../helpers/fake-cog.js';

/**
 * Stands in for Gantry's webhook route: POST /cog/{predictionId}?token=... is handed to the backend,
 * answered 204 when it took it and 404 otherwise (Cog does not retry a 4xx).
 */
interface WebhookReceiver {
  /** The callbackUrl to configure: `http://127.0.0.1:PORT/cog`. */
  callbackUrl: string;
  backend: CogBackend | undefined;
  received: { predictionId: string; status: unknown; answered: number }[];
  close(): Promise<void>;
}

async function startWebhookReceiver(): Promise<WebhookReceiver> {
  const receiver: WebhookReceiver = {
    callbackUrl: '',
    backend: undefined,
    received: [],
    close: async () => {},
  };
  const server: Server = createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (chunk: Buffer) => parts.push(chunk));
    req.on('end', () => {
      const url = new URL(req.url ?? '/', 'http://receiver');
      const match = /^\/cog\/([^/]+)$/.exec(url.pathname);
      let payload: unknown;
      try {
        payload = JSON.parse(Buffer.concat(parts).toString('utf8'));
      } catch {
        payload = undefined;
      }
      if (req.method !== 'POST' || !match?.[1] || payload === undefined) {
        res.writeHead(400).end();
        return;
      }
      const predictionId = decodeURIComponent(match[1]);
      const token = url.searchParams.get('token') ?? '';
      const accepted = receiver.backend?.receiveWebhook(predictionId, token, payload) ?? false;
      const answered = accepted ? 204 : 404;
      receiver.received.push({
        predictionId,
        status: (payload as { status?: unknown }).status,
        answered,
      });
      res.writeHead(answered).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  receiver.callbackUrl = `http://127.0.0.1:${port}/cog`;
  receiver.close = () =>
    new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
  return receiver;
}

/** Records what a backend reports, in order. */
function recorder() {
  const seen: Array<{ kind: 'processing' | 'log' | 'progress' | 'output'; value?: string | number }> = [];
  const events = {
    processing: () => seen.push({ kind: 'processing' }),
    log: (text: string) => seen.push({ kind: 'log', value: text }),
    progress: (percent: number) => seen.push({ kind: 'progress', value: percent }),
    output: (piece: string) => seen.push({ kind: 'output', value: piece }),
  };
  const values = (kind: 'log' | 'progress' | 'output'): Array<string | number | undefined> =>
    seen.filter((e) => e.kind === kind).map((e) => e.value);
  return { seen, events, values };
}

let fake: FakeCog;
let receiver: WebhookReceiver;
const backends: CogBackend[] = [];
const extraFakes: FakeCog[] = [];
let counter = 0;

beforeAll(async () => {
  // No throttling, so every log line and output makes its own webhook.
  fake = await startFakeCog({ throttleMs: 0 });
  receiver = await startWebhookReceiver();
});
afterAll(async () => {
  await fake.close();
  await receiver.close();
});
beforeEach(() => {
  fake.reset();
  receiver.received.length = 0;
});
afterEach(async () => {
  await Promise.all(backends.splice(0).map((b) => b.close()));
  await Promise.all(extraFakes.splice(0).map((f) => f.close()));
  receiver.backend = undefined;
});

async function otherFake(options: FakeCogOptions): Promise<FakeCog> {
  const started = await startFakeCog(options);
  extraFakes.push(started);
  return started;
}

function backend(
  mode: 'sync' | 'async',
  extra: Partial<BackendConfig> = {},
  options: CogBackendOptions = {},
  on: FakeCog = fake,
): CogBackend {
  const created = new CogBackend(
    {
      name: 'cog-test',
      kind: 'cog',
      baseUrl: on.origin,
      timeoutMs: 10_000,
      ...(mode === 'async' ? { callbackUrl: receiver.callbackUrl } : {}),
      ...extra,
    },
    options,
  );
  backends.push(created);
  if (mode === 'async') receiver.backend = created;
  return created;
}

function job(input: Record<string, unknown> = { prompt: 'a red square' }, stream = false): BackendJob {
  counter += 1;
  return {
    predictionId: `8d0f7a4e-0000-4000-8000-${String(counter).padStart(12, '0')}`,
    model: 'flux',
    input,
    stream,
  };
}

function context(signal: AbortSignal = new AbortController().signal) {
  const rec = recorder();
  const ctx: BackendContext = { signal, events: rec.events };
  return { ctx, rec };
}

/** The files of a shaped result, in order. */
function filesOf(result: BackendResult): FileOutput[] {
  return (result.output?.files ?? []).map((f) => f.file);
}

async function failure(promise: Promise<BackendResult>): Promise<BackendError> {
  const error = await promise.then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(error).toBeInstanceOf(BackendError);
  return error as BackendError;
}

function predictionRequests(on: FakeCog = fake) {
  return on.requests.filter((r) => r.path.startsWith('/predictions'));
}

async function waitFor(check: () => boolean, timeoutMs = 3000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > until) throw new Error('condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

describe('CogBackend, synchronous', () => {
  it('PUTs the prediction with its id and maps data: URI outputs to bytes', async () => {
    const b = backend('sync');
    const j = job({ prompt: 'a red square', num_outputs: 2 });
    const { ctx, rec } = context();

    const result = await b.run(j, ctx);

    expect(result.output?.value).toEqual([null, null]);
    expect(result.output?.files.map((f) => f.path)).toEqual([[0], [1]]);
    for (const [index, output] of filesOf(result).entries()) {
      expect(output).toMatchObject({ kind: 'bytes', contentType: 'image/png', name: `output_${index}.png` });
      if (output.kind !== 'bytes') throw new Error('expected bytes');
      expect(output.data.equals(fake.png)).toBe(true);
      const meta = await sharp(output.data).metadata();
      expect(meta).toMatchObject({ format: 'png', width: 8, height: 8 });
    }
    expect(result.predictTime).toBeGreaterThan(0);
    expect(result.logs).toContain('100%|██████████| 4/4');
    // The model ran, so it is reported started, then what it printed and the last tqdm percentage.
    expect(rec.seen[0]).toEqual({ kind: 'processing' });
    expect(rec.values('log')).toEqual([result.logs]);
    expect(rec.values('progress')).toEqual([100]);

    const [put] = predictionRequests();
    expect(put?.method).toBe('PUT');
    expect(put?.path).toBe(`/predictions/${j.predictionId}`);
    expect(put?.headers.prefer).toBeUndefined();
    expect(put?.body).toEqual({ id: j.predictionId, input: j.input });
  });

  it('keeps the output in place: URLs and data: URIs are files, other strings stay strings', async () => {
    const b = backend('sync');
    fake.setBehavior({
      output: ['https://cdn.example.com/out-0.webp', 'a red square on white', { file: 'output.jpg' }],
    });

    const result = await b.run(job(), context().ctx);

    expect(result.output?.value).toEqual([null, 'a red square on white', null]);
    expect(result.output?.files.map((f) => f.path)).toEqual([[0], [2]]);
    expect(filesOf(result)[0]).toEqual({ kind: 'url', url: 'https://cdn.example.com/out-0.webp' });
    // One extension per type across backends: a JPEG is .jpg.
    expect(filesOf(result)[1]).toMatchObject({
      kind: 'bytes',
      contentType: 'image/jpeg',
      name: 'output_1.jpg',
    });
  });

  it('is processing once Cog has the request, long before it answers', async () => {
    const slow = await otherFake({});
    const b = backend('sync', {}, {}, slow);
    slow.setBehavior({ stepMs: 150, logs: ['step 1', 'step 2'] });
    const j = job();
    const { ctx, rec } = context();
    let answered = false;

    const running = b.run(j, ctx).finally(() => {
      answered = true;
    });
    await waitFor(() => rec.seen.some((e) => e.kind === 'processing'));
    expect(answered).toBe(false);
    // `processing` comes once the request is written; the fake (in this process) takes it a moment later.
    await waitFor(() => slow.running().length > 0);
    expect(slow.running()).toEqual([j.predictionId]);
    expect(answered).toBe(false);
    await running;
    expect(rec.seen.filter((e) => e.kind === 'processing')).toHaveLength(1);
  });

  it('cancels an earlier attempt still running on Cog (202) and runs the prediction again, in one attempt', async () => {
    const b = backend('sync');
    fake.setBehavior({ stepMs: 150, logs: ['step 1', 'step 2', 'step 3', 'step 4'] });
    const j = job();
    // What a worker that died mid-run leaves: Cog still runs its synchronous PUT, whose client is gone.
    const orphan = new AbortController();
    void fetch(`${fake.origin}/predictions/${j.predictionId}`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ id: j.predictionId, input: j.input }),
      signal: orphan.signal,
    }).catch(() => undefined);
    await waitFor(() => fake.running().includes(j.predictionId));
    orphan.abort();
    fake.setBehavior({ stepMs: 5 });

    const result = await b.run(j, context().ctx);

    expect(filesOf(result)).toHaveLength(1);
    expect(fake.canceled).toContain(j.predictionId);
    const puts = predictionRequests().filter((r) => r.method === 'PUT');
    expect(puts.length).toBeGreaterThanOrEqual(3);
  });

  it('fails with Cog error text, not retryable, when the prediction fails', async () => {
    const b = backend('sync');
    fake.setBehavior({ fail: 'CUDA out of memory. Tried to allocate 2.00 GiB' });

    const error = await failure(b.run(job(), context().ctx));

    expect(error.message).toBe('CUDA out of memory. Tried to allocate 2.00 GiB');
    expect(error.retryable).toBe(false);
  });

  it('rejects promptly on abort, POSTs cancel, and the job really stops', async () => {
    const b = backend('sync');
    fake.setBehavior({ stepMs: 200, logs: ['step 1', 'step 2', 'step 3', 'step 4', 'step 5'] });
    const j = job();
    const abort = new AbortController();
    const running = b.run(j, context(abort.signal).ctx);
    await waitFor(() => fake.running().includes(j.predictionId));

    const abortedAt = Date.now();
    abort.abort();
    const error = await failure(running);

    expect(Date.now() - abortedAt).toBeLessThan(150);
    expect(error.message).toBe('the prediction was canceled');
    await waitFor(() => fake.canceled.includes(j.predictionId));
    const cancel = fake.requests.find((r) => r.path === `/predictions/${j.predictionId}/cancel`);
    expect(cancel?.method).toBe('POST');
    await fake.idle();
    expect(fake.running()).toEqual([]);
  });

  it('times out with a BackendError and cancels the remote prediction', async () => {
    const b = backend('sync', { timeoutMs: 300 });
    fake.setBehavior({ stepMs: 300, logs: ['step 1', 'step 2', 'step 3'] });
    const j = job();
    const started = Date.now();

    const error = await failure(b.run(j, context().ctx));

    expect(error.message).toMatch(/did not finish within/);
    expect(error.retryable).toBe(false);
    expect(Date.now() - started).toBeLessThan(1000);
    await waitFor(() => fake.canceled.includes(j.predictionId));
  });
});

describe('CogBackend, asynchronous (webhooks)', () => {
  it('drives processing, log deltas, progress and stream output from webhooks', async () => {
    const texts = await otherFake({ throttleMs: 0, outputSchema: CONCATENATED_OUTPUT });
    const b = backend('async', {}, {}, texts);
    texts.setBehavior({ iterator: true, output: ['Hello', ' world'] });
    const j = job({ prompt: 'say hello' }, true);
    const { ctx, rec } = context();

    const result = await b.run(j, ctx);

    // A concatenated iterator is one text, and its stream pieces add up to it.
    expect(result.output).toEqual({ value: 'Hello world', files: [], text: true });
    expect(result.predictTime).toBeGreaterThan(0);
    expect(rec.seen[0]).toEqual({ kind: 'processing' });
    expect(rec.seen.filter((e) => e.kind === 'processing')).toHaveLength(1);
    // Cog sends cumulative logs: each event carries only the new line.
    const logs = rec.values('log');
    expect(logs).toEqual([
      'Using seed: 42\n',
      '  0%|          | 0/4 [00:00<?, ?it/s]\n',
      ' 50%|█████     | 2/4 [00:00<00:00, 19.94it/s]\n',
      '100%|██████████| 4/4 [00:00<00:00, 19.97it/s]\n',
    ]);
    expect(logs.join('')).toBe(result.logs);
    expect(rec.values('progress')).toEqual([0, 50, 100]);
    expect(rec.values('output')).toEqual(['Hello', ' world']);

    const put = predictionRequests(texts)[0];
    expect(put?.method).toBe('PUT');
    expect(put?.headers.prefer).toBe('respond-async');
    expect(put?.body?.webhook_events_filter).toEqual(['start', 'output', 'logs', 'completed']);
    const webhook = new URL(String(put?.body?.webhook));
    expect(`${webhook.origin}${webhook.pathname}`).toBe(`${receiver.callbackUrl}/${j.predictionId}`);
    expect(webhook.searchParams.get('token')).toMatch(/^[A-Za-z0-9_-]{43}$/);
    // Every webhook Cog sent was taken: start, 4 logs, 2 outputs, completed.
    expect(texts.webhooks.map((w) => w.event)).toEqual([
      'start',
      'logs',
      'logs',
      'logs',
      'logs',
      'output',
      'output',
      'completed',
    ]);
    expect(receiver.received.every((r) => r.answered === 204)).toBe(true);
  });

  it('streams no pieces of an iterator that is not a concatenated text, and keeps it a list', async () => {
    const b = backend('async');
    fake.setBehavior({ iterator: true, output: ['cat', 'dog'] });
    const { ctx, rec } = context();

    const result = await b.run(job({ prompt: 'labels' }, true), ctx);

    expect(result.output).toEqual({ value: ['cat', 'dog'], files: [] });
    expect(rec.values('output')).toEqual([]);
  });

  it('reports each log line once when throttled webhooks carry several', async () => {
    const throttled = await otherFake({ throttleMs: 500 });
    const b = backend('async', {}, {}, throttled);
    throttled.setBehavior({ stepMs: 5, logs: ['one', 'two', 'three', 'four'] });
    const { ctx, rec } = context();

    const result = await b.run(job(), ctx);

    expect(rec.values('log').join('')).toBe('one\ntwo\nthree\nfour\n');
    expect(result.logs).toBe('one\ntwo\nthree\nfour\n');
    // Fewer webhooks than lines: the completed one brought the rest.
    expect(throttled.webhooks.filter((w) => w.event === 'logs').length).toBeLessThan(4);
  });

  it('maps uploaded file outputs to URLs the server serves', async () => {
    const uploading = await otherFake({ throttleMs: 0, uploadFiles: true });
    const b = backend('async', {}, {}, uploading);
    const j = job({ prompt: 'two squares', num_outputs: 2 });

    const result = await b.run(j, context().ctx);

    expect(filesOf(result)).toEqual([
      // On the Cog server's own origin: a file without a schema saying so, exempt with allow_private_outputs.
      { kind: 'url', url: uploading.uploadUrl(j.predictionId, 'output.png'), ownOrigin: true },
      { kind: 'url', url: uploading.uploadUrl(j.predictionId, 'output_1.png'), ownOrigin: true },
    ]);
    const first = filesOf(result)[0];
    if (first?.kind !== 'url') throw new Error('expected a url');
    const res = await fetch(first.url);
    expect(res.headers.get('content-type')).toBe('image/png');
    expect(Buffer.from(await res.arrayBuffer()).equals(uploading.png)).toBe(true);
  });

  it('rejects webhooks with a wrong token, for unknown predictions, and after the run', async () => {
    const b = backend('async');
    fake.setBehavior({ stepMs: 60 });
    const j = job();
    const running = b.run(j, context().ctx);
    await waitFor(() => fake.webhooks.some((w) => w.event === 'start'));
    const token = new URL(String(predictionRequests()[0]?.body?.webhook)).searchParams.get('token') ?? '';

    const forged = { id: j.predictionId, status: 'succeeded', output: 'https://attacker.example/x.png' };
    expect(b.receiveWebhook(j.predictionId, 'not-the-token', forged)).toBe(false);
    expect(b.receiveWebhook(j.predictionId, `${token}x`, forged)).toBe(false);
    expect(b.receiveWebhook('00000000-0000-4000-8000-000000000000', token, forged)).toBe(false);
    expect(b.receiveWebhook(j.predictionId, token, 'not a prediction')).toBe(false);
    expect(b.receiveWebhook(j.predictionId, token, { ...forged, id: 'someone-else' })).toBe(false);
    const overHttp = await fetch(`${receiver.callbackUrl}/${j.predictionId}?token=forged`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(forged),
    });
    expect(overHttp.status).toBe(404);

    const result = await running;
    expect(filesOf(result)).toHaveLength(1);
    expect(filesOf(result)[0]).toMatchObject({ kind: 'bytes', contentType: 'image/png' });
    // The run is over: its token no longer completes anything.
    expect(b.receiveWebhook(j.predictionId, token, forged)).toBe(false);
  });

  it('fails with Cog error text, not retryable, on a failed webhook', async () => {
    const b = backend('async');
    fake.setBehavior({ fail: 'NSFW content detected. Try running it again, or try a different prompt.' });
    const { ctx, rec } = context();

    const error = await failure(b.run(job(), ctx));

    expect(error.message).toBe('NSFW content detected. Try running it again, or try a different prompt.');
    expect(error.retryable).toBe(false);
    expect(rec.values('log').join('')).toContain('Traceback (most recent call last):');
  });

  it('on abort POSTs cancel, rejects promptly, and Cog sends only a canceled terminal webhook', async () => {
    const b = backend('async');
    fake.setBehavior({ stepMs: 200 });
    const j = job();
    const abort = new AbortController();
    const running = b.run(j, context(abort.signal).ctx);
    await waitFor(() => fake.webhooks.some((w) => w.event === 'start'));

    const abortedAt = Date.now();
    abort.abort();
    const error = await failure(running);

    expect(Date.now() - abortedAt).toBeLessThan(150);
    expect(error.retryable).toBe(false);
    await waitFor(() => fake.canceled.includes(j.predictionId));
    await fake.idle();
    const terminal = fake.webhooks.filter((w) => w.event === 'completed').map((w) => w.body.status);
    expect(terminal).toEqual(['canceled']);
    // Nobody waits for it any more: the route is told so.
    await waitFor(() => receiver.received.some((r) => r.status === 'canceled'));
    expect(receiver.received.find((r) => r.status === 'canceled')?.answered).toBe(404);
  });

  it('close() fails runs in flight as retryable and cancels them on the server', async () => {
    const b = backend('async');
    fake.setBehavior({ stepMs: 200 });
    const j = job();
    const running = b.run(j, context().ctx);
    await waitFor(() => fake.webhooks.some((w) => w.event === 'start'));

    const outcome = failure(running);
    await b.close();
    const error = await outcome;

    expect(error.message).toBe('the Cog backend is closing');
    expect(error.retryable).toBe(true);
    expect(fake.canceled).toEqual([j.predictionId]);
  });

  it('times out when no webhook arrives and the server cannot be polled', async () => {
    const b = backend('async', { timeoutMs: 300 }, { webhookSilenceMs: 50 });
    fake.setBehavior({ dropWebhooks: true, stepMs: 200 });
    const j = job();
    const started = Date.now();

    const error = await failure(b.run(j, context().ctx));

    expect(error.message).toMatch(/did not finish within/);
    expect(error.retryable).toBe(false);
    expect(Date.now() - started).toBeLessThan(1000);
    await waitFor(() => fake.canceled.includes(j.predictionId));
    // Cog has no GET /predictions/{id}: it was never tried.
    expect(fake.requests.some((r) => r.method === 'GET' && r.path === `/predictions/${j.predictionId}`)).toBe(
      false,
    );
  });

  it('polls GET /predictions/{id} when webhooks stop and the server lists it', async () => {
    const pollable = await otherFake({ throttleMs: 0, pollable: true });
    const b = backend('async', { pollIntervalMs: 20 }, { webhookSilenceMs: 50 }, pollable);
    pollable.setBehavior({ dropWebhooks: true, stepMs: 30 });
    const j = job();
    const { ctx, rec } = context();

    const result = await b.run(j, ctx);

    expect(filesOf(result)[0]).toMatchObject({ kind: 'bytes', contentType: 'image/png' });
    expect(rec.seen[0]).toEqual({ kind: 'processing' });
    expect(
      pollable.requests.some((r) => r.method === 'GET' && r.path === `/predictions/${j.predictionId}`),
    ).toBe(true);
  });
});

describe('CogBackend, failures before the model runs', () => {
  it('is retryable when the server is down', async () => {
    const down = await otherFake({});
    const origin = down.origin;
    await down.close();
    extraFakes.splice(extraFakes.indexOf(down), 1);
    const b = new CogBackend({ name: 'cog-down', kind: 'cog', baseUrl: origin, timeoutMs: 5000 });
    backends.push(b);

    const { ctx, rec } = context();
    const error = await failure(b.run(job(), ctx));

    expect(error.retryable).toBe(true);
    expect(error.message).toMatch(/could not reach the Cog server \(ECONNREFUSED\)/);
    // Nothing reached a server: the prediction never started.
    expect(rec.seen).toEqual([]);
  });

  it('is retryable on 5xx', async () => {
    const b = backend('sync');
    fake.setBehavior({ status: 500 });

    const error = await failure(b.run(job(), context().ctx));

    expect(error.retryable).toBe(true);
    expect(error.message).toBe('the Cog server answered HTTP 500: Internal Server Error');
    // An error status means nothing runs: there is nothing to cancel.
    expect(fake.requests.some((r) => r.path.endsWith('/cancel'))).toBe(false);
  });

  it('is retryable on 409 when Cog already runs another prediction', async () => {
    const b = backend('sync');
    fake.setBehavior({ stepMs: 200 });
    const first = job();
    const abort = new AbortController();
    const running = b.run(first, context(abort.signal).ctx);
    await waitFor(() => fake.running().includes(first.predictionId));

    const error = await failure(b.run(job(), context().ctx));

    expect(error.retryable).toBe(true);
    expect(error.message).toBe('the Cog server is busy: Already running a prediction');
    abort.abort();
    await failure(running);
  });

  it('is final on 422, naming the field but never echoing the input', async () => {
    const b = backend('sync');

    const error = await failure(
      b.run(job({ aspect_ratio: '7:5', api_key: 'sk-secret-value' }), context().ctx),
    );

    expect(error.retryable).toBe(false);
    expect(error.message).toMatch(
      /^the Cog server rejected the input: prompt: field required; aspect_ratio: /,
    );
    expect(error.message).not.toContain('sk-secret-value');
  });
});

describe('CogBackend.schemas', () => {
  it('reads /openapi.json once and inlines the $refs of Input and Output', async () => {
    const b = backend('sync');

    const schemas = await b.schemas('flux');
    await b.schemas('flux');
    await b.run(job(), context().ctx);

    expect(schemas?.input).toMatchObject({ title: 'Input', type: 'object', required: ['prompt'] });
    const properties = schemas?.input?.properties as Record<string, Record<string, unknown>>;
    expect(properties.aspect_ratio).toEqual({
      title: 'aspect_ratio',
      enum: ['1:1', '16:9', '9:16', '4:3', '3:4'],
      type: 'string',
      description: 'Aspect ratio for the generated image',
      default: '1:1',
      'x-order': 1,
    });
    expect(properties.output_format).toMatchObject({ enum: ['webp', 'jpg', 'png'], default: 'webp' });
    expect(properties.num_outputs).toMatchObject({ type: 'integer', minimum: 1, maximum: 4, default: 1 });
    expect(JSON.stringify(schemas)).not.toMatch(/\$ref|allOf/);
    expect(schemas?.output).toEqual({
      title: 'Output',
      type: 'array',
      items: { type: 'string', format: 'uri' },
    });
    expect(fake.requests.filter((r) => r.path === '/openapi.json')).toHaveLength(1);
  });
});
