/**
 * What happens to a prediction while it runs and after, seen from outside: the SSE stream (spec 4.8;
 * events `logs`, `output`, `error`, `done` per DESIGN.md) parsed from the raw bytes, live and replayed;
 * signed webhooks (spec 6) received by a real receiver that verifies Standard Webhooks signatures, with
 * event filters, auth headers, retries and the SSRF guard; cancel and delete of a running video (the
 * ffmpeg encoder really stops); and a prediction that fails in its backend.
 */
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { UsageRecord } from '../../src/usage/index.js';
import { addKey, LOCAL_CONFIG, startGantry, type TestGantry } from '../helpers/gantry.js';
import { type Res, type RestOptions, restCall } from '../helpers/rest.js';
import { parseSse, type SseEvent } from '../helpers/sse-events.js';
import { ledgerRecords } from '../helpers/usage.js';
import { sleep, waitFor } from '../helpers/wait.js';
import { startWebhookReceiver } from '../helpers/webhook-receiver.js';

const IMAGE = 'gantry/local-image';
const SPEECH = 'gantry/local-speech';
const VIDEO = 'gantry/local-video';

const MODELS = `
  - { namespace: ${IMAGE}, name: Local image, type: image, vendor: { name: Gantry, slug: gantry }, serves: [predictions], routes: [{ provider: local, model: local-image }] }
  - { namespace: ${SPEECH}, name: Local speech, type: audio, vendor: { name: Gantry, slug: gantry }, serves: [predictions], routes: [{ provider: local, model: local-speech }] }
  - { namespace: ${VIDEO}, name: Local video, type: video, vendor: { name: Gantry, slug: gantry }, serves: [predictions], routes: [{ provider: local, model: local-video }] }
`;
const WEBHOOKS = 'webhooks: { allow_private: true, backoff_base_ms: 20, backoff_max_ms: 200 }';
const CONFIG = `${LOCAL_CONFIG}${MODELS}
usage: { flush_ms: 20 }
predictions: { retention_minutes: 1, await_timeout_seconds: 1, ${WEBHOOKS} }
`;

/** A video that takes the local backend about two seconds: long enough to cancel while it runs. */
const SLOW_VIDEO = { prompt: 'a slow pan over golden hills', resolution: '720p', duration: 10 };
const TERMINAL = ['succeeded', 'failed', 'canceled'];

interface Prediction {
  id: string;
  status: string;
  stream: boolean;
  input: Record<string, unknown>;
  output: string[] | string | null;
  error: string | null;
  logs: string;
  completed_at: string | null;
  webhook: { url: string | null; events: string[] };
  metadata: {
    billing: { credits_used: number };
    storage: { files: Array<{ name: string; type: string; size: number; url: string }> };
    data_available: boolean;
  };
  urls: { get: string; cancel: string; stream: string; delete: string };
}

interface ErrorEnvelope {
  status: boolean;
  response: string;
  error: { http_status: number; message: string; details: unknown; error_id: string };
}

let gantry: TestGantry;

beforeAll(async () => {
  gantry = await startGantry(CONFIG);
});
afterAll(() => gantry?.close());

type CallOptions = Pick<Partial<RestOptions>, 'key' | 'body' | 'headers'>;

/** A call as the test account (its key unless `key` says otherwise). */
function call<T = Prediction>(method: string, path: string, options: CallOptions = {}): Promise<Res<T>> {
  return restCall<T>(gantry.origin, method, path, {
    ...options,
    key: options.key === undefined ? gantry.key : options.key,
  });
}

function create(body: Record<string, unknown>, key = gantry.key) {
  return call<Prediction>('POST', '/v1/predictions', { key, body });
}

function expectError(res: Res<unknown>, status: number, errorId: string): ErrorEnvelope['error'] {
  const body = res.body as ErrorEnvelope;
  expect(res.status, res.text).toBe(status);
  expect(body.status).toBe(false);
  expect(typeof body.response).toBe('string');
  expect(body.error.error_id).toBe(errorId);
  expect(body.error.http_status).toBe(status);
  expect(typeof body.error.message).toBe('string');
  expect(body.error).toHaveProperty('details');
  return body.error;
}

