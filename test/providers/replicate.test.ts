import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { lastPercentage } from '../../providers/predictions/common.js';
import {
  parseModel,
  partnerKeyFields,
  ReplicateBackend,
  takePartnerKey,
} from '../../providers/predictions/replicate.js';
import {
  type BackendConfig,
  type BackendContext,
  BackendError,
  type BackendEvents,
  type BackendJob,
  type BackendResult,
  type FileOutput,
  type JsonObject,
} from '../../providers/predictions/types.js';
import {
  DEFAULT_LOGS,
  FAKE_OFFICIAL_MODEL,
  FAKE_PNG,
  FAKE_REPLICATE_TOKEN,
  FAKE_VERSION_ID,
  FAKE_VERSIONED_MODEL,
  type FakeReplicate,
  type RecordedReplicateRequest,
  startFakeReplicate,
} from '../helpers/fake-replicate.js';

const CALLER_KEY = FAKE_REPLICATE_TOKEN;
const SERVICE_KEY = 'r8_gantry_default_token_abcdef';

let fake: FakeReplicate;
const backends: ReplicateBackend[] = [];

beforeAll(async () => {
  fake = await startFakeReplicate({ tokens: [CALLER_KEY, SERVICE_KEY] });
});
afterAll(async () => {
  await fake.close();
});
beforeEach(() => fake.reset());
afterEach(async () => {
  await Promise.all(backends.splice(0).map((backend) => backend.close()));
});

function backend(overrides: Partial<BackendConfig> = {}): ReplicateBackend {
  const created = new ReplicateBackend({
    name: 'replicate',
    kind: 'replicate',
    baseUrl: fake.url,
    timeoutMs: 10_000,
    pollIntervalMs: 20,
    ...overrides,
  });
  backends.push(created);
  return created;
}

/** The files of a shaped result, in order. */
function filesOf(result: BackendResult): FileOutput[] {
  return (result.output?.files ?? []).map((f) => f.file);
}

/** Cog's ConcatenateIterator output schema (a language model's), as the catalogue would carry it. */
const CONCATENATED = {
  type: 'array',
  items: { type: 'string' },
  'x-cog-array-type': 'iterator',
  'x-cog-array-display': 'concatenate',
};

function job(overrides: Partial<BackendJob> = {}, input: JsonObject = {}): BackendJob {
  return {
    predictionId: '7d5e4b8a-3c2f-4a1b-9e8d-1f2a3b4c5d6e',
    model: FAKE_OFFICIAL_MODEL,
    input: { prompt: 'a lighthouse at dusk', replicate_api_key: CALLER_KEY, ...input },
    stream: false,
    ...overrides,
  };
}

interface Recorded extends BackendEvents {
  processingCalls: number;
  logs: string[];
  percents: number[];
  pieces: string[];
  /** Event names in order, to check that processing comes first. */
  order: string[];
}

function recorder(): Recorded {
  const events: Recorded = {
    processingCalls: 0,
    logs: [],
    percents: [],
    pieces: [],
    order: [],
    processing() {
      events.processingCalls++;
      events.order.push('processing');
    },
    log(text) {
      events.logs.push(text);
      events.order.push('log');
    },
    progress(percent) {
      events.percents.push(percent);
      events.order.push('progress');
    },
    output(piece) {
      events.pieces.push(piece);
      events.order.push('output');
    },
  };
  return events;
}

function ctx(signal: AbortSignal = new AbortController().signal, events: BackendEvents = recorder()) {
  return { signal, events } satisfies BackendContext;
}

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (err) {
    return err;
  }
  throw new Error('expected the run to reject');
}

async function backendError(promise: Promise<unknown>): Promise<BackendError> {
  const err = await rejection(promise);
  expect(err).toBeInstanceOf(BackendError);
  return err as BackendError;
}

function creates(): RecordedReplicateRequest[] {
  return fake.requests.filter((r) => r.method === 'POST' && !r.path.endsWith('/cancel'));
}

function cancels(): RecordedReplicateRequest[] {
  return fake.requests.filter((r) => r.method === 'POST' && r.path.endsWith('/cancel'));
}

