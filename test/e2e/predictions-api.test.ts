/**
 * The Predictions API (spec 2.3, 3, 4.3-4.8, 7, 8) end to end, as a media app developer uses it: real HTTP
 * against a real Gantry whose models run on the built-in local backend (local-image, local-speech,
 * local-video), a real webhook receiver, and the SQLite usage ledger. Create (async, await, the
 * /v1/predict alias), the Prediction object field by field, every error of the create and list calls in
 * the REST envelope, account isolation, list pagination and filters, 409 on cancelling a finished
 * prediction, delete, Idempotency-Key, one usage record per prediction and the predictions metric.
 * Cancelling running predictions is in predictions-stream.test.ts, files in predictions-files.test.ts.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { UsageRecord } from '../../src/usage/index.js';
import { addKey, LOCAL_CONFIG, startGantry, type TestGantry } from '../helpers/gantry.js';
import { type Res, type RestOptions, restCall } from '../helpers/rest.js';
import { ledgerRecords } from '../helpers/usage.js';
import { sleep, waitFor } from '../helpers/wait.js';
import { startWebhookReceiver } from '../helpers/webhook-receiver.js';

const IMAGE = 'gantry/local-image';
const SPEECH = 'gantry/local-speech';
const VIDEO = 'gantry/local-video';

/** 1 USD is 1000 credits (the default rate): an image costs 10 credits, a video second 50. */
const MODELS = `
  - namespace: ${IMAGE}
    name: Local image
    type: image
    vendor: { name: Gantry, slug: gantry }
    serves: [predictions]
    routes: [{ provider: local, model: local-image }]
    billable: true
    pricing: { amount: 0.01, currency: USD, unit: image }
  - namespace: ${SPEECH}
    name: Local speech
    type: audio
    vendor: { name: Gantry, slug: gantry }
    serves: [predictions]
    routes: [{ provider: local, model: local-speech }]
  - namespace: ${VIDEO}
    name: Local video
    type: video
    vendor: { name: Gantry, slug: gantry }
    serves: [predictions]
    routes: [{ provider: local, model: local-video }]
    billable: true
    pricing: { amount: 0.05, currency: USD, unit: second }
`;
const CONFIG = `${LOCAL_CONFIG}${MODELS}
usage: { flush_ms: 20 }
predictions: { retention_minutes: 1, webhooks: { allow_private: true, backoff_base_ms: 20, backoff_max_ms: 200 } }
`;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[1-8][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const TERMINAL = ['succeeded', 'failed', 'canceled'];

interface FileInfo {
  name: string;
  type: string;
  size: number;
  url: string;
}

interface Prediction {
  id: string;
  status: string;
  stream: boolean;
  type: string;
  input: Record<string, unknown>;
  output: string[] | string | null;
  error: string | null;
  logs: string;
  created_at: string;
  started_at: string | null;
  completed_at: string | null;
  updated_at: string;
  privacy: string;
  source: string;
  model: { name: string; type: string };
  webhook: { url: string | null; events: string[] };
  metrics: {
    predict_time: number;
    total_time: number;
    image_count?: number;
    asset_count?: number;
    progress?: number;
  };
  metadata: {
    billing: { credits_used: number };
    storage: { files: FileInfo[] };
    data_available: boolean;
  };
  data_removed: boolean;
  urls: { get: string; cancel: string; stream: string; delete: string };
}

interface ErrorEnvelope {
  status: boolean;
  response: string;
  error: { http_status: number; message: string; details: unknown; error_id: string };
}

interface ListBody {
  data: Prediction[];
  pagination: { current_page: number; per_page: number; total: number; last_page: number };
}

let gantry: TestGantry;

beforeAll(async () => {
  gantry = await startGantry(CONFIG);
});
afterAll(() => gantry?.close());

type CallOptions = Partial<RestOptions>;

/** A call as the test account (its key unless `key` says otherwise). */
function call<T = Prediction>(method: string, path: string, options: CallOptions = {}): Promise<Res<T>> {
  return restCall<T>(gantry.origin, method, path, {
    ...options,
    key: options.key === undefined ? gantry.key : options.key,
  });
}

function create(body: Record<string, unknown>, options: Omit<CallOptions, 'body'> = {}) {
  return call<Prediction>('POST', '/v1/predictions', { ...options, body });
}

/** Asserts the REST envelope of spec 7.1 with the given status and error id; returns the error. */
function expectError(res: Res<unknown>, status: number, errorId: string): ErrorEnvelope['error'] {
  const body = res.body as ErrorEnvelope;
  expect(res.status, res.text).toBe(status);
  expect(body.status).toBe(false);
  expect(typeof body.response).toBe('string');
  expect(body.response.length).toBeGreaterThan(0);
  expect(body.error.error_id).toBe(errorId);
  expect(body.error.http_status).toBe(status);
  expect(typeof body.error.message).toBe('string');
  expect(body.error).toHaveProperty('details');
  expect(Object.keys(body).sort()).toEqual(['error', 'response', 'status']);
  return body.error;
}

/** Polls GET until the prediction reaches one of `statuses`. */
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

function accountId(name: string): string {
  const account = gantry.store.getAccountByName(name);
  if (!account) throw new Error(`no account ${name}`);
  return account.id;
}

/** The account's usage records once at least `count` are in the ledger. */
function usageOf(account: string, count: number): Promise<UsageRecord[]> {
  return ledgerRecords(gantry, accountId(account), count, 5000);
}

const SPEC_FIELDS = [
  'id',
  'status',
  'stream',
  'type',
  'input',
  'output',
  'created_at',
  'started_at',
  'completed_at',
  'updated_at',
  'privacy',
  'source',
  'model',
  'webhook',
  'metrics',
  'metadata',
  'urls',
  'error',
  'logs',
];

function expectIso(value: unknown): number {
  expect(typeof value).toBe('string');
  const ms = Date.parse(value as string);
  expect(Number.isNaN(ms), String(value)).toBe(false);
  expect(new Date(ms).toISOString()).toBe(value);
  return ms;
}

function expectUrls(p: Prediction) {
  const base = `${gantry.origin}/v1/predictions/${p.id}`;
  expect(p.urls.get).toBe(base);
  expect(p.urls.cancel).toBe(`${base}/cancel`);
  expect(p.urls.stream).toBe(`${base}/stream`);
  expect(p.urls.delete.startsWith(base)).toBe(true);
  for (const url of Object.values(p.urls)) expect(new URL(url).origin).toBe(gantry.origin);
}

describe('creating and fetching predictions', () => {
  it('without await answers at once with a non-terminal status; polling GET reaches succeeded', async () => {
    const started = Date.now();
    const res = await create({
      model: IMAGE,
      input: { prompt: 'a teal lake at night', num_outputs: 2, megapixels: '1' },
    });
    const took = Date.now() - started;
    expect(res.status, res.text).toBe(200);
    const p = res.body;
    expect(p.id).toMatch(UUID);
    expect(['starting', 'processing']).toContain(p.status);
    expect(p.output).toBeNull();
    expect(p.completed_at).toBeNull();
    expect(p.error).toBeNull();
    expect(p.metadata.storage.files).toEqual([]);
    expect(p.metadata.data_available).toBe(false);
    expectUrls(p);

    const done = await pollUntil(p.id, TERMINAL);
    expect(done.status).toBe('succeeded');
    // The create call answered before the generator finished.
    expect(Date.parse(done.completed_at as string) - Date.parse(done.created_at)).toBeGreaterThan(0);
    expect(took).toBeLessThan(5000);
    expect(Array.isArray(done.output)).toBe(true);
    expect(done.output).toHaveLength(2);
    for (const url of done.output as string[]) {
      expect(url.startsWith(`${gantry.origin}/v1/files/${p.id}/`)).toBe(true);
    }
  });

  it('await: true returns the succeeded prediction with every field of spec 2.3', async () => {
    const res = await create({ model: IMAGE, input: { prompt: 'red sunset', num_outputs: 2 }, await: true });
    expect(res.status, res.text).toBe(200);
    const p = res.body;
    // Exactly the spec's fields, plus data_removed (shown in the spec's failed-prediction excerpt).
    expect(Object.keys(p).sort()).toEqual([...SPEC_FIELDS, 'data_removed'].sort());
    expect(p.id).toMatch(UUID);
    expect(p.status).toBe('succeeded');
    expect(p.stream).toBe(false);
    expect(p.type).toBe('inference');
    expect(p.model).toEqual({ name: IMAGE, type: 'image' });
    expect(p.source).toBe('api');
    expect(['private', 'public']).toContain(p.privacy);
    expect(p.webhook).toEqual({ url: null, events: [] });
    expect(p.error).toBeNull();
    expect(typeof p.logs).toBe('string');
    expect(p.logs).toMatch(/Using seed: \d+/);
    expect(p.data_removed).toBe(false);
    expectUrls(p);

    const created = expectIso(p.created_at);
    const startedAt = expectIso(p.started_at);
    const completed = expectIso(p.completed_at);
    const updated = expectIso(p.updated_at);
    expect(startedAt).toBeGreaterThanOrEqual(created);
    expect(completed).toBeGreaterThanOrEqual(startedAt);
    expect(updated).toBeGreaterThanOrEqual(completed);

    expect(typeof p.metrics.predict_time).toBe('number');
    expect(typeof p.metrics.total_time).toBe('number');
    expect(p.metrics.predict_time).toBeGreaterThan(0);
    expect(p.metrics.total_time).toBeGreaterThanOrEqual(p.metrics.predict_time);
    expect(p.metrics.total_time).toBeCloseTo((completed - created) / 1000, 2);
    expect(p.metrics.image_count).toBe(2);
    expect(p.metrics.asset_count).toBe(2);

    // 2 images at 0.01 USD, 1000 credits per USD.
    expect(p.metadata.billing.credits_used).toBe(20);
    expect(p.metadata.data_available).toBe(true);
    const files = p.metadata.storage.files;
    expect(files.map((f) => f.name)).toEqual(['output_0.png', 'output_1.png']);
    for (const file of files) {
      expect(Object.keys(file).sort()).toEqual(['name', 'size', 'type', 'url']);
      expect(file.type).toBe('image/png');
      expect(Number.isInteger(file.size)).toBe(true);
      expect(file.size).toBeGreaterThan(100);
    }
    expect(p.output).toEqual(files.map((f) => f.url));

    // GET shows the same prediction.
    const got = await call('GET', p.urls.get);
    expect(got.status).toBe(200);
    expect(got.body.id).toBe(p.id);
    expect(got.body.output).toEqual(p.output);
    expect(got.body.metadata).toEqual(p.metadata);
  });

  it('POST /v1/predict is the same create call', async () => {
    const res = await call('POST', '/v1/predict', {
      body: { model: IMAGE, input: { prompt: 'alias' }, await: true },
    });
    expect(res.status, res.text).toBe(200);
    expect(res.body.id).toMatch(UUID);
    expect(res.body.status).toBe('succeeded');
    expect(res.body.model.name).toBe(IMAGE);
    expect(res.body.output).toHaveLength(1);
    const got = await call('GET', `/v1/predictions/${res.body.id}`);
    expect(got.status).toBe(200);
    expect(got.body.status).toBe('succeeded');

    const bad = await call('POST', '/v1/predict', { body: { input: { prompt: 'no model' } } });
    expectError(bad, 400, 'MISSING_REQUIRED_FIELD');
  });

  it('merges top-level width, height and num_outputs into input; a value in input wins', async () => {
    const merged = await create({
      model: IMAGE,
      input: { prompt: 'merged' },
      width: 320,
      height: 192,
      num_outputs: 2,
      await: true,
    });
    expect(merged.status, merged.text).toBe(200);
    expect(merged.body.input).toMatchObject({ prompt: 'merged', width: 320, height: 192, num_outputs: 2 });
    expect(merged.body.output).toHaveLength(2);
    expect(merged.body.metrics.image_count).toBe(2);

    const inputWins = await create({
      model: IMAGE,
      input: { prompt: 'input wins', num_outputs: 1 },
      num_outputs: 3,
      await: true,
    });
    expect(inputWins.status, inputWins.text).toBe(200);
    expect(inputWins.body.input.num_outputs).toBe(1);
    expect(inputWins.body.output).toHaveLength(1);

    // A merged value is validated like any input.
    const tooMany = await create({ model: IMAGE, input: { prompt: 'too many' }, num_outputs: 9 });
    const error = expectError(tooMany, 400, 'INVALID_INPUT');
    expect(JSON.stringify(error.details)).toContain('num_outputs');
  });

  it('applies the schema defaults and shows them in input', async () => {
    const image = await create({ model: IMAGE, input: { prompt: 'defaults' } });
    expect(image.status, image.text).toBe(200);
    expect(image.body.input).toEqual({
      prompt: 'defaults',
      aspect_ratio: '1:1',
      megapixels: '0.25',
      num_outputs: 1,
      output_format: 'png',
      output_quality: 80,
    });

    const speech = await create({ model: SPEECH, input: { prompt: 'hello' } });
    expect(speech.status, speech.text).toBe(200);
    expect(speech.body.input).toEqual({
      prompt: 'hello',
      voice: 'en-us',
      voice_variant: 'default',
      speed: 175,
      pitch: 50,
      output_format: 'mp3',
    });
    expect(speech.body.model).toEqual({ name: SPEECH, type: 'audio' });

    const receiver = await startWebhookReceiver();
    try {
      const video = await create({
        model: VIDEO,
        input: { prompt: 'defaults' },
        webhook: { url: receiver.url },
      });
      expect(video.status, video.text).toBe(200);
      expect(video.body.input).toEqual({
        prompt: 'defaults',
        duration: 5,
        aspect_ratio: '16:9',
        resolution: '180p',
      });
      expect(video.body.model).toEqual({ name: VIDEO, type: 'video' });
      const done = await pollUntil(video.body.id, TERMINAL);
      expect(done.status).toBe('succeeded');
      expect(done.metrics.asset_count).toBe(1);
      expect(done.metrics.progress).toBe(100);
      expect(done.metrics).not.toHaveProperty('image_count');
      expect(typeof done.output).toBe('string'); // one URL, as the model's output schema says
    } finally {
      await receiver.close();
    }
    await pollUntil(image.body.id, TERMINAL);
    await pollUntil(speech.body.id, TERMINAL);
  });
});

describe('errors of the create call, in the REST envelope', () => {
  it('no key, or a wrong one, is 401 UNAUTHORIZED on every route', async () => {
    const body = { model: IMAGE, input: { prompt: 'x' } };
    expectError(await create(body, { key: null }), 401, 'UNAUTHORIZED');
    expectError(await create(body, { key: 'gk-not-a-key' }), 401, 'UNAUTHORIZED');
    expectError(await call('GET', '/v1/predictions', { key: null }), 401, 'UNAUTHORIZED');
    const id = '00000000-0000-4000-8000-000000000000';
    expectError(await call('GET', `/v1/predictions/${id}`, { key: null }), 401, 'UNAUTHORIZED');
    expectError(await call('POST', `/v1/predictions/${id}/cancel`, { key: null }), 401, 'UNAUTHORIZED');
    expectError(await call('DELETE', `/v1/predictions/${id}`, { key: null }), 401, 'UNAUTHORIZED');
    expectError(await call('GET', `/v1/predictions/${id}/stream`, { key: null }), 401, 'UNAUTHORIZED');
  });

  it('a missing model or input is 400 MISSING_REQUIRED_FIELD', async () => {
    expectError(await create({ input: { prompt: 'x' } }), 400, 'MISSING_REQUIRED_FIELD');
    expectError(await create({ model: IMAGE }), 400, 'MISSING_REQUIRED_FIELD');
    expectError(await create({}), 400, 'MISSING_REQUIRED_FIELD');
    expectError(await create({ model: '', input: { prompt: 'x' } }), 400, 'MISSING_REQUIRED_FIELD');
  });

  it('fields of the wrong type are 422 VALIDATION_ERROR', async () => {
    const cases: Record<string, unknown>[] = [
      { model: 5, input: { prompt: 'x' } },
      { model: IMAGE, input: 'a prompt' },
      { model: IMAGE, input: ['a prompt'] },
      { model: IMAGE, input: { prompt: 'x' }, await: 'yes' },
      { model: IMAGE, input: { prompt: 'x' }, stream: 1 },
      { model: IMAGE, input: { prompt: 'x' }, webhook: 'http://example.com/hook' },
    ];
    for (const body of cases) {
      expectError(await create(body), 422, 'VALIDATION_ERROR');
    }
    // A body that is JSON but not an object.
    expectError(await call('POST', '/v1/predictions', { raw: '[1, 2]' }), 422, 'VALIDATION_ERROR');
  });

  it('an unknown top-level field is 422 VALIDATION_ERROR naming it', async () => {
    const res = await create({ model: IMAGE, input: { prompt: 'x' }, promt: 'typo' });
    const error = expectError(res, 422, 'VALIDATION_ERROR');
    expect(error.message).toContain('promt');
  });

  it('input that breaks the model schema is 400 INVALID_INPUT naming every bad field', async () => {
    const res = await create({
      model: IMAGE,
      input: {
        prompt: 'x',
        aspect_ratio: '7:3',
        num_outputs: 9,
        output_quality: 0,
        colour: 'red',
      },
    });
    const error = expectError(res, 400, 'INVALID_INPUT');
    const fields = (error.details as { fields: Array<{ field: string; message: string }> }).fields;
    expect(fields.map((f) => f.field).sort()).toEqual([
      'aspect_ratio',
      'colour',
      'num_outputs',
      'output_quality',
    ]);
    for (const f of fields) expect(f.message.length).toBeGreaterThan(0);

    const missingPrompt = await create({ model: IMAGE, input: { aspect_ratio: '1:1' } });
    const missing = expectError(missingPrompt, 400, 'INVALID_INPUT');
    expect((missing.details as { fields: Array<{ field: string }> }).fields.map((f) => f.field)).toEqual([
      'prompt',
    ]);

    const wrongType = await create({ model: SPEECH, input: { prompt: 'x', speed: 'fast' } });
    const typed = expectError(wrongType, 400, 'INVALID_INPUT');
    expect((typed.details as { fields: Array<{ field: string }> }).fields.map((f) => f.field)).toEqual([
      'speed',
    ]);
  });

  it('an unknown model is 404 MODEL_NOT_FOUND; an inference-only model is 422 MODEL_NOT_SUPPORTED', async () => {
    expectError(await create({ model: 'nobody/nothing', input: { prompt: 'x' } }), 404, 'MODEL_NOT_FOUND');
    expectError(
      await create({ model: 'gantry/local-chat', input: { prompt: 'x' } }),
      422,
      'MODEL_NOT_SUPPORTED',
    );
    // A model the account may not see is as unknown as a missing one.
    expectError(
      await create({ model: 'acme/secret-chat', input: { prompt: 'x' } }, { key: gantry.otherKey }),
      404,
      'MODEL_NOT_FOUND',
    );
  });

  it('a video prediction without a webhook is 400 MISSING_REQUIRED_FIELD', async () => {
    const res = await create({ model: VIDEO, input: { prompt: 'no hook' } });
    expectError(res, 400, 'MISSING_REQUIRED_FIELD');
  });

  it('malformed JSON and a wrong Content-Type are enveloped 400s', async () => {
    const malformed = await call('POST', '/v1/predictions', {
      raw: '{"model": "gantry/local-image", "input": {',
    });
    expectError(malformed, 400, 'INVALID_REQUEST');
    const plain = await call('POST', '/v1/predictions', {
      raw: JSON.stringify({ model: IMAGE, input: { prompt: 'x' } }),
      contentType: 'text/plain',
    });
    expectError(plain, 400, 'UNSUPPORTED_MEDIA_TYPE');
    const form = await call('POST', '/v1/predictions', {
      raw: 'model=gantry/local-image',
      contentType: 'application/x-www-form-urlencoded',
    });
    expectError(form, 400, 'UNSUPPORTED_MEDIA_TYPE');
  });

  it('an unknown prediction id is 404 PREDICTION_NOT_FOUND everywhere', async () => {
    for (const id of ['00000000-0000-4000-8000-000000000000', 'not-a-uuid']) {
      expectError(await call('GET', `/v1/predictions/${id}`), 404, 'PREDICTION_NOT_FOUND');
      expectError(await call('POST', `/v1/predictions/${id}/cancel`), 404, 'PREDICTION_NOT_FOUND');
      expectError(await call('DELETE', `/v1/predictions/${id}`), 404, 'PREDICTION_NOT_FOUND');
      expectError(await call('GET', `/v1/predictions/${id}/stream`), 404, 'PREDICTION_NOT_FOUND');
    }
  });
});

describe('accounts', () => {
  it("another account's prediction is 404 on get, cancel, delete and stream, and lists stay apart", async () => {
    const mine = await create({ model: IMAGE, input: { prompt: 'mine' }, stream: true, await: true });
    expect(mine.status, mine.text).toBe(200);
    const id = mine.body.id;
    const other = { key: gantry.otherKey };
    expectError(await call('GET', `/v1/predictions/${id}`, other), 404, 'PREDICTION_NOT_FOUND');
    expectError(await call('POST', `/v1/predictions/${id}/cancel`, other), 404, 'PREDICTION_NOT_FOUND');
    expectError(await call('DELETE', `/v1/predictions/${id}`, other), 404, 'PREDICTION_NOT_FOUND');
    expectError(await call('POST', `/v1/predictions/${id}/delete`, other), 404, 'PREDICTION_NOT_FOUND');
    expectError(await call('GET', `/v1/predictions/${id}/stream`, other), 404, 'PREDICTION_NOT_FOUND');
    expectError(await call('GET', `/v1/predictions/${id}/webhooks`, other), 404, 'PREDICTION_NOT_FOUND');

    // Untouched for its owner.
    const still = await call('GET', `/v1/predictions/${id}`);
    expect(still.status).toBe(200);
    expect(still.body.status).toBe('succeeded');

    const theirs = await create({ model: IMAGE, input: { prompt: 'theirs' } }, other);
    expect(theirs.status, theirs.text).toBe(200);
    const otherList = await call<ListBody>('GET', '/v1/predictions?per_page=50', other);
    expect(otherList.status).toBe(200);
    const otherIds = otherList.body.data.map((p) => p.id);
    expect(otherIds).toContain(theirs.body.id);
    expect(otherIds).not.toContain(id);
    const myList = await call<ListBody>('GET', '/v1/predictions?per_page=50');
    const myIds = myList.body.data.map((p) => p.id);
    expect(myIds).toContain(id);
    expect(myIds).not.toContain(theirs.body.id);
    await pollUntil(theirs.body.id, TERMINAL, gantry.otherKey);
  });
});

describe('listing predictions', () => {
  let key: string;
  /** Ids in creation order: 16 images, then one speech. */
  const ids: string[] = [];

  beforeAll(async () => {
    key = addKey(gantry.store, 'lister');
    for (let i = 0; i < 16; i++) {
      const res = await create({ model: IMAGE, input: { prompt: `list ${i}`, megapixels: '0.25' } }, { key });
      expect(res.status, res.text).toBe(200);
      ids.push(res.body.id);
      await sleep(3); // distinct created_at, so "newest first" has one answer
    }
    const speech = await create({ model: SPEECH, input: { prompt: 'listed' } }, { key });
    expect(speech.status, speech.text).toBe(200);
    ids.push(speech.body.id);
    for (const id of ids) await pollUntil(id, TERMINAL, key);
  });

  const list = (query: string) => call<ListBody>('GET', `/v1/predictions${query}`, { key });
  const newestFirst = () => [...ids].reverse();

  it('defaults to 15 per page, newest first, with the pagination envelope', async () => {
    const res = await list('');
    expect(res.status, res.text).toBe(200);
    expect(Object.keys(res.body).sort()).toEqual(['data', 'pagination']);
    expect(res.body.pagination).toEqual({ current_page: 1, per_page: 15, total: 17, last_page: 2 });
    expect(res.body.data.map((p) => p.id)).toEqual(newestFirst().slice(0, 15));
    // Items are full Prediction objects.
    expect(res.body.data[0]).toMatchObject({ id: ids[16], model: { name: SPEECH }, status: 'succeeded' });
    expect(res.body.data[0]?.urls.get).toBe(`${gantry.origin}/v1/predictions/${ids[16]}`);

    const page2 = await list('?page=2');
    expect(page2.body.pagination).toEqual({ current_page: 2, per_page: 15, total: 17, last_page: 2 });
    expect(page2.body.data.map((p) => p.id)).toEqual(newestFirst().slice(15));

    const beyond = await list('?page=5');
    expect(beyond.status).toBe(200);
    expect(beyond.body.data).toEqual([]);
    expect(beyond.body.pagination).toEqual({ current_page: 5, per_page: 15, total: 17, last_page: 2 });
  });

  it('per_page takes 1 to 50; anything else is 400 INVALID_PARAMETER', async () => {
    const one = await list('?per_page=1&page=3');
    expect(one.status).toBe(200);
    expect(one.body.pagination).toEqual({ current_page: 3, per_page: 1, total: 17, last_page: 17 });
    expect(one.body.data.map((p) => p.id)).toEqual([newestFirst()[2]]);

    const fifty = await list('?per_page=50');
    expect(fifty.status).toBe(200);
    expect(fifty.body.data).toHaveLength(17);
    expect(fifty.body.pagination).toEqual({ current_page: 1, per_page: 50, total: 17, last_page: 1 });

    for (const bad of ['0', '51', '-1', 'ten', '2.5']) {
      expectError(await list(`?per_page=${bad}`), 400, 'INVALID_PARAMETER');
    }
    expectError(await list('?page=0'), 400, 'INVALID_PARAMETER');
  });

  it('filters by model; an unknown model is 404 MODEL_NOT_FOUND', async () => {
    const speech = await list(`?model=${encodeURIComponent(SPEECH)}`);
    expect(speech.status).toBe(200);
    expect(speech.body.data.map((p) => p.id)).toEqual([ids[16]]);
    expect(speech.body.pagination.total).toBe(1);

    const images = await list(`?model=${encodeURIComponent(IMAGE)}&per_page=50`);
    expect(images.body.pagination.total).toBe(16);
    expect(images.body.data.every((p) => p.model.name === IMAGE)).toBe(true);

    const video = await list(`?model=${encodeURIComponent(VIDEO)}`);
    expect(video.status).toBe(200);
    expect(video.body.data).toEqual([]);
    expect(video.body.pagination).toEqual({ current_page: 1, per_page: 15, total: 0, last_page: 1 });

    expectError(await list('?model=nobody%2Fnothing'), 404, 'MODEL_NOT_FOUND');
  });

  it('filters by from/to dates (YYYY-MM-DD, whole UTC days)', async () => {
    const day = (offset: number) => new Date(Date.now() + offset * 86_400_000).toISOString().slice(0, 10);
    const today = day(0);
    expect((await list(`?from=${today}&to=${today}`)).body.pagination.total).toBe(17);
    expect((await list(`?from=${today}`)).body.pagination.total).toBe(17);
    expect((await list(`?to=${today}`)).body.pagination.total).toBe(17);
    expect((await list(`?from=${day(-3)}&to=${day(3)}`)).body.pagination.total).toBe(17);
    expect((await list(`?from=${day(1)}`)).body.pagination.total).toBe(0);
    expect((await list(`?to=${day(-1)}`)).body.pagination.total).toBe(0);

    for (const bad of ['2024-13-01', '2024-02-30', '24-01-01', '2024/01/01', 'yesterday', '2024-1-1']) {
      expectError(await list(`?from=${encodeURIComponent(bad)}`), 400, 'INVALID_DATE_FORMAT');
      expectError(await list(`?to=${encodeURIComponent(bad)}`), 400, 'INVALID_DATE_FORMAT');
    }
    expectError(await list(`?from=${day(1)}&to=${day(-1)}`), 400, 'INVALID_DATE_RANGE');
  });
});

describe('cancel', () => {
  it('a finished prediction is not cancellable: 409 PREDICTION_NOT_CANCELLABLE, and it stays succeeded', async () => {
    const done = await create({ model: IMAGE, input: { prompt: 'finished' }, await: true });
    expect(done.body.status).toBe('succeeded');
    const res = await call('POST', `/v1/predictions/${done.body.id}/cancel`, { contentType: null });
    const error = expectError(res, 409, 'PREDICTION_NOT_CANCELLABLE');
    expect(error.message).toContain('succeeded');
    const got = await call('GET', `/v1/predictions/${done.body.id}`);
    expect(got.body.status).toBe('succeeded');
    expect(got.body.output).toEqual(done.body.output);
  });
});

describe('delete', () => {
  it('DELETE removes the prediction and its files', async () => {
    const done = await create({ model: IMAGE, input: { prompt: 'to delete' }, await: true });
    expect(done.body.status).toBe('succeeded');
    const fileUrl = (done.body.output as string[])[0] as string;
    expect((await fetch(fileUrl)).status).toBe(200);

    const res = await call<{ success: boolean }>('DELETE', `/v1/predictions/${done.body.id}`);
    expect(res.status, res.text).toBe(200);
    expect(res.body).toEqual({ success: true });

    expectError(await call('GET', `/v1/predictions/${done.body.id}`), 404, 'PREDICTION_NOT_FOUND');
    const file = await call('GET', fileUrl, { key: null });
    expectError(file, 404, 'FILE_NOT_FOUND');
    const listed = await call<ListBody>('GET', '/v1/predictions?per_page=50');
    expect(listed.body.data.map((p) => p.id)).not.toContain(done.body.id);
    // Gone for good.
    expectError(await call('DELETE', `/v1/predictions/${done.body.id}`), 404, 'PREDICTION_NOT_FOUND');
  });

  it('POST /v1/predictions/{id}/delete is the same delete', async () => {
    const done = await create({ model: IMAGE, input: { prompt: 'post delete' }, await: true });
    const fileUrl = (done.body.output as string[])[0] as string;
    const res = await call<{ success: boolean }>('POST', `/v1/predictions/${done.body.id}/delete`, {
      body: {},
    });
    expect(res.status, res.text).toBe(200);
    expect(res.body).toEqual({ success: true });
    expectError(await call('GET', `/v1/predictions/${done.body.id}`), 404, 'PREDICTION_NOT_FOUND');
    expectError(await call('GET', fileUrl, { key: null }), 404, 'FILE_NOT_FOUND');
  });

  it("the prediction's delete action URL ends with /delete (spec 4) and deletes with POST or DELETE", async () => {
    const first = await create({ model: IMAGE, input: { prompt: 'delete url' }, await: true });
    expect(first.body.urls.delete).toBe(`${gantry.origin}/v1/predictions/${first.body.id}/delete`);
    const posted = await call<{ success: boolean }>('POST', first.body.urls.delete, { body: {} });
    expect(posted.status, posted.text).toBe(200);
    expect(posted.body).toEqual({ success: true });

    const second = await create({ model: IMAGE, input: { prompt: 'delete url 2' }, await: true });
    const deleted = await call<{ success: boolean }>('DELETE', second.body.urls.delete);
    expect(deleted.status, deleted.text).toBe(200);
    expectError(await call('GET', second.body.urls.get), 404, 'PREDICTION_NOT_FOUND');
  });
});

describe('Idempotency-Key', () => {
  it('the same key twice gives the same prediction; another account with the key gets its own', async () => {
    const key = addKey(gantry.store, 'idem');
    const idem = { 'idempotency-key': 'order-42' };
    const body = { model: IMAGE, input: { prompt: 'once only' } };
    const first = await create(body, { key, headers: idem });
    expect(first.status, first.text).toBe(200);
    const again = await create(body, { key, headers: idem });
    expect(again.status, again.text).toBe(200);
    expect(again.body.id).toBe(first.body.id);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(first.headers.get('idempotent-replayed')).toBeNull();

    // A retry after completion still answers with the same (now finished) prediction.
    await pollUntil(first.body.id, TERMINAL, key);
    const late = await create(body, { key, headers: idem });
    expect(late.body.id).toBe(first.body.id);
    expect(late.body.status).toBe('succeeded');

    const listed = await call<ListBody>('GET', '/v1/predictions', { key });
    expect(listed.body.pagination.total).toBe(1);
    expect(listed.body.data.map((p) => p.id)).toEqual([first.body.id]);

    // Keys are per account.
    const otherKey = addKey(gantry.store, 'idem-other');
    const other = await create(body, { key: otherKey, headers: idem });
    expect(other.status, other.text).toBe(200);
    expect(other.body.id).not.toBe(first.body.id);
    expect(other.headers.get('idempotent-replayed')).toBeNull();

    // A key must be 1 to 255 characters.
    expectError(
      await create(body, { key, headers: { 'idempotency-key': 'x'.repeat(256) } }),
      400,
      'INVALID_PARAMETER',
    );

    // A different key is a different prediction.
    const fresh = await create(body, { key, headers: { 'idempotency-key': 'order-43' } });
    expect(fresh.body.id).not.toBe(first.body.id);
    await pollUntil(fresh.body.id, TERMINAL, key);
    await pollUntil(other.body.id, TERMINAL, otherKey);
    expect((await call<ListBody>('GET', '/v1/predictions', { key })).body.pagination.total).toBe(2);
  });
});

describe('usage and metrics', () => {
  it('writes one usage record per prediction with api prediction and media units', async () => {
    const key = addKey(gantry.store, 'metered');
    const receiver = await startWebhookReceiver();
    try {
      const image = await create(
        { model: IMAGE, input: { prompt: 'billed', num_outputs: 2 }, await: true },
        { key },
      );
      const speech = await create({ model: SPEECH, input: { prompt: 'billed' }, await: true }, { key });
      const video = await create(
        { model: VIDEO, input: { prompt: 'billed' }, webhook: { url: receiver.url }, await: true },
        { key },
      );
      for (const p of [image, speech, video]) expect(p.body.status, p.text).toBe('succeeded');
      expect(video.body.metadata.billing.credits_used).toBe(250); // 5 s at 0.05 USD

      const records = await usageOf('metered', 3);
      // Written once: nothing more shows up later.
      await sleep(300);
      const again = await usageOf('metered', 3);
      expect(again).toHaveLength(3);
      expect(records).toHaveLength(3);
      const byModel = new Map(records.map((r) => [r.model, r]));
      for (const r of records) {
        expect(r.api).toBe('prediction');
        expect(r.outcome).toBe('ok');
        expect(r.account_id).toBe(accountId('metered'));
        expect(r.stream).toBe(false);
      }
      expect(byModel.get(IMAGE)?.media_units).toEqual({ unit: 'image', quantity: 2 });
      expect(byModel.get(IMAGE)?.credits).toBe(image.body.metadata.billing.credits_used);
      expect(byModel.get(IMAGE)?.credits).toBe(20);
      expect(byModel.get(IMAGE)?.cost).toBeCloseTo(0.02, 10);
      expect(byModel.get(VIDEO)?.media_units).toEqual({ unit: 'second', quantity: 5 });
      expect(byModel.get(VIDEO)?.credits).toBe(250);
      expect(byModel.get(SPEECH)?.media_units).toEqual({ unit: 'prediction', quantity: 1 });
      expect(byModel.get(SPEECH)?.credits).toBe(0);
    } finally {
      await receiver.close();
    }
  });

  it('/metrics counts finished predictions in gantry_predictions_total', async () => {
    const done = await create({ model: IMAGE, input: { prompt: 'counted' }, await: true });
    expect(done.body.status).toBe('succeeded');
    const res = await fetch(`${gantry.origin}/metrics`);
    expect(res.status).toBe(200);
    const text = await res.text();
    const sample = (model: string, status: string) => {
      const line = text
        .split('\n')
        .find((l) => l.startsWith(`gantry_predictions_total{model="${model}",status="${status}"}`));
      return line === undefined ? undefined : Number(line.split(' ').pop());
    };
    expect(sample(IMAGE, 'succeeded')).toBeGreaterThanOrEqual(1);
    expect(sample(SPEECH, 'succeeded')).toBeGreaterThanOrEqual(1);
    expect(sample(VIDEO, 'succeeded')).toBeGreaterThanOrEqual(1);
    expect(text).toMatch(
      /^gantry_prediction_duration_seconds_count\{model="gantry\/local-image",status="succeeded"\} \d+/m,
    );
  });
});