async function pollUntil(id: string, statuses: string[], key = gantry.key, timeoutMs = 10_000) {
  return waitFor(
    `prediction ${id} to reach ${statuses.join('|')}`,
    async () => {
      const res = await call('GET', `/v1/predictions/${id}`, { key });
      expect(res.status, res.text).toBe(200);
      return statuses.includes(res.body.status) ? res.body : undefined;
    },
    timeoutMs,
  );
}

async function webhookSecret(key = gantry.key): Promise<string> {
  const res = await call<{ key: string }>('GET', '/v1/webhooks/secret', { key });
  expect(res.status).toBe(200);
  expect(res.body.key).toMatch(/^whsec_/);
  return res.body.key;
}

/** ffmpeg processes this test process (which hosts Gantry) has running now. */
function ffmpegChildren(): string[] {
  try {
    const out = execFileSync('ps', ['-o', 'pid=,args=', '--ppid', String(process.pid)], { encoding: 'utf8' });
    return out.split('\n').filter((line) => /ffmpeg/.test(line));
  } catch {
    return []; // ps exits 1 when there are no children at all
  }
}

function usageOf(account: string, count: number): Promise<UsageRecord[]> {
  const id = gantry.store.getAccountByName(account)?.id;
  if (!id) throw new Error(`no account ${account}`);
  return ledgerRecords(gantry, id, count, 5000);
}

interface StreamRead {
  status: number;
  contentType: string | null;
  raw: string;
  events: SseEvent[];
}

/** Reads a prediction's stream until the server ends it (it must, after `done`). */
async function readStream(url: string, headers: Record<string, string> = {}): Promise<StreamRead> {
  const res = await fetch(url, {
    headers: { 'x-api-key': gantry.key, ...headers },
    signal: AbortSignal.timeout(10_000),
  });
  const raw = Buffer.from(await res.arrayBuffer()).toString('utf8');
  return { status: res.status, contentType: res.headers.get('content-type'), raw, events: parseSse(raw) };
}

function names(events: SseEvent[]): string[] {
  return events.map((e) => e.event);
}

describe('SSE stream of a prediction', () => {
  it('sends logs, output and done to a live subscriber, and ends after done', async () => {
    const res = await create({
      model: IMAGE,
      input: { prompt: 'a golden field', num_outputs: 2, megapixels: '1' },
      stream: true,
    });
    expect(res.status, res.text).toBe(200);
    expect(res.body.stream).toBe(true);
    expect(res.body.status).not.toBe('succeeded');
    const stream = await readStream(res.body.urls.stream);
    expect(stream.status).toBe(200);
    expect(stream.contentType).toMatch(/^text\/event-stream/);

    const final = await pollUntil(res.body.id, TERMINAL);
    expect(final.status).toBe('succeeded');
    const events = stream.events;
    // Event ids count up, so a client can resume with Last-Event-ID.
    const ids = events.map((e) => Number(e.id));
    expect(ids).toEqual([...ids].sort((a, b) => a - b));
    expect(new Set(ids).size).toBe(ids.length);

    const logs = events.filter((e) => e.event === 'logs').map((e) => e.data);
    expect(logs.join('\n')).toMatch(/Using seed: \d+/);
    expect(logs.join('\n')).toContain('Generated 2 images');
    // The logs events carry the same text as the prediction's logs field.
    expect(logs.join('')).toBe(final.logs);
    expect(names(events).at(-1)).toBe('done');
    expect(JSON.parse(events.at(-1)?.data ?? '{}')).toEqual({ status: 'succeeded' });
    // The output: its URLs, before done.
    expect(names(events)).toContain('output');
    const output = events.find((e) => e.event === 'output');
    expect(JSON.parse(output?.data ?? 'null')).toEqual(final.output);
    expect(names(events).indexOf('output')).toBeLessThan(names(events).indexOf('done'));
    expect(names(events)).not.toContain('error');
  });

  it('replays every event to a subscriber that joins after completion', async () => {
    const res = await create({ model: IMAGE, input: { prompt: 'late joiner' }, stream: true, await: true });
    expect(res.body.status).toBe('succeeded');
    const first = await readStream(res.body.urls.stream);
    const second = await readStream(res.body.urls.stream);
    expect(first.status).toBe(200);
    expect(first.contentType).toMatch(/^text\/event-stream/);
    expect(second.events).toEqual(first.events);
    expect(names(first.events)).toContain('logs');
    expect(names(first.events).at(-1)).toBe('done');
    expect(names(first.events)).toContain('output');
    expect(JSON.parse(first.events.find((e) => e.event === 'output')?.data ?? 'null')).toEqual(
      res.body.output,
    );
  });

  it('resumes after Last-Event-ID without repeating events', async () => {
    const res = await create({ model: IMAGE, input: { prompt: 'resume' }, stream: true, await: true });
    const all = await readStream(res.body.urls.stream);
    expect(all.events.length).toBeGreaterThanOrEqual(2);
    expect(all.events.every((e) => e.id !== undefined)).toBe(true);
    const resumed = await readStream(res.body.urls.stream, { 'last-event-id': String(all.events[0]?.id) });
    expect(resumed.status).toBe(200);
    expect(resumed.events).toEqual(all.events.slice(1));
    expect(names(resumed.events).at(-1)).toBe('done');
  });

  it('is 400 for a prediction created without stream: true', async () => {
    const res = await create({ model: IMAGE, input: { prompt: 'no stream' }, await: true });
    expect(res.body.stream).toBe(false);
    const stream = await call('GET', res.body.urls.stream);
    const error = expectError(stream, 400, 'INVALID_REQUEST');
    expect(error.message).toContain('stream');
  });

  it('ends a canceled streaming prediction with error, then done', async () => {
    const receiver = await startWebhookReceiver();
    try {
      const res = await create({
        model: VIDEO,
        input: SLOW_VIDEO,
        stream: true,
        webhook: { url: receiver.url },
      });
      expect(res.status, res.text).toBe(200);
      const reading = readStream(res.body.urls.stream);
      await pollUntil(res.body.id, ['processing']);
      const canceled = await call<{ success: boolean }>('POST', res.body.urls.cancel);
      expect(canceled.status, canceled.text).toBe(200);
      const stream = await reading;
      expect(stream.status).toBe(200);
      const events = names(stream.events);
      expect(events.slice(-2)).toEqual(['error', 'done']);
      expect(stream.events.at(-2)?.data).toMatch(/cancel/i);
      expect(JSON.parse(stream.events.at(-1)?.data ?? '{}')).toEqual({ status: 'canceled' });
      expect(events).not.toContain('output');
    } finally {
      await receiver.close();
    }
  });
});