async function waitFor(check: () => boolean, timeoutMs = 2000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > until) throw new Error('condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

describe('ReplicateBackend: successful runs', () => {
  it('runs an official model by name and returns its files with the token they need', async () => {
    const result = await backend().run(job(), ctx());

    const [create] = creates();
    expect(create?.path).toBe(`/v1/models/${FAKE_OFFICIAL_MODEL}/predictions`);
    expect(create?.headers.prefer).toBe('wait=5');
    expect(create?.headers['cancel-after']).toBe('40s');
    expect(create?.headers['content-type']).toBe('application/json');
    expect(create?.body).toEqual({ input: { prompt: 'a lighthouse at dusk' } });

    const prediction = fake.predictions[0]!;
    expect(result.output?.value).toEqual([null]);
    expect(filesOf(result)).toEqual([
      {
        kind: 'url',
        url: `${fake.origin}/delivery/${prediction.id}/out-0.png`,
        headers: { authorization: `Bearer ${CALLER_KEY}` },
        ownOrigin: true,
      },
    ]);
    expect(result.predictTime).toBeGreaterThan(0);
    expect(result.logs).toBe(DEFAULT_LOGS.join(''));

    // The file really needs the token, and the headers given are enough to download it.
    const output = filesOf(result)[0]!;
    if (output.kind !== 'url') throw new Error('expected a url output');
    const withToken = await fetch(output.url, { headers: output.headers ?? {} });
    expect(withToken.status).toBe(200);
    expect(Buffer.from(await withToken.arrayBuffer())).toEqual(FAKE_PNG);
    const anonymous = await fetch(output.url);
    expect(anonymous.status).toBe(401);
  });

  it('runs a pinned version through POST /v1/predictions and joins a language model’s tokens', async () => {
    fake.setBehavior({
      output: { kind: 'tokens', tokens: ['Here', ' is', ' a', ' haiku'] },
      predictTime: 1.25,
    });

    const result = await backend().run(
      job({ model: `${FAKE_VERSIONED_MODEL}:${FAKE_VERSION_ID}`, outputSchema: CONCATENATED }),
      ctx(),
    );

    const [create] = creates();
    expect(create?.path).toBe('/v1/predictions');
    expect(create?.body).toEqual({ version: FAKE_VERSION_ID, input: { prompt: 'a lighthouse at dusk' } });
    expect(fake.predictions[0]?.model).toBe(FAKE_VERSIONED_MODEL);
    expect(result.output).toEqual({ value: 'Here is a haiku', files: [], text: true });
    expect(result.predictTime).toBe(1.25);
  });

  it('keeps a list of strings a list when the schema does not say it is a concatenated text', async () => {
    fake.setBehavior({ maxHoldMs: 0, processingMs: 150, output: { kind: 'tokens', tokens: ['cat', 'dog'] } });
    const events = recorder();

    const result = await backend().run(job({ stream: true }), ctx(undefined, events));

    expect(result.output).toEqual({ value: ['cat', 'dog'], files: [] });
    expect(events.pieces).toEqual([]);
  });

  it('polls until the prediction is terminal, reporting processing once, new log text only and progress', async () => {
    fake.setBehavior({ maxHoldMs: 0, startingMs: 40, processingMs: 300 });
    const events = recorder();

    await backend().run(job(), ctx(undefined, events));

    const polls = fake.requests.filter((r) => r.method === 'GET');
    expect(polls.length).toBeGreaterThan(3);
    for (const poll of polls) expect(poll.path).toBe(`/v1/predictions/${fake.predictions[0]!.id}`);
    expect(events.processingCalls).toBe(1);
    expect(events.order[0]).toBe('processing');
    // Deltas: each chunk arrives once, in order, and together they are the whole log.
    expect(events.logs.length).toBeGreaterThan(1);
    expect(events.logs.join('')).toBe(DEFAULT_LOGS.join(''));
    expect(events.percents.at(-1)).toBe(100);
    expect([...events.percents].sort((a, b) => a - b)).toEqual(events.percents);
  });

  it('streams a language model’s new tokens to stream callers', async () => {
    const tokens = ['The', ' tide', ' comes', ' in', ' slow', 'ly'];
    fake.setBehavior({ maxHoldMs: 0, processingMs: 250, output: { kind: 'tokens', tokens } });
    const events = recorder();

    const result = await backend().run(
      job({ stream: true, outputSchema: CONCATENATED }),
      ctx(undefined, events),
    );

    expect(events.pieces.join('')).toBe(tokens.join(''));
    expect(events.pieces.length).toBeGreaterThan(1);
    expect(result.output).toEqual({ value: tokens.join(''), files: [], text: true });
  });

  it('gives the token only to the delivery host and the API’s own origin, and decodes data URIs', async () => {
    fake.setBehavior({
      output: {
        kind: 'raw',
        value: [
          'https://replicate.delivery/pbxt/abc/out-0.png',
          'https://pbxt.replicate.delivery/abc/out-1.png',
          'http://replicate.delivery/plain/out-2.png',
          'https://cdn.example.com/out-3.png',
          'https://replicate.delivery.example.com/out-4.png',
          `data:image/png;base64,${FAKE_PNG.toString('base64')}`,
        ],
      },
    });

    // The schema says these are files (`format: uri`): without it only the partner's own URLs would be.
    const uris = { type: 'array', items: { type: 'string', format: 'uri' } };
    const outputs = filesOf(await backend().run(job({ outputSchema: uris }), ctx()));

    const auth = { authorization: `Bearer ${CALLER_KEY}` };
    expect(outputs).toEqual([
      { kind: 'url', url: 'https://replicate.delivery/pbxt/abc/out-0.png', headers: auth, ownOrigin: true },
      { kind: 'url', url: 'https://pbxt.replicate.delivery/abc/out-1.png', headers: auth, ownOrigin: true },
      { kind: 'url', url: 'http://replicate.delivery/plain/out-2.png' },
      { kind: 'url', url: 'https://cdn.example.com/out-3.png' },
      { kind: 'url', url: 'https://replicate.delivery.example.com/out-4.png' },
      { kind: 'bytes', data: FAKE_PNG, contentType: 'image/png', name: 'output_5.png' },
    ]);
  });

  it('keeps an object output in shape: files anywhere taken out with their places, JPEG as .jpg', async () => {
    const jpeg = `data:image/jpeg;base64,${Buffer.from([0xff, 0xd8, 0xff, 0xe0]).toString('base64')}`;
    fake.setBehavior({
      output: {
        kind: 'raw',
        value: {
          images: [jpeg, 'https://replicate.delivery/pbxt/abc/out-1.png'],
          seed: 3,
          scores: [0.25, -0.5],
        },
      },
    });

    const result = await backend().run(job(), ctx());

    expect(result.output?.value).toEqual({ images: [null, null], seed: 3, scores: [0.25, -0.5] });
    expect(result.output?.files.map((f) => f.path)).toEqual([
      ['images', 0],
      ['images', 1],
    ]);
    expect(filesOf(result)[0]).toMatchObject({
      kind: 'bytes',
      contentType: 'image/jpeg',
      name: 'output_0.jpg',
    });
    expect(filesOf(result)[1]).toMatchObject({
      kind: 'url',
      headers: { authorization: `Bearer ${CALLER_KEY}` },
    });
  });

  it('returns a single URL output as one url output', async () => {
    fake.setBehavior({ output: { kind: 'files', single: true } });
    const result = await backend().run(job(), ctx());
    expect(result.output?.value).toBeNull();
    const outputs = filesOf(result);
    expect(outputs).toHaveLength(1);
    expect(outputs[0]).toMatchObject({ kind: 'url', headers: { authorization: `Bearer ${CALLER_KEY}` } });
  });

  it('keeps polling through a transient poll failure', async () => {
    fake.enqueue({ maxHoldMs: 0, processingMs: 150 }, { error: { status: 503 } }, { cut: true });
    const result = await backend().run(job(), ctx());
    expect(filesOf(result)).toHaveLength(1);
  });
});

describe('ReplicateBackend: the caller’s partner key', () => {
  it('takes the key out of the input and sends it only as the Bearer token of every call', async () => {
    fake.setBehavior({ maxHoldMs: 0, processingMs: 100 });
    const input = job().input;

    await backend().run(job(), ctx());

    expect(fake.requests.length).toBeGreaterThan(1);
    for (const request of fake.requests) {
      expect(request.headers.authorization).toBe(`Bearer ${CALLER_KEY}`);
      expect(request.rawBody.toString('utf8')).not.toContain(CALLER_KEY);
      expect(request.path).not.toContain(CALLER_KEY);
    }
    expect(creates()[0]?.body?.input).toEqual({ prompt: 'a lighthouse at dusk' });
    expect(fake.predictions[0]?.input).not.toHaveProperty('replicate_api_key');
    // The caller's object is not mutated.
    expect(input.replicate_api_key).toBe(CALLER_KEY);
  });

  it('accepts the key under the provider’s own name and strips every key field', async () => {
    await backend({ name: 'replicate-eu' }).run(
      job({
        input: { prompt: 'x', replicate_eu_api_key: CALLER_KEY, replicate_api_key: 'r8_other_key_1234' },
      }),
      ctx(),
    );
    expect(creates()[0]?.headers.authorization).toBe(`Bearer ${CALLER_KEY}`);
    expect(creates()[0]?.body?.input).toEqual({ prompt: 'x' });
  });

  it('falls back to the configured default token when the caller gives none', async () => {
    await backend({ apiKey: SERVICE_KEY }).run(job({ input: { prompt: 'x' } }), ctx());
    expect(creates()[0]?.headers.authorization).toBe(`Bearer ${SERVICE_KEY}`);
  });

  it('prefers the caller’s key over the default token', async () => {
    await backend({ apiKey: SERVICE_KEY }).run(job(), ctx());
    expect(creates()[0]?.headers.authorization).toBe(`Bearer ${CALLER_KEY}`);
  });

  it('fails without a request when there is no key and no default', async () => {
    const err = await backendError(backend().run(job({ input: { prompt: 'x' } }), ctx()));
    expect(err.message).toBe('a replicate_api_key is required in input');
    expect(err.retryable).toBe(false);

    const blank = await backendError(
      backend().run(job({ input: { prompt: 'x', replicate_api_key: ' ' } }), ctx()),
    );
    expect(blank.message).toBe('a replicate_api_key is required in input');
    expect(fake.requests).toHaveLength(0);
  });

  it('reports a rejected key clearly, without the key', async () => {
    const wrongKey = 'r8_wrong_key_never_shown_98765';
    const err = await backendError(
      backend().run(job({ input: { prompt: 'x', replicate_api_key: wrongKey } }), ctx()),
    );
    expect(fake.requests[0]?.headers.authorization).toBe(`Bearer ${wrongKey}`);
    expect(err.message).toBe('replicate rejected the API key (HTTP 401)');
    expect(err.retryable).toBe(false);
    expect(
      JSON.stringify({ message: err.message, stack: err.stack, cause: String(err.cause) }),
    ).not.toContain(wrongKey);

    fake.enqueue({ error: { status: 403 } });
    const forbidden = await backendError(backend().run(job(), ctx()));
    expect(forbidden.message).toBe('replicate rejected the API key (HTTP 403)');
    expect(forbidden.retryable).toBe(false);
  });

  it('scrubs the key from anything the partner echoes back', async () => {
    fake.setBehavior({
      fail: `auth helper crashed with token ${CALLER_KEY}`,
      logs: [`debug: token=${CALLER_KEY}\n`],
    });
    const events = recorder();
    const err = await backendError(backend().run(job(), ctx(undefined, events)));
    expect(err.message).toBe('auth helper crashed with token [redacted]');
    expect(events.logs.join('')).toBe('debug: token=[redacted]\n');
  });

  it('rejects a key that cannot be a header value before sending anything', async () => {
    const err = await backendError(
      backend().run(job({ input: { prompt: 'x', replicate_api_key: 'r8_abc\r\nx-evil: 1' } }), ctx()),
    );
    expect(err.message).toBe('the replicate_api_key is not a valid token');
    expect(err.message).not.toContain('evil');
    expect(fake.requests).toHaveLength(0);
  });
});

describe('ReplicateBackend: failures', () => {
  it('fails with the partner’s error when the prediction fails', async () => {
    fake.setBehavior({ fail: 'CUDA out of memory. Tried to allocate 2.00 GiB' });
    const err = await backendError(backend().run(job(), ctx()));
    expect(err.message).toBe('CUDA out of memory. Tried to allocate 2.00 GiB');
    expect(err.retryable).toBe(false);
  });

  it('makes 429 on create retryable and says so', async () => {
    fake.enqueue({ error: { status: 429 } });
    const err = await backendError(backend().run(job(), ctx()));
    expect(err.retryable).toBe(true);
    expect(err.message).toBe(
      // Replicate's detail repeats its title; the title is dropped rather than said twice.
      'replicate is rate limiting this API key (HTTP 429): Request was throttled. Expected available in 1 second.',
    );
    expect(fake.predictions).toHaveLength(0);
  });

  it('makes 5xx and network failures on create retryable', async () => {
    fake.enqueue({ error: { status: 500 } });
    const server = await backendError(backend().run(job(), ctx()));
    expect(server.retryable).toBe(true);
    expect(server.message).toMatch(/^replicate answered HTTP 500/);

    fake.enqueue({ cut: true });
    const cut = await backendError(backend().run(job(), ctx()));
    expect(cut.retryable).toBe(true);
    expect(cut.message).toMatch(/^could not reach replicate/);

    const closed = await backendError(backend({ baseUrl: 'http://127.0.0.1:9/v1' }).run(job(), ctx()));
    expect(closed.retryable).toBe(true);
    expect(closed.message).toMatch(/^could not reach replicate: ECONNREFUSED/);
  });

  it('does not retry an unknown model, an unknown version or a malformed model name', async () => {
    const model = await backendError(backend().run(job({ model: 'nobody/nothing' }), ctx()));
    expect(model.message).toBe('replicate has no model nobody/nothing (HTTP 404)');
    expect(model.retryable).toBe(false);

    const version = await backendError(
      backend().run(job({ model: `${FAKE_VERSIONED_MODEL}:deadbeef` }), ctx()),
    );
    expect(version.message).toMatch(
      /^replicate refused the request \(HTTP 422\): Invalid version or not permitted/,
    );
    expect(version.retryable).toBe(false);

    const malformed = await backendError(backend().run(job({ model: 'just-a-name' }), ctx()));
    expect(malformed.retryable).toBe(false);
  });

  it('gives up, non-retryable, on a prediction that cannot be polled, and cancels it', async () => {
    fake.enqueue(
      { maxHoldMs: 0, processingMs: 5000 },
      ...Array.from({ length: 5 }, () => ({ error: { status: 502 } })),
    );
    const err = await backendError(backend().run(job(), ctx()));
    expect(err.retryable).toBe(false);
    expect(err.message).toMatch(/^replicate could not be polled: replicate answered HTTP 502/);
    await waitFor(() => fake.predictions[0]?.canceledBy === 'cancel');
  });
});

describe('ReplicateBackend: abort and timeout', () => {
  it('cancels the prediction with the same key and rejects promptly when aborted', async () => {
    fake.setBehavior({ maxHoldMs: 0, processingMs: 10_000 });
    const controller = new AbortController();
    const running = backend().run(job(), ctx(controller.signal));
    await fake.waitForRequests(2); // created, and polled at least once

    const abortedAt = Date.now();
    const reason = new Error('caller canceled');
    controller.abort(reason);
    const err = await backendError(running);
    expect(Date.now() - abortedAt).toBeLessThan(200);
    expect(err.message).toBe('the prediction was canceled');
    expect(err.retryable).toBe(false);
    expect(err.cause).toBe(reason);

    await waitFor(() => cancels().length === 1);
    const prediction = fake.predictions[0]!;
    expect(cancels()[0]?.path).toBe(`/v1/predictions/${prediction.id}/cancel`);
    expect(cancels()[0]?.headers.authorization).toBe(`Bearer ${CALLER_KEY}`);
    expect(prediction.canceledBy).toBe('cancel');
    expect(fake.snapshot(prediction.id)?.status).toBe('canceled');
  });

  it('cancels a prediction whose create was still in flight when the run was aborted', async () => {
    fake.setBehavior({ maxHoldMs: 0, processingMs: 10_000 });
    fake.enqueue({ delayMs: 300, maxHoldMs: 0, processingMs: 10_000 });
    const controller = new AbortController();
    const running = backend().run(job(), ctx(controller.signal));
    await fake.waitForRequests(1);

    const abortedAt = Date.now();
    controller.abort();
    const err = await backendError(running);
    expect(Date.now() - abortedAt).toBeLessThan(200);
    expect(err.message).toBe('the prediction was canceled');

    await waitFor(() => fake.predictions[0]?.canceledBy === 'cancel');
    expect(cancels()[0]?.headers.authorization).toBe(`Bearer ${CALLER_KEY}`);
  });

  it('rejects at once, without a request, when already aborted', async () => {
    const controller = new AbortController();
    controller.abort();
    const err = await backendError(backend().run(job(), ctx(controller.signal)));
    expect(err.message).toBe('the prediction was canceled');
    expect(fake.requests).toHaveLength(0);
  });

  it('times out, non-retryable, and cancels the prediction', async () => {
    fake.setBehavior({ maxHoldMs: 0, processingMs: 10_000 });
    const startedAt = Date.now();
    const err = await backendError(backend({ timeoutMs: 300 }).run(job(), ctx()));
    expect(Date.now() - startedAt).toBeLessThan(800);
    expect(err.message).toBe('replicate prediction timed out after 0.3s');
    expect(err.retryable).toBe(false);
    expect(creates()[0]?.headers['cancel-after']).toBe('31s');
    await waitFor(() => fake.predictions[0]?.canceledBy === 'cancel');
  });

  it('treats a partner-side cancel as a failure', async () => {
    fake.setBehavior({ maxHoldMs: 0, processingMs: 2000 });
    const running = backend().run(job(), ctx());
    await fake.waitForRequests(2);
    const prediction = fake.predictions[0]!;
    prediction.canceledAt = Date.now();
    const err = await backendError(running);
    expect(err.message).toBe('replicate canceled the prediction');
    expect(err.retryable).toBe(false);
  });
});

describe('replicate helpers', () => {
  it('parses owner/name and owner/name:version', () => {
    expect(parseModel('black-forest-labs/flux-schnell')).toEqual({
      owner: 'black-forest-labs',
      name: 'flux-schnell',
    });
    expect(parseModel(`stability-ai/sdxl:${FAKE_VERSION_ID}`)).toEqual({
      owner: 'stability-ai',
      name: 'sdxl',
      version: FAKE_VERSION_ID,
    });
    expect(() => parseModel('sdxl')).toThrow(BackendError);
    expect(() => parseModel('a/b/c')).toThrow(BackendError);
  });

  it('derives key fields from the provider name', () => {
    expect(partnerKeyFields('replicate')).toEqual(['replicate_api_key']);
    expect(partnerKeyFields('Replicate-EU')).toEqual(['replicate_eu_api_key', 'replicate_api_key']);
    expect(takePartnerKey({ a: 1, replicate_api_key: 5 }, ['replicate_api_key'])).toEqual({
      input: { a: 1 },
      token: undefined,
    });
  });

  it('finds the last percentage in tqdm bars and progress lines', () => {
    expect(lastPercentage(DEFAULT_LOGS.join(''))).toBe(100);
    expect(lastPercentage(' 45%|████▌     | 9/20\r 50%|█████     | 10/20')).toBe(50);
    expect(lastPercentage('progress: 12.5%\n')).toBe(12.5);
    expect(lastPercentage('a 100% cotton shirt, please')).toBeUndefined();
    expect(lastPercentage('Using seed: 42\n')).toBeUndefined();
  });
});