describe('a prediction that fails in its backend', () => {
  it('is 200 on GET with status failed, error set, output null; its stream has error then done', async () => {
    const key = addKey(gantry.store, 'failing');
    const receiver = await startWebhookReceiver({ secret: await webhookSecret(key) });
    try {
      // Whitespace passes the schema (a string) but the speech backend has nothing to say.
      const res = await create(
        { model: SPEECH, input: { prompt: '   ' }, stream: true, webhook: { url: receiver.url } },
        key,
      );
      expect(res.status, res.text).toBe(200);
      const failed = await pollUntil(res.body.id, TERMINAL, key);
      expect(failed.status).toBe('failed');
      expect(typeof failed.error).toBe('string');
      expect(failed.error?.length).toBeGreaterThan(0);
      expect(failed.output).toBeNull();
      expect(failed.metadata.storage.files).toEqual([]);
      expect(failed.metadata.billing.credits_used).toBe(0);

      const stream = await readStream(res.body.urls.stream, { 'x-api-key': key });
      expect(names(stream.events).slice(-2)).toEqual(['error', 'done']);
      expect(stream.events.at(-2)?.data).toBe(failed.error);
      expect(JSON.parse(stream.events.at(-1)?.data ?? '{}')).toEqual({ status: 'failed' });

      const hooks = await receiver.waitFor(2);
      expect(hooks.map((h) => h.event)).toEqual(['prediction.started', 'prediction.failed']);
      expect(hooks[1]?.body).toMatchObject({
        id: res.body.id,
        status: 'failed',
        error: failed.error,
        output: null,
      });

      const records = await usageOf('failing', 1);
      expect(records).toHaveLength(1);
      expect(records[0]).toMatchObject({ api: 'prediction', model: SPEECH, outcome: 'error', credits: 0 });
    } finally {
      await receiver.close();
    }
  });
});

describe('webhooks', () => {
  it('sends prediction.started then prediction.succeeded, signed, with the auth header', async () => {
    const secret = await webhookSecret();
    const receiver = await startWebhookReceiver({ secret });
    try {
      const res = await create({
        model: IMAGE,
        input: { prompt: 'hooked', num_outputs: 2 },
        webhook: { url: receiver.url, auth_header: 'X-Hook-Token', auth_token: 'tok-s3cret-value' },
      });
      expect(res.status, res.text).toBe(200);
      // The caller's webhook, without its token; no filter means every event.
      expect(res.body.webhook).toEqual({
        url: receiver.url,
        events: ['prediction.started', 'prediction.succeeded', 'prediction.failed', 'prediction.canceled'],
      });
      expect(res.text).not.toContain('tok-s3cret-value');

      const hooks = await receiver.waitFor(2);
      const final = await pollUntil(res.body.id, TERMINAL);
      await sleep(200);
      expect(receiver.requests).toHaveLength(2);
      expect(hooks.map((h) => h.event)).toEqual(['prediction.started', 'prediction.succeeded']);
      for (const hook of hooks) {
        expect(hook.method).toBe('POST');
        expect(hook.path).toBe('/webhook');
        expect(String(hook.headers['content-type'])).toMatch(/^application\/json/);
        expect(hook.signatureValid, hook.signatureError).toBe(true);
        expect(hook.gantrySignatureValid).toBe(true);
        expect(hook.headers['x-hook-token']).toBe('tok-s3cret-value');
        expect(hook.rawBody).not.toContain('tok-s3cret-value');
        // The body is the Prediction object plus webhook_event_type.
        expect(Object.keys(hook.body ?? {}).sort()).toEqual(
          [...Object.keys(final), 'webhook_event_type'].sort(),
        );
        expect(hook.body?.id).toBe(res.body.id);
      }
      expect(hooks[0]?.headers['webhook-id']).not.toBe(hooks[1]?.headers['webhook-id']);
      expect(hooks[0]?.body).toMatchObject({ status: 'processing', output: null });
      expect(hooks[1]?.body).toMatchObject({
        status: 'succeeded',
        output: final.output,
        metadata: final.metadata,
        completed_at: final.completed_at,
      });

      // The signature covers the body: an edited one fails a customer's verification.
      const signed = hooks[1];
      const verifier = new Webhook(secret);
      const signedHeaders = {
        'webhook-id': String(signed?.headers['webhook-id']),
        'webhook-timestamp': String(signed?.headers['webhook-timestamp']),
        'webhook-signature': String(signed?.headers['webhook-signature']),
      };
      expect(() => verifier.verify(signed?.rawBody ?? '', signedHeaders)).not.toThrow();
      const forged = (signed?.rawBody ?? '').replace('"succeeded"', '"failed"');
      expect(() => verifier.verify(forged, signedHeaders)).toThrow();

      const log = await call<{ data: Array<{ event: string; state: string; attempts: number }> }>(
        'GET',
        `/v1/predictions/${res.body.id}/webhooks`,
      );
      expect(log.status).toBe(200);
      expect(log.body.data.map((d) => [d.event, d.state, d.attempts])).toEqual([
        ['prediction.started', 'delivered', 1],
        ['prediction.succeeded', 'delivered', 1],
      ]);
    } finally {
      await receiver.close();
    }
  });

  it('takes event filters in any spelling: ["completed"] delivers only prediction.succeeded', async () => {
    const receiver = await startWebhookReceiver({ secret: await webhookSecret() });
    try {
      const res = await create({
        model: IMAGE,
        input: { prompt: 'filtered' },
        webhook: { url: receiver.url, events: ['completed'] },
      });
      expect(res.status, res.text).toBe(200);
      expect(res.body.webhook.events).toEqual(['prediction.succeeded']);
      const [hook] = await receiver.waitFor(1);
      await pollUntil(res.body.id, TERMINAL);
      await sleep(300);
      expect(receiver.requests).toHaveLength(1);
      expect(hook?.event).toBe('prediction.succeeded');
      expect(hook?.signatureValid).toBe(true);

      const aliases = await create({
        model: IMAGE,
        input: { prompt: 'aliases' },
        webhook: { url: receiver.url, events: ['processing', 'prediction.cancelled', 'FAILED'] },
      });
      expect(aliases.status, aliases.text).toBe(200);
      expect([...aliases.body.webhook.events].sort()).toEqual([
        'prediction.canceled',
        'prediction.failed',
        'prediction.started',
      ]);
      await pollUntil(aliases.body.id, TERMINAL);

      const unknown = await create({
        model: IMAGE,
        input: { prompt: 'unknown event' },
        webhook: { url: receiver.url, events: ['finished'] },
      });
      expectError(unknown, 400, 'INVALID_PARAMETER');
    } finally {
      await receiver.close();
    }
  });

  it('retries a receiver that answers 500: delivered on the 3rd attempt, with the attempts logged', async () => {
    const receiver = await startWebhookReceiver({ secret: await webhookSecret() });
    try {
      receiver.nextResponses({ status: 500 }, { status: 500 });
      const res = await create({
        model: IMAGE,
        input: { prompt: 'retried' },
        webhook: { url: receiver.url, events: ['succeeded'] },
      });
      expect(res.status, res.text).toBe(200);
      const hooks = await receiver.waitFor(3);
      await sleep(300);
      expect(receiver.requests).toHaveLength(3);
      expect(hooks.map((h) => h.event)).toEqual([
        'prediction.succeeded',
        'prediction.succeeded',
        'prediction.succeeded',
      ]);
      // One delivery, attempted three times: same webhook-id and body, each attempt signed.
      expect(new Set(hooks.map((h) => h.headers['webhook-id'])).size).toBe(1);
      expect(new Set(hooks.map((h) => h.rawBody)).size).toBe(1);
      for (const hook of hooks) expect(hook.signatureValid).toBe(true);

      const log = await waitFor('the delivery to settle', async () => {
        const r = await call<{
          data: Array<{
            event: string;
            state: string;
            attempts: number;
            next_attempt_at: string | null;
            log: Array<{ outcome: string; status: number | null; at: string }>;
          }>;
        }>('GET', `/v1/predictions/${res.body.id}/webhooks`);
        return r.body.data[0]?.state === 'pending' ? undefined : r;
      });
      expect(log.status).toBe(200);
      expect(log.body.data).toHaveLength(1);
      const delivery = log.body.data[0];
      expect(delivery).toMatchObject({ event: 'prediction.succeeded', state: 'delivered', attempts: 3 });
      expect(delivery?.next_attempt_at).toBeNull();
      expect(delivery?.log.map((l) => [l.outcome, l.status])).toEqual([
        ['retry', 500],
        ['retry', 500],
        ['delivered', 200],
      ]);
    } finally {
      await receiver.close();
    }
  });

  it('refuses half an auth pair and a header Gantry sets itself', async () => {
    const base = { model: IMAGE, input: { prompt: 'auth' } };
    expectError(
      await create({ ...base, webhook: { url: 'http://127.0.0.1:9/hook', auth_token: 'x' } }),
      400,
      'INVALID_PARAMETER_COMBINATION',
    );
    expectError(
      await create({
        ...base,
        webhook: { url: 'http://127.0.0.1:9/hook', auth_header: 'webhook-signature', auth_token: 'x' },
      }),
      400,
      'INVALID_PARAMETER',
    );
  });
});

describe('cancel and delete of a running prediction', () => {
  it('cancels a running video: 200 {success:true}, status canceled, the backend stops, no output', async () => {
    const key = addKey(gantry.store, 'canceler');
    const receiver = await startWebhookReceiver({ secret: await webhookSecret(key) });
    try {
      const res = await create({ model: VIDEO, input: SLOW_VIDEO, webhook: { url: receiver.url } }, key);
      expect(res.status, res.text).toBe(200);
      const id = res.body.id;
      await pollUntil(id, ['processing'], key);
      // ffmpeg is encoding it right now.
      await waitFor(
        'ffmpeg to start',
        async () => (ffmpegChildren().length > 0 ? true : undefined),
        5000,
        20,
      );

      // No body and no Content-Type: spec 4.6 says the call has no body.
      const canceled = await call<{ success: boolean }>('POST', `/v1/predictions/${id}/cancel`, { key });
      expect(canceled.status, canceled.text).toBe(200);
      expect(canceled.body.success).toBe(true);

      const got = await call('GET', `/v1/predictions/${id}`, { key });
      expect(got.body.status).toBe('canceled');
      expect(got.body.output).toBeNull();
      expect(got.body.error).toBeNull();
      expect(got.body.completed_at).not.toBeNull();

      // The encoder was stopped, not left running in the background.
      await waitFor(
        'ffmpeg to stop',
        async () => (ffmpegChildren().length === 0 ? true : undefined),
        1500,
        20,
      );

      // Past the time the whole video would have taken: still canceled, nothing stored, no success event.
      await sleep(2000);
      const later = await call('GET', `/v1/predictions/${id}`, { key });
      expect(later.body.status).toBe('canceled');
      expect(later.body.output).toBeNull();
      expect(later.body.metadata.storage.files).toEqual([]);
      expect(later.body.metadata.data_available).toBe(false);
      expect(later.body.metadata.billing.credits_used).toBe(0);
      expect(existsSync(join(gantry.gantry.config.predictions.filesDir, id))).toBe(false);

      await receiver.waitFor(2);
      expect(receiver.requests.map((w) => w.event)).toEqual(['prediction.started', 'prediction.canceled']);
      expect(receiver.requests.every((w) => w.signatureValid)).toBe(true);
      expect(receiver.requests[1]?.body).toMatchObject({ id, status: 'canceled', output: null });

      // A canceled prediction is terminal: cancelling again is 409.
      expectError(
        await call('POST', `/v1/predictions/${id}/cancel`, { key }),
        409,
        'PREDICTION_NOT_CANCELLABLE',
      );

      // One usage record, not charged.
      const records = await usageOf('canceler', 1);
      expect(records).toHaveLength(1);
      expect(records[0]).toMatchObject({
        api: 'prediction',
        model: VIDEO,
        credits: 0,
        cost: 0,
        outcome: 'client_aborted',
      });
    } finally {
      await receiver.close();
    }
  });

  it('accepts the cancel POST with Content-Type: application/json and no body (spec 4: POSTs send it)', async () => {
    const receiver = await startWebhookReceiver();
    try {
      const res = await create({ model: VIDEO, input: SLOW_VIDEO, webhook: { url: receiver.url } });
      expect(res.status, res.text).toBe(200);
      const canceled = await call<{ success: boolean }>('POST', res.body.urls.cancel, {
        headers: { 'content-type': 'application/json' },
      });
      // Leave nothing running for the other tests, whatever the answer was.
      if (canceled.status !== 200) await call('POST', res.body.urls.cancel, { body: {} });
      expect(canceled.status, canceled.text).toBe(200);
      expect(canceled.body.success).toBe(true);
    } finally {
      await receiver.close();
    }
  });

  it('await: true gives up after await_timeout_seconds and returns the prediction still running', async () => {
    // A Gantry that waits 0.2 s: on a quiet machine the slow video can finish within the file's 1 s.
    const impatient = await startGantry(
      CONFIG.replace('await_timeout_seconds: 1', 'await_timeout_seconds: 0.2'),
    );
    const receiver = await startWebhookReceiver();
    try {
      const post = (path: string, body?: unknown) =>
        restCall<Prediction>(impatient.origin, 'POST', path, { key: impatient.key, body });
      const started = Date.now();
      const res = await post('/v1/predictions', {
        model: VIDEO,
        input: SLOW_VIDEO,
        webhook: { url: receiver.url },
        await: true,
      });
      const took = Date.now() - started;
      expect(res.status).toBe(200);
      expect(['starting', 'processing']).toContain(res.body.status);
      expect(res.body.output).toBeNull();
      expect(took).toBeGreaterThanOrEqual(180);
      expect(took).toBeLessThan(5000);
      const canceled = await post(res.body.urls.cancel);
      expect(canceled.status).toBe(200);
    } finally {
      await receiver.close();
      await impatient.close();
    }
  });

  it('deleting a running video stops its backend too', async () => {
    const receiver = await startWebhookReceiver();
    try {
      const res = await create({ model: VIDEO, input: SLOW_VIDEO, webhook: { url: receiver.url } });
      const id = res.body.id;
      await pollUntil(id, ['processing']);
      await waitFor(
        'ffmpeg to start',
        async () => (ffmpegChildren().length > 0 ? true : undefined),
        5000,
        20,
      );
      const deleted = await call<{ success: boolean }>('DELETE', `/v1/predictions/${id}`);
      expect(deleted.status, deleted.text).toBe(200);
      expect(deleted.body).toEqual({ success: true });
      await waitFor(
        'ffmpeg to stop',
        async () => (ffmpegChildren().length === 0 ? true : undefined),
        1500,
        20,
      );
      await sleep(2000);
      expectError(await call('GET', `/v1/predictions/${id}`), 404, 'PREDICTION_NOT_FOUND');
      expect(existsSync(join(gantry.gantry.config.predictions.filesDir, id))).toBe(false);
      expect(receiver.requests.map((w) => w.event)).not.toContain('prediction.succeeded');
    } finally {
      await receiver.close();
    }
  });
});

/**
 * A second Gantry as an operator would run it: webhooks to private addresses refused, accounts without
 * credits (billable models refused), and a per-model request limit on local-speech.
 */
describe('a Gantry with the default webhook policy, credits and rate limits', () => {
  const FREE = 'gantry/free-image';
  const UNFLAGGED = 'gantry/unflagged-image';
  const SINGLE = 'gantry/single-image';
  const STRICT_CONFIG = `${LOCAL_CONFIG.replace(
    'tiers:\n  default: {}',
    `tiers:\n  default:\n    window_seconds: 60\n    models: { ${SPEECH}: { requests: 2 }, ${SINGLE}: { concurrency: 1 } }`,
  )}
  - { namespace: ${IMAGE}, name: Priced image, type: image, vendor: { name: Gantry, slug: gantry }, serves: [predictions], routes: [{ provider: local, model: local-image }], billable: true, pricing: { amount: 0.01, currency: USD, unit: image } }
  - { namespace: ${UNFLAGGED}, name: Priced but not flagged billable, type: image, vendor: { name: Gantry, slug: gantry }, serves: [predictions], routes: [{ provider: local, model: local-image }], pricing: { amount: 0.01, currency: USD, unit: image } }
  - { namespace: ${FREE}, name: Free image, type: image, vendor: { name: Gantry, slug: gantry }, serves: [predictions], routes: [{ provider: local, model: local-image }] }
  - { namespace: ${SPEECH}, name: Local speech, type: audio, vendor: { name: Gantry, slug: gantry }, serves: [predictions], routes: [{ provider: local, model: local-speech }] }
  - { namespace: ${SINGLE}, name: One at a time, type: image, vendor: { name: Gantry, slug: gantry }, serves: [predictions], routes: [{ provider: local, model: local-image }] }
credits: { default_balance: 0 }
predictions: { retention_minutes: 1 }
`;
  let strict: TestGantry;
  beforeAll(async () => {
    strict = await startGantry(STRICT_CONFIG);
  });
  afterAll(() => strict?.close());

  function strictCreate(body: Record<string, unknown>): Promise<Res<Prediction>> {
    return restCall<Prediction>(strict.origin, 'POST', '/v1/predictions', { key: strict.key, body });
  }

  it('refuses webhook URLs to link-local, loopback and private targets (allow_private off)', async () => {
    for (const url of [
      'http://169.254.169.254/latest/meta-data',
      'http://127.0.0.1:9/hook',
      'http://10.0.0.1/hook',
      'http://[::1]/hook',
    ]) {
      const res = await strictCreate({ model: FREE, input: { prompt: 'ssrf' }, webhook: { url } });
      const error = expectError(res, 400, 'INVALID_PARAMETER');
      expect(error.message).toContain('webhook.url');
    }
    // Nothing was created.
    const list = await fetch(`${strict.origin}/v1/predictions`, { headers: { 'x-api-key': strict.key } });
    expect(((await list.json()) as { pagination: { total: number } }).pagination.total).toBe(0);
  });

  it('refuses a billable prediction of an account without credits with 402 (spec 4.3)', async () => {
    const res = await strictCreate({ model: IMAGE, input: { prompt: 'no credits' } });
    expect(res.status, res.text).toBe(402);
    const error = (res.body as unknown as ErrorEnvelope).error;
    expect(['INSUFFICIENT_CREDITS', 'PAYMENT_REQUIRED']).toContain(error.error_id);
    // A free model still runs.
    const free = await strictCreate({ model: FREE, input: { prompt: 'free' }, await: true });
    expect(free.status, free.text).toBe(200);
  });

  it('charges nothing for a model the catalog shows as not billable, as inference does', async () => {
    const model = await fetch(`${strict.origin}/v1/models/${encodeURIComponent(UNFLAGGED)}`, {
      headers: { 'x-api-key': strict.key },
    });
    expect(model.status).toBe(200);
    expect(((await model.json()) as { billable: boolean }).billable).toBe(false);
    // Not billable, so no credit check (the account has none) …
    const res = await strictCreate({ model: UNFLAGGED, input: { prompt: 'unflagged' }, await: true });
    expect(res.status, res.text).toBe(200);
    expect(res.body.status).toBe('succeeded');
    // … and no charge either.
    expect(res.body.metadata.billing.credits_used).toBe(0);
  });

  it("applies the tier's per-model request limit to predictions: 429 RATE_LIMIT_EXCEEDED (spec 8)", async () => {
    const answers: Res<Prediction>[] = [];
    for (let i = 0; i < 3; i++)
      answers.push(await strictCreate({ model: SPEECH, input: { prompt: `limited ${i}` } }));
    expect(answers.map((a) => a.status)).toEqual([200, 200, 429]);
    // Spec 8: the rate-limit headers on successful responses.
    expect(answers[0]?.headers.get('x-ratelimit-limit')).toBe('2');
    expect(answers[0]?.headers.get('x-ratelimit-remaining')).toBe('1');
    expect(answers[1]?.headers.get('x-ratelimit-remaining')).toBe('0');
    expect(Number(answers[0]?.headers.get('x-ratelimit-reset'))).toBeGreaterThan(Date.now() / 1000);
    const refused = answers[2] as Res<unknown>;
    expectError(refused, 429, 'RATE_LIMIT_EXCEEDED');
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
  });

  it('holds a concurrency slot while a prediction runs and gives it back when it ends or is canceled', async () => {
    const big = { prompt: 'busy', num_outputs: 2, megapixels: '1' };
    const first = await strictCreate({ model: SINGLE, input: big });
    expect(first.status, first.text).toBe(200);
    const second = await strictCreate({ model: SINGLE, input: big });
    const refused = expectError(second as Res<unknown>, 429, 'RATE_LIMIT_EXCEEDED');
    expect(refused.details).toMatchObject({ metric: 'concurrency' });

    const getStrict = async (id: string) => {
      const res = await fetch(`${strict.origin}/v1/predictions/${id}`, {
        headers: { 'x-api-key': strict.key },
      });
      return (await res.json()) as Prediction;
    };
    await waitFor('the first to finish', async () =>
      TERMINAL.includes((await getStrict(first.body.id)).status) ? true : undefined,
    );
    // The slot is free again once the prediction ended.
    const third = await strictCreate({ model: SINGLE, input: big });
    expect(third.status, third.text).toBe(200);
    const cancel = await fetch(`${strict.origin}/v1/predictions/${third.body.id}/cancel`, {
      method: 'POST',
      headers: { 'x-api-key': strict.key },
    });
    expect(cancel.status).toBe(200);
    // … and once it was canceled.
    const fourth = await strictCreate({ model: SINGLE, input: { prompt: 'after cancel' }, await: true });
    expect(fourth.status, fourth.text).toBe(200);
    expect(fourth.body.status).toBe('succeeded');
    const fifth = await strictCreate({ model: SINGLE, input: { prompt: 'after success' }, await: true });
    expect(fifth.status, fifth.text).toBe(200);
  });

  it('answers a retried create (same Idempotency-Key) with the first prediction, even at the limit', async () => {
    const send = async () => {
      const res = await fetch(`${strict.origin}/v1/predictions`, {
        method: 'POST',
        headers: {
          'x-api-key': strict.otherKey,
          'content-type': 'application/json',
          'idempotency-key': 'k-1',
        },
        body: JSON.stringify({ model: SPEECH, input: { prompt: 'retried create' } }),
      });
      const text = await res.text();
      return { status: res.status, text, body: JSON.parse(text) as Prediction };
    };
    const first = await send();
    expect(first.status, first.text).toBe(200);
    // The limit is 2 requests per minute: the retries are replays, not new predictions.
    for (let i = 0; i < 3; i++) {
      const retry = await send();
      expect(retry.status, retry.text).toBe(200);
      expect(retry.body.id).toBe(first.body.id);
    }
  });
});
